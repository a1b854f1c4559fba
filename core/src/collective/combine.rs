//! The element-wise combination kernels: what a receiver does with a
//! reduction message, and what [`execute`](super::execute) does.

use crate::fp::Element;
use crate::kernels::LANES;

use super::op::ReduceOp;

/// Calls `$f(args.., combine)` with `combine` the operation's scalar
/// function, so each loop is compiled for one operation.
macro_rules! with_op {
    ($op:expr, $f:ident($($arg:expr),*)) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Mean => $f($($arg,)* |x: f32, y: f32| x + y),
            ReduceOp::Max => $f($($arg,)* |x: f32, y: f32| ReduceOp::Max.combine(x, y)),
            ReduceOp::Min => $f($($arg,)* |x: f32, y: f32| ReduceOp::Min.combine(x, y)),
        }
    };
}

/// `dst[i] = op.combine(dst[i], src[i])` over f32 partials: how a
/// receiver adds a message's values (widened exactly from `B`) to the
/// partial it holds. Bitwise what [`execute`](super::execute) computes for
/// the same operands, on every backend.
///
/// ```
/// use tessera_core::collective::{ReduceOp, combine};
/// use tessera_core::fp::f16;
///
/// let mut held = [1.0f32, -0.0, 3.0];
/// combine(ReduceOp::Sum, &mut held, &[f16::ONE, f16::from_f32(-0.0), f16::from_f32(0.5)]);
/// assert_eq!(held, [2.0, -0.0, 3.5]);
/// combine(ReduceOp::Max, &mut held, &[0.0f32, 0.0, 4.0]);
/// assert_eq!(held.map(f32::to_bits), [2.0f32, 0.0, 4.0].map(f32::to_bits));
/// ```
///
/// # Panics
/// If the lengths differ.
pub fn combine<B: Element>(op: ReduceOp, dst: &mut [f32], src: &[B]) {
    assert_eq!(dst.len(), src.len(), "combine: lengths differ");
    with_op!(op, assign_with(dst, src));
}

/// `dst[i] = op.combine(a[i], b[i])`, both widened exactly: [`combine`]
/// starting from a held value that is not yet f32 (a 16-bit rank's own
/// contribution, say), without widening it first.
///
/// ```
/// use tessera_core::collective::{ReduceOp, combine_into};
/// use tessera_core::fp::bf16;
///
/// let own = [bf16::from_f32(1.0), bf16::from_f32(2.0)];
/// let mut sum = [0.0f32; 2];
/// combine_into(ReduceOp::Sum, &mut sum, &own, &[0.25f32, 0.5]);
/// assert_eq!(sum, [1.25, 2.5]);
/// ```
///
/// # Panics
/// If the lengths differ.
pub fn combine_into<A: Element, B: Element>(op: ReduceOp, dst: &mut [f32], a: &[A], b: &[B]) {
    assert!(
        dst.len() == a.len() && a.len() == b.len(),
        "combine_into: lengths differ"
    );
    with_op!(op, into_with(dst, a, b));
}

/// `dst[i] = f(dst[i], b[i])`, widening eight at a time (the eight-lane
/// widening equals [`Element::load`] bit for bit).
#[inline(always)]
fn assign_with<B: Element>(dst: &mut [f32], b: &[B], f: impl Fn(f32, f32) -> f32) {
    let (d8, dt) = dst.as_chunks_mut::<LANES>();
    let (b8, bt) = b.as_chunks::<LANES>();
    for (d, b) in d8.iter_mut().zip(b8) {
        let b = B::load_x8(*b).to_array();
        for (d, b) in d.iter_mut().zip(b) {
            *d = f(*d, b);
        }
    }
    for (d, b) in dt.iter_mut().zip(bt) {
        *d = f(*d, b.load());
    }
}

/// `dst[i] = f(a[i], b[i])`, widening eight at a time.
#[inline(always)]
fn into_with<A: Element, B: Element>(
    dst: &mut [f32],
    a: &[A],
    b: &[B],
    f: impl Fn(f32, f32) -> f32,
) {
    let (d8, dt) = dst.as_chunks_mut::<LANES>();
    let (a8, at) = a.as_chunks::<LANES>();
    let (b8, bt) = b.as_chunks::<LANES>();
    for ((d, a), b) in d8.iter_mut().zip(a8).zip(b8) {
        let (a, b) = (A::load_x8(*a).to_array(), B::load_x8(*b).to_array());
        for ((d, a), b) in d.iter_mut().zip(a).zip(b) {
            *d = f(a, b);
        }
    }
    for ((d, a), b) in dt.iter_mut().zip(at).zip(bt) {
        *d = f(a.load(), b.load());
    }
}
