//! Partition invariance.

use super::*;

/// Cuts `0..n` at the block boundaries chosen by `picks`.
fn block_cuts(n: usize, picks: &[usize]) -> Vec<usize> {
    let blocks = n.div_ceil(BLOCK);
    let mut cuts: Vec<usize> = picks
        .iter()
        .map(|&p| (p % (blocks + 1) * BLOCK).min(n))
        .chain([0, n])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Partials of the pieces between `cuts`, merged in an order given by
/// `seed`, both with `merge` and as an integer all-reduce of the limbs.
fn merged(
    cuts: &[usize],
    seed: u64,
    partial: impl Fn(usize, usize) -> ExactSum,
) -> (ExactSum, ExactSum) {
    let mut parts: Vec<ExactSum> = cuts.windows(2).map(|w| partial(w[0], w[1])).collect();
    shuffle(&mut parts, seed);
    let mut sum = ExactSum::new();
    let mut limbs = [0i64; ExactSum::LIMBS];
    for p in &parts {
        sum.merge(p);
        for (l, v) in limbs.iter_mut().zip(p.limbs()) {
            *l = l.wrapping_add(v);
        }
    }
    (sum, ExactSum::from_limbs(limbs))
}

fn kind_of(k: u8) -> Kind {
    KINDS[usize::from(k) % KINDS.len()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn f32_reductions_are_partition_invariant(
        n in 0usize..3000,
        picks in prop::collection::vec(any::<usize>(), 0..8),
        kind in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let x = f32_data(kind_of(kind), n, seed);
        let y = f32_data(kind_of(kind), n, seed ^ 5);
        let cuts = block_cuts(n, &picks);

        let whole = kernels::dot_partial(&x, &y);
        let (m, l) = merged(&cuts, seed, |a, b| kernels::dot_partial(&x[a..b], &y[a..b]));
        prop_assert_eq!(m, whole);
        prop_assert_eq!(l, whole);
        prop_assert!(same_f32(m.to_f32(), kernels::dot(&x, &y)));

        let whole = kernels::sum_of_squares_partial(&x);
        let (m, l) = merged(&cuts, seed, |a, b| kernels::sum_of_squares_partial(&x[a..b]));
        prop_assert_eq!(m, whole);
        prop_assert_eq!(l, whole);
        prop_assert!(same_f32(m.to_f32(), kernels::sum_of_squares(&x)));

        // max_abs does not even need block-aligned cuts.
        let mut g = Gen(seed);
        let mut m = MaxAbs::new();
        let mut rest = &x[..];
        while !rest.is_empty() {
            let k = 1 + g.below(rest.len() as u64) as usize;
            m.merge(&MaxAbs::from_bits(kernels::max_abs_partial(&rest[..k]).to_bits()));
            rest = &rest[k..];
        }
        prop_assert_eq!(m, kernels::max_abs_partial(&x));
        prop_assert!(same_f32(m.to_f32(), kernels::max_abs(&x)));
    }

    #[test]
    fn half_reductions_are_partition_invariant(
        n in 0usize..3000,
        picks in prop::collection::vec(any::<usize>(), 0..8),
        kind in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let x: Vec<f16> = half_data(kind_of(kind), n, seed);
        let y: Vec<f16> = half_data(kind_of(kind), n, seed ^ 5);
        let b: Vec<bf16> = half_data(kind_of(kind), n, seed ^ 9);
        let cuts = block_cuts(n, &picks);

        let (m, l) = merged(&cuts, seed, |a, e| kernels::dot_partial(&x[a..e], &y[a..e]));
        prop_assert_eq!(m, kernels::dot_partial(&x, &y));
        prop_assert_eq!(l, m);
        prop_assert!(same_f32(m.to_f32(), kernels::dot(&x, &y)));

        let (m, l) = merged(&cuts, seed, |a, e| kernels::sum_of_squares_partial(&b[a..e]));
        prop_assert_eq!(m, kernels::sum_of_squares_partial(&b));
        prop_assert_eq!(l, m);
        prop_assert!(same_f32(m.to_f32(), kernels::sum_of_squares(&b)));

        let mut mx = MaxAbs::new();
        for w in cuts.windows(2) {
            mx.merge(&kernels::max_abs_partial(&b[w[0]..w[1]]));
        }
        prop_assert!(same_f32(mx.to_f32(), kernels::max_abs(&b)));
    }

    /// Element-wise kernels with stochastic rounding over pieces, each with
    /// its own offset, write the same bits as one call.
    #[test]
    fn stochastic_rounding_kernels_are_split_invariant(
        n in 0usize..600,
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        seed in any::<u64>(),
        first_index in prop_oneof![Just(0u64), any::<u64>(), Just((1u64 << 32) - 20)],
    ) {
        let x: Vec<bf16> = half_data(Kind::Moderate, n, seed);
        let y: Vec<bf16> = half_data(Kind::Special, n, seed ^ 3);
        let sr = Stochastic::new(RandomStream::new(seed, 1), Overflow::Saturate);
        let rounding = |offset: usize| Rounding::Stochastic {
            sr,
            first_index: first_index.wrapping_add(offset as u64),
        };
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (n + 1)).chain([0, n]).collect();
        cuts.sort_unstable();
        cuts.dedup();

        let mut whole = y.clone();
        kernels::axpy(-0.3, &x, &mut whole, rounding(0));
        let mut pieces = y.clone();
        for w in cuts.windows(2) {
            kernels::axpy(-0.3, &x[w[0]..w[1]], &mut pieces[w[0]..w[1]], rounding(w[0]));
        }
        prop_assert!(whole.iter().zip(&pieces).all(|(a, b)| a.to_bits() == b.to_bits()));

        let mut whole = x.clone();
        let f_whole = kernels::unscale_and_check(&mut whole, 0.125, rounding(0));
        let mut pieces = x.clone();
        let mut f_pieces = false;
        for w in cuts.windows(2) {
            f_pieces |= kernels::unscale_and_check(&mut pieces[w[0]..w[1]], 0.125, rounding(w[0]));
        }
        prop_assert_eq!(f_whole, f_pieces);
        prop_assert!(whole.iter().zip(&pieces).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    /// For `inv_scale` finite and at most 1 the check on the results equals
    /// PyTorch's check on the inputs.
    #[test]
    fn found_inf_matches_pytorch_for_inv_scale_at_most_one(
        x in prop::collection::vec(any_f32(), 0..40),
        inv in (0u32..=0x3f80_0000).prop_map(f32::from_bits),
    ) {
        let inputs_bad = x.iter().any(|v| !v.is_finite());
        let mut y = x.clone();
        prop_assert_eq!(kernels::unscale_and_check(&mut y, inv, Rounding::Nearest), inputs_bad);
        let mut h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let h_bad = h.iter().any(|v| !v.to_f32().is_finite());
        prop_assert_eq!(kernels::unscale_and_check(&mut h, inv, Rounding::Nearest), h_bad);
    }
}
