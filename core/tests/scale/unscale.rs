//! Unscale and check over mixed slices.

use super::*;

/// Three slices of each type, lengths not multiples of 8.
struct Grads {
    a: Vec<f32>,
    b: Vec<f16>,
    c: Vec<bf16>,
    d: Vec<f32>,
    e: Vec<f16>,
    f: Vec<bf16>,
}

impl Grads {
    fn new(seed: u64, lo: i32, hi: i32) -> Self {
        let mut g = Gen(seed);
        Self {
            a: g.vec_f32(37, lo, hi),
            b: g.vec_half(29, lo, hi),
            c: g.vec_half(40, lo, hi),
            d: g.vec_f32(3, lo, hi),
            e: g.vec_half(8, lo, hi),
            f: g.vec_half(1, lo, hi),
        }
    }

    fn slices(&mut self, rb: Rounding, rc: Rounding) -> [GradSlice<'_>; 6] {
        [
            GradSlice::from(&mut self.a[..]),
            GradSlice::F16(&mut self.b, rb),
            GradSlice::Bf16(&mut self.c, rc),
            GradSlice::from(&mut self.d[..]),
            GradSlice::from(&mut self.e[..]),
            GradSlice::from(&mut self.f[..]),
        ]
    }
}

fn sr(seed: u64, stream: u64, first_index: u64) -> Rounding {
    Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(seed, stream), Overflow::Infinity),
        first_index,
    }
}

fn expect_f32(x: &[f32], inv: f32) -> Vec<u32> {
    x.iter().map(|&v| (v * inv).to_bits()).collect()
}

fn expect_half<H: HalfFloat>(x: &[H], inv: f32, r: Rounding) -> Vec<u16> {
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let p = v.to_f32() * inv;
            let h = match r {
                Rounding::Nearest => H::from_f32(p),
                Rounding::Stochastic { sr, first_index } => {
                    H::from_f32_sr(p, sr, first_index + i as u64)
                }
                other => other.round(p, i),
            };
            bytemuck::cast(h)
        })
        .collect()
}

#[test]
fn unscale_mixed_slices_equals_scalar_multiply_and_rounding() {
    for (seed, inv) in [
        (1, pow2(-16)),
        (2, 1.0 / 3.0),
        (3, inv_of(1000.0)),
        (4, 1.0),
        (5, inv_of(98304.0)),
    ] {
        for (rb, rc) in [
            (Rounding::Nearest, Rounding::Nearest),
            (sr(seed, 1, 0), sr(seed, 2, 100)),
        ] {
            let mut g = Grads::new(seed, -10, 14);
            let want = (
                expect_f32(&g.a, inv),
                expect_half(&g.b, inv, rb),
                expect_half(&g.c, inv, rc),
                expect_f32(&g.d, inv),
                expect_half(&g.e, inv, Rounding::Nearest),
                expect_half(&g.f, inv, Rounding::Nearest),
            );
            // For nearest, the half crate's own conversion is the oracle.
            if rb == Rounding::Nearest {
                let half_rn: Vec<u16> =
                    g.b.iter()
                        .map(|v| half::f16::from_f32(v.to_f32() * inv).to_bits())
                        .collect();
                assert_eq!(want.1, half_rn);
            }
            let st = unscale_grads(g.slices(rb, rc), inv, None);
            assert_eq!(st, GradStats::default(), "seed {seed}");
            assert_eq!(to_bits(&g.a), want.0);
            assert_eq!(half_bits(&g.b), want.1);
            assert_eq!(half_bits(&g.c), want.2);
            assert_eq!(to_bits(&g.d), want.3);
            assert_eq!(half_bits(&g.e), want.4);
            assert_eq!(half_bits(&g.f), want.5);
        }
    }
}

#[test]
fn found_inf_from_a_single_non_finite_value_in_any_slice() {
    let inv = pow2(-10);
    let clean = Grads::new(11, -5, 5);
    let mut g = Grads::new(11, -5, 5);
    assert!(!unscale_grads(g.slices(Rounding::Nearest, Rounding::Nearest), inv, None).found_inf);
    for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        for which in 0..6 {
            let lens = [37usize, 29, 40, 3, 8, 1];
            for at in [0, lens[which] / 2, lens[which] - 1] {
                let mut g = Grads {
                    a: clean.a.clone(),
                    b: clean.b.clone(),
                    c: clean.c.clone(),
                    d: clean.d.clone(),
                    e: clean.e.clone(),
                    f: clean.f.clone(),
                };
                match which {
                    0 => g.a[at] = bad,
                    1 => g.b[at] = f16::from_f32(bad),
                    2 => g.c[at] = bf16::from_f32(bad),
                    3 => g.d[at] = bad,
                    4 => g.e[at] = f16::from_f32(bad),
                    _ => g.f[at] = bf16::from_f32(bad),
                }
                let st = unscale_grads(
                    g.slices(sr(3, 3, 0), Rounding::Nearest),
                    inv,
                    Some(BinEdge::DEFAULT),
                );
                assert!(st.found_inf, "{bad} in slice {which} at {at}");
                // The non-finite value is in the upper bin.
                assert_eq!(st.bins.upper, 1, "{bad} in slice {which} at {at}");
                assert_eq!(st.bins.total(), 118);
            }
        }
    }
}

/// `|x| >= edge`, NaN upper, on the exact (widened) value.
fn is_upper(x: f32, edge: f32) -> bool {
    x.is_nan() || x.abs() >= edge
}

#[test]
fn histogram_counts_are_exact_and_taken_before_unscaling() {
    let edge = 8188.0f32;
    let below = f32::from_bits(edge.to_bits() - 1);
    let above = f32::from_bits(edge.to_bits() + 1);
    let mut a: Vec<f32> = vec![
        edge,
        -edge,
        below,
        -below,
        above,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NAN,
        65504.0,
        1e30,
        -1e-30,
        f32::MIN_POSITIVE,
    ];
    // 8188 is an f16 value; 8184 and 8192 are its neighbours.
    let mut b: Vec<f16> = [8184.0, 8188.0, 8192.0, -8188.0, 65504.0, 0.0]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    b.push(f16::NAN);
    // 8188 is not a bf16 value: 8160 below, 8192 above.
    let mut c: Vec<bf16> = [8160.0, 8192.0, -8192.0, 1.0]
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let expected_upper = a.iter().filter(|&&v| is_upper(v, edge)).count()
        + b.iter().filter(|v| is_upper(v.to_f32(), edge)).count()
        + c.iter().filter(|v| is_upper(v.to_f32(), edge)).count();
    assert_eq!(expected_upper, 7 + 5 + 2);
    let total = a.len() + b.len() + c.len();
    // inv_scale 1/16 would take every value below the edge: the counts are
    // of the scaled values.
    let st = unscale_grads(
        [
            GradSlice::from(&mut a[..]),
            GradSlice::from(&mut b[..]),
            GradSlice::from(&mut c[..]),
        ],
        0.0625,
        Some(BinEdge::new(edge).unwrap()),
    );
    assert!(st.found_inf);
    assert_eq!(st.bins.upper, expected_upper as u64);
    assert_eq!(st.bins.lower, (total - expected_upper) as u64);
    assert_eq!(a[0], edge / 16.0);
}

#[test]
fn half_counts_are_exact_for_every_value() {
    fn check<H: HalfFloat>(edge: f32) {
        let e = BinEdge::new(edge).unwrap();
        let all: Vec<H> = (0..=u16::MAX).map(bytemuck::cast::<u16, H>).collect();
        for &h in &all {
            let got = e.count_half(&[h]);
            let upper = is_upper(h.to_f32(), edge);
            assert_eq!(
                (got.upper, got.lower),
                (u64::from(upper), u64::from(!upper)),
                "{} {:#06x} against {edge:e}",
                H::NAME,
                bytemuck::cast::<H, u16>(h)
            );
        }
        let total = e.count_half(&all);
        let upper = all.iter().filter(|h| is_upper(h.to_f32(), edge)).count() as u64;
        assert_eq!((total.upper, total.lower), (upper, 65536 - upper));
    }
    let edges = [
        0.0,
        8188.0,
        8188.5,
        8190.0,
        65504.0,
        65510.0,
        65519.0,
        65520.0,
        1e-8,
        6e-8,
        3e-5,
        1e-40,
        3.38e38,
        3.4e38,
        f32::MAX,
        f32::INFINITY,
    ];
    for edge in edges {
        check::<f16>(edge);
        check::<bf16>(edge);
    }
    // f32 at the same edges, on special and neighbouring values.
    for edge in edges {
        let e = BinEdge::new(edge).unwrap();
        let mut xs = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        if edge.is_finite() {
            let b = edge.to_bits();
            for v in [b.saturating_sub(1), b, b + 1] {
                xs.push(f32::from_bits(v));
                xs.push(-f32::from_bits(v));
            }
        }
        for x in xs {
            let got = e.count(&[x]);
            assert_eq!(
                got.upper,
                u64::from(is_upper(x, edge)),
                "{x:e} against {edge:e}"
            );
        }
    }
}

#[test]
fn merged_stats_of_split_replicas_equal_the_whole() {
    let edge = BinEdge::new(1000.0).unwrap();
    let inv = inv_of(3000.0);
    let mut g = Gen(21);
    let a0 = g.vec_f32(301, -4, 12);
    let b0: Vec<f16> = g.vec_half(133, -4, 12);
    let c0: Vec<bf16> = g.vec_half(77, -4, 12);

    let (mut a, mut b, mut c) = (a0.clone(), b0.clone(), c0.clone());
    let whole = unscale_grads(
        [
            GradSlice::from(&mut a[..]),
            GradSlice::from(&mut b[..]),
            GradSlice::from(&mut c[..]),
        ],
        inv,
        Some(edge),
    );
    assert!(whole.bins.upper > 0 && whole.bins.lower > 0);
    assert!(!whole.found_inf);

    for (sa, sb, sc) in [(0, 0, 0), (150, 64, 1), (7, 133, 76), (301, 1, 40)] {
        let (mut a2, mut b2, mut c2) = (a0.clone(), b0.clone(), c0.clone());
        let (a_lo, a_hi) = a2.split_at_mut(sa);
        let (b_lo, b_hi) = b2.split_at_mut(sb);
        let (c_lo, c_hi) = c2.split_at_mut(sc);
        // "Replica" 0 takes the low parts, replica 1 the high parts.
        let r0 = unscale_grads(
            [
                GradSlice::from(a_lo),
                GradSlice::from(b_lo),
                GradSlice::from(c_lo),
            ],
            inv,
            Some(edge),
        );
        let r1 = unscale_grads(
            [
                GradSlice::from(c_hi),
                GradSlice::from(a_hi),
                GradSlice::from(b_hi),
            ],
            inv,
            Some(edge),
        );
        assert_eq!(r0.merge(r1), whole);
        assert_eq!(r1.merge(r0), whole);
        // The same through a sum all-reduce of words.
        let w0 = r0.to_words();
        let w1 = r1.to_words();
        let sum = [0, 1, 2].map(|i| w0[i].wrapping_add(w1[i]));
        assert_eq!(GradStats::from_words(sum), whole);
        assert_eq!(to_bits(&a2), to_bits(&a));
        assert_eq!(half_bits(&b2), half_bits(&b));
        assert_eq!(half_bits(&c2), half_bits(&c));
    }
}

#[test]
fn grad_stats_merge_and_words() {
    let x = stats(true, 3, 4);
    let y = stats(false, 10, 20);
    assert_eq!(x.merge(y), stats(true, 13, 24));
    assert_eq!(y.merge(y), stats(false, 20, 40));
    assert_eq!(x.merge(GradStats::default()), x);
    assert_eq!(x.to_words(), [1, 4, 3]);
    assert_eq!(GradStats::from_words([3, 4, 3]), x); // three replicas found inf
    assert_eq!(GradStats::from_words(y.to_words()), y);
    // Counts wrap like u64 sums.
    let big = stats(false, u64::MAX, 0);
    assert_eq!(big.merge(stats(false, 2, 0)).bins.upper, 1);
}

#[test]
fn slices_kept_in_an_array_are_reborrowed_step_after_step() {
    let mut w = [1024.0f32; 10];
    let mut h = [f16::from_f32(1024.0); 9];
    let mut grads = [GradSlice::from(&mut w[..]), GradSlice::from(&mut h[..])];
    assert_eq!(grads[0].len() + grads[1].len(), 19);
    assert!(!grads[1].is_empty());
    for _ in 0..3 {
        let st = unscale_grads(grads.iter_mut().map(GradSlice::reborrow), 0.5, None);
        assert!(!st.found_inf);
    }
    assert_eq!(grads[1].bins(BinEdge::new(128.0).unwrap()).upper, 9);
    assert!(w.iter().all(|&v| v == 128.0));
    assert!(h.iter().all(|&v| v == f16::from_f32(128.0)));
}

/// A data-parallel step loop generic over the scaler, as a trainer would
/// write it.
fn train<S: LossScaler>(scaler: &mut S, replicas: &mut [Vec<f32>], steps: usize) -> Vec<bool> {
    let mut skipped = Vec::new();
    for step in 0..steps {
        let mut combined = GradStats::default();
        for (r, grad) in replicas.iter_mut().enumerate() {
            // Replica 1 overflows on step 2.
            let v = if r == 1 && step == 2 {
                f32::INFINITY
            } else {
                scaler.scale()
            };
            grad.fill(v);
            combined = combined.merge(scaler.unscale([GradSlice::from(&mut grad[..])]));
        }
        skipped.push(scaler.update(combined).is_skip());
    }
    skipped
}

#[test]
fn a_generic_trainer_skips_on_every_replica_together() {
    let mut replicas = vec![vec![0.0f32; 5]; 3];
    let mut d = DynamicLossScaler::default();
    assert_eq!(train(&mut d, &mut replicas, 4), [false, false, true, false]);
    assert_eq!(d.scale(), 32768.0);
    let mut a = AutomaticLossScaler::new(AutomaticConfig {
        init_scale: 16.0,
        update_period: nz(2),
        ..AutomaticConfig::default()
    })
    .unwrap();
    assert_eq!(a.histogram_edge(), Some(BinEdge::DEFAULT));
    assert_eq!(train(&mut a, &mut replicas, 4), [false, false, true, false]);
    // Steps 0 and 2 decide: 15 calm elements (double), then 5 infinities in
    // 15 (halve).
    assert_eq!(a.scale(), 16.0);
    let mut s = StaticLossScaler::new(8.0).unwrap();
    assert_eq!(train(&mut s, &mut replicas, 4), [false, false, true, false]);
    assert_eq!(replicas[0], [1.0; 5]);
}
