//! Stochastic rounding of a tensor to f16: each value rounds up with the
//! probability of its distance to the lower neighbour, so the mean of the
//! rounded tensor stays the mean of the f32 one where round to nearest
//! loses a small offset entirely.
//!
//! Run with `cargo run -p tessera-core --example stochastic_rounding`.

use tessera_core::fp::{self, Overflow, Stochastic, f16};
use tessera_core::rng::RandomStream;

fn main() {
    // 1 + a quarter of f16's spacing at 1 (2^-10): nearest rounding gives
    // exactly 1 everywhere.
    let x = vec![1.0f32 + 0.25 * 2f32.powi(-10); 1 << 16];
    let mut nearest = vec![f16::ZERO; x.len()];
    let mut stochastic = vec![f16::ZERO; x.len()];
    fp::f32_to_half_slice(&x, &mut nearest);
    // The random bits of element i are position i of the stream: any split
    // of the tensor over threads gives the same bits.
    let sr = Stochastic::new(RandomStream::new(42, 0), Overflow::Infinity);
    fp::f32_to_half_sr_slice(&x, &mut stochastic, sr, 0);

    let mean = |h: &[f16]| h.iter().map(|v| f64::from(v.to_f32())).sum::<f64>() / h.len() as f64;
    let want = f64::from(x[0]);
    let (rn, sr) = (mean(&nearest), mean(&stochastic));
    println!("f32 mean        {want:.9}");
    println!("nearest mean    {rn:.9} (error {:.2e})", rn - want);
    println!("stochastic mean {sr:.9} (error {:.2e})", sr - want);
    assert_eq!(rn, 1.0);
    assert!((sr - want).abs() < (rn - want).abs() / 10.0);
}
