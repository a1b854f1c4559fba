//! Stochastic-rounding slice conversions.

use super::{HalfFloat, Stochastic, narrow_sr};
use crate::arch::{self, F32s, Kernel, Simd};
use crate::rng::HalfBitGroups;

/// Rounds every f32 in `src` stochastically into `dst`; element `i` uses the
/// random bits of element `first_index + i` of `sr.stream`.
///
/// Bitwise equal to [`HalfFloat::from_f32_sr`] element by element, on every
/// backend, so converting a slice whole or in pieces (passing each piece's
/// offset) gives the same result. See [the module docs](super) for the
/// rounding rule.
///
/// ```
/// use tessera_core::fp::{self, f16, Overflow, Stochastic};
/// use tessera_core::rng::RandomStream;
///
/// let sr = Stochastic::new(RandomStream::new(7, 0), Overflow::Infinity);
/// let x = vec![1.0 + 2f32.powi(-12); 4096]; // a quarter of an f16 ulp above 1
/// let mut h = vec![f16::ZERO; 4096];
/// fp::f32_to_half_sr_slice(&x, &mut h, sr, 0);
/// let mean = h.iter().map(|v| f64::from(v.to_f32())).sum::<f64>() / 4096.0;
/// assert!((mean - (1.0 + 2f64.powi(-12))).abs() < 1e-4); // unbiased
/// // In pieces, each with its offset: the same bits.
/// let mut pieces = vec![f16::ZERO; 4096];
/// fp::f32_to_half_sr_slice(&x[..1000], &mut pieces[..1000], sr, 0);
/// fp::f32_to_half_sr_slice(&x[1000..], &mut pieces[1000..], sr, 1000);
/// assert_eq!(pieces, h);
/// ```
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
    let bits = Bits { sr, first_index };
    arch::dispatch(NarrowSr { src, dst, bits });
}

struct NarrowSr<'a, H> {
    src: &'a [f32],
    dst: &'a mut [H],
    bits: Bits,
}

/// Where a conversion's random bits come from.
#[derive(Clone, Copy)]
struct Bits {
    sr: Stochastic,
    first_index: u64,
}

impl<H: HalfFloat> Kernel for NarrowSr<'_, H> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        let Self { src, dst, bits } = self;
        let (sr, first_index) = (bits.sr, bits.first_index);
        // Up to the first element whose index is a multiple of 16: from
        // there, groups of 16 share one eight-word draw of random bits.
        let head = ((16 - first_index % 16) % 16).min(src.len() as u64) as usize;
        let body = (src.len() - head) / 16 * 16;
        let (src_head, src) = src.split_at(head);
        let (dst_head, dst) = dst.split_at_mut(head);
        let (src_body, src_tail) = src.split_at(body);
        let (dst_body, dst_tail) = dst.split_at_mut(body);
        bits.one_by_one(src_head, dst_head, 0);
        let groups = sr
            .stream
            .half_bit_groups::<S::U8>(first_index.wrapping_add(head as u64));
        // Two copies of the loop, so the streaming choice is not a branch
        // per chunk.
        if arch::wants_streaming(dst_body) {
            bits.groups::<S, H, true>(src_body, dst_body, groups, head);
            arch::store_fence();
        } else {
            bits.groups::<S, H, false>(src_body, dst_body, groups, head);
        }
        bits.one_by_one(src_tail, dst_tail, head + body);
    }

    fn scalar(self) {
        self.bits.one_by_one(self.src, self.dst, 0);
    }
}

impl Bits {
    /// Elements `at..at + src.len()` one at a time.
    #[inline(always)]
    fn one_by_one<H: HalfFloat>(self, src: &[f32], dst: &mut [H], at: usize) {
        for (i, (s, d)) in src.iter().zip(dst).enumerate() {
            let index = self.first_index.wrapping_add((at + i) as u64);
            *d = H::from_f32_sr(*s, self.sr, index);
        }
    }

    /// Groups of 16 elements from element `head` of the conversion, each
    /// with one eight-word draw.
    #[inline(always)]
    fn groups<S: Simd, H: HalfFloat, const STREAMING: bool>(
        self,
        src: &[f32],
        dst: &mut [H],
        mut groups: HalfBitGroups<S::U8>,
        head: usize,
    ) {
        let mut buf = [H::default(); 16];
        for (g, (s, d)) in src
            .chunks_exact(16)
            .zip(dst.chunks_exact_mut(16))
            .enumerate()
        {
            // The generator's arithmetic is long enough per group that the
            // loads need a prefetch to overlap with it.
            arch::prefetch_ahead(src, 16 * g);
            let words = groups.next_words();
            for k in 0..16 / S::LANES {
                let at = head + 16 * g + k * S::LANES;
                let lanes = k * S::LANES..(k + 1) * S::LANES;
                let (s, d) = (&s[lanes.clone()], &mut d[lanes]);
                let index = self.first_index.wrapping_add(at as u64);
                let half = S::group_halves(words, k);
                let rounded = narrow_sr::<S>(
                    H::FORMAT,
                    S::F::load(s),
                    half,
                    #[inline(always)]
                    || S::words(self.sr.stream, index, 1),
                    self.sr.overflow,
                );
                match rounded {
                    Some(v) if STREAMING => {
                        S::store_h(v, crate::arch::cast_slice_mut(&mut buf));
                        arch::store_streaming(d, &buf[..S::LANES]);
                    }
                    Some(v) => S::store_h(v, crate::arch::cast_slice_mut(d)),
                    None => self.one_by_one(s, d, at),
                }
            }
        }
    }
}
