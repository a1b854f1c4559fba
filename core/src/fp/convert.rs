//! Round-to-nearest slice conversions.

use wide::f32x8;

use super::HalfFloat;
use crate::arch;

/// Rounds every f32 in `src` to the nearest `H` (ties to even) into `dst`.
///
/// Bitwise equal to [`HalfFloat::from_f32`] (and to `half`) element by
/// element, on every CPU path.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn f32_to_half_slice<H: HalfFloat>(src: &[f32], dst: &mut [H]) {
    assert_eq!(src.len(), dst.len(), "f32_to_half_slice: length mismatch");
    convert(src, dst, |s| H::narrow_rn_x8(f32x8::from(s)), H::from_f32);
}

/// Widens every `H` in `src` to f32 (exactly; NaN is quieted) into `dst`.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn half_to_f32_slice<H: HalfFloat>(src: &[H], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "half_to_f32_slice: length mismatch");
    convert(src, dst, |s| H::widen_x8(s).to_array(), H::to_f32);
}

/// Converts eight at a time with `lanes` and one at a time with `scalar`.
/// Large outputs are written with streaming stores from the first 16-byte
/// aligned element on (see `arch::STREAMING_BYTES`).
#[inline(always)]
fn convert<S: Copy, D: bytemuck::Pod>(
    src: &[S],
    dst: &mut [D],
    lanes: impl Fn([S; 8]) -> [D; 8],
    scalar: impl Fn(S) -> D,
) {
    let streaming = arch::wants_streaming(dst);
    let head = if streaming {
        dst.as_ptr().align_offset(16).min(dst.len())
    } else {
        0
    };
    for (s, d) in src[..head].iter().zip(&mut dst[..head]) {
        *d = scalar(*s);
    }
    let (src8, src_tail) = src[head..].as_chunks::<8>();
    let (dst8, dst_tail) = dst[head..].as_chunks_mut::<8>();
    if streaming {
        for (s, d) in src8.iter().zip(dst8) {
            arch::store_streaming(d, lanes(*s));
        }
        arch::store_fence();
    } else {
        for (s, d) in src8.iter().zip(dst8) {
            *d = lanes(*s);
        }
    }
    for (s, d) in src_tail.iter().zip(dst_tail) {
        *d = scalar(*s);
    }
}
