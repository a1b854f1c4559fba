//! Stochastic-rounding slice conversions.

use wide::{f32x8, u32x8};

use super::{HalfFloat, Stochastic};
use crate::arch;
use crate::rng::HalfBitGroups;

/// Rounds every f32 in `src` stochastically into `dst`; element `i` uses the
/// random bits of element `first_index + i` of `sr.stream`.
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
    let scalar = |src: &[f32], dst: &mut [H], at: usize| {
        for (i, (s, d)) in src.iter().zip(dst).enumerate() {
            *d = H::from_f32_sr(*s, sr, first_index.wrapping_add((at + i) as u64));
        }
    };
    // Up to the first element whose index is a multiple of 16: from there,
    // groups of 16 share one eight-word draw of random bits.
    let head = ((16 - first_index % 16) % 16).min(src.len() as u64) as usize;
    scalar(&src[..head], &mut dst[..head], 0);
    let (src16, src_tail) = src[head..].as_chunks::<16>();
    let (dst16, dst_tail) = dst[head..].as_chunks_mut::<16>();
    let groups = sr
        .stream
        .half_bit_groups(first_index.wrapping_add(head as u64));
    let at = (head, first_index);
    // Two copies of the loop, so the streaming choice is not a branch per chunk.
    if arch::wants_streaming(dst16) {
        convert_groups::<H, true>(src16, dst16, groups, sr, at);
        arch::store_fence();
    } else {
        convert_groups::<H, false>(src16, dst16, groups, sr, at);
    }
    let done = src.len() - src_tail.len();
    scalar(src_tail, dst_tail, done);
}

/// Groups of 16 elements from element `head` of the conversion (`at` is
/// `(head, first_index)`), each with one eight-word draw.
#[inline(always)]
fn convert_groups<H: HalfFloat, const STREAMING: bool>(
    src: &[[f32; 16]],
    dst: &mut [[H; 16]],
    mut groups: HalfBitGroups,
    sr: Stochastic,
    (head, first_index): (usize, u64),
) {
    for (g, (s, d)) in src.iter().zip(dst).enumerate() {
        let at = head + 16 * g;
        let words = groups.next_words();
        let (s, d) = (s.as_chunks::<8>().0, d.as_chunks_mut::<8>().0);
        eight::<H, STREAMING>(&s[0], &mut d[0], words, sr, first_index, at);
        eight::<H, STREAMING>(&s[1], &mut d[1], words >> 16, sr, first_index, at + 8);
    }
}

/// Elements `at..at + 8` of a conversion, with their 16-bit random halves
/// in the low halves of `half`.
#[inline(always)]
fn eight<H: HalfFloat, const STREAMING: bool>(
    src: &[f32; 8],
    dst: &mut [H; 8],
    half: u32x8,
    sr: Stochastic,
    first_index: u64,
    at: usize,
) {
    let word1 = || sr.stream.words_x8(first_index.wrapping_add(at as u64), 1);
    match H::narrow_sr_x8(f32x8::from(*src), half, word1, sr.overflow) {
        Some(v) if STREAMING => arch::store_streaming(dst, v),
        Some(v) => *dst = v,
        None => {
            for (i, (s, d)) in src.iter().zip(dst).enumerate() {
                *d = H::from_f32_sr(*s, sr, first_index.wrapping_add((at + i) as u64));
            }
        }
    }
}
