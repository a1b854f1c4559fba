//! Layers as builders: each adds its own tensors, vertices, exchanges and
//! programs for the forward pass and, in a training graph, the backward
//! pass, to a [`Builder`] that holds the graph and the program so far.
//!
//! - [`dense`]: `Y = A W` with its weights and bias, and `dW`, `db`, `dA`;
//! - [`activation`]: the bias added and ReLU/GELU applied (one vertex per
//!   block), and the activation's derivative;
//! - [`batch_norm`]: the bias added, normalised over the micro-batch (and
//!   the replica group) or by the running statistics, scaled, shifted and
//!   activated; its backward pass;
//! - [`loss`]: softmax cross-entropy over whole rows of logits, with the
//!   gradient of the logits when training;
//! - [`conv2d`], [`pool`], [`residual`]: feature maps' layers.
//!
//! [`network`] composes them into a model's training or inference graph
//! (an MLP's dense blocks, [`dense::block`], as a network's).

pub(super) mod activation;
pub(super) mod batch_norm;
pub(super) mod conv2d;
pub(super) mod cost;
pub(super) mod dense;
pub(super) mod exact_grad;
pub(super) mod loss;
pub(super) mod network;
pub(super) mod pool;
pub(super) mod quant;
pub(super) mod residual;

use core::num::NonZeroU64;
use core::ops::Range;
use std::sync::Arc;

use super::codelets::GroupLink;
use super::config::Activation;
use super::config::MIN_BLOCK_FLOPS;
use super::error::ModelError;
use super::placement::Placement;
use crate::ipu::{
    self, Codelet, DType, Graph, Interval, Kernel, Mapping, ProductPrice, Program, TensorId,
    TensorSlice, Tile,
};
use crate::kernels::matmul::{
    Block, BlockLayout, Cut, Operand, Output, Problem, ProductPlan, Source, matmul,
};

/// Grain of the linear mapping of parameters and inputs (elements).
const PARAM_GRAIN: u64 = 4096;

/// Copies of one exchange.
pub(super) type Copies = Vec<(TensorSlice, TensorSlice)>;

/// A matrix on the tiles: its tensor and layout.
#[derive(Clone, Debug)]
pub(super) struct Act {
    pub(super) tensor: TensorId,
    pub(super) layout: BlockLayout,
}

impl Act {
    /// The matrix as a product's operand.
    pub(super) fn operand(&self, transposed: bool) -> Operand {
        Operand {
            tensor: self.tensor,
            layout: self.layout.clone(),
            transposed,
        }
    }
}

/// A tensor of a piece per block of a layout, and the pieces' ranges.
#[derive(Clone, Debug)]
pub(super) struct Staged {
    pub(super) tensor: TensorId,
    pub(super) ranges: Vec<Range<u64>>,
}

/// What the layers build into: the graph, the program so far, and the
/// settings every layer reads.
pub(super) struct Builder<'a> {
    pub(super) g: Graph,
    pub(super) placement: &'a Placement,
    pub(super) target: &'a ipu::Target,
    pub(super) batch: usize,
    /// f16 compute ([`Compute::F16`](super::Compute::F16)).
    pub(super) f16: bool,
    /// The dense and convolution products' quantisation, if any.
    pub(super) quant: Option<super::quant::Recipe>,
    /// Each quantised operand's stats (a piece per block) and delayed
    /// scaling's input.
    pub(super) quant_stats: Vec<quant::QuantTensors>,
    /// A training graph.
    pub(super) train: bool,
    pub(super) activation: Activation,
    pub(super) link: &'a GroupLink,
    /// Parameters staged per block, in one exchange before the forward
    /// pass.
    pub(super) stage_copies: Copies,
    /// The program, in order.
    pub(super) programs: Vec<Program>,
    /// Group sums per run.
    pub(super) group_calls: usize,
}

/// A group link for a graph without batch norm.
fn standalone_link() -> GroupLink {
    Arc::new(std::sync::Mutex::new(None))
}

/// `expected` elements, or [`ModelError::InputLength`].
fn check_len(got: usize, expected: usize) -> Result<(), ModelError> {
    (got == expected)
        .then_some(())
        .ok_or(ModelError::InputLength { expected, got })
}

/// Copies of columns `cols` of each listed vector (`[len]`) into a piece,
/// one after the other from `at`.
fn copy_cols(
    copies: &mut Copies,
    sources: &[TensorId],
    cols: &core::ops::Range<usize>,
    dst: TensorId,
    mut at: u64,
) {
    for &src in sources {
        let n = cols.len() as u64;
        copies.push((
            TensorSlice::new(src, cols.start as u64..cols.end as u64),
            TensorSlice::new(dst, at..at + n),
        ));
        at += n;
    }
}

/// Writes a row-major matrix into `a`.
fn write_rows(e: &mut ipu::Engine, a: &Act, rows: &[f32]) {
    e.write_tensor(a.tensor, &a.layout.from_row_major(rows))
        .expect("lengths checked");
}

/// Reads `a` row-major.
pub(super) fn read_rows(e: &ipu::Engine, a: &Act) -> Vec<f32> {
    a.layout
        .to_row_major(&e.read_tensor::<f32>(a.tensor).expect("f32"))
}

impl<'a> Builder<'a> {
    /// A training graph in f32 of one layer's tests, spread over
    /// `target`'s tiles.
    fn standalone(
        target: &'a ipu::Target,
        placement: &'a Placement,
        link: &'a GroupLink,
        batch: usize,
    ) -> Self {
        Self {
            g: Graph::new(*target),
            placement,
            target,
            batch,
            f16: false,
            quant: None,
            quant_stats: Vec::new(),
            train: true,
            activation: Activation::Relu,
            link,
            stage_copies: Vec::new(),
            programs: Vec::new(),
            group_calls: 0,
        }
    }

    /// The engine of the graph and program built.
    fn engine(self) -> Result<ipu::Engine, ModelError> {
        let program = Program::Sequence(self.programs);
        Ok(ipu::Engine::new(
            self.g,
            program,
            ipu::EngineOptions::default(),
        )?)
    }
}

impl Builder<'_> {
    /// The products' kernel.
    pub(super) const fn kernel(&self) -> Kernel {
        if self.f16 {
            Kernel::MatmulF16
        } else {
            Kernel::MatmulF32
        }
    }

    /// How the products of `a` and `b` run: of quantised operands (held
    /// in their encodings), as the IPU runs them ([`IpuSpec::product_of`]:
    /// its FP8 units, or conversion and FP16 products); else the compute's
    /// kernel.
    ///
    /// [`IpuSpec::product_of`]: crate::ipu::IpuSpec::product_of
    pub(super) fn price(&self, a: &Operand, b: &Operand) -> ProductPrice {
        match (self.g.held(a.tensor), self.g.held(b.tensor)) {
            (Some(ea), Some(eb)) => self.target.spec().product_of(ea, eb),
            _ => self.kernel().into(),
        }
    }

    /// How gradients come out of their products (the AMP writes f16).
    pub(super) const fn grad_output(&self) -> Output {
        if self.f16 { Output::F16 } else { Output::F32 }
    }

    /// Small tensors of layer `l`, linear over its tiles.
    pub(super) fn linear_on(&self, l: usize) -> Mapping {
        let grain = NonZeroU64::new(PARAM_GRAIN).expect("nonzero");
        match self.placement {
            Placement::Spread => Mapping::linear(grain),
            Placement::Ipus(_) | Placement::Stages { .. } => Mapping::Linear {
                grain,
                tiles: Some(self.placement.tiles(l, self.target)),
            },
        }
    }

    /// An f32 tensor of `len` elements.
    pub(super) fn tensor(
        &mut self,
        name: &str,
        len: usize,
        mapping: Mapping,
    ) -> Result<TensorId, ModelError> {
        Ok(self
            .g
            .add_tensor(name, DType::F32, &[len as u64], mapping)?)
    }

    /// An f32 matrix in `layout`.
    pub(super) fn matrix(&mut self, name: &str, layout: &BlockLayout) -> Result<Act, ModelError> {
        let tensor = self.tensor(name, layout.len(), layout.mapping())?;
        Ok(Act {
            tensor,
            layout: layout.clone(),
        })
    }

    /// A vertex of `codelet` on `tile` in `cs`.
    pub(super) fn vertex(
        &mut self,
        cs: ipu::ComputeSetId,
        tile: Tile,
        codelet: &Arc<dyn Codelet>,
        fields: &[TensorSlice],
    ) -> Result<(), ModelError> {
        Ok(self.g.add_vertex(cs, tile, codelet.clone(), fields)?)
    }

    /// A compute set of one vertex per block of `layout`, its fields
    /// from `fields(block index, block)`, appended to the program.
    pub(super) fn per_block_vertices(
        &mut self,
        name: &str,
        layout: &BlockLayout,
        codelet: &Arc<dyn Codelet>,
        fields: impl Fn(usize, &Block) -> Vec<TensorSlice>,
    ) -> Result<(), ModelError> {
        let cs = self.g.add_compute_set(name);
        for (k, blk) in layout.blocks().iter().enumerate() {
            self.vertex(cs, blk.tile, codelet, &fields(k, blk))?;
        }
        self.programs.push(Program::Execute(cs));
        Ok(())
    }

    /// An exchange of `copies`, appended to the program.
    pub(super) fn exchange(&mut self, name: &str, copies: &Copies) -> Result<(), ModelError> {
        let ex = self.g.add_exchange(name, copies)?;
        self.programs.push(Program::Exchange(ex));
        Ok(())
    }

    /// A tensor of a piece per block of `layout` (`len(block)` elements
    /// each, on the block's tile); the pieces' ranges.
    pub(super) fn per_block(
        &mut self,
        name: &str,
        layout: &BlockLayout,
        len: impl Fn(&Block) -> u64,
    ) -> Result<Staged, ModelError> {
        let mut intervals = Vec::new();
        let mut ranges = Vec::new();
        let mut at = 0;
        for b in layout.blocks() {
            let n = len(&b);
            if n > 0 {
                intervals.push(Interval::new(b.tile, at..at + n));
            }
            ranges.push(at..at + n);
            at += n;
        }
        let tensor = self
            .g
            .add_tensor(name, DType::F32, &[at], Mapping::Explicit(intervals))?;
        Ok(Staged { tensor, ranges })
    }

    /// Layer `l`'s vectors `sources` (`[cols]` each) staged per block of
    /// `out`, one after the other (`layer{l}.params`), by the exchange
    /// before the forward pass.
    pub(super) fn stage(
        &mut self,
        l: usize,
        out: &BlockLayout,
        sources: &[TensorId],
    ) -> Result<Staged, ModelError> {
        let stage = self.per_block(&format!("layer{l}.params"), out, |blk| {
            (blk.cols.len() * sources.len()) as u64
        })?;
        for (blk, r) in out.blocks().iter().zip(&stage.ranges) {
            copy_cols(
                &mut self.stage_copies,
                sources,
                &blk.cols,
                stage.tensor,
                r.start,
            );
        }
        Ok(stage)
    }

    /// `c = op(a) op(b)` (vertices named `name`), cut by `plan`, appended
    /// to the program; `c` is a new tensor `tensor` in the plan's output
    /// layout.
    pub(super) fn product(
        &mut self,
        (tensor, name): (&str, &str),
        (a, b): (&Operand, &Operand),
        plan: &ProductPlan,
        output: Output,
    ) -> Result<Act, ModelError> {
        let c = self.matrix(tensor, plan.output())?;
        let arith = (
            self.price(a, b),
            self.quant.map_or_else(Default::default, |r| r.accumulator),
        );
        let p = matmul(&mut self.g, name, a, b, c.tensor, plan, arith, output)?;
        self.programs.push(p);
        Ok(c)
    }

    fn problem<'p>(
        &self,
        (m, k, n): (usize, usize, usize),
        (a, b): (Source<'p>, Source<'p>),
        tiles: &'p Range<Tile>,
    ) -> Problem<'p> {
        Problem {
            m,
            k,
            n,
            a,
            b,
            tiles,
            min_flops: MIN_BLOCK_FLOPS,
            kernel: self.kernel(),
        }
    }

    /// Layer `l`'s first tile of a layout of `blocks` consecutive blocks:
    /// layers take turns over their tiles (37 is prime to every tile count
    /// of a power of two), so that no tile holds every layer's first block.
    pub(super) fn first_tile(&self, l: usize, blocks: usize) -> Tile {
        let tiles = self.tiles(l);
        let span = tiles.end - tiles.start;
        let free = span.saturating_sub(blocks as u32) + 1;
        tiles.start + (l as u32).wrapping_mul(37) % free
    }

    /// The tiles of layer `l` (its pipeline stage's IPU, or all).
    pub(super) fn tiles(&self, l: usize) -> Range<Tile> {
        self.placement.tiles(l, self.target)
    }

    /// All of `tensor`.
    pub(super) fn all(&self, tensor: TensorId) -> TensorSlice {
        self.g.all(tensor)
    }

    /// Layer `l`'s product of `dims` cut freely within `cut`.
    pub(super) fn plan(
        &self,
        l: usize,
        dims: (usize, usize, usize),
        sources: (Source<'_>, Source<'_>),
        cut: Cut,
    ) -> ProductPlan {
        let tiles = self.placement.tiles(l, self.target);
        let problem = self.problem(dims, sources, &tiles);
        let (spec, sync) = (self.target.spec(), self.target.sync_cycles());
        ProductPlan::choose(&problem, spec, sync, cut)
    }

    /// Layer `l`'s product of `dims` onto the layout `out`.
    pub(super) fn plan_onto(
        &self,
        l: usize,
        out: &BlockLayout,
        dims: (usize, usize, usize),
        sources: (Source<'_>, Source<'_>),
    ) -> ProductPlan {
        let tiles = self.placement.tiles(l, self.target);
        let problem = self.problem(dims, sources, &tiles);
        let (spec, sync) = (self.target.spec(), self.target.sync_cycles());
        ProductPlan::onto(out, &problem, spec, sync)
    }
}

#[cfg(test)]
mod tests {
    use super::conv2d;
    use super::pool;
    use super::*;
    use crate::ipu::{IpuParams, IpuSpec, MemoryUsage, Target};
    use crate::model::shapes::{Conv2d, Pool2d, PoolKind};

    /// A convolution, a max pool and a residual add, forward and
    /// backward, in a sizing graph (`sizing`) or a real one: its memory.
    fn measure(tiles: u32, sizing: bool) -> MemoryUsage {
        let spec = IpuSpec::new(IpuParams {
            tiles,
            ..IpuParams::default()
        })
        .unwrap();
        let target = Target::single(spec);
        let (placement, link) = (Placement::Spread, standalone_link());
        let mut b = Builder::standalone(&target, &placement, &link, 2);
        if sizing {
            b.g = Graph::sizing(target);
        }
        let conv = Conv2d {
            in_channels: 3,
            out_channels: 8,
            kernel: (3, 3),
            stride: 1,
            padding: 1,
        };
        let shape = conv.on(2, (6, 6)).unwrap();
        let layout = BlockLayout::grid(shape.in_rows(), 3, 5, 1, tiles);
        let x = b.matrix("x", &layout).unwrap();
        let c = conv2d::forward(&mut b, 0, &shape, &x, Cut::default()).unwrap();
        let p = Pool2d {
            kind: PoolKind::Max,
            kernel: (2, 2),
            stride: 2,
            padding: 0,
        };
        let ps = p.on(2, 8, (6, 6)).unwrap();
        let pooled = pool::forward(&mut b, 1, (&p, &ps), &c.y).unwrap();
        let sum = residual::add(&mut b, "sum", &pooled.y, &pooled.y).unwrap();
        let dx = pool::backward(&mut b, 1, (&p, &ps), (&pooled, &sum), &c.y.layout).unwrap();
        conv2d::backward(&mut b, 0, &shape, &c, &dx, Some(&layout)).unwrap();
        MemoryUsage::of(&b.g)
    }

    #[test]
    fn sizing_graphs_of_the_convolutional_layers_measure_the_engines_memory() {
        // Tensors, vertex state and code to the byte; the exchange code
        // counts the receiving side only, so at most the engine's.
        for tiles in [1, 4, 16] {
            let (sized, built) = (measure(tiles, true), measure(tiles, false));
            for (t, (s, e)) in sized.tiles.iter().zip(&built.tiles).enumerate() {
                assert_eq!(s.tensors, e.tensors, "tile {t} of {tiles}");
                assert_eq!(s.vertex_state, e.vertex_state, "tile {t} of {tiles}");
                assert_eq!(s.code, e.code, "tile {t} of {tiles}");
                assert!(s.exchange <= e.exchange, "tile {t} of {tiles}");
            }
            let received: u64 = sized.tiles.iter().map(|m| m.exchange).sum();
            assert!(received > 0, "{tiles} tiles");
        }
    }
}
