//! Products over tiles: every cut (rows, columns, the reduction split in
//! parts) gives the bits of `gemm_tree`, the planner's choice included;
//! the reduction's tree depends on `k` alone.

use core::num::NonZeroU64;

use tessera_sim::IpuSpec;
use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Kernel, Mapping, Target};
use tessera_sim::kernels::matmul::{
    Accumulator, BlockLayout, Cut, GemmShape, LEAF_K, Operand, Output, Problem, ProductPlan,
    Source, gemm, gemm_leaves, gemm_tree, leaves, matmul,
};

use crate::support::{bits, target, uniform};

/// How a test cuts a product.
#[derive(Clone, Copy, Debug)]
enum How {
    /// The planner's choice.
    Chosen(Cut),
    /// `(pm, pn, pk)` by hand.
    Split(usize, usize, usize, Cut),
    /// Onto a `rows x cols` grid of the output, `pk` parts per block.
    Onto(usize, usize, usize),
}

/// Runs `C = op(A) op(B)` on `tiles` tiles cut as `how`, A and B spread
/// in grains of 7; C row-major, and the engine's exchange cycles.
fn run(shape: GemmShape, a: &[f32], b: &[f32], tiles: u32, how: How) -> (Vec<f32>, u64) {
    run_in(shape, (a, b), tiles, how, Accumulator::F32)
}

/// [`run`] accumulating in `acc`.
fn run_in(
    shape: GemmShape,
    (a, b): (&[f32], &[f32]),
    tiles: u32,
    how: How,
    acc: Accumulator,
) -> (Vec<f32>, u64) {
    let GemmShape { m, k, n, .. } = shape;
    let mut g = Graph::new(target(tiles));
    let grain = Mapping::linear(NonZeroU64::new(7).unwrap());
    let at = g
        .add_tensor("a", DType::F32, &[(m * k) as u64], grain.clone())
        .unwrap();
    let bt = g
        .add_tensor("b", DType::F32, &[(k * n) as u64], grain)
        .unwrap();
    let (ar, ac) = if shape.a_transposed { (k, m) } else { (m, k) };
    let (br, bc) = if shape.b_transposed { (n, k) } else { (k, n) };
    let a_layout = BlockLayout::dense(ar, ac, 0);
    let b_layout = BlockLayout::dense(br, bc, 0);
    let range = 0..tiles;
    let problem = Problem {
        m,
        k,
        n,
        a: Source::Layout(&a_layout, shape.a_transposed),
        b: Source::Layout(&b_layout, shape.b_transposed),
        tiles: &range,
        min_flops: 1,
        kernel: Kernel::MatmulF32,
    };
    let spec = target(tiles).spec().to_owned();
    let plan = match how {
        How::Chosen(cut) => ProductPlan::choose(&problem, &spec, 100, cut),
        How::Split(pm, pn, pk, cut) => ProductPlan::with_split(&problem, (pm, pn, pk), cut),
        How::Onto(rb, cb, pk) => {
            ProductPlan::onto_parts(&BlockLayout::grid(m, n, rb, cb, tiles), k, &range, pk)
        }
    };
    let layout = plan.output().clone();
    let c = g
        .add_tensor("c", DType::F32, &[(m * n) as u64], layout.mapping())
        .unwrap();
    let a_op = Operand {
        tensor: at,
        layout: a_layout,
        transposed: shape.a_transposed,
    };
    let b_op = Operand {
        tensor: bt,
        layout: b_layout,
        transposed: shape.b_transposed,
    };
    let p = matmul(
        &mut g,
        "mm",
        &a_op,
        &b_op,
        c,
        &plan,
        (Kernel::MatmulF32, acc),
        Output::F32,
    )
    .unwrap();
    let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
    e.write_tensor(at, a).unwrap();
    e.write_tensor(bt, b).unwrap();
    let profile = e.run();
    assert!(profile.cycles.compute > 0);
    (
        layout.to_row_major(&e.read_tensor::<f32>(c).unwrap()),
        profile.cycles.exchange,
    )
}

fn shape(m: usize, k: usize, n: usize, a_transposed: bool, b_transposed: bool) -> GemmShape {
    GemmShape {
        m,
        k,
        n,
        a_transposed,
        b_transposed,
    }
}

const TRANSPOSES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

#[test]
fn every_cut_gives_the_bits_of_gemm_tree() {
    let rows = Cut::default();
    let cols = Cut {
        full_rows: false,
        full_cols: true,
    };
    let whole_rows = Cut {
        full_rows: true,
        full_cols: false,
    };
    for (s, &(m, k, n)) in [
        (1, 1, 1),
        (13, 300, 29),
        (5, 513, 3),
        (8, 1024, 16),
        (3, 129, 40),
    ]
    .iter()
    .enumerate()
    {
        let l = leaves(k).len() - 1;
        for (at, bt) in TRANSPOSES {
            let shape = shape(m, k, n, at, bt);
            let a = uniform(m * k, 10 + s as u64, -1.0, 1.0);
            let b = uniform(k * n, 20 + s as u64, -1.0, 1.0);
            let mut want = vec![0.0; m * n];
            gemm_tree(shape, &a, &b, &mut want);
            let mut hows = vec![
                How::Chosen(rows),
                How::Chosen(cols),
                How::Chosen(whole_rows),
            ];
            let mut pk = 1;
            while pk <= l {
                hows.extend([
                    How::Split(1, 1, pk, rows),
                    How::Split(2, 3, pk, rows),
                    How::Split(3, 2, pk, cols),
                    How::Split(4, 1, pk, whole_rows),
                    How::Onto(2, 2, pk),
                    How::Onto(1, 1, pk),
                ]);
                pk *= 2;
            }
            for how in hows {
                for tiles in [1, 3, 7, 64] {
                    let (got, _) = run(shape, &a, &b, tiles, how);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{shape:?} {how:?} on {tiles} tiles"
                    );
                }
            }
        }
    }
}

#[test]
fn with_one_leaf_a_product_is_one_whole_gemm() {
    for (m, k, n) in [(4, 64, 128), (32, 7, 65), (64, LEAF_K, 10)] {
        for (at, bt) in TRANSPOSES {
            let shape = shape(m, k, n, at, bt);
            let a = uniform(m * k, 3, -1.0, 1.0);
            let b = uniform(k * n, 4, -1.0, 1.0);
            let mut whole = vec![0.0; m * n];
            gemm(shape, &a, &b, &mut whole);
            let (got, _) = run(shape, &a, &b, 64, How::Chosen(Cut::default()));
            assert_eq!(bits(&got), bits(&whole), "{shape:?}");
        }
    }
}

#[test]
fn splitting_the_reduction_moves_fewer_bytes() {
    // 8 x 1024 by 1024 x 16 on 64 tiles: with the reduction in 8 parts a
    // tile gathers an eighth of A's rows instead of all of them.
    let shape = shape(8, 1024, 16, false, false);
    let a = uniform(8 * 1024, 1, -1.0, 1.0);
    let b = uniform(1024 * 16, 2, -1.0, 1.0);
    let (whole, one) = run(shape, &a, &b, 64, How::Split(1, 8, 1, Cut::default()));
    let (split, eight) = run(shape, &a, &b, 64, How::Split(1, 1, 8, Cut::default()));
    assert_eq!(bits(&whole), bits(&split));
    assert!(
        eight * 3 < one,
        "exchange cycles: split {eight}, whole {one}"
    );
}

#[test]
fn the_planner_splits_a_long_reduction_and_never_a_short_one() {
    let spec = IpuSpec::MK2_GC200;
    let range = 0..spec.tiles();
    let dense = |m, k| BlockLayout::dense(m, k, 0);
    let (x, w) = (dense(8, 1024), dense(1024, 1024));
    let problem = |m, k, n, a, b| Problem {
        m,
        k,
        n,
        a,
        b,
        tiles: &range,
        min_flops: 1 << 16,
        kernel: Kernel::MatmulF16,
    };
    let long = problem(8, 1024, 1024, Source::Layout(&x, false), Source::Planned);
    let plan = ProductPlan::choose(&long, &spec, 100, Cut::default());
    assert!(plan.k_parts() > 1, "{:?}", plan.k_parts());
    let short = problem(
        1024,
        8,
        1024,
        Source::Layout(&x, true),
        Source::Layout(&w, false),
    );
    assert_eq!(
        ProductPlan::choose(&short, &spec, 100, Cut::default()).k_parts(),
        1
    );
    // The weights' layout puts each part's rows of B on its tile.
    let b = plan.b_layout();
    assert_eq!((b.rows(), b.cols()), (1024, 1024));
    assert_eq!(b.row_blocks(), plan.k_parts());
    let _ = Target::single(spec);
}

/// In an f16 accumulator (with and without promotion) every cut gives
/// the bits of `gemm_leaves` over the product's leaves in it, and those
/// differ from f32's; unpromoted, the split reduction's partials are half
/// and take fewer exchange cycles.
#[test]
fn an_f16_accumulator_gives_the_same_bits_on_every_cut() {
    let promoted = Accumulator::F16 {
        promote_every: core::num::NonZeroUsize::new(16),
    };
    for (m, k, n) in [(5, 513, 3), (6, 70, 9)] {
        let shape = shape(m, k, n, true, false);
        let a = uniform(m * k, 31, -1.0, 1.0);
        let b = uniform(k * n, 32, -1.0, 1.0);
        let mut f32_sum = vec![0.0; m * n];
        gemm_tree(shape, &a, &b, &mut f32_sum);
        // Exchange cycles of the split reduction on 7 tiles, per accumulator.
        let mut split_exchange = Vec::new();
        for acc in [Accumulator::F16, promoted] {
            let mut want = vec![0.0; m * n];
            gemm_leaves(shape, &leaves(k), (&a, &b), &mut want, acc);
            assert_ne!(bits(&want), bits(&f32_sum), "{acc:?}");
            let l = leaves(k).len() - 1;
            for how in [
                How::Chosen(Cut::default()),
                How::Split(2, 1, l, Cut::default()),
                How::Onto(1, 2, l.min(2)),
            ] {
                for tiles in [1, 7] {
                    let (got, exchange) = run_in(shape, (&a, &b), tiles, how, acc);
                    let what = format!("{acc:?} {shape:?} {how:?} on {tiles} tiles");
                    assert_eq!(bits(&got), bits(&want), "{what}");
                    if matches!(how, How::Split(..)) && tiles == 7 {
                        split_exchange.push(exchange);
                    }
                }
            }
        }
        // f16 partials move 2 bytes an element, promoted (f32) ones 4.
        if k > LEAF_K {
            assert!(
                split_exchange[0] < split_exchange[1],
                "{shape:?}: {split_exchange:?}"
            );
        }
    }
}
