//! A training micro-batch on the simulated IPU against the same kernels
//! called directly, with no engine: what the simulator's graph, exchanges
//! and tiles cost on the host over the arithmetic itself.
//!
//! The simulated side is [`Model::train_micro_batch`] on one replica's Mk2
//! (forward, loss and backward: the inputs streamed in, every product cut
//! over the tiles, the gradients read back row-major). The direct side,
//! [`Direct::step`], computes the same numbers with the same products
//! ([`gemm_tree`]: Tessera's fixed-order GEMM over the same leaves) and
//! the same element-wise arithmetic and loss kernel on whole matrices; a
//! test checks that both give the same gradients bit for bit. The optimizer
//! step and the all-reduce are left out of both: the trainer calls the same
//! kernels for them either way.

use tessera_core::fp::{HalfFloat, f16};
use tessera_core::loss::{self, CrossEntropyParams, Reduction};
use tessera_core::rng::RandomStream;
use tessera_sim::IpuSpec;
use tessera_sim::ipu::Target;
use tessera_sim::kernels::matmul::{GemmShape, gemm_tree};
use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError, NoGroup};

/// Rounds to f16 and back if `f16`.
pub(crate) fn round(x: f32, f16: bool) -> f32 {
    if f16 {
        <f16 as HalfFloat>::from_f32(x).to_f32()
    } else {
        x
    }
}

/// The network `inputs-width-width-10` with ReLU, no batch norm.
pub(crate) fn mlp_config(inputs: usize, width: usize) -> MlpConfig {
    MlpConfig {
        inputs,
        hidden: vec![width, width],
        classes: 10,
        activation: Activation::Relu,
        batch_norm: false,
    }
}

/// One micro-batch's data and parameters of a model `C`, shared by both
/// sides.
pub(crate) struct Case<C = MlpConfig> {
    pub(crate) config: C,
    pub(crate) batch: usize,
    pub(crate) compute: Compute,
    /// The parameters in the model's order (f16 values in
    /// [`Compute::F16`]).
    pub(crate) params: Vec<Vec<f32>>,
    /// The inputs (for images CHW per sample).
    pub(crate) x: Vec<f32>,
    pub(crate) labels: Vec<u32>,
    pub(crate) scale: f32,
}

impl<C> Case<C> {
    /// A seeded case of `config` with its initial `params`, both rounded
    /// to f16 in [`Compute::F16`]: `batch` samples of `features` inputs
    /// uniform in [0, 1), labels below `classes`.
    pub(crate) fn seeded(
        (config, mut params): (C, Vec<Vec<f32>>),
        (batch, features, classes): (usize, usize, usize),
        compute: Compute,
    ) -> Self {
        let f16 = compute == Compute::F16;
        for p in &mut params {
            p.iter_mut().for_each(|v| *v = round(*v, f16));
        }
        let s = RandomStream::new(11, 0);
        let x = (0..(batch * features) as u64)
            .map(|i| round((s.bits(i) >> 8) as f32 / (1u32 << 24) as f32, f16))
            .collect();
        let labels = (0..batch as u64)
            .map(|i| s.substream(1).bits(i) % classes as u32)
            .collect();
        Self {
            config,
            batch,
            compute,
            params,
            x,
            labels,
            scale: 1024.0,
        }
    }
}

impl Case {
    /// A seeded case: He-initialised weights, inputs uniform in [0, 1).
    pub(crate) fn new(config: MlpConfig, batch: usize, compute: Compute) -> Self {
        let (params, shape) = (
            config.network().init(7).expect("a valid MLP"),
            (batch, config.inputs, config.classes),
        );
        Self::seeded((config, params), shape, compute)
    }

    /// The simulated replica, its parameters set.
    pub(crate) fn simulated(&self, spec: IpuSpec) -> Result<Simulated, ModelError> {
        let network = self.config.network();
        let mut mlp = Model::new(&network, Target::single(spec), self.batch, self.compute)?;
        let params: Vec<&[f32]> = self.params.iter().map(Vec::as_slice).collect();
        mlp.set_params(&params)?;
        Ok(Simulated {
            mlp,
            grads: vec![Vec::new(); self.params.len()],
        })
    }
}

/// The simulated side.
pub(crate) struct Simulated {
    mlp: Model,
    pub(crate) grads: Vec<Vec<f32>>,
}

impl Simulated {
    /// One micro-batch, forward and backward: the loss sum.
    pub(crate) fn step(&mut self, case: &Case) -> f32 {
        self.mlp
            .train_micro_batch(
                &case.x,
                &case.labels,
                case.scale,
                &mut NoGroup,
                &mut self.grads,
            )
            .expect("a valid micro-batch")
            .loss_sum
    }
}

/// The direct side: whole matrices, no engine.
pub(crate) struct Direct<'a> {
    case: &'a Case,
    ones: Vec<f32>,
    pub(crate) grads: Vec<Vec<f32>>,
}

/// `c = op(a) op(b)` over `m x k x n`, a fresh output.
pub(crate) fn product(
    (m, k, n): (usize, usize, usize),
    (a, a_transposed): (&[f32], bool),
    (b, b_transposed): (&[f32], bool),
) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    let shape = GemmShape {
        m,
        k,
        n,
        a_transposed,
        b_transposed,
    };
    gemm_tree(shape, a, b, &mut c);
    c
}

impl<'a> Direct<'a> {
    pub(crate) fn new(case: &'a Case) -> Self {
        Self {
            case,
            ones: vec![1.0; case.batch],
            grads: vec![Vec::new(); case.params.len()],
        }
    }

    /// One micro-batch, forward and backward: the loss sum.
    pub(crate) fn step(&mut self) -> f32 {
        let case = self.case;
        let f16 = case.compute == Compute::F16;
        let batch = case.batch;
        let mut widths = vec![case.config.inputs];
        widths.extend(&case.config.hidden);
        widths.push(case.config.classes);
        let last = widths.len() - 2;
        // Forward: the inputs of every layer and its pre-activation.
        let (mut inputs, mut zs) = (vec![case.x.clone()], Vec::new());
        for l in 0..=last {
            let (fan_in, width) = (widths[l], widths[l + 1]);
            let (w, bias) = (&case.params[2 * l], &case.params[2 * l + 1]);
            let y = product((batch, fan_in, width), (&inputs[l], false), (w, false));
            let z: Vec<f32> = y
                .iter()
                .zip(bias.iter().cycle())
                .map(|(y, b)| round(y + b, f16))
                .collect();
            if l < last {
                inputs.push(z.iter().map(|&v| round(v.max(0.0), f16)).collect());
            }
            zs.push(z);
        }
        let classes = case.config.classes;
        let params = CrossEntropyParams::new(classes, Reduction::None)
            .and_then(|p| p.with_loss_scale(case.scale))
            .expect("valid classes and scale");
        let (mut losses, mut dz) = (vec![0.0; batch], vec![0.0; batch * classes]);
        loss::softmax_cross_entropy_with_grad(
            &params,
            &zs[last],
            &case.labels,
            &mut losses,
            &mut dz,
        )
        .expect("labels below classes");
        dz.iter_mut().for_each(|g| *g = round(*g, f16));
        // Backward, last layer first.
        for l in (0..=last).rev() {
            let (fan_in, width) = (widths[l], widths[l + 1]);
            let dw = product((fan_in, batch, width), (&inputs[l], true), (&dz, false));
            let db = product((1, batch, width), (&self.ones, false), (&dz, false));
            self.grads[2 * l] = dw.into_iter().map(|v| round(v, f16)).collect();
            self.grads[2 * l + 1] = db.into_iter().map(|v| round(v, f16)).collect();
            if l == 0 {
                break;
            }
            let w = &case.params[2 * l];
            let da = product((batch, width, fan_in), (&dz, false), (w, true));
            dz = da
                .iter()
                .zip(&zs[l - 1])
                .map(|(&g, &z)| {
                    let d = if z > 0.0 { 1.0 } else { 0.0 };
                    round(round(g, f16) * d, f16)
                })
                .collect();
        }
        losses.iter().map(|&l| f64::from(l)).sum::<f64>() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sim::IpuParams;

    #[test]
    fn the_direct_step_computes_the_simulated_gradients_bit_for_bit() {
        let spec = IpuSpec::new(IpuParams {
            tiles: 64,
            ..IpuParams::default()
        })
        .unwrap();
        for compute in [Compute::F32, Compute::F16] {
            // 300 inputs: a reduction of several leaves.
            let case = Case::new(mlp_config(300, 48), 8, compute);
            let mut sim = case.simulated(spec).unwrap();
            let mut direct = Direct::new(&case);
            let (a, b) = (sim.step(&case), direct.step());
            assert_eq!(a.to_bits(), b.to_bits(), "{compute:?}");
            for (k, (s, d)) in sim.grads.iter().zip(&direct.grads).enumerate() {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(s), bits(d), "{compute:?} parameter {k}");
            }
        }
    }
}
