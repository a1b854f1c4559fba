//! Two replicas sharing one LAMB step through the two-phase API: each owns
//! a block-aligned half of the tensor (and of its optimizer state), computes
//! its partial sums, exchanges them (here, by summing the integer limbs as
//! an all-reduce would), and applies the update to its half. The result is
//! bitwise the step of one process over the whole tensor.
//!
//! Run with `cargo run -p tessera-core --example two_replicas`.

use tessera_core::kernels::BLOCK;
use tessera_core::optim::{ConfigError, Lamb, LambConfig, Param, Partials, Precision, Step};

fn main() -> Result<(), ConfigError> {
    let n = 3 * BLOCK + 100;
    let lamb = Lamb::new(LambConfig::default())?;
    let precision = Precision::default();
    let w0: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let g: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos() * 0.1).collect();
    let step = Step::first();

    // One process, the whole tensor.
    let mut whole = w0.clone();
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    lamb.step(
        step,
        &precision,
        &mut Param::new(7, &mut whole, &g, [&mut m, &mut v]),
    );

    // Two replicas: replica r owns `cut[r]..cut[r + 1]`.
    let cut = [0, 2 * BLOCK, n];
    let mut shards: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..2)
        .map(|r| {
            (
                w0[cut[r]..cut[r + 1]].to_vec(),
                vec![0.0; cut[r + 1] - cut[r]],
                vec![0.0; cut[r + 1] - cut[r]],
            )
        })
        .collect();
    // Phase 1 on each replica: partial sums of its piece.
    let limbs: Vec<_> = shards
        .iter_mut()
        .enumerate()
        .map(|(r, (w, m, v))| {
            let piece = Param::new(7, w, &g[cut[r]..cut[r + 1]], [m, v]).at_offset(cut[r] as u64);
            lamb.partials(step, &piece).limbs()
        })
        .collect();
    // The all-reduce: integer sums of the limbs, in any order.
    let mut summed = limbs[0];
    for (sum, other) in summed.iter_mut().zip(&limbs[1]) {
        for (a, b) in sum.iter_mut().zip(other) {
            *a += b;
        }
    }
    let totals = Partials::from_limbs(summed);
    // Phase 2 on each replica: its piece, with the whole tensor's norms.
    for (r, (w, m, v)) in shards.iter_mut().enumerate() {
        let mut piece = Param::new(7, w, &g[cut[r]..cut[r + 1]], [m, v]).at_offset(cut[r] as u64);
        lamb.apply(step, &totals, &precision, &mut piece);
    }

    let joined: Vec<f32> = shards
        .iter()
        .flat_map(|(w, _, _)| w.iter().copied())
        .collect();
    let same = joined
        .iter()
        .zip(&whole)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    println!("norms of the whole tensor: {:?}", totals.norms());
    println!("two replicas match one process bit for bit: {same}");
    assert!(same);
    Ok(())
}
