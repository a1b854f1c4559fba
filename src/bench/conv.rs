//! The convolutional stand-in for `resnet-mini` in `tessera bench sim`: a
//! stem-like 3x3 convolution, batch norm with ReLU and a 2x2 max pool on
//! 8x8 feature maps, each forward and backward, through the layer runners
//! of `tessera_sim::model`, against the same arithmetic called directly.
//!
//! The runners build their engine and run it once per call, so the
//! simulated time is the engines' run time alone
//! ([`run_seconds_on_this_thread`]), not their building. When the trainer
//! has `resnet-mini`, [`Stack::simulated`] is the one function to replace by
//! its training micro-batch.

use tessera_core::rng::RandomStream;
use tessera_sim::IpuSpec;
use tessera_sim::ipu::{Target, run_seconds_on_this_thread};
use tessera_sim::kernels::matmul::{GemmShape, gemm_tree};
use tessera_sim::model::{
    BN_EPSILON, Conv2d, ConvShape, ModelError, Pool2d, PoolKind, batch_norm2d_on_tiles,
    conv2d_on_tiles, pool2d_on_tiles,
};

/// Samples, channels and feature-map side of the stand-in.
const N: usize = 8;
const C: usize = 16;
const SIDE: usize = 8;

fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let s = RandomStream::new(seed, 0);
    (0..n as u64)
        .map(|i| (s.bits(i) >> 8) as f32 / (1u32 << 24) as f32 - 0.5)
        .collect()
}

/// The stand-in's layers and data (NCHW, as the runners take them).
pub(crate) struct Stack {
    pub(crate) conv: ConvShape,
    pool: (Pool2d, ConvShape),
    x: Vec<f32>,
    weight: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    dy: Vec<f32>,
}

impl Stack {
    pub(crate) fn new() -> Self {
        let conv = Conv2d {
            in_channels: C,
            out_channels: C,
            kernel: (3, 3),
            stride: 1,
            padding: 1,
        }
        .on(N, (SIDE, SIDE))
        .expect("a valid convolution");
        let pool = Pool2d {
            kind: PoolKind::Max,
            kernel: (2, 2),
            stride: 2,
            padding: 0,
        };
        let pool_shape = pool.on(N, C, (SIDE, SIDE)).expect("a valid pool");
        let maps = N * C * SIDE * SIDE;
        Self {
            conv,
            pool: (pool, pool_shape),
            x: uniform(maps, 1),
            weight: uniform(C * C * 9, 2),
            gamma: vec![1.0; C],
            beta: vec![0.0; C],
            dy: uniform(maps, 3),
        }
    }

    /// Wall seconds the three runners' engines spent running (forward and
    /// backward of each layer).
    pub(crate) fn simulated(&self, spec: IpuSpec) -> Result<f64, ModelError> {
        let target = Target::single(spec);
        let before = run_seconds_on_this_thread();
        let conv = conv2d_on_tiles(&self.conv, target, &self.x, &self.weight, &self.dy)?;
        let hw = SIDE * SIDE;
        let bn = batch_norm2d_on_tiles(
            (N, C, hw),
            target,
            &conv.y,
            (&self.gamma, &self.beta),
            &self.dy,
        )?;
        let (pool, shape) = &self.pool;
        let out = shape.output.0 * shape.output.1;
        pool2d_on_tiles(pool, shape, target, &bn.y, &self.dy[..N * C * out])?;
        Ok(run_seconds_on_this_thread() - before)
    }
}

/// The same layers on whole matrices (`[n h w, c]` rows), no engine.
pub(crate) struct Direct<'a> {
    stack: &'a Stack,
    x: Vec<f32>,
    w: Vec<f32>,
    dy: Vec<f32>,
}

/// `op(a) op(b)` by the simulator's products.
fn product(shape: GemmShape, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![0.0; shape.m * shape.n];
    gemm_tree(shape, a, b, &mut c);
    c
}

impl<'a> Direct<'a> {
    pub(crate) fn new(stack: &'a Stack) -> Self {
        let hw = SIDE * SIDE;
        // PyTorch's [c_out, c_in, kh, kw] as the product's [kh kw c_in, c_out].
        let mut w = vec![0.0; stack.weight.len()];
        for o in 0..C {
            for c in 0..C {
                for t in 0..9 {
                    w[(t * C + c) * C + o] = stack.weight[(o * C + c) * 9 + t];
                }
            }
        }
        Self {
            stack,
            x: tessera_sim::model::nchw_to_rows(&stack.x, N, C, hw),
            w,
            dy: tessera_sim::model::nchw_to_rows(&stack.dy, N, C, hw),
        }
    }

    /// Each pixel's 3x3 patch (`kh kw c_in` per row), zero outside.
    fn patches(&self) -> Vec<f32> {
        let patch = 9 * C;
        let mut cols = vec![0.0; N * SIDE * SIDE * patch];
        for (r, row) in cols.chunks_exact_mut(patch).enumerate() {
            let (s, y, x) = (r / (SIDE * SIDE), r / SIDE % SIDE, r % SIDE);
            for t in 0..9 {
                let (iy, ix) = ((y + t / 3).wrapping_sub(1), (x + t % 3).wrapping_sub(1));
                if iy < SIDE && ix < SIDE {
                    let src = ((s * SIDE + iy) * SIDE + ix) * C;
                    row[t * C..(t + 1) * C].copy_from_slice(&self.x[src..src + C]);
                }
            }
        }
        cols
    }

    /// The convolution forward (`y`) and backward (`dw`, `dx`).
    pub(crate) fn conv(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let (rows, patch) = (N * SIDE * SIDE, 9 * C);
        let cols = self.patches();
        let shape = |m, k, n, a_transposed, b_transposed| GemmShape {
            m,
            k,
            n,
            a_transposed,
            b_transposed,
        };
        let y = product(shape(rows, patch, C, false, false), &cols, &self.w);
        let dw = product(shape(patch, rows, C, true, false), &cols, &self.dy);
        let dcols = product(shape(rows, C, patch, false, true), &self.dy, &self.w);
        let mut dx = vec![0.0; rows * C];
        for (r, row) in dcols.chunks_exact(patch).enumerate() {
            let (s, y, x) = (r / (SIDE * SIDE), r / SIDE % SIDE, r % SIDE);
            for t in 0..9 {
                let (iy, ix) = ((y + t / 3).wrapping_sub(1), (x + t % 3).wrapping_sub(1));
                if iy < SIDE && ix < SIDE {
                    let dst = ((s * SIDE + iy) * SIDE + ix) * C;
                    for (d, g) in dx[dst..dst + C].iter_mut().zip(&row[t * C..(t + 1) * C]) {
                        *d += g;
                    }
                }
            }
        }
        (y, dw, dx)
    }

    /// Batch norm (batch statistics) and ReLU forward and backward over
    /// `y` rows: the output and the input gradient.
    fn batch_norm(&self, y: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let n = (N * SIDE * SIDE) as f32;
        let (mut sum, mut sq) = ([0.0f32; C], [0.0f32; C]);
        for row in y.chunks_exact(C) {
            for c in 0..C {
                sum[c] += row[c];
                sq[c] += row[c] * row[c];
            }
        }
        let mean: Vec<f32> = sum.iter().map(|s| s / n).collect();
        let inv: Vec<f32> = (0..C)
            .map(|c| 1.0 / (sq[c] / n - mean[c] * mean[c] + BN_EPSILON).max(0.0).sqrt())
            .collect();
        let mut xhat = vec![0.0; y.len()];
        let mut a = vec![0.0; y.len()];
        for (k, &v) in y.iter().enumerate() {
            let c = k % C;
            xhat[k] = (v - mean[c]) * inv[c];
            a[k] = (self.stack.gamma[c] * xhat[k] + self.stack.beta[c]).max(0.0);
        }
        let (mut dbeta, mut dgamma) = ([0.0f32; C], [0.0f32; C]);
        let dz: Vec<f32> = (0..y.len())
            .map(|k| if a[k] > 0.0 { self.dy[k] } else { 0.0 })
            .collect();
        for (k, &g) in dz.iter().enumerate() {
            dbeta[k % C] += g;
            dgamma[k % C] += g * xhat[k];
        }
        let dx = (0..y.len())
            .map(|k| {
                let c = k % C;
                self.stack.gamma[c] * inv[c] / n * (n * dz[k] - dbeta[c] - xhat[k] * dgamma[c])
            })
            .collect();
        (a, dx)
    }

    /// 2x2 max pooling forward and backward (the first maximum's pixel
    /// takes the gradient).
    fn pool(&self, a: &[f32]) -> Vec<f32> {
        let half = SIDE / 2;
        let mut dx = vec![0.0; a.len()];
        for s in 0..N {
            for (oy, ox) in (0..half * half).map(|p| (p / half, p % half)) {
                for c in 0..C {
                    let at =
                        |t: usize| ((s * SIDE + 2 * oy + t / 2) * SIDE + 2 * ox + t % 2) * C + c;
                    let best = (1..4).fold(0, |b, t| if a[at(t)] > a[at(b)] { t } else { b });
                    dx[at(best)] += self.dy[((s * half + oy) * half + ox) * C + c];
                }
            }
        }
        dx
    }

    /// The three layers forward and backward; a checksum.
    pub(crate) fn step(&self) -> f32 {
        let (y, dw, dx) = self.conv();
        let (a, dbn) = self.batch_norm(&y);
        let dpool = self.pool(&a);
        dw[0] + dx[0] + dbn[0] + dpool[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sim::IpuParams;

    #[test]
    fn the_direct_convolution_is_the_runners_bit_for_bit() {
        let spec = IpuSpec::new(IpuParams {
            tiles: 32,
            ..IpuParams::default()
        })
        .unwrap();
        let stack = Stack::new();
        let run = conv2d_on_tiles(
            &stack.conv,
            Target::single(spec),
            &stack.x,
            &stack.weight,
            &stack.dy,
        )
        .unwrap();
        let direct = Direct::new(&stack);
        let (y, _, _) = direct.conv();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let hw = SIDE * SIDE;
        assert_eq!(
            bits(&tessera_sim::model::rows_to_nchw(&y, N, C, hw)),
            bits(&run.y)
        );
    }
}
