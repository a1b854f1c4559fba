//! Round-to-nearest slice conversions.

use wide::f32x8;

use super::HalfFloat;

/// Rounds every f32 in `src` to the nearest `H` (ties to even) into `dst`.
///
/// Bitwise equal to [`HalfFloat::from_f32`] (and to `half`) element by
/// element, on every CPU path.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn f32_to_half_slice<H: HalfFloat>(src: &[f32], dst: &mut [H]) {
    assert_eq!(src.len(), dst.len(), "f32_to_half_slice: length mismatch");
    let (src8, src_tail) = src.as_chunks::<8>();
    let (dst8, dst_tail) = dst.as_chunks_mut::<8>();
    for (s, d) in src8.iter().zip(dst8) {
        *d = H::narrow_rn_x8(f32x8::from(*s));
    }
    for (s, d) in src_tail.iter().zip(dst_tail) {
        *d = H::from_f32(*s);
    }
}

/// Widens every `H` in `src` to f32 (exactly; NaN is quieted) into `dst`.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn half_to_f32_slice<H: HalfFloat>(src: &[H], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "half_to_f32_slice: length mismatch");
    let (src8, src_tail) = src.as_chunks::<8>();
    let (dst8, dst_tail) = dst.as_chunks_mut::<8>();
    for (s, d) in src8.iter().zip(dst8) {
        *d = H::widen_x8(*s).to_array();
    }
    for (s, d) in src_tail.iter().zip(dst_tail) {
        *d = s.to_f32();
    }
}
