//! What the engine charges for one layer on its own, forward and backward
//! separately, for the planner's calibration
//! ([`crate::plan::calibrate`]): the layer's graph is built and compiled
//! as the standalone runners build it, and priced from the compiled
//! engine's per-step estimates without running it (the estimates do not
//! depend on the values, so running would only cost host time).

use super::{Act, Builder, Copies, ModelError, Placement};
use crate::ipu::{self, Program};
use crate::kernels::matmul::{BlockLayout, Cut, gather_copies};
use crate::model::shapes::{ConvShape, Pool2d};

/// Cycles and memory of one layer's graph on a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerCycles {
    /// The forward pass.
    pub forward: u64,
    /// The backward pass.
    pub backward: u64,
    /// The fullest tile's bytes (tensors, vertex state, code and exchange
    /// buffers of the layer's whole training graph).
    pub max_tile_bytes: u64,
}

/// What follows a convolution in the priced layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvExtras {
    /// Batch norm over the feature maps, then ReLU.
    pub batch_norm: bool,
    /// A residual add of a second branch (stand-in: in row blocks over the
    /// tiles) after the batch norm.
    pub residual: bool,
    /// The input's gradient (not for a network's first layer).
    pub input_grad: bool,
    /// f16 compute (the AMP's f16 rate; tensors stay f32, as the trainer's
    /// [`Compute::F16`](crate::model::Compute::F16)).
    pub f16: bool,
    /// The products' operands quantised by this recipe (as the trainer's
    /// [`Compute::Quantised`](crate::model::Compute::Quantised); with `f16`).
    pub quant: Option<crate::model::quant::Recipe>,
}

/// The cycles the engine charges for `programs`, as [`ipu::Engine::run`]
/// adds them up: a compute set and a sync per execute, an exchange per
/// exchange.
fn program_cycles(e: &ipu::Engine, programs: &[Program]) -> u64 {
    let sync = e.graph().target.sync_cycles();
    programs.iter().fold(0u64, |total, p| {
        let c = match p {
            Program::Execute(cs) => e.compute_set_cycles(*cs).0 + sync,
            Program::Exchange(ex) => e.exchange_cycles(*ex),
            Program::Sequence(ps) => program_cycles(e, ps),
            Program::Repeat { count, body } => {
                count.saturating_mul(program_cycles(e, core::slice::from_ref(body)))
            }
            // The layer graphs here stream nothing from the host.
            Program::HostWrite(_) | Program::HostRead(_) => 0,
        };
        total.saturating_add(c)
    })
}

/// Compiles `b`'s graph (the first `forward` programs are the forward
/// pass) and prices it.
fn priced(b: Builder<'_>, forward: usize) -> Result<LayerCycles, ModelError> {
    let programs = b.programs.clone();
    let e = b.engine()?;
    Ok(LayerCycles {
        forward: program_cycles(&e, &programs[..forward]),
        backward: program_cycles(&e, &programs[forward..]),
        max_tile_bytes: e.memory().summary(1).max,
    })
}

/// The input spread over `target`'s tiles in row blocks, as the runners
/// place it.
fn input_layout(rows: usize, cols: usize, target: &ipu::Target) -> BlockLayout {
    BlockLayout::grid(rows, cols, rows, 1, target.tiles())
}

/// One convolution (with `extras`) forward and backward on `target`:
/// the graph [`conv2d_on_tiles`](crate::model::conv2d_on_tiles) builds,
/// with batch norm, ReLU and a residual add if asked.
///
/// # Errors
/// The graph's and the engine's errors (a tile out of memory names it).
///
/// ```
/// use tessera_sim::ipu::Target;
/// use tessera_sim::model::{Conv2d, ConvExtras, conv2d_cycles};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let conv = Conv2d { in_channels: 2, out_channels: 2, kernel: (3, 3), stride: 1, padding: 1 };
/// let shape = conv.on(1, (4, 4)).unwrap();
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// let plain = conv2d_cycles(&shape, ConvExtras::default(), Target::single(ipu))?;
/// let bn = ConvExtras { batch_norm: true, ..ConvExtras::default() };
/// let with_bn = conv2d_cycles(&shape, bn, Target::single(ipu))?;
/// assert!(plain.forward > 0 && with_bn.forward > plain.forward);
/// # Ok::<(), tessera_sim::model::ModelError>(())
/// ```
pub fn conv2d_cycles(
    shape: &ConvShape,
    extras: ConvExtras,
    target: ipu::Target,
) -> Result<LayerCycles, ModelError> {
    let (placement, link) = (Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, shape.n);
    b.f16 = extras.f16;
    b.quant = extras.quant;
    let in_layout = input_layout(shape.in_rows(), shape.conv.in_channels, &target);
    let input = b.matrix("x", &in_layout)?;
    let layer = super::conv2d::forward(&mut b, 0, shape, &input, Cut::default())?;
    let mut out = layer.y.layout.clone();
    let mut dy = None;
    let mut bn = None;
    if extras.batch_norm {
        let c = shape.conv.out_channels;
        // The output moved into batch norm's layout first, as the
        // networks move every convolution's output.
        let rows = shape.out_rows();
        let chunk = super::batch_norm::chunk_rows(rows, c);
        let min = super::batch_norm::MIN_BLOCK_ELEMENTS;
        out = super::batch_norm::layout((rows, c, chunk), 0, target.tiles(), min);
        let y = relaid(&mut b, &layer.y, &out)?;
        let params = super::batch_norm::params(&mut b, 0, c)?;
        let stage = b.per_block("layer0.params", &out, |blk| 3 * blk.cols.len() as u64)?;
        let (z, a) = (b.matrix("layer0.z", &out)?, b.matrix("layer0.a", &out)?);
        let norm = super::batch_norm::forward(&mut b, (0, chunk), params, &y, &stage, (&z, &a))?;
        if extras.residual {
            let other = input_layout(shape.out_rows(), c, &target);
            let shortcut = b.matrix("shortcut", &other)?;
            super::residual::add(&mut b, "layer0.residual", &a, &shortcut)?;
        }
        bn = Some((norm, z, stage));
    }
    let forward = b.programs.len();
    if let Some((norm, z, stage)) = &bn {
        let da = b.matrix("layer0.da", &out)?;
        dy = Some(super::batch_norm::backward(
            &mut b,
            0,
            norm,
            &da,
            (z, stage),
        )?);
    }
    let dy = match dy {
        Some(dy) => dy,
        None => b.matrix("layer0.dy", &out)?,
    };
    let grad = extras.input_grad.then_some(&in_layout);
    super::conv2d::backward(&mut b, 0, shape, &layer, &dy, grad)?;
    priced(b, forward)
}

/// `x` copied into `layout` in one exchange.
fn relaid(b: &mut Builder<'_>, x: &Act, layout: &BlockLayout) -> Result<Act, ModelError> {
    let y = b.matrix("layer0.y_columns", layout)?;
    let mut copies = Copies::new();
    for blk in layout.blocks() {
        let (rows, cols, at) = (blk.rows.clone(), blk.cols.clone(), blk.elements.start);
        gather_copies(&mut copies, x.tensor, &x.layout, rows, cols, y.tensor, at);
    }
    b.exchange("layer0.y_columns", &copies)?;
    Ok(y)
}

/// One pooling forward and backward on `target`: the graph
/// [`pool2d_on_tiles`](crate::model::pool2d_on_tiles) builds.
///
/// # Errors
/// The graph's and the engine's errors.
///
/// ```
/// use tessera_sim::ipu::Target;
/// use tessera_sim::model::{Pool2d, PoolKind, pool2d_cycles};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let pool = Pool2d { kind: PoolKind::Max, kernel: (2, 2), stride: 2, padding: 0 };
/// let shape = pool.on(1, 2, (4, 4)).unwrap();
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// let cycles = pool2d_cycles(&pool, &shape, false, Target::single(ipu))?;
/// assert!(cycles.forward > 0 && cycles.backward > 0 && cycles.max_tile_bytes > 0);
/// # Ok::<(), tessera_sim::model::ModelError>(())
/// ```
pub fn pool2d_cycles(
    pool: &Pool2d,
    shape: &ConvShape,
    f16: bool,
    target: ipu::Target,
) -> Result<LayerCycles, ModelError> {
    let (placement, link) = (Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, shape.n);
    b.f16 = f16;
    let in_layout = input_layout(shape.in_rows(), shape.conv.in_channels, &target);
    let input = b.matrix("x", &in_layout)?;
    let fwd = super::pool::forward(&mut b, 0, (pool, shape), &input)?;
    let forward = b.programs.len();
    let dy = b.matrix("layer0.dy", &fwd.y.layout)?;
    super::pool::backward(&mut b, 0, (pool, shape), (&fwd, &dy), &in_layout)?;
    priced(b, forward)
}
