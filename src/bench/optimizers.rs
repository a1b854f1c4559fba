//! The `optimizers` suite: one optimizer step over a parameter tensor.
//!
//! Four optimizers (LAMB, LARS with momentum, AdamW, SGD with momentum) in
//! two storage modes:
//! - `f32`: f32 weights, gradients and state;
//! - `f16_sr`: f16 weights and gradients, f32 state, weights stored with
//!   stochastic rounding (no master copy).
//!
//! Each step is timed in the same run, samples interleaved, with two
//! references over the same number of parameters:
//! - `triad`: the STREAM triad `a[i] = b[i] + s * c[i]` over three f32
//!   arrays of that length, written as a plain loop the compiler
//!   vectorises; its bandwidth counts 12 bytes per element, as STREAM does
//!   (the write-allocate read of `a` is not counted, so the machine moves 16);
//! - `naive`: the same update written plainly in scalar Rust ([`naive`]):
//!   a first pass that sums the squared norms in f64 (LAMB, LARS), then a
//!   pass that updates. No intrinsics, no unrolling; the compiler vectorises
//!   what it can (the update passes; not the f64 sums, whose order is fixed).
//!
//! A step's bandwidth (`gbps`) is the *minimum* bytes it must move over its
//! time: read the weights, gradients and state once and write the weights
//! and state once ([`Kernel::bytes_per_element`]: 28 B per parameter for
//! LAMB and AdamW in f32, 20 B for LARS and SGD with momentum, 22 B and 14 B
//! with f16 weights and gradients). The naive step gets the same byte
//! count. Tessera's LAMB and LARS actually read the weights, gradients and
//! state twice (phase 1 computes the norms, phase 2 the update), so they
//! move more than they are credited with: LAMB in f32 44 B, LARS 28 B.
//!
//! `ratio` is the step's throughput over the reference's: for `naive`
//! `reference_seconds / seconds` (the same bytes); for `triad` `gbps /
//! reference_gbps`, effective bandwidth over the triad's, since the triad
//! moves a different number of bytes per element.
//!
//! Every function works on its own buffers, filled from the same seeded
//! inputs: weights uniform in `[-1, 1)`, gradients in `[-0.01, 0.01)` and
//! state as after some steps. Each call is one more step (step number
//! [`STEP`] every time, so the bias corrections and momentum are those of a
//! step in the middle of training); the values drift slowly and stay
//! finite and normal.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use tessera_core::arch;
use tessera_core::fp::{Element, f16};
use tessera_core::optim::{
    AdamW, AdamWConfig, Lamb, LambConfig, Lars, LarsConfig, Param, Precision, Sgd, SgdConfig, Step,
};
use tessera_core::rng::RandomStream;

use super::report::Sink;
use super::timing::{self, Measurement, Settings};
use super::{BenchError, Plan, Record, Suite, try_zeroed};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "optimizers",
    about: "LAMB, LARS, AdamW and SGD steps (f32; f16 weights with SR) vs a STREAM triad and a naive scalar step",
    run,
};

/// 1 Mi parameters (the state fits in a 32 MB L3) and 16 Mi (memory).
const SIZES: [usize; 2] = [1 << 20, 16 << 20];
/// `--quick`: 64 Ki (L2) and 1 Mi parameters.
const QUICK_SIZES: [usize; 2] = [64 << 10, 1 << 20];

const FULL: Settings = Settings {
    samples: NonZeroUsize::new(15).unwrap(),
    min_sample: Duration::from_millis(5),
};
const QUICK: Settings = Settings {
    samples: NonZeroUsize::new(5).unwrap(),
    min_sample: Duration::from_millis(1),
};

/// The seed of the inputs and of the stochastic rounding.
const SEED: u64 = 0x7e55_e7a0;
/// The parameter's id (it addresses the stochastic-rounding bits).
const ID: u64 = 7;
/// The step number of every call: past step 1, where SGD's and LARS's
/// momentum buffer is written without being read.
const STEP: u64 = 10;
/// STREAM's triad scalar.
const TRIAD_SCALAR: f32 = 3.0;
/// Bytes per element STREAM credits the triad with: read `b` and `c`, write `a`.
const TRIAD_BYTES: usize = 3 * size_of::<f32>();

/// LAMB as timm's `Lamb` defaults (lr 1e-3, weight decay 0.01, adapted).
fn lamb_config() -> LambConfig {
    LambConfig::default()
}

/// LARS as in a ResNet-50 recipe: momentum 0.9, weight decay 1e-4 (so the
/// trust ratio is computed), trust coefficient 0.001.
fn lars_config() -> LarsConfig {
    LarsConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..LarsConfig::default()
    }
}

/// PyTorch's `AdamW` defaults.
fn adamw_config() -> AdamWConfig {
    AdamWConfig::default()
}

/// SGD with momentum 0.9 and weight decay 1e-4.
fn sgd_config() -> SgdConfig {
    SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..SgdConfig::default()
    }
}

/// The optimizers, in the order they are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Optimizer {
    Lamb,
    Lars,
    AdamW,
    Sgd,
}

impl Optimizer {
    const ALL: [Self; 4] = [Self::Lamb, Self::Lars, Self::AdamW, Self::Sgd];

    /// State tensors: `m` and `v`, or the momentum buffer.
    const fn states(self) -> usize {
        match self {
            Self::Lamb | Self::AdamW => 2,
            Self::Lars | Self::Sgd => 1,
        }
    }
}

/// How weights and gradients are stored (state is f32 in both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    F32,
    F16Sr,
}

impl Storage {
    const ALL: [Self; 2] = [Self::F32, Self::F16Sr];

    /// Bytes of one weight or gradient.
    const fn bytes(self) -> usize {
        match self {
            Self::F32 => size_of::<f32>(),
            Self::F16Sr => size_of::<f16>(),
        }
    }
}

/// One optimizer in one storage mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kernel {
    optimizer: Optimizer,
    storage: Storage,
}

impl Kernel {
    /// Every kernel, optimizer by optimizer.
    fn all() -> impl Iterator<Item = Self> {
        Optimizer::ALL
            .into_iter()
            .flat_map(|optimizer| Storage::ALL.map(|storage| Self { optimizer, storage }))
    }

    const fn name(self) -> &'static str {
        match (self.optimizer, self.storage) {
            (Optimizer::Lamb, Storage::F32) => "lamb_f32",
            (Optimizer::Lamb, Storage::F16Sr) => "lamb_f16_sr",
            (Optimizer::Lars, Storage::F32) => "lars_f32",
            (Optimizer::Lars, Storage::F16Sr) => "lars_f16_sr",
            (Optimizer::AdamW, Storage::F32) => "adamw_f32",
            (Optimizer::AdamW, Storage::F16Sr) => "adamw_f16_sr",
            (Optimizer::Sgd, Storage::F32) => "sgd_f32",
            (Optimizer::Sgd, Storage::F16Sr) => "sgd_f16_sr",
        }
    }

    /// The bytes per parameter Tessera's step moves in each pass over the
    /// tensor (reads plus writes; LAMB in its fused form, whose first pass
    /// also writes the update to f32 scratch).
    const fn pass_bytes(self) -> (usize, usize) {
        let (w, f) = (self.storage.bytes(), size_of::<f32>());
        match self.optimizer {
            // Read w, g, m, v; write m, v, u. Then read w, u; write w.
            Optimizer::Lamb => (2 * w + 5 * f, 2 * w + f),
            // Read w, g. Then read w, g, buf; write w, buf.
            Optimizer::Lars => (2 * w, 3 * w + 2 * f),
            Optimizer::AdamW | Optimizer::Sgd => (self.bytes_per_element(), 0),
        }
    }

    /// The least a step can move per parameter: read the weight, the
    /// gradient and each state element once, write the weight and each
    /// state element once.
    const fn bytes_per_element(self) -> usize {
        // Read w and g, write w.
        let weights = 3 * self.storage.bytes();
        // Read and write each state tensor.
        let state = 2 * self.optimizer.states() * size_of::<f32>();
        weights + state
    }
}

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = if plan.quick { QUICK } else { FULL };
    let sizes: Vec<usize> = match &plan.elements {
        Some(sizes) => sizes.iter().map(|n| n.get()).collect(),
        None if plan.quick => QUICK_SIZES.to_vec(),
        None => SIZES.to_vec(),
    };
    let passes: Vec<String> = Kernel::all()
        .map(|k| match k.pass_bytes() {
            (one, 0) => format!("{} {one}", k.name()),
            (one, two) => format!("{} {one}+{two}", k.name()),
        })
        .collect();
    sink.start(&format!(
        "optimizers: best of {} samples (each >= {} ms) per step and reference, interleaved; \
         {}; naive and triad compiled with the {} backend's target features ({}); \
         GB/s = minimum bytes per step / time (triad: 12 B per element); \
         ratio vs triad = GB/s / triad GB/s, vs naive = naive time / step time; \
         bytes per parameter Tessera moves, by pass: {}",
        settings.samples,
        settings.min_sample.as_millis(),
        super::build_note(),
        arch::active(),
        arch::active().target_features(),
        passes.join(", "),
    ))?;
    for n in sizes {
        for kernel in Kernel::all() {
            let [ours, naive, triad] = match kernel.storage {
                Storage::F32 => time_kernel::<f32>(kernel.optimizer, n, settings)?,
                Storage::F16Sr => time_kernel::<f16>(kernel.optimizer, n, settings)?,
            };
            report(kernel, n, ours, naive, triad, sink)?;
        }
    }
    Ok(())
}

/// Passes the kernel's two records to the sink.
fn report(
    kernel: Kernel,
    n: usize,
    ours: Measurement,
    naive: Measurement,
    triad: Measurement,
    sink: &mut dyn Sink,
) -> Result<(), BenchError> {
    let moved = (n * kernel.bytes_per_element()) as f64;
    let gbps = moved / ours.best / 1e9;
    let naive_gbps = moved / naive.best / 1e9;
    let triad_gbps = (n * TRIAD_BYTES) as f64 / triad.best / 1e9;
    for (reference, theirs, reference_gbps) in
        [("triad", triad, triad_gbps), ("naive", naive, naive_gbps)]
    {
        sink.record(&Record {
            suite: SUITE.name,
            kernel: kernel.name(),
            elements: n,
            seconds: ours.best,
            gbps,
            reference,
            ratio: gbps / reference_gbps,
            reference_seconds: theirs.best,
            reference_gbps,
        })?;
    }
    Ok(())
}

/// A tensor's buffers: weights and gradients in `W`, two f32 state tensors
/// (the second empty for the one-state optimizers), and LAMB's update
/// scratch (empty for the others).
struct Buffers<W> {
    w: Vec<W>,
    g: Vec<W>,
    s0: Vec<f32>,
    s1: Vec<f32>,
    update: Vec<f32>,
}

impl<W: naive::Weight> Buffers<W> {
    /// The suite's inputs for `n` parameters of `optimizer`.
    fn new(n: usize, optimizer: Optimizer) -> Result<Self, BenchError> {
        let stream = RandomStream::new(SEED, 0);
        // 24 random bits to [-1, 1).
        let uniform = |i: usize, k: u32| {
            (stream.word(i as u64, k) >> 8) as f32 * (1.0 / (1 << 23) as f32) - 1.0
        };
        let mut w = try_zeroed::<W>(n)?;
        let mut g = try_zeroed::<W>(n)?;
        let mut s0 = try_zeroed::<f32>(n)?;
        let mut s1 = try_zeroed::<f32>(if optimizer.states() == 2 { n } else { 0 })?;
        let update = try_zeroed::<f32>(if optimizer == Optimizer::Lamb { n } else { 0 })?;
        for (i, ((w, g), s0)) in w.iter_mut().zip(&mut g).zip(&mut s0).enumerate() {
            *w = W::round(uniform(i, 0));
            *g = W::round(0.01 * uniform(i, 1));
            // The first moment (or the momentum buffer) as after some steps.
            *s0 = 0.5 * g.get();
        }
        for (s1, g) in s1.iter_mut().zip(&g) {
            *s1 = 0.5 * g.get() * g.get();
        }
        Ok(Self {
            w,
            g,
            s0,
            s1,
            update,
        })
    }
}

/// The four optimizers with the suite's settings, validated once, and the
/// step they apply.
struct Steps {
    lamb: Lamb,
    lars: Lars,
    adamw: AdamW,
    sgd: Sgd,
    precision: Precision,
    step: Step,
}

impl Steps {
    fn new() -> Self {
        let valid = "the suite's settings are valid";
        Self {
            lamb: Lamb::new(lamb_config()).expect(valid),
            lars: Lars::new(lars_config()).expect(valid),
            adamw: AdamW::new(adamw_config()).expect(valid),
            sgd: Sgd::new(sgd_config()).expect(valid),
            precision: Precision {
                seed: SEED,
                ..Precision::default()
            },
            step: Step::after(STEP - 1),
        }
    }

    /// One step of Tessera's `optimizer` over `b`.
    fn tessera<W: Element>(&self, optimizer: Optimizer, b: &mut Buffers<W>) {
        let (step, precision) = (self.step, &self.precision);
        let Buffers {
            w,
            g,
            s0,
            s1,
            update,
        } = b;
        match optimizer {
            Optimizer::Lamb => {
                // The fused form: the element formula once per parameter.
                let mut p = Param::new(ID, w, g, [s0, s1]);
                let totals = self.lamb.partials_into(step, precision, &mut p, update);
                self.lamb
                    .apply_update(step, &totals, precision, &mut p, update);
            }
            Optimizer::Lars => self
                .lars
                .step(step, precision, &mut Param::new(ID, w, g, [s0])),
            Optimizer::AdamW => {
                let mut p = Param::new(ID, w, g, [s0, s1]);
                let two = "two state tensors: AdamW without amsgrad";
                self.adamw.step(step, precision, &mut p).expect(two);
            }
            Optimizer::Sgd => self
                .sgd
                .step(step, precision, &mut Param::new(ID, w, g, [s0])),
        }
    }

    /// One step of the naive `optimizer` over `b`; f16 weights round with
    /// the stream Tessera uses.
    #[inline(always)]
    fn naive<W: naive::Weight>(&self, optimizer: Optimizer, b: &mut Buffers<W>) {
        let sr = naive::Sr(self.precision.weight_stream(ID, STEP));
        let Buffers { w, g, s0, s1, .. } = b;
        match optimizer {
            Optimizer::Lamb => naive::lamb(self.lamb.config(), STEP, w, g, s0, s1, sr),
            Optimizer::Lars => naive::lars(self.lars.config(), w, g, s0, sr),
            Optimizer::AdamW => naive::adamw(self.adamw.config(), STEP, w, g, s0, s1, sr),
            Optimizer::Sgd => naive::sgd(self.sgd.config(), w, g, s0, sr),
        }
    }
}

/// Times one optimizer step with weights and gradients in `W`, the naive
/// step and the triad, at `n` parameters.
fn time_kernel<W: naive::Weight + Element>(
    optimizer: Optimizer,
    n: usize,
    settings: Settings,
) -> Result<[Measurement; 3], BenchError> {
    let steps = Steps::new();
    let mut ours = Buffers::<W>::new(n, optimizer)?;
    let mut theirs = Buffers::<W>::new(n, optimizer)?;
    let (mut a, b, c) = (try_zeroed::<f32>(n)?, vec_of(n, 1.0)?, vec_of(n, 2.0)?);
    let mut ours_fn = || steps.tessera(optimizer, black_box(&mut ours));
    // The references are compiled with the kernels' backend's target
    // features: what the compiler makes of a plain loop on this CPU.
    let mut naive_fn = || {
        arch::with_backend_features(
            #[inline(always)]
            || steps.naive(optimizer, black_box(&mut theirs)),
        );
    };
    let mut triad_fn = || {
        arch::with_backend_features(
            #[inline(always)]
            || {
                triad(
                    black_box(&mut a),
                    black_box(&b),
                    black_box(&c),
                    TRIAD_SCALAR,
                )
            },
        );
        black_box(&mut a);
    };
    let m = timing::compare(settings, &mut [&mut ours_fn, &mut naive_fn, &mut triad_fn]);
    Ok([m[0], m[1], m[2]])
}

/// `n` copies of `x`, or [`BenchError::OutOfMemory`].
fn vec_of(n: usize, x: f32) -> Result<Vec<f32>, BenchError> {
    let mut v = try_zeroed::<f32>(n)?;
    v.fill(x);
    Ok(v)
}

/// STREAM's triad, `a[i] = b[i] + s * c[i]`: a plain loop that the compiler
/// vectorises (no fused multiply-add: Rust does not contract).
///
/// # Panics
/// Never; the shortest slice sets the length.
#[inline(always)]
fn triad(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    for (a, (b, c)) in a.iter_mut().zip(b.iter().zip(c)) {
        *a = b + s * c;
    }
}

/// The naive references: each update written as plainly as it is stated,
/// in scalar Rust over slices, with the norms summed naively in f64.
///
/// Each covers the options the suite uses (for LAMB: coupled weight decay,
/// bias correction, gradient averaging, no clamp of `||w||`) and computes
/// the same per-element formula in f32 as Tessera, so its weights agree
/// with Tessera's to rounding (the tests check this). f16 weights are
/// widened with `to_f32` and stored with Tessera's scalar stochastic
/// rounding, element by element, from the same random stream.
pub(crate) mod naive {
    use tessera_core::fp::{self, Overflow, f16};
    use tessera_core::optim::{AdamWConfig, LambConfig, LarsConfig, SgdConfig};
    use tessera_core::rng::RandomStream;

    /// The random stream that rounds f16 weights.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Sr(pub(crate) RandomStream);

    /// How the naive code reads and writes weights and gradients.
    pub(crate) trait Weight: Copy + Default {
        /// The value as f32.
        fn get(self) -> f32;
        /// `x` stored as weight `i` with stochastic rounding from `sr`.
        fn put(x: f32, sr: Sr, i: usize) -> Self;
        /// `x` rounded to nearest (for inputs).
        fn round(x: f32) -> Self;
    }

    impl Weight for f32 {
        #[inline(always)]
        fn get(self) -> f32 {
            self
        }

        #[inline(always)]
        fn put(x: f32, _: Sr, _: usize) -> Self {
            x
        }

        #[inline(always)]
        fn round(x: f32) -> Self {
            x
        }
    }

    impl Weight for f16 {
        #[inline(always)]
        fn get(self) -> f32 {
            self.to_f32()
        }

        #[inline(always)]
        fn put(x: f32, sr: Sr, i: usize) -> Self {
            fp::scalar::f32_to_f16_sr(x, sr.0, i as u64, Overflow::Infinity)
        }

        #[inline(always)]
        fn round(x: f32) -> Self {
            f16::from_f32(x)
        }
    }

    /// `1 - beta^t`.
    #[inline(always)]
    fn bias_correction(beta: f32, t: u64) -> f32 {
        1.0 - beta.powi(i32::try_from(t).unwrap_or(i32::MAX))
    }

    /// LAMB: pass 1 sums `||w||^2` and `||u||^2`, pass 2 updates `w`, `m`, `v`.
    #[inline(always)]
    pub(crate) fn lamb<W: Weight>(
        c: &LambConfig,
        t: u64,
        w: &mut [W],
        g: &[W],
        m: &mut [f32],
        v: &mut [f32],
        sr: Sr,
    ) {
        let (b1, b2) = c.betas;
        let bc1 = bias_correction(b1, t);
        let bc2_sqrt = bias_correction(b2, t).sqrt();
        let wd = c.weight_decay;
        let direction = |w: f32, g: f32, m: f32, v: f32| {
            let m = b1 * m + (1.0 - b1) * g;
            let v = b2 * v + (1.0 - b2) * (g * g);
            let u = (m / bc1) / (v.sqrt() / bc2_sqrt + c.eps) + wd * w;
            (u, m, v)
        };

        let mut w_sq = 0.0f64;
        let mut u_sq = 0.0f64;
        for (((w, g), m), v) in w.iter().zip(g).zip(m.iter()).zip(v.iter()) {
            let w = w.get();
            let (u, _, _) = direction(w, g.get(), *m, *v);
            w_sq += f64::from(w) * f64::from(w);
            u_sq += f64::from(u) * f64::from(u);
        }
        let (w_norm, u_norm) = (w_sq.sqrt(), u_sq.sqrt());
        let ratio = if w_norm > 0.0 && u_norm > 0.0 {
            (w_norm / u_norm) as f32
        } else {
            1.0
        };

        for (i, (((w, g), m), v)) in w.iter_mut().zip(g).zip(m).zip(v).enumerate() {
            let (u, m_new, v_new) = direction(w.get(), g.get(), *m, *v);
            *w = W::put(w.get() - c.lr * (u * ratio), sr, i);
            *m = m_new;
            *v = v_new;
        }
    }

    /// LARS with momentum: pass 1 sums `||w||^2` and `||g||^2`, pass 2
    /// updates `w` and the buffer (not step 1).
    #[inline(always)]
    pub(crate) fn lars<W: Weight>(c: &LarsConfig, w: &mut [W], g: &[W], buf: &mut [f32], sr: Sr) {
        let mut w_sq = 0.0f64;
        let mut g_sq = 0.0f64;
        for (w, g) in w.iter().zip(g) {
            let (w, g) = (f64::from(w.get()), f64::from(g.get()));
            w_sq += w * w;
            g_sq += g * g;
        }
        let (w_norm, g_norm) = (w_sq.sqrt(), g_sq.sqrt());
        let ratio = if w_norm > 0.0 && g_norm > 0.0 {
            let wd = f64::from(c.weight_decay);
            (f64::from(c.trust_coeff) * w_norm / (g_norm + w_norm * wd + f64::from(c.eps))) as f32
        } else {
            1.0
        };

        for (i, ((w, g), buf)) in w.iter_mut().zip(g).zip(buf).enumerate() {
            let d = (g.get() + c.weight_decay * w.get()) * ratio;
            *buf = c.momentum * *buf + (1.0 - c.dampening) * d;
            *w = W::put(w.get() - c.lr * *buf, sr, i);
        }
    }

    /// AdamW: one pass (no norms).
    #[inline(always)]
    pub(crate) fn adamw<W: Weight>(
        c: &AdamWConfig,
        t: u64,
        w: &mut [W],
        g: &[W],
        m: &mut [f32],
        v: &mut [f32],
        sr: Sr,
    ) {
        let (b1, b2) = c.betas;
        let step_size = c.lr / bias_correction(b1, t);
        let bc2_sqrt = bias_correction(b2, t).sqrt();
        let decay = 1.0 - c.lr * c.weight_decay;
        for (i, (((w, g), m), v)) in w.iter_mut().zip(g).zip(m).zip(v).enumerate() {
            let g = g.get();
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * (g * g);
            let denom = v.sqrt() / bc2_sqrt + c.eps;
            *w = W::put(w.get() * decay - step_size * (*m / denom), sr, i);
        }
    }

    /// SGD with momentum and weight decay: one pass (not step 1).
    #[inline(always)]
    pub(crate) fn sgd<W: Weight>(c: &SgdConfig, w: &mut [W], g: &[W], buf: &mut [f32], sr: Sr) {
        for (i, ((w, g), buf)) in w.iter_mut().zip(g).zip(buf).enumerate() {
            let d = g.get() + c.weight_decay * w.get();
            *buf = c.momentum * *buf + (1.0 - c.dampening) * d;
            *w = W::put(w.get() - c.lr * *buf, sr, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step of Tessera's and of the naive `optimizer` from the suite's
    /// inputs: `(initial, tessera, naive)` weights.
    fn one_step<W: naive::Weight + Element>(optimizer: Optimizer, n: usize) -> [Vec<W>; 3] {
        let steps = Steps::new();
        let initial = Buffers::<W>::new(n, optimizer).unwrap();
        let mut ours = Buffers::<W>::new(n, optimizer).unwrap();
        let mut theirs = Buffers::<W>::new(n, optimizer).unwrap();
        steps.tessera(optimizer, &mut ours);
        steps.naive(optimizer, &mut theirs);
        [initial.w, ours.w, theirs.w]
    }

    #[test]
    fn naive_steps_compute_the_same_update_in_f32() {
        for optimizer in Optimizer::ALL {
            let [initial, ours, theirs] = one_step::<f32>(optimizer, 1000);
            for ((w0, a), b) in initial.iter().zip(&ours).zip(&theirs) {
                // Relative to the update, the part that can differ.
                let update = (a - w0).abs();
                assert!(update > 0.0, "{optimizer:?}: {w0} not updated");
                assert!(
                    (a - b).abs() <= 1e-3 * update,
                    "{optimizer:?}: {w0} -> {a} (tessera) vs {b} (naive)"
                );
            }
        }
    }

    #[test]
    fn naive_steps_round_f16_weights_alike() {
        // The same stochastic-rounding bits, and norms that differ only by
        // rounding: a weight rounds differently only when its f32 update
        // lands within rounding error of a threshold, which is rare.
        for optimizer in Optimizer::ALL {
            let n = 4096;
            let [_, ours, theirs] = one_step::<f16>(optimizer, n);
            let differ = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
            assert!(differ <= n / 100, "{optimizer:?}: {differ} of {n} differ");
        }
    }

    #[test]
    fn bytes_per_element_are_the_minimum_traffic() {
        let bytes = |optimizer, storage| Kernel { optimizer, storage }.bytes_per_element();
        assert_eq!(bytes(Optimizer::Lamb, Storage::F32), 28);
        assert_eq!(bytes(Optimizer::AdamW, Storage::F32), 28);
        assert_eq!(bytes(Optimizer::Lars, Storage::F32), 20);
        assert_eq!(bytes(Optimizer::Sgd, Storage::F32), 20);
        assert_eq!(bytes(Optimizer::Lamb, Storage::F16Sr), 22);
        assert_eq!(bytes(Optimizer::AdamW, Storage::F16Sr), 22);
        assert_eq!(bytes(Optimizer::Lars, Storage::F16Sr), 14);
        assert_eq!(bytes(Optimizer::Sgd, Storage::F16Sr), 14);
    }

    #[test]
    fn passes_move_at_least_the_minimum() {
        for k in Kernel::all() {
            let (one, two) = k.pass_bytes();
            assert!(one + two >= k.bytes_per_element(), "{}", k.name());
        }
        let lamb = Kernel {
            optimizer: Optimizer::Lamb,
            storage: Storage::F32,
        };
        assert_eq!(lamb.pass_bytes(), (28, 12));
    }

    #[test]
    fn kernel_names_are_distinct() {
        let names: Vec<_> = Kernel::all().map(Kernel::name).collect();
        assert_eq!(names.len(), 8);
        for (i, a) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(a), "{a}");
        }
    }

    #[test]
    fn triad_is_b_plus_s_c() {
        let mut a = [0.0f32; 5];
        triad(&mut a, &[1.0; 5], &[2.0; 5], 3.0);
        assert_eq!(a, [7.0; 5]);
    }
}
