//! The block loop MX and NVFP4 quantize share (their scalar twins and
//! their SIMD kernels, dispatched to the active backend), the lane
//! helpers of their dequantize kernels, and the value tables of their
//! scale codes.
//!
//! Quantize takes full blocks in groups of `S::LANES`: each block's lane
//! maxima of the magnitude patterns (read while the group before is
//! encoded), the group's amaxes as one vector by a transposing reduction
//! (`U32s::max_rows`), their scale codes in lanes by the rule
//! ([`BlockRule::scale_codes`], bitwise the scalar rule; rare cases such as
//! f32 subnormal amaxes take the scalar rule), then each block's elements
//! scaled and rounded by [`Encoder`] and packed in lanes. Lanes the
//! encoder does not cover take the twin; blocks with NaN or infinity and
//! partial last blocks take the twin whole; full blocks after the last
//! group take the same steps one block at a time. Dequantize unpacks a vector of codes at a time, decodes
//! them by [`Decoder`](super::decode_kernels::Decoder) and multiplies by
//! the block's scale (read from a table built at compile time) as the
//! twin does.

use super::code_kernels::patch;
use super::decode_kernels::load_codes;
use super::encode_fast::FastLanes;
use super::encode_lanes::{Encoder, Fast, LaneBits, LaneKernel, run_lanes};
use super::format::Format;
use super::pack::{
    pack_fp4, pack_fp4_lanes, pack_fp6, pack_fp6_lanes, unpack_fp4_lanes, unpack_fp6_lanes,
};
use super::round::Mode;
use crate::arch::{F32s, Kernel, Simd, U32s};
use crate::rng::RandomBits;

/// The largest block (MX's).
const MAX_BLOCK: usize = 32;

/// A block format's side of the shared quantize loop ([`Mx`](super::Mx)
/// with its settings, NVFP4 with its tensor scale).
pub(super) trait BlockRule: Copy {
    /// Elements per block (a multiple of every backend's lanes, at most 32).
    const BLOCK: usize;
    /// What a finite block's elements need of its scale.
    type Scale: Copy;
    /// Bits per element code: 4, 6 or 8.
    fn code_bits(self) -> u32;
    /// The element encoder (its rounding saturates).
    fn encoder(self) -> Encoder;
    /// The scalar twin of one block: its scale code, its element codes
    /// (unpacked) in `codes`; element `i` uses position `index + i`.
    fn quantize_block<B: RandomBits + ?Sized>(
        self,
        block: &[f32],
        codes: &mut [u8],
        bits: &B,
        index: u64,
    ) -> u8;
    /// The scale code of a block of finite largest magnitude `amax`.
    fn scale_code(self, amax: f32) -> u8;
    /// [`BlockRule::scale_code`] of finite magnitude patterns `amax` in
    /// lanes, bitwise; `None` where the lanes leave it to the scalar rule.
    fn scale_codes<S: Simd>(self, amax: S::U) -> Option<S::U>;
    /// What a finite block's elements need of its scale code `code`.
    fn block_scale(self, code: u8) -> Self::Scale;
    /// Two f32 lanes per block of scale codes `codes` (lane `b`: block
    /// `b`, all finite), from which [`BlockRule::fast_scale`] builds the
    /// blocks' scales.
    fn scale_lanes<S: Simd>(self, codes: S::U) -> [S::F; 2];
    /// [`BlockRule::block_scale`] of `code` from its lanes of
    /// [`BlockRule::scale_lanes`], for elements the encoder's fast rule
    /// rounds (nearest-even or exactly stochastic, subnormals kept): the
    /// codes [`BlockRule::scaled`] then leads to are the twin's.
    fn fast_scale(self, code: u8, lanes: [f32; 2]) -> Self::Scale;
    /// The lanes to round: `x` divided by the block's scale, bitwise as
    /// the twin divides.
    fn scaled<S: Simd>(self, scale: &Self::Scale, x: S::F) -> S::F;
    /// The encoder's codes as the block's codes.
    fn adjust<S: Simd>(self, codes: S::U) -> S::U;
    /// Element `x`'s code by the twin, at position `at`.
    fn twin_element<B: RandomBits + ?Sized>(
        self,
        scale: &Self::Scale,
        x: f32,
        bits: &B,
        at: u64,
    ) -> u8;
}

/// Code bytes of `n` elements of `bits`-bit codes (4, 6 or 8).
const fn packed_len(bits: u32, n: usize) -> usize {
    match bits {
        4 => super::pack::fp4_packed_len(n),
        6 => super::pack::fp6_packed_len(n),
        _ => n,
    }
}

/// Packs (FP6, FP4) or copies one block's `bits`-bit codes into its bytes.
pub(super) fn store_block(bits: u32, codes: &[u8], out: &mut [u8]) {
    match bits {
        4 => pack_fp4(codes, out),
        6 => pack_fp6(codes, out),
        _ => out.copy_from_slice(codes),
    }
}

/// Quantize's arguments (checked): `src` into `codes` and `scales` by
/// `rule`, element `i` at random position `first_index + i`.
pub(super) struct BlockQuantize<'a, R, B: ?Sized> {
    pub(super) rule: R,
    pub(super) src: &'a [f32],
    pub(super) codes: &'a mut [u8],
    pub(super) scales: &'a mut [u8],
    pub(super) bits: &'a B,
    pub(super) first_index: u64,
    /// The rounding mode (for [`run_lanes`]).
    pub(super) mode: Mode,
}

impl<R: BlockRule, B: RandomBits + ?Sized> Kernel for BlockQuantize<'_, R, B> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        let (bits, mode) = (self.bits, self.mode);
        run_lanes::<S, _, _>(self, bits, mode);
    }

    /// Block by block: the rule's twin, then packed.
    fn scalar(self) {
        let per_block = packed_len(self.rule.code_bits(), R::BLOCK);
        for (b, ((block, out), scale)) in self
            .src
            .chunks(R::BLOCK)
            .zip(self.codes.chunks_mut(per_block))
            .zip(self.scales)
            .enumerate()
        {
            let mut unpacked = [0u8; MAX_BLOCK];
            let unpacked = &mut unpacked[..block.len()];
            let index = self.first_index.wrapping_add((b * R::BLOCK) as u64);
            *scale = self.rule.quantize_block(block, unpacked, self.bits, index);
            store_block(self.rule.code_bits(), unpacked, out);
        }
    }
}

impl<R: BlockRule, B: RandomBits + ?Sized> LaneKernel for BlockQuantize<'_, R, B> {
    type Output = ();

    /// Groups of `S::LANES` full blocks (amaxes and scales in lanes), then
    /// the full blocks left one at a time, then a partial last block by
    /// the twin. Where the elements round by the encoder's fast rule (MX's
    /// and NVFP4's formats are signed with signed zeros), the loop is
    /// compiled with that rule's constants.
    #[inline(always)]
    fn lanes<S: Simd, L: LaneBits>(self, mode: Mode, lane_bits: &L) {
        let Self {
            rule,
            src,
            codes,
            scales,
            bits,
            first_index,
            ..
        } = self;
        let blocks = Blocks {
            rule,
            encoder: rule.encoder(),
            code_bits: rule.code_bits(),
            mode,
            lane_bits,
            bits,
        };
        let e = &blocks.encoder;
        let fast = L::GROUPS
            && e.fast == Fast::Signed
            && e.zero_signed
            && matches!(mode, Mode::NearestEven | Mode::Stochastic);
        let full = if fast {
            FastLanes::<S>::new(e).specialized(
                #[inline(always)]
                |fast| blocks.full_blocks::<S>(Some(fast), src, codes, scales, first_index),
            )
        } else {
            blocks.full_blocks::<S>(None, src, codes, scales, first_index)
        };
        let per_block = packed_len(blocks.code_bits, R::BLOCK);
        BlockQuantize {
            rule,
            src: &src[full * R::BLOCK..],
            codes: &mut codes[full * per_block..],
            scales: &mut scales[full..],
            bits,
            first_index: first_index.wrapping_add((full * R::BLOCK) as u64),
            mode,
        }
        .scalar();
    }
}

/// The quantize loop's constants: the rule, its encoder and the random
/// bits.
struct Blocks<'a, R, L, B: ?Sized> {
    rule: R,
    encoder: Encoder,
    code_bits: u32,
    mode: Mode,
    lane_bits: &'a L,
    bits: &'a B,
}

impl<R: BlockRule, L: LaneBits, B: RandomBits + ?Sized> Blocks<'_, R, L, B> {
    /// Quantizes the full blocks of `src` (element 0 at position `index`)
    /// in groups of `S::LANES`, then one at a time; returns their number.
    /// `fast`: the encoder's fast rule, where every finite block's
    /// elements take it.
    #[inline(always)]
    fn full_blocks<S: Simd>(
        &self,
        fast: Option<&FastLanes<S>>,
        src: &[f32],
        codes: &mut [u8],
        scales: &mut [u8],
        index: u64,
    ) -> usize {
        let per_block = packed_len(self.code_bits, R::BLOCK);
        let group = S::LANES * R::BLOCK;
        // Large outputs of byte codes skip the cache (as `encode_slice`'s).
        let streaming =
            fast.is_some() && self.code_bits == 8 && crate::arch::wants_streaming(codes);
        // Each group's lane maxima are read while the group before it is
        // encoded, so its loads overlap that work.
        let mut rows = [S::U::splat(0); 16];
        if let Some(x) = src.get(..group) {
            lane_maxima::<S>(x, R::BLOCK, &mut rows);
        }
        for (g, ((x, out), scales)) in src
            .chunks_exact(group)
            .zip(codes.chunks_exact_mut(S::LANES * per_block))
            .zip(scales.chunks_exact_mut(S::LANES))
            .enumerate()
        {
            let next = src.get((g + 1) * group..(g + 2) * group);
            let at = index.wrapping_add((g * group) as u64);
            self.group::<S>(fast, x, next, &mut rows, out, scales, at, streaming);
        }
        if streaming {
            crate::arch::store_fence();
        }
        let (grouped, full) = (src.len() / group * S::LANES, src.len() / R::BLOCK);
        for b in grouped..full {
            let block = &src[b * R::BLOCK..][..R::BLOCK];
            let out = &mut codes[b * per_block..][..per_block];
            let at = index.wrapping_add((b * R::BLOCK) as u64);
            scales[b] = self.block::<S>(block, amax_bits::<S>(block), None, out, at);
        }
        full
    }

    /// `S::LANES` full blocks `x` (element 0 at position `index`) whose
    /// lane maxima are `rows`: their amaxes as one vector (lane `b`: block
    /// `b`), their scale codes in lanes, then each block's elements; `rows`
    /// becomes the lane maxima of the `next` group's blocks. With `fast`,
    /// a group of finite blocks whose scales the lanes give takes
    /// [`Blocks::fast_group`].
    #[cfg_attr(debug_assertions, inline(never))]
    #[cfg_attr(not(debug_assertions), inline(always))]
    #[allow(clippy::too_many_arguments)]
    fn group<S: Simd>(
        &self,
        fast: Option<&FastLanes<S>>,
        x: &[f32],
        next: Option<&[f32]>,
        rows: &mut [S::U; 16],
        out: &mut [u8],
        scales: &mut [u8],
        index: u64,
        streaming: bool,
    ) {
        let amax = S::U::max_rows(&rows[..S::LANES]);
        let codes = if amax.all_le(0x7f7f_ffff) {
            self.rule.scale_codes::<S>(amax)
        } else {
            None
        };
        if let (Some(fast), Some(codes)) = (fast, codes) {
            let group = (x, next, rows);
            return self.fast_group(fast, codes, group, out, scales, index, streaming);
        }
        let mut amaxes = [0u32; 16];
        amax.write_to(&mut amaxes);
        let mut code_bytes = [0u8; 16];
        if let Some(c) = codes {
            S::store_bytes(c, &mut code_bytes);
        }
        let per_block = out.len() / S::LANES;
        for (b, ((block, out), scale)) in x
            .chunks_exact(R::BLOCK)
            .zip(out.chunks_exact_mut(per_block))
            .zip(scales.iter_mut())
            .enumerate()
        {
            if let Some(next) = next {
                rows[b] = lane_max::<S>(&next[b * R::BLOCK..][..R::BLOCK]);
            }
            let at = index.wrapping_add((b * R::BLOCK) as u64);
            let code = codes.is_some().then_some(code_bytes[b]);
            *scale = self.block::<S>(block, amaxes[b], code, out, at);
        }
    }

    /// [`Blocks::group`] of finite blocks with scale codes `codes` (lane
    /// `b`: block `b`), each block's scale from lanes
    /// ([`BlockRule::scale_lanes`]), the elements by the fast rule `fast`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fast_group<S: Simd>(
        &self,
        fast: &FastLanes<S>,
        codes: S::U,
        (x, next, rows): (&[f32], Option<&[f32]>, &mut [S::U; 16]),
        out: &mut [u8],
        scales: &mut [u8],
        index: u64,
        streaming: bool,
    ) {
        let rule = self.rule;
        S::store_bytes(codes, scales);
        let (mut first, mut second) = ([0f32; 16], [0f32; 16]);
        let [f, g] = rule.scale_lanes::<S>(codes);
        f.store(&mut first);
        g.store(&mut second);
        let per_block = out.len() / S::LANES;
        for (b, (block, out)) in x
            .chunks_exact(R::BLOCK)
            .zip(out.chunks_exact_mut(per_block))
            .enumerate()
        {
            if let Some(next) = next {
                rows[b] = lane_max::<S>(&next[b * R::BLOCK..][..R::BLOCK]);
            }
            let at = index.wrapping_add((b * R::BLOCK) as u64);
            let s = rule.fast_scale(scales[b], [first[b], second[b]]);
            self.fast_block::<S>(fast, block, &s, out, at, streaming);
        }
    }

    /// A finite block's elements (element 0 at position `index`) scaled by
    /// `s`, rounded by the fast rule `fast` when every quotient is finite
    /// (else by [`Blocks::elements`]), and packed into `out`; 8-bit codes
    /// with streaming stores if `streaming`.
    #[cfg_attr(debug_assertions, inline(never))]
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn fast_block<S: Simd>(
        &self,
        fast: &FastLanes<S>,
        block: &[f32],
        s: &R::Scale,
        out: &mut [u8],
        index: u64,
        streaming: bool,
    ) {
        let rule = self.rule;
        let mut q = [S::U::splat(0); MAX_BLOCK / 8];
        let mut top = S::U::splat(0);
        for (q, v) in q.iter_mut().zip(block.chunks_exact(S::LANES)) {
            *q = rule.scaled::<S>(s, S::F::load(v)).to_bits();
            top = top.max(*q & S::U::splat(0x7fff_ffff));
        }
        if !top.all_le(0x7f7f_ffff) {
            // A quotient past f32's range (NVFP4 under a small tensor
            // scale): the encoder's general rule.
            return self.elements::<S>(block, s, out, index);
        }
        let mut bytes = [0u8; MAX_BLOCK];
        for (k, (v, q)) in block.chunks_exact(S::LANES).zip(q).enumerate() {
            let at = index.wrapping_add((k * S::LANES) as u64);
            let (c, fallback) = fast.encode(self.mode, q, self.lane_bits, at);
            let c = self.codes::<S>(c, fallback, s, v, at);
            if streaming {
                S::store_bytes(c, &mut bytes[k * S::LANES..]);
            } else {
                store_elements::<S>(c, self.code_bits, out, k);
            }
        }
        if streaming {
            S::stream_codes(&bytes[..R::BLOCK], out);
        }
    }

    /// One full block of largest magnitude pattern `amax` (NaN or
    /// infinity: by the twin), its scale code `code` if known; returns the
    /// scale code.
    #[cfg_attr(debug_assertions, inline(never))]
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn block<S: Simd>(
        &self,
        block: &[f32],
        amax: u32,
        code: Option<u8>,
        out: &mut [u8],
        index: u64,
    ) -> u8 {
        let rule = self.rule;
        if amax >= 0x7f80_0000 {
            let mut unpacked = [0u8; MAX_BLOCK];
            let unpacked = &mut unpacked[..R::BLOCK];
            let code = rule.quantize_block(block, unpacked, self.bits, index);
            store_block(self.code_bits, unpacked, out);
            return code;
        }
        let code = code.unwrap_or_else(|| rule.scale_code(f32::from_bits(amax)));
        self.elements::<S>(block, &rule.block_scale(code), out, index);
        code
    }

    /// A finite block's elements (element 0 at position `index`) scaled by
    /// `s`, rounded by the encoder, and packed into `out`.
    #[cfg_attr(debug_assertions, inline(never))]
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn elements<S: Simd>(&self, block: &[f32], s: &R::Scale, out: &mut [u8], index: u64) {
        for (k, v) in block.chunks_exact(S::LANES).enumerate() {
            let at = index.wrapping_add((k * S::LANES) as u64);
            let x = self.rule.scaled::<S>(s, S::F::load(v));
            let (c, fallback) = self
                .encoder
                .encode::<S, L>(self.mode, x, self.lane_bits, at);
            let c = self.codes::<S>(c, fallback, s, v, at);
            store_elements::<S>(c, self.code_bits, out, k);
        }
    }

    /// The block's codes from the encoder's codes `c` of the vector `v`
    /// (element 0 at position `at`, scaled by `s`), with the lanes marked
    /// in `fallback` by the twin.
    #[inline(always)]
    fn codes<S: Simd>(&self, c: S::U, fallback: S::U, s: &R::Scale, v: &[f32], at: u64) -> S::U {
        let rule = self.rule;
        let c = rule.adjust::<S>(c);
        if !fallback.any() {
            return c;
        }
        patch::<S>(
            c,
            fallback,
            #[inline(always)]
            |i| {
                let at = at.wrapping_add(i as u64);
                u32::from(rule.twin_element(s, v[i], self.bits, at))
            },
        )
    }
}

/// The lane maxima of the `block`-element blocks of `x` into `rows`.
#[inline(always)]
fn lane_maxima<S: Simd>(x: &[f32], block: usize, rows: &mut [S::U]) {
    for (row, block) in rows.iter_mut().zip(x.chunks_exact(block)) {
        *row = lane_max::<S>(block);
    }
}

/// The lanewise largest magnitude pattern of `block` (a multiple of
/// `S::LANES` long).
#[inline(always)]
fn lane_max<S: Simd>(block: &[f32]) -> S::U {
    let mut m = S::U::splat(0);
    for v in block.chunks_exact(S::LANES) {
        m = m.max(S::F::load(v).to_bits() & S::U::splat(0x7fff_ffff));
    }
    m
}

/// The largest magnitude pattern of `block` (a multiple of `S::LANES`
/// long), NaN and infinity included (they are the patterns from
/// `0x7f80_0000` up).
#[inline(always)]
fn amax_bits<S: Simd>(block: &[f32]) -> u32 {
    let mut lanes = [0u32; 16];
    lane_max::<S>(block).write_to(&mut lanes);
    lanes.into_iter().fold(0, u32::max)
}

/// Stores vector `k` of a block's codes (`bits`-bit: 4, 6 or 8) into the
/// block's bytes `out`, packed as [`pack_fp4`](super::pack_fp4) and
/// [`pack_fp6`](super::pack_fp6) do.
#[inline(always)]
fn store_elements<S: Simd>(codes: S::U, bits: u32, out: &mut [u8], k: usize) {
    match bits {
        4 => pack_fp4_lanes::<S>(codes, &mut out[k * S::LANES / 2..]),
        6 => pack_fp6_lanes::<S>(codes, &mut out[k * S::LANES * 3 / 4..]),
        _ => S::store_bytes(codes, &mut out[k * S::LANES..]),
    }
}

/// Vector `k` of a block's `bits`-bit codes (4, 6 or 8) from the block's
/// bytes `block`, one per lane.
#[inline(always)]
pub(super) fn element_lanes<S: Simd>(bits: u32, block: &[u8], k: usize) -> S::U {
    match bits {
        4 => unpack_fp4_lanes::<S>(&block[k * S::LANES / 2..]),
        6 => unpack_fp6_lanes::<S>(&block[k * S::LANES * 3 / 4..]),
        _ => load_codes::<S, u8>(&block[k * S::LANES..]),
    }
}

/// The values of every 8-bit code of `format`, by its scalar decode.
const fn code_values(format: Format) -> [f32; 256] {
    let mut table = [0f32; 256];
    let mut c = 0;
    while c < 256 {
        table[c] = format.decode(c as u32);
        c += 1;
    }
    table
}

/// The value of every E8M0 code (MX block scales).
pub(super) static E8M0_VALUES: [f32; 256] = code_values(Format::E8M0FNU);

/// The value of every E4M3 code (NVFP4 block scales).
pub(super) static E4M3_VALUES: [f32; 256] = code_values(Format::E4M3FN);

/// The largest finite magnitude pattern of `x` (0 if none), in lanes; its
/// scalar twin is [`FiniteAmax::scalar`].
pub(super) struct FiniteAmax<'a>(pub(super) &'a [f32]);

impl Kernel for FiniteAmax<'_> {
    type Output = u32;

    #[inline(always)]
    fn run<S: Simd>(self) -> u32 {
        let s = <S::U as U32s>::splat;
        let mut chunks = self.0.chunks_exact(S::LANES);
        let mut m = s(0);
        for v in &mut chunks {
            let abs = S::F::load(v).to_bits() & s(0x7fff_ffff);
            m = m.max(abs.simd_lt(s(0x7f80_0000)).select(abs, s(0)));
        }
        let mut lanes = [0u32; 16];
        m.write_to(&mut lanes);
        let vector = lanes.into_iter().fold(0, u32::max);
        vector.max(FiniteAmax(chunks.remainder()).scalar())
    }

    fn scalar(self) -> u32 {
        self.0
            .iter()
            .map(|v| v.to_bits() & 0x7fff_ffff)
            .filter(|a| *a < 0x7f80_0000)
            .max()
            .unwrap_or(0)
    }
}
