//! Loss kernels: softmax cross-entropy against an f64 reference and central
//! finite differences; CTC against brute-force enumeration of every
//! alignment on tiny cases (and an f64 forward recursion on long ones); the
//! f32 `exp`, `ln` and `ln_1p` against `std`'s f64 functions over dense
//! sweeps (all 2^32 inputs with `--ignored`).

mod cross_entropy;
mod ctc;
mod ctc_oracle;
mod math;

use proptest::prelude::*;
use tessera_core::fp::Element;
use tessera_core::loss::Reduction;

/// The unit roundoff of f32, 2^-24.
const U: f64 = f32::EPSILON as f64 / 2.0;

/// The values of `x`, widened to f64.
fn widen<L: Element>(x: &[L]) -> Vec<f64> {
    x.iter().map(|v| f64::from(v.load())).collect()
}

/// The bits of `x`'s values as f32.
fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
}

/// Every reduction.
fn reductions() -> impl Strategy<Value = Reduction> {
    prop_oneof![
        Just(Reduction::None),
        Just(Reduction::Sum),
        Just(Reduction::Mean)
    ]
}
