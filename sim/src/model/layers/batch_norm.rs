//! Batch norm over the micro-batch after the bias, before the activation
//! (see the [model docs](crate::model#batch-norm)): per-block column sums,
//! one vertex hands them to the replica group's sum and the totals come
//! back to every block; inference uses the running statistics.

use std::sync::Arc;

use super::{Act, Builder, Copies, ModelError, Staged};
use crate::ipu::{Codelet, Mapping, Program, TensorId, TensorSlice};
use crate::kernels::matmul::{Block, BlockLayout};
use crate::model::codelets::{BiasAct, BnApply, BnGrad, BnGradSums, BnStats, GroupSumVertex};

/// A batch-norm layer's tensors.
#[derive(Debug)]
pub(in crate::model) struct BatchNorm {
    pub(in crate::model) gamma: TensorId,
    pub(in crate::model) beta: TensorId,
    /// The normalised values.
    xhat: TensorId,
    /// Train: the group's forward sums `[S1, S2, n]`.
    pub(in crate::model) group: Option<TensorId>,
    /// Train: the group's totals staged per block (`2 w + 1` each).
    totals: Option<Staged>,
    /// Train: the local backward sums per block `[S_dy, S_dyxhat]`.
    pub(in crate::model) grad_sums: Option<Staged>,
    /// Eval: the running `[mean, var]` staged per block.
    pub(in crate::model) running: Option<Staged>,
}

impl BatchNorm {
    /// Train: the per-micro-batch tensors its backward pass reads besides
    /// `z` (the normalised values, the group's totals).
    pub(in crate::model) fn saved(&self) -> Vec<TensorId> {
        core::iter::once(self.xhat)
            .chain(self.totals.as_ref().map(|t| t.tensor))
            .collect()
    }
}

/// Layer `l`'s `gamma` and `beta` (`[width]` each).
pub(super) fn params(
    b: &mut Builder<'_>,
    l: usize,
    width: usize,
) -> Result<(TensorId, TensorId), ModelError> {
    let mut param = |name: &str| {
        let mapping = b.linear_on(l);
        b.tensor(&format!("layer{l}.bn.{name}"), width, mapping)
    };
    Ok((param("gamma")?, param("beta")?))
}

/// The bias staged `[bias | gamma | beta]` per block: the three parts of
/// block `k`'s range.
fn thirds(stage: &Staged, k: usize) -> [core::ops::Range<u64>; 3] {
    let r = &stage.ranges[k];
    let w = (r.end - r.start) / 3;
    [
        r.start..r.start + w,
        r.start + w..r.start + 2 * w,
        r.start + 2 * w..r.end,
    ]
}

/// Adds layer `l`'s batch norm of `y` (with the bias) into `z` and the
/// activation into `a`; `stage` holds `[bias | gamma | beta]` per block.
pub(super) fn forward(
    b: &mut Builder<'_>,
    l: usize,
    (gamma, beta): (TensorId, TensorId),
    y: &Act,
    stage: &Staged,
    (z, a): (&Act, &Act),
) -> Result<BatchNorm, ModelError> {
    let out = &y.layout;
    let xhat = b.matrix(&format!("layer{l}.bn.xhat"), out)?.tensor;
    let pre = b.matrix(&format!("layer{l}.bn.x"), out)?.tensor;
    let f16 = b.f16;
    let (group, totals, grad_sums, running, stats) = if b.train {
        // Pass 1: x = y + bias, column sums.
        let sums = b.per_block(&format!("layer{l}.bn.sums"), out, |blk| {
            2 * blk.cols.len() as u64
        })?;
        let c1: Arc<dyn Codelet> = Arc::new(BnStats::new(f16));
        b.per_block_vertices(&format!("layer{l}.bn.stats"), out, &c1, |k, blk| {
            vec![
                TensorSlice::new(y.tensor, blk.elements.clone()),
                TensorSlice::new(stage.tensor, thirds(stage, k)[0].clone()),
                TensorSlice::new(pre, blk.elements.clone()),
                TensorSlice::new(sums.tensor, sums.ranges[k].clone()),
            ]
        })?;
        let name = format!("layer{l}.bn");
        let (group, totals) = group_sum(b, &name, out, &sums, ("group", "totals", ""), true)?;
        b.group_calls += 2;
        let grad_sums = b.per_block(&format!("layer{l}.bn.grad_sums"), out, |blk| {
            2 * blk.cols.len() as u64
        })?;
        (
            Some(group),
            Some(totals.clone()),
            Some(grad_sums),
            None,
            totals,
        )
    } else {
        // Inference: x = y + bias, then the running moments.
        let c1: Arc<dyn Codelet> = Arc::new(BiasAct::new(None, f16));
        b.per_block_vertices(&format!("layer{l}.bias"), out, &c1, |k, blk| {
            vec![
                TensorSlice::new(y.tensor, blk.elements.clone()),
                TensorSlice::new(stage.tensor, thirds(stage, k)[0].clone()),
                TensorSlice::new(pre, blk.elements.clone()),
            ]
        })?;
        let running = b.per_block(&format!("layer{l}.bn.running"), out, |blk| {
            2 * blk.cols.len() as u64
        })?;
        (None, None, None, Some(running.clone()), running)
    };
    let c2: Arc<dyn Codelet> = Arc::new(BnApply::new(b.activation, b.train, f16));
    b.per_block_vertices(&format!("layer{l}.bn.apply"), out, &c2, |k, blk| {
        let [_, g, be] = thirds(stage, k);
        vec![
            TensorSlice::new(pre, blk.elements.clone()),
            TensorSlice::new(stats.tensor, stats.ranges[k].clone()),
            TensorSlice::new(stage.tensor, g),
            TensorSlice::new(stage.tensor, be),
            TensorSlice::new(xhat, blk.elements.clone()),
            TensorSlice::new(z.tensor, blk.elements.clone()),
            TensorSlice::new(a.tensor, blk.elements.clone()),
        ]
    })?;
    Ok(BatchNorm {
        gamma,
        beta,
        xhat,
        group,
        totals,
        grad_sums,
        running,
    })
}

/// Gathers the per-block column sums `sums` to the first block's tile as
/// `[S_a (width), S_b (width), n?]` (`{name}.{group}`), sums them over the
/// replica group there (with the micro-batch's count if `count`), and
/// broadcasts the totals back per block (`{name}.{totals}`).
fn group_sum(
    b: &mut Builder<'_>,
    name: &str,
    out: &BlockLayout,
    sums: &Staged,
    (group, totals, prefix): (&str, &str, &str),
    count: bool,
) -> Result<(TensorId, Staged), ModelError> {
    let blocks = out.blocks();
    let width = out.cols();
    let n = 2 * width + usize::from(count);
    let home = blocks[0].tile;
    let group = b.tensor(
        &format!("{name}.{group}"),
        n,
        Mapping::one_tile(home, n as u64),
    )?;
    let extra = u64::from(count);
    let totals = b.per_block(&format!("{name}.{totals}"), out, |blk| {
        2 * blk.cols.len() as u64 + extra
    })?;
    let (gather, bcast) = sums_exchanges(&blocks, sums, group, width, &totals, count);
    b.exchange(&format!("{name}.{prefix}gather"), &gather)?;
    let cs = b.g.add_compute_set(&format!("{name}.{prefix}group_sum"));
    // The elements per column: samples, or pixels of feature maps.
    let per_sample = count.then_some(out.rows() as f32);
    let cg: Arc<dyn Codelet> = Arc::new(GroupSumVertex::new(b.link.clone(), per_sample));
    let all = b.g.all(group);
    b.vertex(cs, home, &cg, &[all])?;
    b.programs.push(Program::Execute(cs));
    b.exchange(&format!("{name}.{prefix}broadcast"), &bcast)?;
    Ok((group, totals))
}

/// Adds the backward pass of layer `l`'s batch norm (and activation) from
/// `da` into a new `layer{l}.dz`; `z` is the pre-activation, `stage` the
/// forward's staged parameters.
pub(super) fn backward(
    b: &mut Builder<'_>,
    l: usize,
    bn: &BatchNorm,
    da: &Act,
    (z, stage): (&Act, &Staged),
) -> Result<Act, ModelError> {
    let out = &da.layout;
    let dz = b.matrix(&format!("layer{l}.dz"), out)?;
    let grad_sums = bn.grad_sums.as_ref().expect("a training graph");
    let totals = bn.totals.as_ref().expect("a training graph");
    let dy = b.matrix(&format!("layer{l}.bn.dy"), out)?.tensor;
    let c1: Arc<dyn Codelet> = Arc::new(BnGradSums::new(b.activation, b.f16));
    b.per_block_vertices(&format!("layer{l}.bn.grad_sums"), out, &c1, |k, blk| {
        vec![
            TensorSlice::new(da.tensor, blk.elements.clone()),
            TensorSlice::new(z.tensor, blk.elements.clone()),
            TensorSlice::new(bn.xhat, blk.elements.clone()),
            TensorSlice::new(dy, blk.elements.clone()),
            TensorSlice::new(grad_sums.tensor, grad_sums.ranges[k].clone()),
        ]
    })?;
    let name = format!("layer{l}.bn");
    let names = ("grad_group", "grad_totals", "grad_");
    let (_, back) = group_sum(b, &name, out, grad_sums, names, false)?;
    let c2: Arc<dyn Codelet> = Arc::new(BnGrad::new(b.f16));
    b.per_block_vertices(&format!("layer{l}.bn.grad"), out, &c2, |k, blk| {
        vec![
            TensorSlice::new(dy, blk.elements.clone()),
            TensorSlice::new(bn.xhat, blk.elements.clone()),
            TensorSlice::new(stage.tensor, thirds(stage, k)[1].clone()),
            TensorSlice::new(totals.tensor, totals.ranges[k].clone()),
            TensorSlice::new(back.tensor, back.ranges[k].clone()),
            TensorSlice::new(dz.tensor, blk.elements.clone()),
        ]
    })?;
    Ok(dz)
}

/// The exchanges that gather per-block column sums (`[S_a, S_b]` of the
/// block's columns) into one group vector `[S_a (width), S_b (width), n?]`
/// and broadcast its totals back to per-block pieces (with `n` if
/// `count`).
fn sums_exchanges(
    blocks: &[Block],
    sums: &Staged,
    group: TensorId,
    width: usize,
    stage: &Staged,
    count: bool,
) -> (Copies, Copies) {
    let (mut gather, mut bcast) = (Vec::new(), Vec::new());
    let width = width as u64;
    for ((blk, s), st) in blocks.iter().zip(&sums.ranges).zip(&stage.ranges) {
        let (c0, c1) = (blk.cols.start as u64, blk.cols.end as u64);
        let w = c1 - c0;
        for (half, off) in [(0, 0), (1, width)] {
            let src = s.start + half * w;
            gather.push((
                TensorSlice::new(sums.tensor, src..src + w),
                TensorSlice::new(group, off + c0..off + c1),
            ));
            let dst = st.start + half * w;
            bcast.push((
                TensorSlice::new(group, off + c0..off + c1),
                TensorSlice::new(stage.tensor, dst..dst + w),
            ));
        }
        if count {
            bcast.push((
                TensorSlice::new(group, 2 * width..2 * width + 1),
                TensorSlice::new(stage.tensor, st.start + 2 * w..st.start + 2 * w + 1),
            ));
        }
    }
    (gather, bcast)
}

/// Batch norm (and ReLU) of feature maps on the tiles, in PyTorch's
/// layouts: one training step's results.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormRun {
    /// `relu(batch_norm(x))`, NCHW.
    pub y: Vec<f32>,
    /// The input's gradient, NCHW.
    pub dx: Vec<f32>,
    /// The gradients of `gamma` and `beta`.
    pub dgamma: Vec<f32>,
    /// See `dgamma`.
    pub dbeta: Vec<f32>,
    /// The running mean and variance after this step from `(0, 1)`
    /// (momentum 0.1, unbiased variance).
    pub running: (Vec<f32>, Vec<f32>),
}

/// Runs batch norm over the feature maps `x` (NCHW, `n` samples of `c`
/// channels of `hw` pixels) with `gamma`, `beta`, then ReLU, forward and
/// backward from `dy` (NCHW), on one replica's tiles: statistics over `n
/// hw` elements per channel, as PyTorch's `BatchNorm2d` in training.
///
/// # Errors
/// [`ModelError::InputLength`] for a slice of the wrong length, and the
/// engine's errors.
pub fn batch_norm2d_on_tiles(
    (n, c, hw): (usize, usize, usize),
    target: crate::ipu::Target,
    x: &[f32],
    (gamma, beta): (&[f32], &[f32]),
    dy: &[f32],
) -> Result<BatchNormRun, ModelError> {
    for (got, expected) in [
        (x.len(), n * c * hw),
        (dy.len(), n * c * hw),
        (gamma.len(), c),
        (beta.len(), c),
    ] {
        super::check_len(got, expected)?;
    }
    let (placement, link) = (super::Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, n);
    let rows = n * hw;
    // Every channel's pixels on one tile (columns whole).
    let layout = BlockLayout::grid(rows, c, 1, c, target.tiles());
    let x_t = b.matrix("x", &layout)?;
    let params = params(&mut b, 0, c)?;
    let stage = b.per_block("layer0.params", &layout, |blk| 3 * blk.cols.len() as u64)?;
    let (z, a) = (
        b.matrix("layer0.z", &layout)?,
        b.matrix("layer0.a", &layout)?,
    );
    let bn = forward(&mut b, 0, params, &x_t, &stage, (&z, &a))?;
    let dy_t = b.matrix("layer0.da", &layout)?;
    let dx = backward(&mut b, 0, &bn, &dy_t, (&z, &stage))?;
    let mut e = b.engine()?;
    let mut staged = Vec::new();
    for blk in layout.blocks() {
        staged.extend(blk.cols.clone().map(|_| 0.0));
        staged.extend_from_slice(&gamma[blk.cols.clone()]);
        staged.extend_from_slice(&beta[blk.cols.clone()]);
    }
    e.write_tensor(stage.tensor, &staged)
        .expect("lengths checked");
    super::write_rows(&mut e, &x_t, &super::conv2d::nchw_to_rows(x, n, c, hw));
    super::write_rows(&mut e, &dy_t, &super::conv2d::nchw_to_rows(dy, n, c, hw));
    e.run();
    let sums = bn.grad_sums.as_ref().expect("training");
    let values = e.read_tensor::<f32>(sums.tensor).expect("f32");
    let (mut dgamma, mut dbeta) = (vec![0.0; c], vec![0.0; c]);
    for (blk, r) in layout.blocks().iter().zip(&sums.ranges) {
        let (s, w) = (&values[r.start as usize..r.end as usize], blk.cols.len());
        for (j, col) in blk.cols.clone().enumerate() {
            (dbeta[col], dgamma[col]) = (s[j], s[w + j]);
        }
    }
    let stats = e
        .read_tensor::<f32>(bn.group.expect("training"))
        .expect("f32");
    let (mut mean, mut var) = (vec![0.0; c], vec![1.0; c]);
    crate::model::codelets::update_running(&stats, &mut mean, &mut var);
    let read = |t: &Act| super::conv2d::rows_to_nchw(&super::read_rows(&e, t), n, c, hw);
    Ok(BatchNormRun {
        y: read(&a),
        dx: read(&dx),
        dgamma,
        dbeta,
        running: (mean, var),
    })
}
