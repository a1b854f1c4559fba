//! Sub-byte formats packed as OCP MX v1.0 stores them: a little-endian bit
//! stream, element `i` in bits `b * i..b * (i + 1)` (`b` = 4 or 6). So two
//! FP4 per byte, element 0 in the low nibble (as PyTorch's
//! `Float4_e2m1fn_x2`), and four FP6 per three bytes.

use crate::arch::{Simd, U32s};

/// Bytes that hold `n` packed FP4 codes.
///
/// ```
/// use tessera_core::fp;
///
/// assert_eq!((fp::fp4_packed_len(32), fp::fp4_packed_len(3)), (16, 2));
/// ```
#[must_use]
pub const fn fp4_packed_len(n: usize) -> usize {
    n.div_ceil(2)
}

/// Bytes that hold `n` packed FP6 codes.
///
/// ```
/// use tessera_core::fp;
///
/// assert_eq!((fp::fp6_packed_len(32), fp::fp6_packed_len(5)), (24, 4));
/// ```
#[must_use]
pub const fn fp6_packed_len(n: usize) -> usize {
    (n * 6).div_ceil(8)
}

/// Packs 4-bit codes (one per byte, low nibble; the high nibble is
/// ignored) two per byte; an odd last code leaves the high nibble 0.
///
/// ```
/// use tessera_core::fp;
///
/// let mut packed = [0u8; 2];
/// fp::pack_fp4(&[0x1, 0x2, 0xf], &mut packed);
/// assert_eq!(packed, [0x21, 0x0f]);
/// ```
///
/// # Panics
/// If `packed.len() != fp4_packed_len(codes.len())`.
pub fn pack_fp4(codes: &[u8], packed: &mut [u8]) {
    assert_eq!(
        packed.len(),
        fp4_packed_len(codes.len()),
        "pack_fp4: length mismatch"
    );
    for (pair, p) in codes.chunks(2).zip(packed) {
        let hi = pair.get(1).map_or(0, |c| c & 0xf);
        *p = (pair[0] & 0xf) | hi << 4;
    }
}

/// Unpacks FP4 codes packed by [`pack_fp4`], one per byte.
///
/// ```
/// use tessera_core::fp;
///
/// let mut codes = [0u8; 3];
/// fp::unpack_fp4(&[0x21, 0x0f], &mut codes);
/// assert_eq!(codes, [0x1, 0x2, 0xf]);
/// ```
///
/// # Panics
/// If `packed.len() != fp4_packed_len(codes.len())`.
pub fn unpack_fp4(packed: &[u8], codes: &mut [u8]) {
    assert_eq!(
        packed.len(),
        fp4_packed_len(codes.len()),
        "unpack_fp4: length mismatch"
    );
    for (i, c) in codes.iter_mut().enumerate() {
        *c = (packed[i / 2] >> (4 * (i % 2))) & 0xf;
    }
}

/// Packs 6-bit codes (one per byte, low 6 bits; the rest is ignored),
/// four per three bytes; unused high bits of the last byte are 0.
///
/// ```
/// use tessera_core::fp;
///
/// let mut packed = [0u8; 3];
/// fp::pack_fp6(&[0x01, 0x02, 0x03, 0x3f], &mut packed);
/// // bits: 000001 | 000010 << 6 | 000011 << 12 | 111111 << 18
/// assert_eq!(packed, [0x81, 0x30, 0xfc]);
/// ```
///
/// # Panics
/// If `packed.len() != fp6_packed_len(codes.len())`.
pub fn pack_fp6(codes: &[u8], packed: &mut [u8]) {
    assert_eq!(
        packed.len(),
        fp6_packed_len(codes.len()),
        "pack_fp6: length mismatch"
    );
    packed.fill(0);
    for (i, c) in codes.iter().enumerate() {
        let (bit, c) = (6 * i, u16::from(c & 0x3f));
        let word = c << (bit % 8);
        packed[bit / 8] |= word as u8;
        if let Some(next) = packed.get_mut(bit / 8 + 1) {
            *next |= (word >> 8) as u8;
        }
    }
}

/// Unpacks FP6 codes packed by [`pack_fp6`], one per byte.
///
/// ```
/// use tessera_core::fp;
///
/// let mut codes = [0u8; 4];
/// fp::unpack_fp6(&[0x81, 0x30, 0xfc], &mut codes);
/// assert_eq!(codes, [0x01, 0x02, 0x03, 0x3f]);
/// ```
///
/// # Panics
/// If `packed.len() != fp6_packed_len(codes.len())`.
pub fn unpack_fp6(packed: &[u8], codes: &mut [u8]) {
    assert_eq!(
        packed.len(),
        fp6_packed_len(codes.len()),
        "unpack_fp6: length mismatch"
    );
    for (i, c) in codes.iter_mut().enumerate() {
        let bit = 6 * i;
        let lo = u16::from(packed[bit / 8]);
        let hi = packed.get(bit / 8 + 1).map_or(0, |b| u16::from(*b));
        *c = ((lo | hi << 8) >> (bit % 8)) as u8 & 0x3f;
    }
}

// Lane forms for the block kernels: the same bit stream, a vector of codes
// (one per u32 lane) at a time.

/// The `S::LANES` FP4 codes packed in the first `S::LANES / 2` bytes of
/// `packed`, one per lane.
#[inline(always)]
pub(crate) fn unpack_fp4_lanes<S: Simd>(packed: &[u8]) -> S::U {
    let s = <S::U as U32s>::splat;
    let iota = S::U::iota();
    // Lane `i` takes word `i / 8`, shifted right by `4 (i % 8)`.
    let word = |k: usize| {
        let b = &packed[4 * k..4 * k + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    };
    let mut v = s(word(0));
    for k in 1..S::LANES / 8 {
        v = iota.simd_ge(s(8 * k as u32)).select(s(word(k)), v);
    }
    v.unbounded_shr((iota & s(7)) << 2) & s(0xf)
}

/// The `S::LANES` FP6 codes packed in the first `3 S::LANES / 4` bytes of
/// `packed`, one per lane.
#[inline(always)]
pub(crate) fn unpack_fp6_lanes<S: Simd>(packed: &[u8]) -> S::U {
    let s = <S::U as U32s>::splat;
    let iota = S::U::iota();
    // Lane `i` takes the 24 bits of group `i / 4`, shifted by `6 (i % 4)`.
    let group = |g: usize| {
        let b = &packed[3 * g..3 * g + 3];
        u32::from_le_bytes([b[0], b[1], b[2], 0])
    };
    let mut v = s(group(0));
    for g in 1..S::LANES / 4 {
        v = iota.simd_ge(s(4 * g as u32)).select(s(group(g)), v);
    }
    v.unbounded_shr((iota & s(3)) * s(6)) & s(0x3f)
}

/// Packs the `S::LANES` codes of `codes` (each below 16) into the first
/// `S::LANES / 2` bytes of `packed`, as [`pack_fp4`] does.
#[inline(always)]
pub(crate) fn pack_fp4_lanes<S: Simd>(codes: S::U, packed: &mut [u8]) {
    let mut bytes = [0u8; 16];
    S::store_bytes(codes, &mut bytes);
    S::pack_fp4_bytes(&bytes, S::LANES, packed);
}

/// Packs the `S::LANES` codes of `codes` (each below 64) into the first
/// `3 S::LANES / 4` bytes of `packed`, as [`pack_fp6`] does.
#[inline(always)]
pub(crate) fn pack_fp6_lanes<S: Simd>(codes: S::U, packed: &mut [u8]) {
    let mut bytes = [0u8; 16];
    S::store_bytes(codes, &mut bytes);
    S::pack_fp6_bytes(&bytes, S::LANES, packed);
}
