//! Round-to-nearest slice conversions.

use super::{HalfFloat, narrow_rn};
use crate::arch::{self, F32s, Kernel, Simd};

/// Rounds every f32 in `src` to the nearest `H` (ties to even) into `dst`.
///
/// Bitwise equal to [`HalfFloat::from_f32`] (and to `half`) element by
/// element, on every backend.
///
/// ```
/// use tessera_core::fp::{self, bf16, f16};
///
/// let x = [1.0f32, 0.1, 1e6];
/// let mut h = [f16::ZERO; 3];
/// fp::f32_to_half_slice(&x, &mut h);
/// assert_eq!(h[0], f16::ONE);
/// assert!(h[2].is_infinite()); // above f16's range
/// let mut b = [bf16::ZERO; 3];
/// fp::f32_to_half_slice(&x, &mut b);
/// assert_eq!(b[2], bf16::from_f32(1e6));
/// ```
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn f32_to_half_slice<H: HalfFloat>(src: &[f32], dst: &mut [H]) {
    assert_eq!(src.len(), dst.len(), "f32_to_half_slice: length mismatch");
    arch::dispatch(Narrow { src, dst });
}

/// Widens every `H` in `src` to f32 (exactly; NaN is quieted) into `dst`.
///
/// ```
/// use tessera_core::fp::{self, f16};
///
/// let mut x = [0.0f32; 2];
/// fp::half_to_f32_slice(&[f16::ONE, f16::MAX], &mut x);
/// assert_eq!(x, [1.0, 65504.0]);
/// ```
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn half_to_f32_slice<H: HalfFloat>(src: &[H], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "half_to_f32_slice: length mismatch");
    arch::dispatch(Widen { src, dst });
}

struct Narrow<'a, H> {
    src: &'a [f32],
    dst: &'a mut [H],
}

impl<H: HalfFloat> Kernel for Narrow<'_, H> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        convert::<S, _, _>(
            self.src,
            self.dst,
            #[inline(always)]
            |s: &[f32], d: &mut [H]| {
                let h = narrow_rn::<S>(H::FORMAT, S::F::load(s));
                S::store_h(h, crate::arch::cast_slice_mut(d));
            },
            H::from_f32,
        );
    }

    fn scalar(self) {
        for (s, d) in self.src.iter().zip(self.dst) {
            *d = H::from_f32(*s);
        }
    }
}

struct Widen<'a, H> {
    src: &'a [H],
    dst: &'a mut [f32],
}

impl<H: HalfFloat> Kernel for Widen<'_, H> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        convert::<S, _, _>(
            self.src,
            self.dst,
            #[inline(always)]
            |s: &[H], d: &mut [f32]| super::load::<S, H>(s).store(d),
            H::to_f32,
        );
    }

    fn scalar(self) {
        for (s, d) in self.src.iter().zip(self.dst) {
            *d = s.to_f32();
        }
    }
}

/// Converts `S::LANES` at a time with `lanes` and one at a time with
/// `scalar`. Large outputs are written with streaming stores from the
/// first 16-byte aligned element on (see `arch::STREAMING_BYTES`).
#[inline(always)]
fn convert<S: Simd, A: Copy, B: crate::arch::Plain>(
    src: &[A],
    dst: &mut [B],
    lanes: impl Fn(&[A], &mut [B]),
    scalar: impl Fn(A) -> B,
) {
    let streaming = arch::wants_streaming(dst);
    let head = if streaming {
        dst.as_ptr().align_offset(16).min(dst.len())
    } else {
        0
    };
    let body = (src.len() - head) / S::LANES * S::LANES;
    let (src_head, src) = src.split_at(head);
    let (dst_head, dst) = dst.split_at_mut(head);
    let (src_body, src_tail) = src.split_at(body);
    let (dst_body, dst_tail) = dst.split_at_mut(body);
    for (s, d) in src_head.iter().zip(dst_head) {
        *d = scalar(*s);
    }
    if streaming {
        let mut buf = [B::default(); 16];
        arch::each_vector::<S>(
            body,
            #[inline(always)]
            |at| {
                lanes(&src_body[at..], &mut buf);
                arch::store_streaming(&mut dst_body[at..at + S::LANES], &buf[..S::LANES]);
            },
        );
        arch::store_fence();
    } else {
        arch::each_vector::<S>(
            body,
            #[inline(always)]
            |at| lanes(&src_body[at..], &mut dst_body[at..]),
        );
    }
    for (s, d) in src_tail.iter().zip(dst_tail) {
        *d = scalar(*s);
    }
}
