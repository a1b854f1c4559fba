//! Matrix products on every backend.

use super::*;

use tessera_core::kernels::GemmShape;

/// `kernels::gemm` on fresh output and scratch.
fn gemm_of(shape: GemmShape, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![f32::from_bits(0x7fc0_0001); shape.m * shape.n];
    let mut scratch = vec![0.0; kernels::gemm_scratch_len(&shape)];
    kernels::gemm(shape, a, b, &mut c, &mut scratch);
    c
}

#[test]
fn gemm_matches_its_scalar_twin_on_every_backend() {
    let mut g = Gen(77);
    let mut cases = Vec::new();
    for (m, k, n) in [
        (0, 3, 4),
        (3, 0, 5),
        (1, 1, 1),
        (5, 7, 33),
        (9, 64, 70),
        (4, 300, 17),
        (6, 600, 70),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            cases.push((m, k, n, ta, tb));
        }
    }
    for _ in 0..40 {
        let dim = |g: &mut Gen| g.below(40) as usize + 1;
        cases.push((
            dim(&mut g),
            dim(&mut g),
            dim(&mut g),
            g.below(2) == 0,
            g.below(2) == 0,
        ));
    }
    let inputs: Vec<_> = cases
        .into_iter()
        .enumerate()
        .map(|(c, (m, k, n, a_transposed, b_transposed))| {
            let shape = GemmShape {
                m,
                k,
                n,
                a_transposed,
                b_transposed,
            };
            let kind = KINDS[c % KINDS.len()];
            let (a, b) = (
                f32_data(kind, m * k, c as u64),
                f32_data(kind, k * n, 1000 + c as u64),
            );
            let mut twin = vec![0.0; m * n];
            scalar::gemm(shape, &a, &b, &mut twin);
            (shape, a, b, twin)
        })
        .collect();
    on_every_backend("gemm", || {
        for (shape, a, b, twin) in &inputs {
            assert_bits_eq(&gemm_of(*shape, a, b), twin, &format!("gemm {shape:?}"));
        }
    });
}

#[test]
fn gemm_sums_in_increasing_p_without_fma() {
    // 1 + 2^-24 products: (0 + 1) + 2^-24 rounds back to 1 each time in
    // increasing p, where an FMA or another order would keep them.
    let k = 5;
    let a = vec![1.0f32; 3 * k];
    let mut b = vec![pow2(-24); k * 17];
    b[..17].fill(1.0);
    let shape = GemmShape {
        m: 3,
        k,
        n: 17,
        a_transposed: false,
        b_transposed: false,
    };
    on_every_backend("gemm order", || {
        assert!(gemm_of(shape, &a, &b).iter().all(|&c| c == 1.0));
        // With the small terms first they add up before meeting 1.
        let mut b2 = vec![pow2(-24); k * 17];
        b2[(k - 1) * 17..].fill(1.0);
        let want = 1.0 + 4.0 * pow2(-24);
        assert!(gemm_of(shape, &a, &b2).iter().all(|&c| c == want));
    });
    // x * y + z with an FMA differs from the rounded product added:
    // 1 + 2^-12 squared is 1 + 2^-11 + 2^-24; minus (1 + 2^-11) that is 0
    // after rounding the product, 2^-24 with an FMA.
    let x = 1.0 + pow2(-12);
    let shape = GemmShape {
        m: 1,
        k: 2,
        n: 16,
        a_transposed: false,
        b_transposed: true,
    };
    let a = [-(1.0 + pow2(-11)), x];
    let b: Vec<f32> = (0..16).flat_map(|_| [1.0, x]).collect();
    on_every_backend("gemm without fma", || {
        assert!(gemm_of(shape, &a, &b).iter().all(|&c| c == 0.0));
    });
}
