//! Batch norm's vertices: the sums of each pass per chunk of rows, their
//! tree over the chunks, the replica group's sum (a vertex that hands its
//! values to the host through a [`GroupLink`]), the normalisation with
//! the activation, the backward sums and the input gradient; and the
//! running statistics' update on the host.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::activation::{activate, derivative};
use super::common::{elementwise, f32_fields, round};
use crate::ipu::{Access, Codelet, FieldSpec, IpuSpec, Kernel, VertexCycles, VertexIo};
use crate::model::config::{Activation, BN_EPSILON, BN_MOMENTUM};

/// Batch norm's first pass: `x = round(y + bias)` and per chunk of
/// `chunk_rows` rows and column the sum of `x` over the chunk's rows in
/// order (f32). Fields: `y`, `bias`, `x`, `partials` (`chunks * cols`,
/// chunk-major).
#[derive(Debug)]
pub(crate) struct BnStats {
    pub(crate) f16: bool,
    pub(crate) chunk_rows: usize,
    fields: Vec<FieldSpec>,
}

impl BnStats {
    pub(crate) fn new(f16: bool, chunk_rows: usize) -> Self {
        Self {
            f16,
            chunk_rows,
            fields: f32_fields(&[Access::Read, Access::Read, Access::Write, Access::Write]),
        }
    }
}

impl Codelet for BnStats {
    fn name(&self) -> &str {
        "batch_norm_stats"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::BatchNorm, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let cols = io.len(1);
        let [y, bias, x, sums] = io.many([0, 1, 2, 3]);
        let (y, bias, x, sums) = (
            y.into_slice::<f32>(),
            bias.into_slice::<f32>(),
            x.into_slice::<f32>(),
            sums.into_slice::<f32>(),
        );
        sums.fill(0.0);
        let chunk = self.chunk_rows * cols;
        for (k, (yc, xc)) in y.chunks(chunk).zip(x.chunks_mut(chunk)).enumerate() {
            let s = &mut sums[k * cols..(k + 1) * cols];
            for (yr, xr) in yc.chunks_exact(cols).zip(xc.chunks_exact_mut(cols)) {
                for c in 0..cols {
                    let v = round(yr[c] + bias[c], self.f16);
                    xr[c] = v;
                    s[c] += v;
                }
            }
        }
    }
}

/// Batch norm's second statistics pass: per chunk of `chunk_rows` rows and
/// column the sum of `(x - mean)^2` over the chunk's rows in order, `mean`
/// from the group's totals as [`moments`] takes it. Fields: `x`, `totals`
/// (the block's `[S1 (cols), _, n]`), `partials` (`chunks * cols`).
#[derive(Debug)]
pub(crate) struct BnSquares {
    pub(crate) chunk_rows: usize,
    fields: Vec<FieldSpec>,
}

impl BnSquares {
    pub(crate) fn new(chunk_rows: usize) -> Self {
        Self {
            chunk_rows,
            fields: f32_fields(&[Access::Read, Access::Read, Access::Write]),
        }
    }
}

impl Codelet for BnSquares {
    fn name(&self) -> &str {
        "batch_norm_squares"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::BatchNorm, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let cols = (io.len(1) - 1) / 2;
        let [x, totals, sums] = io.many([0, 1, 2]);
        let (x, totals, sums) = (
            x.into_slice::<f32>(),
            totals.into_slice::<f32>(),
            sums.into_slice::<f32>(),
        );
        let n = totals[2 * cols];
        let mean: Vec<f32> = totals[..cols].iter().map(|s| s / n).collect();
        sums.fill(0.0);
        for (k, xc) in x.chunks(self.chunk_rows * cols).enumerate() {
            let s = &mut sums[k * cols..(k + 1) * cols];
            for xr in xc.chunks_exact(cols) {
                for c in 0..cols {
                    let d = xr[c] - mean[c];
                    s[c] += d * d;
                }
            }
        }
    }
}

/// Per-column mean and inverse standard deviation from the group's totals
/// `[S1 (cols), M2 (cols), n]` (`M2` the sum of squared deviations from
/// the mean), or from running `[mean, var]`.
fn moments(stats: &[f32], cols: usize, from_sums: bool, c: usize) -> (f32, f32) {
    let (mean, var) = if from_sums {
        let n = stats[2 * cols];
        (stats[c] / n, stats[cols + c] / n)
    } else {
        (stats[c], stats[cols + c])
    };
    (mean, 1.0 / (var + BN_EPSILON).sqrt())
}

/// Batch norm's second pass and the activation: `xhat = (x - mean) *
/// inv_std`, `z = round(gamma xhat + beta)`, `a = round(act(z))`. Fields:
/// `x`, `stats` (group sums `2 cols + 1`, or running moments `2 cols`),
/// `gamma`, `beta`, `xhat`, `z`, `a`.
#[derive(Debug)]
pub(crate) struct BnApply {
    pub(crate) act: Activation,
    pub(crate) from_sums: bool,
    pub(crate) f16: bool,
    fields: Vec<FieldSpec>,
}

impl BnApply {
    pub(crate) fn new(act: Activation, from_sums: bool, f16: bool) -> Self {
        let r = Access::Read;
        let w = Access::Write;
        Self {
            act,
            from_sums,
            f16,
            fields: f32_fields(&[r, r, r, r, w, w, w]),
        }
    }
}

impl Codelet for BnApply {
    fn name(&self) -> &str {
        "batch_norm_apply"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::BatchNorm);
        let act = spec.costs().get(Kernel::Activation);
        let w = spec.workers_per_tile();
        VertexCycles::AllWorkers(
            cost.multi_thread_cycles(lens[0], w) + act.multi_thread_cycles(lens[0], w),
        )
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let cols = io.len(2);
        // gamma and beta are pieces of one staging tensor: copied first.
        let stats = io.read::<f32>(1).to_vec();
        let gamma = io.read::<f32>(2).to_vec();
        let beta = io.read::<f32>(3).to_vec();
        let [x, xhat, z, a] = io.many([0, 4, 5, 6]);
        let x = x.into_slice::<f32>();
        let (xhat, z, a) = (
            xhat.into_slice::<f32>(),
            z.into_slice::<f32>(),
            a.into_slice::<f32>(),
        );
        let stats = stats.as_slice();
        let m: Vec<(f32, f32)> = (0..cols)
            .map(|c| moments(stats, cols, self.from_sums, c))
            .collect();
        for (k, &v) in x.iter().enumerate() {
            let c = k % cols;
            let (mean, inv_std) = m[c];
            let h = (v - mean) * inv_std;
            xhat[k] = h;
            z[k] = round(gamma[c] * h + beta[c], self.f16);
            a[k] = round(activate(self.act, z[k]), self.f16);
        }
    }
}

/// Batch norm's first backward pass: `dy = round(round(da) * act'(z))`
/// (the gradient at batch norm's output) and per chunk of `chunk_rows`
/// rows the column sums of `dy` and `dy * xhat` over the chunk's rows in
/// order. Fields: `da`, `z`, `xhat`, `dy`, `partials` (`chunks * 2 cols`:
/// per chunk the sums of `dy`, then of `dy * xhat`), `gamma` (read for its
/// length: the block's columns).
#[derive(Debug)]
pub(crate) struct BnGradSums {
    pub(crate) act: Activation,
    pub(crate) f16: bool,
    pub(crate) chunk_rows: usize,
    fields: Vec<FieldSpec>,
}

impl BnGradSums {
    pub(crate) fn new(act: Activation, f16: bool, chunk_rows: usize) -> Self {
        let r = Access::Read;
        let w = Access::Write;
        Self {
            act,
            f16,
            chunk_rows,
            fields: f32_fields(&[r, r, r, w, w, r]),
        }
    }
}

impl Codelet for BnGradSums {
    fn name(&self) -> &str {
        "batch_norm_grad_sums"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::BatchNorm, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let cols = io.len(5);
        let [da, z, xhat, dy, sums] = io.many([0, 1, 2, 3, 4]);
        let (da, z, xhat) = (
            da.into_slice::<f32>(),
            z.into_slice::<f32>(),
            xhat.into_slice::<f32>(),
        );
        let (dy, sums) = (dy.into_slice::<f32>(), sums.into_slice::<f32>());
        sums.fill(0.0);
        for k in 0..da.len() {
            let (row, c) = (k / cols, k % cols);
            let s = 2 * cols * (row / self.chunk_rows);
            let g = round(
                round(da[k], self.f16) * derivative(self.act, z[k]),
                self.f16,
            );
            dy[k] = g;
            sums[s + c] += g;
            sums[s + cols + c] += g * xhat[k];
        }
    }
}

/// Batch norm's second backward pass: `dx = round(gamma inv_std / n (n dy -
/// S_dy - xhat S_dyxhat))` with the group's sums. Fields: `dy`, `xhat`,
/// `gamma`, `stats` (forward sums, `2 cols + 1`), `grad_sums` (`2 cols`),
/// `dx`.
#[derive(Debug)]
pub(crate) struct BnGrad {
    pub(crate) f16: bool,
    fields: Vec<FieldSpec>,
}

impl BnGrad {
    pub(crate) fn new(f16: bool) -> Self {
        let r = Access::Read;
        Self {
            f16,
            fields: f32_fields(&[r, r, r, r, r, Access::Write]),
        }
    }
}

impl Codelet for BnGrad {
    fn name(&self) -> &str {
        "batch_norm_grad"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::BatchNorm, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let cols = io.len(2);
        let [dy, xhat, gamma, stats, sums, dx] = io.many([0, 1, 2, 3, 4, 5]);
        let (dy, xhat, gamma) = (
            dy.into_slice::<f32>(),
            xhat.into_slice::<f32>(),
            gamma.into_slice::<f32>(),
        );
        let (stats, sums, dx) = (
            stats.into_slice::<f32>(),
            sums.into_slice::<f32>(),
            dx.into_slice::<f32>(),
        );
        let n = stats[2 * cols];
        // `gamma inv_std / n` once per column (the same operations, so
        // the same bits as per element).
        let scale: Vec<f32> = (0..cols)
            .map(|c| gamma[c] * moments(stats, cols, true, c).1 / n)
            .collect();
        for k in 0..dy.len() {
            let c = k % cols;
            let v = scale[c] * (n * dy[k] - sums[c] - xhat[k] * sums[cols + c]);
            dx[k] = round(v, self.f16);
        }
    }
}

/// A request to the host for a group sum, and where the answer comes back.
pub(crate) type GroupLink = Arc<Mutex<Option<(Sender<Vec<f32>>, Receiver<Vec<f32>>)>>>;

/// The sum of `parts[k * stride + i]` over chunks `k` in `chunks`, by
/// halves: a fixed tree for a given number of chunks.
pub(crate) fn tree_sum(
    parts: &[f32],
    stride: usize,
    i: usize,
    chunks: core::ops::Range<usize>,
) -> f32 {
    match chunks.len() {
        0 => 0.0,
        1 => parts[chunks.start * stride + i],
        len => {
            let mid = chunks.start + len / 2;
            tree_sum(parts, stride, i, chunks.start..mid)
                + tree_sum(parts, stride, i, mid..chunks.end)
        }
    }
}

/// Adds a column block's per-chunk partial sums in a tree fixed by the
/// number of chunks ([`tree_sum`]). Fields: `partials` (`chunks * len`,
/// chunk-major), `totals` (`len`).
#[derive(Debug)]
pub(crate) struct ChunkTree {
    fields: Vec<FieldSpec>,
}

impl ChunkTree {
    pub(crate) fn new() -> Self {
        Self {
            fields: f32_fields(&[Access::Read, Access::Write]),
        }
    }
}

impl Codelet for ChunkTree {
    fn name(&self) -> &str {
        "batch_norm_chunk_tree"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::Combine, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let len = io.len(1);
        let parts = io.read::<f32>(0).to_vec();
        let chunks = parts.len() / len.max(1);
        for (i, t) in io.write::<f32>(1).iter_mut().enumerate() {
            *t = tree_sum(&parts, len, i, 0..chunks);
        }
    }
}

/// Hands a layer's totals to the host's [`GroupSum`](super::GroupSum)
/// and writes back the group's; with `count`, the last element is first
/// set to the micro-batch's elements per column, and with `local` the
/// totals are first kept. Fields: `values`, with `local` a second:
/// `local` (this replica's totals).
#[derive(Debug)]
pub(crate) struct GroupSumVertex {
    pub(crate) link: GroupLink,
    pub(crate) count: Option<f32>,
    fields: Vec<FieldSpec>,
}

impl GroupSumVertex {
    pub(crate) fn new(link: GroupLink, count: Option<f32>, local: bool) -> Self {
        let mut access = vec![Access::ReadWrite];
        if local {
            access.push(Access::Write);
        }
        Self {
            link,
            count,
            fields: f32_fields(&access),
        }
    }
}

impl Codelet for GroupSumVertex {
    fn name(&self) -> &str {
        "group_sum"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        // A copy out and back: the group's own sum is the trainer's
        // collective, timed there.
        elementwise(Kernel::Combine, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        if self.fields.len() == 2 {
            let totals = io.read::<f32>(0).to_vec();
            io.write::<f32>(1).copy_from_slice(&totals);
        }
        let values = io.write::<f32>(0);
        if let Some(n) = self.count
            && let Some(last) = values.last_mut()
        {
            *last = n;
        }
        let guard = self.link.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((to_host, from_host)) = guard.as_ref()
            && to_host.send(values.to_vec()).is_ok()
            && let Ok(total) = from_host.recv()
            && total.len() == values.len()
        {
            values.copy_from_slice(&total);
        }
    }
}

/// Running statistics after a micro-batch with group totals `group`
/// (`[S1 (cols), n, M2 (cols)]`): `mean` and `var` updated in place
/// (unbiased batch variance).
pub(crate) fn update_running(group: &[f32], mean: &mut [f32], var: &mut [f32]) {
    let cols = mean.len();
    let n = group[cols];
    for c in 0..cols {
        let m = group[c] / n;
        let v = group[cols + 1 + c] / n;
        let unbiased = if n > 1.0 { v * n / (n - 1.0) } else { v };
        mean[c] = (1.0 - BN_MOMENTUM) * mean[c] + BN_MOMENTUM * m;
        var[c] = (1.0 - BN_MOMENTUM) * var[c] + BN_MOMENTUM * unbiased;
    }
}
