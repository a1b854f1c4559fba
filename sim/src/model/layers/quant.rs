//! Quantised products: each operand of a dense or convolution product
//! rounded by its role's [`RoleQuant`](crate::model::quant::RoleQuant)
//! into a new f32 tensor of its values (scaled back, exactly), which the
//! product reads in place of the operand. The product itself is the
//! [`matmul`](fn@crate::kernels::matmul) in the recipe's accumulator:
//! with exact products (every 8-, 6- and 4-bit format's) it is core's
//! `RoundedMatmul` with an f32 or f16 accumulator, in the product's fixed
//! summation tree.
//!
//! - Per tensor: a vertex per block of the operand finds the block's
//!   amax; one exchange gives every block's tile all of them; a vertex per
//!   block takes their max (a max: the order does not matter, and a
//!   replica's tensor is the same whatever the split), the exponent `k`
//!   and rounds its elements to `chop(x 2^k) 2^-k`.
//! - MX: the operand is regathered into blocks of whole lines along the
//!   reduction, and a vertex per block quantises each line in blocks of
//!   32 with core's `Mx` and decodes it.
//! - NVFP4: both: the lines regathered, the blocks' amaxes gathered as per
//!   tensor (the tensor scale is core's `Nvfp4::tensor_scale` of their
//!   max), each line quantised in blocks of 16 by core's `Nvfp4`.
//! - Delayed: no amax pass: the host writes the history's amax onto every
//!   block's tile before the step, and each cast vertex records its own
//!   block's amax in a fourth stat, which the host reads after each
//!   micro-batch (see [`crate::model::quant`]'s rules).

use core::ops::Range;
use std::sync::Arc;

use tessera_core::rng::RandomStream;

use super::{Act, Builder, Copies, ModelError};
use crate::ipu::{
    Access, Codelet, DType, FieldSpec, IpuSpec, Kernel, TensorId, TensorSlice, VertexCycles,
    VertexIo,
};
use crate::kernels::matmul::{
    BlockLayout, Cut, Operand, Output, ProductPlan, Source, gather_copies,
};
use tessera_core::fp::{MX_BLOCK, NVFP4_BLOCK, Nvfp4};

use crate::model::quant::{Keyed, QuantStats, Role, RoleQuant, Scaling, tensor_exponent};

/// The seed of the quantisations' random bits (each operand its stream).
const SEED: u64 = 0x1826_f8f8;

/// Elements a quantisation vertex gets at least.
const GRAIN: usize = 1024;

/// A quantised operand's tensors the host reads and writes.
#[derive(Clone, Debug)]
pub(in crate::model) struct QuantTensors {
    /// The operand: `layer{l}.{product}.{role}`.
    pub(in crate::model) name: String,
    /// Its stats, a piece per block: `[exponent, saturated, underflowed]`
    /// and, delayed, the block's amax.
    pub(in crate::model) stats: TensorId,
    /// Delayed scaling's history length and where the host writes the
    /// history's amax (a value per block).
    pub(in crate::model) delayed: Option<DelayedInput>,
}

/// The host-written amax of a delayed operand's history.
#[derive(Clone, Copy, Debug)]
pub(in crate::model) struct DelayedInput {
    /// The history's length.
    pub(in crate::model) steps: u16,
    /// A value per block of the operand.
    pub(in crate::model) amax: TensorId,
    /// The operand's blocks.
    pub(in crate::model) blocks: usize,
}

impl QuantTensors {
    /// Values per block of its stats.
    pub(in crate::model) const fn stride(&self) -> usize {
        if self.delayed.is_some() { 4 } else { 3 }
    }
}

/// How a quantised product's plan is made from its operands' layouts.
#[derive(Clone, Copy, Debug)]
pub(super) enum Replan<'p> {
    /// Cut freely within the cut.
    Cut(Cut),
    /// Onto this output layout.
    Onto(&'p BlockLayout),
}

impl Builder<'_> {
    /// `op(a) op(b)` as [`Builder::product`] adds it (with `plan`) or,
    /// with a recipe, of the operands quantised by their roles (with a
    /// plan made by `replan` from the quantised layouts).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn product_of(
        &mut self,
        l: usize,
        names: (&str, &str),
        (a, ra): (&Operand, Role),
        (b, rb): (&Operand, Role),
        (plan, replan): (&ProductPlan, Replan<'_>),
        output: Output,
    ) -> Result<Act, ModelError> {
        let Some(recipe) = self.quant else {
            return self.product(names, (a, b), plan, output);
        };
        let qa = self.quantise(
            l,
            &format!("{}.{}", names.1, ra.name()),
            a,
            a.transposed,
            (recipe.of(ra), ra == Role::Weights),
        )?;
        let qb = self.quantise(
            l,
            &format!("{}.{}", names.1, rb.name()),
            b,
            !b.transposed,
            (recipe.of(rb), rb == Role::Weights),
        )?;
        let dims = plan.dims();
        let sources = (
            Source::Layout(&qa.layout, qa.transposed),
            Source::Layout(&qb.layout, qb.transposed),
        );
        let plan = match replan {
            Replan::Cut(cut) => self.plan(l, dims, sources, cut),
            Replan::Onto(out) => self.plan_onto(l, out, dims, sources),
        };
        self.product(names, (&qa, &qb), &plan, output)
    }

    /// `op` quantised by `q` into a new tensor `name`, for a product whose
    /// reduction runs along its stored rows (`k_rows`) or columns; `memo`:
    /// its casts are worth remembering (weights, the same on every replica).
    fn quantise(
        &mut self,
        l: usize,
        name: &str,
        op: &Operand,
        k_rows: bool,
        (q, memo): (RoleQuant, bool),
    ) -> Result<Operand, ModelError> {
        let layout = match q.scaling {
            Scaling::Mx | Scaling::Nvfp4 => self.lines(l, name, op, k_rows)?,
            _ => Operand {
                transposed: k_rows,
                ..op.clone()
            },
        };
        let out = self.matrix(name, &layout.layout)?;
        self.g.hold(out.tensor, q.encoding());
        let steps = match q.scaling {
            Scaling::Delayed(n) => Some(n),
            _ => None,
        };
        let stride = if steps.is_some() { 4 } else { 3 };
        let stats = self.per_block(&format!("{name}.stats"), &layout.layout, |_| stride)?;
        let stream = RandomStream::new(SEED, fnv(name));
        let cols = layout.layout.cols();
        let fields =
            |amaxes: Option<TensorSlice>, k: usize, blk: &crate::kernels::matmul::Block| {
                let mut f = vec![
                    TensorSlice::new(layout.tensor, blk.elements.clone()),
                    TensorSlice::new(out.tensor, blk.elements.clone()),
                    TensorSlice::new(stats.tensor, stats.ranges[k].clone()),
                ];
                f.extend(amaxes);
                f
            };
        let mut delayed = None;
        if q.scaling == Scaling::Mx {
            let cs = self.g.add_compute_set(&format!("{name}.mx"));
            for (k, blk) in layout.layout.blocks().iter().enumerate() {
                let codelet: Arc<dyn Codelet> = Arc::new(Cast {
                    q,
                    block: (blk.rows.clone(), blk.cols.clone(), cols),
                    k_rows,
                    stream,
                    memo,
                    fields: cast_fields(false),
                });
                self.vertex(cs, blk.tile, &codelet, &fields(None, k, blk))?;
            }
            self.programs.push(crate::ipu::Program::Execute(cs));
        } else {
            let amaxes = match steps {
                Some(steps) => {
                    let history = format!("{name}.history");
                    let amax = self.per_block(&history, &layout.layout, |_| 1)?;
                    delayed = Some(DelayedInput {
                        steps,
                        amax: amax.tensor,
                        blocks: amax.ranges.len(),
                    });
                    amax
                }
                None => self.amaxes(name, &layout)?,
            };
            let cs = self.g.add_compute_set(&format!("{name}.cast"));
            for (k, blk) in layout.layout.blocks().iter().enumerate() {
                let codelet: Arc<dyn Codelet> = Arc::new(Cast {
                    q,
                    block: (blk.rows.clone(), blk.cols.clone(), cols),
                    k_rows,
                    stream,
                    memo,
                    fields: cast_fields(true),
                });
                let gathered = TensorSlice::new(amaxes.tensor, amaxes.ranges[k].clone());
                self.vertex(cs, blk.tile, &codelet, &fields(Some(gathered), k, blk))?;
            }
            self.programs.push(crate::ipu::Program::Execute(cs));
        }
        self.quant_stats.push(QuantTensors {
            name: name.to_owned(),
            stats: stats.tensor,
            delayed,
        });
        Ok(Operand {
            tensor: out.tensor,
            layout: layout.layout,
            transposed: op.transposed,
        })
    }

    /// The amax of every block of `op`, gathered onto every block's tile
    /// (`blocks` values per block).
    fn amaxes(&mut self, name: &str, op: &Operand) -> Result<super::Staged, ModelError> {
        let blocks = op.layout.blocks();
        let n = blocks.len() as u64;
        let own = self.per_block(&format!("{name}.amax"), &op.layout, |_| 1)?;
        let codelet: Arc<dyn Codelet> = Arc::new(Amax {
            fields: [
                FieldSpec::new(DType::F32, Access::Read),
                FieldSpec::new(DType::F32, Access::Write),
            ],
        });
        self.per_block_vertices(&format!("{name}.amax"), &op.layout, &codelet, |k, blk| {
            vec![
                TensorSlice::new(op.tensor, blk.elements.clone()),
                TensorSlice::new(own.tensor, own.ranges[k].clone()),
            ]
        })?;
        let all = self.per_block(&format!("{name}.amaxes"), &op.layout, |_| n)?;
        let mut copies = Copies::new();
        for (k, blk) in blocks.iter().enumerate() {
            if self.g.is_sizing() {
                self.g.count_received_runs(blk.tile, n);
                continue;
            }
            for (j, r) in own.ranges.iter().enumerate() {
                let at = all.ranges[k].start + j as u64;
                copies.push((
                    TensorSlice::new(own.tensor, r.clone()),
                    TensorSlice::new(all.tensor, at..at + 1),
                ));
            }
        }
        if !copies.is_empty() {
            self.exchange(&format!("{name}.amaxes"), &copies)?;
        }
        Ok(all)
    }

    /// `op` regathered (if it is not already) into blocks of whole lines
    /// along the reduction, over layer `l`'s tiles.
    fn lines(
        &mut self,
        l: usize,
        name: &str,
        op: &Operand,
        k_rows: bool,
    ) -> Result<Operand, ModelError> {
        let (rows, cols) = (op.layout.rows(), op.layout.cols());
        let whole = if k_rows {
            op.layout.row_blocks() == 1
        } else {
            op.layout.col_blocks() == 1
        };
        if whole {
            return Ok(Operand {
                transposed: k_rows,
                ..op.clone()
            });
        }
        let tiles = self.tiles(l);
        let span = (tiles.end - tiles.start) as usize;
        let lines = if k_rows { cols } else { rows };
        let parts = (rows * cols / GRAIN).clamp(1, span.min(lines).max(1));
        let (rb, cb) = if k_rows { (1, parts) } else { (parts, 1) };
        // On `parts` consecutive tiles from one that depends on the
        // operand, so that operands do not all start on the first tile.
        let first = tiles.start + (fnv(name) % (span - parts + 1) as u64) as u32;
        let layout = BlockLayout::grid(rows, cols, rb, cb, parts as u32).shifted(first);
        let staged = self.matrix(&format!("{name}.lines"), &layout)?;
        let mut copies = Copies::new();
        for blk in layout.blocks() {
            if self.g.is_sizing() {
                let runs = op.layout.runs(&blk.rows, &blk.cols);
                self.g.count_received_runs(blk.tile, runs);
            } else {
                let (r, c, at) = (blk.rows, blk.cols, blk.elements.start);
                gather_copies(&mut copies, op.tensor, &op.layout, r, c, staged.tensor, at);
            }
        }
        if !copies.is_empty() {
            self.exchange(&format!("{name}.lines"), &copies)?;
        }
        Ok(Operand {
            tensor: staged.tensor,
            layout,
            transposed: k_rows,
        })
    }
}

/// FNV-1a of `name`: an operand's random stream.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A block's amax (NaN if it holds one; infinity if it holds one).
/// Fields: the block (read), its amax (written, 1).
#[derive(Debug)]
struct Amax {
    fields: [FieldSpec; 2],
}

impl Codelet for Amax {
    fn name(&self) -> &str {
        "quant_amax"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        convert_cycles(lens[0], spec)
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let amax = amax(io.read::<f32>(0));
        io.write::<f32>(1)[0] = amax;
    }
}

/// The largest magnitude of `x` (NaN if it holds one): a max, whatever
/// the order. The max of the magnitudes' bits (an integer max the
/// compiler vectorises): finite and infinite magnitudes order as their
/// bits, and every NaN's bits are above infinity's.
fn amax(x: &[f32]) -> f32 {
    let top = x.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
    if top > f32::INFINITY.to_bits() {
        f32::NAN
    } else {
        f32::from_bits(top)
    }
}

fn cast_fields(per_tensor: bool) -> Vec<FieldSpec> {
    let mut f = vec![
        FieldSpec::new(DType::F32, Access::Read),
        FieldSpec::new(DType::F32, Access::Write),
        FieldSpec::new(DType::F32, Access::Write),
    ];
    if per_tensor {
        f.push(FieldSpec::new(DType::F32, Access::Read));
    }
    f
}

/// How a block is scaled, found when it runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scale {
    /// Per tensor, by `2^k` (`None`: a non-finite amax).
    Tensor(Option<i32>),
    /// MX blocks along the lines.
    Mx,
    /// NVFP4 blocks along the lines under tensor scale `t` (`None`: a
    /// non-finite amax).
    Nvfp4(Option<f32>),
}

impl Scale {
    /// A hashable and comparable key (the scale's bits).
    fn key(self) -> (u8, u64) {
        match self {
            Self::Tensor(k) => (0, k.map_or(u64::MAX, |k| u64::from(k as u32))),
            Self::Mx => (1, 0),
            Self::Nvfp4(t) => (2, t.map_or(u64::MAX, |t| u64::from(t.to_bits()))),
        }
    }
}

/// A block quantised: per tensor or NVFP4 (a fourth field, every block's
/// amax), delayed (a fourth field, the history's amax) or MX along its
/// lines. Fields: the block (read), its quantised values (written), its
/// stats `[exponent, saturated, underflowed]` and, delayed, its own amax
/// (written), [the amaxes (read)].
#[derive(Debug)]
struct Cast {
    q: RoleQuant,
    /// The block's rows and columns, and the matrix's columns.
    block: (Range<usize>, Range<usize>, usize),
    k_rows: bool,
    stream: RandomStream,
    /// Cast through the host's [`memo`].
    memo: bool,
    fields: Vec<FieldSpec>,
}

impl Codelet for Cast {
    fn name(&self) -> &str {
        "quant_cast"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    // Rounding into the encoding: `convert_f8` or `convert_mx`.
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let kernel = self.q.encoding().conversion().unwrap_or(Kernel::ConvertSr);
        let cost = spec.costs().get(kernel);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let amax_in = (self.fields.len() == 4).then(|| amax(io.read::<f32>(3)));
        // Delayed: the block's own amax, recorded, and NaN for the block
        // if it holds a non-finite value.
        let own = matches!(self.q.scaling, Scaling::Delayed(_)).then(|| amax(io.read::<f32>(0)));
        let scale = match (self.q.scaling, amax_in, own) {
            (_, _, Some(o)) if !o.is_finite() => Scale::Tensor(None),
            (Scaling::Nvfp4, Some(a), _) => {
                Scale::Nvfp4(a.is_finite().then(|| Nvfp4::tensor_scale(&[a])))
            }
            (_, Some(a), _) => Scale::Tensor(tensor_exponent(self.q.format, a)),
            (_, None, _) => Scale::Mx,
        };
        let [x, out, s] = io.many([0, 1, 2]);
        let (x, out) = (x.into_slice::<f32>(), out.into_slice::<f32>());
        let stats = memo::get_or(self, x, scale, out, |out| self.cast(x, scale, out));
        let s = s.into_slice::<f32>();
        s[0] = stats.exponent as f32;
        s[1] = stats.saturated as f32;
        s[2] = stats.underflowed as f32;
        if let Some(o) = own {
            s[3] = o;
        }
    }
}

impl Cast {
    /// The block `x` quantised into `out` by `scale` (along its lines);
    /// its stats. The lines go to core in one call: gathered (unless they
    /// are the block's contiguous rows already), each padded with zeros
    /// to a whole number of MX or NVFP4 blocks, so that blocks start where
    /// lines start and the padding changes no block's scale.
    fn cast(&self, x: &[f32], scale: Scale, out: &mut [f32]) -> QuantStats {
        let mut stats = QuantStats::default();
        let (rows, cols, width) = (&self.block.0, &self.block.1, self.block.2);
        let w = cols.len();
        // Lines along the reduction: the block's columns (k along rows,
        // strided) or its rows (k along columns, contiguous), each with the
        // matrix distance between its elements and between lines.
        let (lines, len, step, line_step) = if self.k_rows {
            (w, rows.len(), width, 1)
        } else {
            (rows.len(), w, 1, width)
        };
        let pad = match scale {
            Scale::Tensor(_) => len,
            Scale::Mx => len.next_multiple_of(MX_BLOCK),
            Scale::Nvfp4(_) => len.next_multiple_of(NVFP4_BLOCK),
        };
        let at = |j: usize, t: usize| if self.k_rows { j + t * w } else { j * w + t };
        let keyed = Keyed {
            stream: self.stream,
            values: &[],
            first: (rows.start * width + cols.start) as u64,
            step: step as u64,
            line: pad.max(1) as u64,
            line_step: line_step as u64,
        };
        if !self.k_rows && pad == len {
            self.round(scale, x, &Keyed { values: x, ..keyed }, out, &mut stats);
            return stats;
        }
        let mut src = vec![0.0; lines * pad];
        for (j, line) in src.chunks_exact_mut(pad.max(1)).enumerate().take(lines) {
            for (t, v) in line[..len].iter_mut().enumerate() {
                *v = x[at(j, t)];
            }
        }
        let mut dst = vec![0.0; lines * pad];
        let bits = Keyed {
            values: &src,
            ..keyed
        };
        self.round(scale, &src, &bits, &mut dst, &mut stats);
        for (j, line) in dst.chunks_exact(pad.max(1)).enumerate().take(lines) {
            for (t, v) in line[..len].iter().enumerate() {
                out[at(j, t)] = *v;
            }
        }
        stats
    }

    /// `src` quantised by `scale` into `dst`.
    fn round(
        &self,
        scale: Scale,
        src: &[f32],
        bits: &Keyed<'_>,
        dst: &mut [f32],
        stats: &mut QuantStats,
    ) {
        match scale {
            Scale::Tensor(k) => self.q.round_scaled(src, k, bits, dst, stats),
            Scale::Mx => self.q.round_mx(src, bits, dst, stats),
            Scale::Nvfp4(t) => self.q.round_nvfp4(src, t, bits, dst, stats),
        }
    }
}

/// The host's memo of the weights' casts: a cast is a function of its
/// block's bits, its exponent and its codelet, so replicas that hold the
/// same weights (all of them) convert them once per step. Host time
/// only: the simulated cycles are the vertex's either way.
mod memo {
    use std::collections::HashMap;
    use std::hash::{DefaultHasher, Hash, Hasher};
    use std::sync::{Arc, Mutex};

    use super::{Cast, QuantStats, Scale};

    /// Entries kept before the memo starts over.
    const MAX_ENTRIES: usize = 1024;

    /// A block's bits, its cast, the cast's stats and its scale's key.
    type Entry = Arc<(Vec<f32>, Vec<f32>, QuantStats, (u8, u64))>;

    static MEMO: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);

    /// A cheap hash of every 16th of `x`'s bits (a hit compares them all;
    /// the weights change as a whole from step to step).
    fn hash_bits(x: &[f32]) -> u64 {
        x.iter().step_by(16).fold(x.len() as u64, |h, v| {
            (h.rotate_left(5) ^ u64::from(v.to_bits())).wrapping_mul(0x517c_c1b7_2722_0a95)
        })
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        bytemuck::cast_slice::<f32, u32>(a) == bytemuck::cast_slice::<f32, u32>(b)
    }

    /// `cast()`'s result for `x` into `out`, from the memo if it holds it;
    /// its stats.
    pub(super) fn get_or(
        c: &Cast,
        x: &[f32],
        scale: Scale,
        out: &mut [f32],
        cast: impl FnOnce(&mut [f32]) -> QuantStats,
    ) -> QuantStats {
        if !c.memo {
            return cast(out);
        }
        let mut h = DefaultHasher::new();
        (hash_bits(x), scale.key(), c.q, &c.block, c.k_rows).hash(&mut h);
        c.stream.bits(0).hash(&mut h);
        let key = h.finish();
        let found = MEMO
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.get(&key).cloned());
        if let Some(e) = found.filter(|e| e.3 == scale.key() && same_bits(&e.0, x)) {
            out.copy_from_slice(&e.1);
            return e.2;
        }
        let stats = cast(out);
        let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        let map = memo.get_or_insert_with(HashMap::new);
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(
            key,
            Arc::new((x.to_vec(), out.to_vec(), stats, scale.key())),
        );
        stats
    }
}

/// A conversion's cycles: `n` elements over all workers.
fn convert_cycles(n: u64, spec: &IpuSpec) -> VertexCycles {
    let cost = spec.costs().get(Kernel::ConvertSr);
    VertexCycles::AllWorkers(cost.multi_thread_cycles(n, spec.workers_per_tile()))
}

#[cfg(test)]
#[path = "quant_tests.rs"]
mod tests;
