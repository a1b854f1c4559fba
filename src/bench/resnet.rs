//! resnet-mini's training micro-batch on the simulated IPU against the
//! same layers computed directly, with no engine, for `tessera bench sim`.
//!
//! The simulated side is [`Model::train_micro_batch`] on one replica's
//! Mk2 (the images streamed in and reordered to `[n h w, c]`, every
//! convolution an im2col exchange and a product cut over the tiles, batch
//! norm's sums gathered and broadcast, the gradients read back). The
//! direct side, [`Direct::step`], does the same work on whole matrices:
//! each convolution's im2col and product ([`gemm_tree`](tessera_sim::kernels::matmul::gemm_tree)), `dW = cols^T dY`,
//! `dcols = dY W^T` and col2im (taps summed in the same order); batch
//! norm's sums, normalisation and activation and its two backward passes
//! with the same roundings; global average pooling, residual sums, the
//! dense head and the loss kernel. A test checks that both give the same
//! gradients within f32 rounding.

use super::step::{self, product, round};
use tessera_core::loss::{self, CrossEntropyParams, Reduction};
use tessera_sim::IpuSpec;
use tessera_sim::ipu::Target;
use tessera_sim::model::{
    BN_EPSILON, Compute, Model, ModelError, NetLayer, NetworkConfig, NoGroup, nchw_to_rows,
};

/// resnet-mini for the 8x8 digits as the trainer builds it by default:
/// channels 16 and 32, one residual block per stage, 10 classes.
pub(crate) fn resnet_mini() -> NetworkConfig {
    NetworkConfig::resnet_mini([1, 8, 8], 10, &[16, 32], &[1, 1])
}

/// resnet-mini's micro-batch: [`step::Case`] of a network.
pub(crate) type Case = step::Case<NetworkConfig>;

/// A seeded case of `config`: its initial weights, pixels uniform in
/// [0, 1).
pub(crate) fn case(config: NetworkConfig, batch: usize, compute: Compute) -> Case {
    let params = config.init(7).expect("a valid network");
    let shape = (batch, config.inputs(), config.classes);
    Case::seeded((config, params), shape, compute)
}

impl Case {
    /// The simulated replica, its parameters set.
    pub(crate) fn simulated(&self, spec: IpuSpec) -> Result<Simulated, ModelError> {
        let target = Target::single(spec);
        let mut net = Model::new(&self.config, target, self.batch, self.compute)?;
        let params: Vec<&[f32]> = self.params.iter().map(Vec::as_slice).collect();
        net.set_params(&params)?;
        Ok(Simulated {
            net,
            grads: vec![Vec::new(); self.params.len()],
        })
    }

    /// Parameters in all.
    pub(crate) fn param_count(&self) -> usize {
        self.params.iter().map(Vec::len).sum()
    }
}

/// The simulated side.
pub(crate) struct Simulated {
    net: Model,
    pub(crate) grads: Vec<Vec<f32>>,
}

impl Simulated {
    /// One micro-batch, forward and backward: the loss sum.
    pub(crate) fn step(&mut self, case: &Case) -> f32 {
        self.net
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

/// A convolution on a batch: `[n h w, c_in]` to `[n oh ow, c_out]`.
#[derive(Clone, Copy)]
struct ConvDims {
    n: usize,
    input: (usize, usize),
    output: (usize, usize),
    cin: usize,
    cout: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
}

impl ConvDims {
    fn out_rows(&self) -> usize {
        self.n * self.output.0 * self.output.1
    }

    fn patch(&self) -> usize {
        self.kernel * self.kernel * self.cin
    }

    /// The input row tap `t` of output row `r` reads, if not padding.
    fn tap(&self, r: usize, t: usize) -> Option<usize> {
        let (oh, ow) = self.output;
        let (n, y, x) = (r / (oh * ow), r / ow % oh, r % ow);
        let (i, j) = (t / self.kernel, t % self.kernel);
        let ih = (y * self.stride + i).checked_sub(self.padding)?;
        let iw = (x * self.stride + j).checked_sub(self.padding)?;
        (ih < self.input.0 && iw < self.input.1)
            .then(|| (n * self.input.0 + ih) * self.input.1 + iw)
    }

    /// The patches `[n oh ow, kh kw c_in]` of `x`, zero outside.
    fn im2col(&self, x: &[f32]) -> Vec<f32> {
        let (patch, cin) = (self.patch(), self.cin);
        let mut cols = vec![0.0; self.out_rows() * patch];
        for (r, row) in cols.chunks_exact_mut(patch).enumerate() {
            for t in 0..self.kernel * self.kernel {
                if let Some(src) = self.tap(r, t) {
                    row[t * cin..(t + 1) * cin].copy_from_slice(&x[src * cin..(src + 1) * cin]);
                }
            }
        }
        cols
    }

    /// The input's gradient from `dcols`: each pixel's taps summed in
    /// increasing tap order, as the tiles' col2im sums them.
    fn col2im(&self, dcols: &[f32]) -> Vec<f32> {
        let (patch, cin) = (self.patch(), self.cin);
        let mut dx = vec![0.0; self.n * self.input.0 * self.input.1 * cin];
        for t in 0..self.kernel * self.kernel {
            for (r, row) in dcols.chunks_exact(patch).enumerate() {
                if let Some(dst) = self.tap(r, t) {
                    let d = &mut dx[dst * cin..(dst + 1) * cin];
                    for (d, g) in d.iter_mut().zip(&row[t * cin..(t + 1) * cin]) {
                        *d += g;
                    }
                }
            }
        }
        dx
    }
}

/// What the backward pass needs of a layer's forward pass.
enum Saved {
    /// Parameter index, the shape, the patches.
    Conv(usize, ConvDims, Vec<f32>),
    /// Parameter index of gamma, `xhat`, `z`, per-channel `inv_std`.
    Bn(usize, Vec<f32>, Vec<f32>, Vec<f32>),
    /// Pixels averaged per channel.
    GlobalPool(usize),
    Fork,
    Join,
}

/// The direct side: whole matrices, no engine.
pub(crate) struct Direct<'a> {
    case: &'a Case,
    ones: Vec<f32>,
    pub(crate) grads: Vec<Vec<f32>>,
}

/// A feature map in flight: `[rows, c]` and its pixels per sample.
struct Map {
    v: Vec<f32>,
    c: usize,
    hw: (usize, usize),
}

impl<'a> Direct<'a> {
    pub(crate) fn new(case: &'a Case) -> Self {
        Self {
            case,
            ones: vec![1.0; case.batch],
            grads: vec![Vec::new(); case.params.len()],
        }
    }

    fn f16(&self) -> bool {
        self.case.compute == Compute::F16
    }

    /// Forward through `layers` (a residual body recursively).
    fn forward(&self, layers: &[NetLayer], map: &mut Map, saved: &mut Vec<Saved>, p: &mut usize) {
        let f16 = self.f16();
        for layer in layers {
            match layer {
                NetLayer::Conv {
                    channels,
                    kernel,
                    stride,
                    padding,
                } => {
                    let out = |s: usize| (s + 2 * padding - kernel) / stride + 1;
                    let d = ConvDims {
                        n: self.case.batch,
                        input: map.hw,
                        output: (out(map.hw.0), out(map.hw.1)),
                        cin: map.c,
                        cout: *channels,
                        kernel: *kernel,
                        stride: *stride,
                        padding: *padding,
                    };
                    let cols = d.im2col(&map.v);
                    let w = &self.case.params[*p];
                    let dims = (d.out_rows(), d.patch(), d.cout);
                    *map = Map {
                        v: product(dims, (&cols, false), (w, false)),
                        c: d.cout,
                        hw: d.output,
                    };
                    saved.push(Saved::Conv(*p, d, cols));
                    *p += 1;
                }
                NetLayer::BnAct => {
                    let (xhat, z, a, inv) = self.bn_forward(&map.v, map.c, *p);
                    map.v = a;
                    saved.push(Saved::Bn(*p, xhat, z, inv));
                    *p += 2;
                }
                NetLayer::GlobalAvgPool => {
                    let (c, hw) = (map.c, map.hw.0 * map.hw.1);
                    let mut y = vec![0.0; self.case.batch * c];
                    for (s, out) in y.chunks_exact_mut(c).enumerate() {
                        for px in map.v[s * hw * c..(s + 1) * hw * c].chunks_exact(c) {
                            out.iter_mut().zip(px).for_each(|(o, v)| *o += v);
                        }
                        out.iter_mut().for_each(|o| *o /= hw as f32);
                    }
                    *map = Map {
                        v: y,
                        c,
                        hw: (1, 1),
                    };
                    saved.push(Saved::GlobalPool(hw));
                }
                NetLayer::Residual(body) => {
                    let skip = map.v.clone();
                    saved.push(Saved::Fork);
                    self.forward(body, map, saved, p);
                    for (v, s) in map.v.iter_mut().zip(&skip) {
                        *v = round(*v + s, f16);
                    }
                    saved.push(Saved::Join);
                }
                NetLayer::Pool(_) | NetLayer::Branches(_) | NetLayer::Dense { .. } => {
                    unreachable!(
                        "the bench's resnet-mini pools only globally and has no branches or \
                         dense blocks"
                    )
                }
            }
        }
    }

    /// Batch norm over the rows of `y` (`c` columns) and ReLU, gamma at
    /// parameter `p`: `xhat`, `z`, `a` and each column's `inv_std`.
    fn bn_forward(
        &self,
        y: &[f32],
        c: usize,
        p: usize,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let f16 = self.f16();
        let (gamma, beta) = (&self.case.params[p], &self.case.params[p + 1]);
        let x: Vec<f32> = y.iter().map(|&v| round(v + 0.0, f16)).collect();
        // Two passes, as the engine: the mean, then squared deviations.
        let (mut s1, mut s2) = (vec![0.0f32; c], vec![0.0f32; c]);
        for row in x.chunks_exact(c) {
            for k in 0..c {
                s1[k] += row[k];
            }
        }
        let n = (y.len() / c) as f32;
        let mean: Vec<f32> = s1.iter().map(|s| s / n).collect();
        for row in x.chunks_exact(c) {
            for k in 0..c {
                let d = row[k] - mean[k];
                s2[k] += d * d;
            }
        }
        let inv: Vec<f32> = (0..c)
            .map(|k| 1.0 / (s2[k] / n + BN_EPSILON).sqrt())
            .collect();
        let (mut xhat, mut z, mut a) = (vec![0.0; y.len()], vec![0.0; y.len()], vec![0.0; y.len()]);
        for (i, &v) in x.iter().enumerate() {
            let k = i % c;
            xhat[i] = (v - mean[k]) * inv[k];
            z[i] = round(gamma[k] * xhat[i] + beta[k], f16);
            a[i] = round(z[i].max(0.0), f16);
        }
        (xhat, z, a, inv)
    }

    /// Batch norm's and ReLU's backward pass from `da`: `dx`, and
    /// gamma's and beta's gradients into `grads[p]`, `grads[p + 1]`.
    fn bn_backward(
        &mut self,
        da: &[f32],
        (p, xhat, z, inv): (usize, &[f32], &[f32], &[f32]),
    ) -> Vec<f32> {
        let f16 = self.f16();
        let c = inv.len();
        let mut dy = vec![0.0; da.len()];
        let (mut s1, mut s2) = (vec![0.0f32; c], vec![0.0f32; c]);
        for i in 0..da.len() {
            let d = if z[i] > 0.0 { 1.0 } else { 0.0 };
            let g = round(round(da[i], f16) * d, f16);
            dy[i] = g;
            s1[i % c] += g;
            s2[i % c] += g * xhat[i];
        }
        let n = (da.len() / c) as f32;
        let gamma = &self.case.params[p];
        let dx = (0..da.len())
            .map(|i| {
                let k = i % c;
                round(
                    gamma[k] * inv[k] / n * (n * dy[i] - s1[k] - xhat[i] * s2[k]),
                    f16,
                )
            })
            .collect();
        self.grads[p] = s2.iter().map(|&v| round(v, f16)).collect();
        self.grads[p + 1] = s1.iter().map(|&v| round(v, f16)).collect();
        dx
    }

    /// The head's logits from the pooled `[n, c]` and the loss; the
    /// gradient of the pooled features.
    fn head(&mut self, pooled: &[f32], c: usize, p: usize) -> (f32, Vec<f32>) {
        let (f16, batch) = (self.f16(), self.case.batch);
        let classes = self.case.config.classes;
        let (w, bias) = (&self.case.params[p], &self.case.params[p + 1]);
        let y = product((batch, c, classes), (pooled, false), (w, false));
        let z: Vec<f32> = y
            .iter()
            .zip(bias.iter().cycle())
            .map(|(y, b)| round(y + b, f16))
            .collect();
        let params = CrossEntropyParams::new(classes, Reduction::None)
            .and_then(|q| q.with_loss_scale(self.case.scale))
            .expect("valid classes and scale");
        let (mut losses, mut dz) = (vec![0.0; batch], vec![0.0; batch * classes]);
        loss::softmax_cross_entropy_with_grad(&params, &z, &self.case.labels, &mut losses, &mut dz)
            .expect("labels below classes");
        dz.iter_mut().for_each(|g| *g = round(*g, f16));
        let dw = product((c, batch, classes), (pooled, true), (&dz, false));
        let db = product((1, batch, classes), (&self.ones, false), (&dz, false));
        self.grads[p] = dw.into_iter().map(|v| round(v, f16)).collect();
        self.grads[p + 1] = db.into_iter().map(|v| round(v, f16)).collect();
        let da = product((batch, classes, c), (&dz, false), (w, true));
        let loss = losses.iter().map(|&l| f64::from(l)).sum::<f64>() as f32;
        (loss, da)
    }

    /// A convolution's backward pass from `dy`: `dW` into `grads[p]`, and
    /// the input's gradient unless it is the network's input.
    fn conv_backward(
        &mut self,
        (p, d, cols): (usize, &ConvDims, &[f32]),
        dy: &[f32],
    ) -> Option<Vec<f32>> {
        let f16 = self.f16();
        let (rows, patch) = (d.out_rows(), d.patch());
        let dw = product((patch, rows, d.cout), (cols, true), (dy, false));
        self.grads[p] = dw.into_iter().map(|v| round(v, f16)).collect();
        (p > 0).then(|| {
            let w = &self.case.params[p];
            let dcols = product((rows, d.cout, patch), (dy, false), (w, true));
            d.col2im(&dcols)
        })
    }

    /// One micro-batch, forward and backward: the loss sum.
    pub(crate) fn step(&mut self) -> f32 {
        let case = self.case;
        let f16 = self.f16();
        let [c, h, w] = case.config.input;
        let mut map = Map {
            v: nchw_to_rows(&case.x, case.batch, c, h * w),
            c,
            hw: (h, w),
        };
        let (mut saved, mut p) = (Vec::new(), 0);
        self.forward(&case.config.layers, &mut map, &mut saved, &mut p);
        let (loss, mut grad) = self.head(&map.v, map.c, p);
        let mut skips = Vec::new();
        for s in saved.iter().rev() {
            match s {
                Saved::GlobalPool(hw) => {
                    let c = grad.len() / case.batch;
                    let mut dx = Vec::with_capacity(grad.len() * hw);
                    for g in grad.chunks_exact(c) {
                        for _ in 0..*hw {
                            dx.extend(g.iter().map(|v| v / *hw as f32));
                        }
                    }
                    grad = dx;
                }
                Saved::Bn(p, xhat, z, inv) => grad = self.bn_backward(&grad, (*p, xhat, z, inv)),
                Saved::Conv(p, d, cols) => match self.conv_backward((*p, d, cols), &grad) {
                    Some(dx) => grad = dx,
                    None => break,
                },
                Saved::Join => skips.push(grad.clone()),
                Saved::Fork => {
                    let skip: Vec<f32> = skips.pop().expect("a join after every fork");
                    for (g, s) in grad.iter_mut().zip(&skip) {
                        *g = round(*g + s, f16);
                    }
                }
            }
        }
        loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sim::IpuParams;

    #[test]
    fn the_direct_step_computes_the_simulated_gradients() {
        let spec = IpuSpec::new(IpuParams {
            tiles: 64,
            ..IpuParams::default()
        })
        .unwrap();
        // Small enough for debug builds: two stages, a stride-2 entry.
        let config = NetworkConfig::resnet_mini([2, 6, 6], 5, &[4, 8], &[1, 1]);
        let case = case(config, 3, Compute::F32);
        let mut sim = case.simulated(spec).unwrap();
        let mut direct = Direct::new(&case);
        let (a, b) = (sim.step(&case), direct.step());
        assert!((a - b).abs() <= 1e-4 * a.abs(), "loss {a} vs {b}");
        for (k, (s, d)) in sim.grads.iter().zip(&direct.grads).enumerate() {
            assert_eq!(s.len(), d.len(), "parameter {k}");
            let scale = d.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-3);
            for (i, (x, y)) in s.iter().zip(d).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-4 * scale,
                    "parameter {k}[{i}]: {x} vs {y}"
                );
            }
        }
    }
}
