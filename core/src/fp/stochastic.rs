//! Stochastic-rounding slice conversions.

use wide::f32x8;

use super::{HalfFloat, Stochastic};

/// Rounds every f32 in `src` stochastically into `dst`; element `i` uses the
/// random bits of position `first_index + i` of `sr.stream`.
///
/// Bitwise equal to [`HalfFloat::from_f32_sr`] element by element, on every
/// CPU path, so converting a slice whole or in pieces (passing each piece's
/// offset) gives the same result. See [the module docs](super) for the
/// rounding rule.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn f32_to_half_sr_slice<H: HalfFloat>(
    src: &[f32],
    dst: &mut [H],
    sr: Stochastic,
    first_index: u64,
) {
    assert_eq!(
        src.len(),
        dst.len(),
        "f32_to_half_sr_slice: length mismatch"
    );
    let vectorised = sr.stream.for_each_x8(first_index, src.len(), |at, r| {
        let s: &[f32; 8] = src[at..at + 8].try_into().expect("eight lanes");
        let d: &mut [H; 8] = (&mut dst[at..at + 8]).try_into().expect("eight lanes");
        *d = H::narrow_sr_x8(f32x8::from(*s), r, sr.overflow).unwrap_or_else(|| {
            core::array::from_fn(|lane| {
                H::from_f32_sr(s[lane], sr, first_index.wrapping_add((at + lane) as u64))
            })
        });
    });
    for (at, (s, d)) in src.iter().zip(dst.iter_mut()).enumerate().skip(vectorised) {
        *d = H::from_f32_sr(*s, sr, first_index.wrapping_add(at as u64));
    }
}
