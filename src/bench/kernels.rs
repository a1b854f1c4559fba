//! The `kernels` suite: Tessera's matrix product against `matrixmultiply`.
//!
//! - `gemm_nn` and `gemm_nt`: `C [n, n] = A [n, n] B [n, n]` (`nt`: `B`
//!   stored transposed, as the MLP's backward pass uses it) by
//!   `tessera_core::kernels::gemm` (the simulator's products: a fixed
//!   summation order, no FMA, the same bits on every CPU), against
//!   `matrixmultiply::sgemm` on the same operands (packed panels and FMA
//!   kernels where the CPU has them; its bits depend on the CPU). `elements`
//!   is `n`; `gbps` counts the three matrices once; `ratio` is
//!   matrixmultiply's time over Tessera's.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use tessera_core::kernels::{self, GemmShape};
use tessera_core::rng::RandomStream;
use tessera_sim::kernels::matmul::gemm_matrixmultiply;

use super::report::Sink;
use super::timing::{self, Settings};
use super::{BenchError, Plan, Record, Suite, try_zeroed};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "kernels",
    about: "the simulator's fixed-order GEMM vs matrixmultiply",
    run,
};

/// Square sizes: the digits MLP's layers are 64 to 128 wide.
const SIZES: [usize; 3] = [64, 256, 1024];
const QUICK_SIZES: [usize; 2] = [64, 256];

const FULL: Settings = Settings {
    samples: NonZeroUsize::new(9).unwrap(),
    min_sample: Duration::from_millis(5),
};
const QUICK: Settings = Settings {
    samples: NonZeroUsize::new(3).unwrap(),
    min_sample: Duration::from_millis(1),
};

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let (sizes, settings): (Vec<usize>, _) = match (&plan.elements, plan.quick) {
        (Some(sizes), quick) => (
            sizes.iter().map(|n| n.get()).collect(),
            if quick { QUICK } else { FULL },
        ),
        (None, true) => (QUICK_SIZES.to_vec(), QUICK),
        (None, false) => (SIZES.to_vec(), FULL),
    };
    sink.start(&format!(
        "kernels: best of {} samples per kernel and reference, interleaved; {}; \
         gemm: n x n matrices (elements = n), ratio = matrixmultiply time / Tessera time",
        settings.samples,
        super::build_note(),
    ))?;
    for n in sizes {
        for (kernel, b_transposed) in [("gemm_nn", false), ("gemm_nt", true)] {
            gemm(n, kernel, b_transposed, settings, sink)?;
        }
    }
    Ok(())
}

/// Times both products of `n x n` matrices and reports the pair.
fn gemm(
    n: usize,
    kernel: &'static str,
    b_transposed: bool,
    settings: Settings,
    sink: &mut dyn Sink,
) -> Result<(), BenchError> {
    let shape = GemmShape {
        m: n,
        k: n,
        n,
        a_transposed: false,
        b_transposed,
    };
    let values = |stream: u64| -> Result<Vec<f32>, BenchError> {
        let rng = RandomStream::new(0x6e33, stream);
        let mut x = try_zeroed::<f32>(n * n)?;
        for (i, x) in (0u64..).zip(&mut x) {
            *x = (rng.bits(i) >> 8) as f32 / (1 << 24) as f32 - 0.5;
        }
        Ok(x)
    };
    let (a, b) = (values(0)?, values(1)?);
    let (mut c, mut theirs) = (try_zeroed::<f32>(n * n)?, try_zeroed::<f32>(n * n)?);
    let mut scratch = try_zeroed::<f32>(kernels::gemm_scratch_len(&shape))?;
    let mut ours = || {
        kernels::gemm(shape, black_box(&a), black_box(&b), &mut c, &mut scratch);
        black_box(&mut c);
    };
    let mut reference = || {
        gemm_matrixmultiply(shape, black_box(&a), black_box(&b), &mut theirs);
        black_box(&mut theirs);
    };
    let m = timing::compare(settings, &mut [&mut ours, &mut reference]);
    let bytes = 3.0 * (n * n * size_of::<f32>()) as f64;
    sink.record(&Record {
        suite: SUITE.name,
        kernel,
        elements: n,
        seconds: m[0].best,
        gbps: bytes / m[0].best / 1e9,
        reference: "matrixmultiply",
        ratio: m[1].best / m[0].best,
        reference_seconds: m[1].best,
        reference_gbps: bytes / m[1].best / 1e9,
    })
}
