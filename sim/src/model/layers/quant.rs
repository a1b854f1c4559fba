//! Quantised products: each operand of a dense or convolution product
//! rounded by its role's [`RoleQuant`](crate::model::quant::RoleQuant)
//! into a new f32 tensor of its values (scaled back, exactly), which the
//! product reads in place of the operand. The product itself is the
//! unchanged [`matmul`](fn@crate::kernels::matmul): with exact products
//! (every 8-, 6- and 4-bit format's) and its f32 sums, it is core's
//! `RoundedMatmul` with an f32 accumulator, in the product's fixed
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

use core::ops::Range;
use std::sync::Arc;

use tessera_core::rng::RandomStream;

use super::{Act, Builder, Copies, ModelError};
use crate::ipu::{
    Access, Codelet, DType, FieldSpec, IpuSpec, Kernel, TensorSlice, VertexCycles, VertexIo,
};
use crate::kernels::matmul::{
    BlockLayout, Cut, Operand, Output, ProductPlan, Source, gather_copies,
};
use crate::model::quant::{Keyed, QuantStats, Role, RoleQuant, Scaling, tensor_exponent};

/// The seed of the quantisations' random bits (each operand its stream).
const SEED: u64 = 0x1826_f8f8;

/// Elements a quantisation vertex gets at least.
const GRAIN: usize = 1024;

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
            &format!("{}.qa", names.1),
            a,
            a.transposed,
            recipe.of(ra),
        )?;
        let qb = self.quantise(
            l,
            &format!("{}.qb", names.1),
            b,
            !b.transposed,
            recipe.of(rb),
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
    /// reduction runs along its stored rows (`k_rows`) or columns.
    fn quantise(
        &mut self,
        l: usize,
        name: &str,
        op: &Operand,
        k_rows: bool,
        q: RoleQuant,
    ) -> Result<Operand, ModelError> {
        let layout = match q.scaling {
            Scaling::Mx => self.lines(l, name, op, k_rows)?,
            _ => Operand {
                transposed: k_rows,
                ..op.clone()
            },
        };
        let out = self.matrix(name, &layout.layout)?;
        let stats = self.per_block(&format!("{name}.stats"), &layout.layout, |_| 3)?;
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
        if q.scaling == Scaling::Mx {
            let cs = self.g.add_compute_set(&format!("{name}.mx"));
            for (k, blk) in layout.layout.blocks().iter().enumerate() {
                let codelet: Arc<dyn Codelet> = Arc::new(Cast {
                    q,
                    block: (blk.rows.clone(), blk.cols.clone(), cols),
                    k_rows,
                    stream,
                    fields: cast_fields(false),
                });
                self.vertex(cs, blk.tile, &codelet, &fields(None, k, blk))?;
            }
            self.programs.push(crate::ipu::Program::Execute(cs));
        } else {
            let amaxes = self.amaxes(name, &layout)?;
            let cs = self.g.add_compute_set(&format!("{name}.cast"));
            for (k, blk) in layout.layout.blocks().iter().enumerate() {
                let codelet: Arc<dyn Codelet> = Arc::new(Cast {
                    q,
                    block: (blk.rows.clone(), blk.cols.clone(), cols),
                    k_rows,
                    stream,
                    fields: cast_fields(true),
                });
                let gathered = TensorSlice::new(amaxes.tensor, amaxes.ranges[k].clone());
                self.vertex(cs, blk.tile, &codelet, &fields(Some(gathered), k, blk))?;
            }
            self.programs.push(crate::ipu::Program::Execute(cs));
        }
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
        let layout = BlockLayout::grid(rows, cols, rb, cb, span as u32).shifted(tiles.start);
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
/// the order.
fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| {
        if v.is_nan() || m.is_nan() {
            f32::NAN
        } else {
            m.max(v.abs())
        }
    })
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

/// A block quantised: per tensor (a fourth field, every block's amax)
/// or MX along its lines. Fields: the block (read), its quantised values
/// (written), its stats `[exponent, saturated, underflowed]` (written),
/// [the amaxes (read)].
#[derive(Debug)]
struct Cast {
    q: RoleQuant,
    /// The block's rows and columns, and the matrix's columns.
    block: (Range<usize>, Range<usize>, usize),
    k_rows: bool,
    stream: RandomStream,
    fields: Vec<FieldSpec>,
}

impl Codelet for Cast {
    fn name(&self) -> &str {
        "quant_cast"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        convert_cycles(lens[0], spec)
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let x = io.read::<f32>(0).to_vec();
        let exponent = (self.fields.len() == 4)
            .then(|| tensor_exponent(self.q.format, amax(io.read::<f32>(3))));
        let mut out = vec![0.0; x.len()];
        let mut stats = QuantStats::default();
        let (rows, cols, width) = (&self.block.0, &self.block.1, self.block.2);
        let w = cols.len();
        // Lines along the reduction: the block's rows (k along columns)
        // or its columns (k along rows, strided).
        let (lines, len, at, step) = if self.k_rows {
            (w, rows.len(), w, 1)
        } else {
            (rows.len(), w, 1, w)
        };
        let (mut line, mut done) = (vec![0.0; len], vec![0.0; len]);
        for i in 0..lines {
            for (t, v) in line.iter_mut().enumerate() {
                *v = x[i * step + t * at];
            }
            // The matrix position of the line's first element and the
            // distance between its elements.
            let (first, stride) = if self.k_rows {
                ((rows.start * width + cols.start + i) as u64, width as u64)
            } else {
                (((rows.start + i) * width + cols.start) as u64, 1)
            };
            let bits = Keyed {
                stream: self.stream,
                values: &line,
                first,
                step: stride,
            };
            match exponent {
                Some(k) => self.q.round_scaled(&line, k, &bits, &mut done, &mut stats),
                None => self.q.round_mx(&line, &bits, &mut done, &mut stats),
            }
            for (t, v) in done.iter().enumerate() {
                out[i * step + t * at] = *v;
            }
        }
        io.write::<f32>(1).copy_from_slice(&out);
        let s = io.write::<f32>(2);
        s[0] = stats.exponent as f32;
        s[1] = stats.saturated as f32;
        s[2] = stats.underflowed as f32;
    }
}

/// A conversion's cycles: `n` elements over all workers.
fn convert_cycles(n: u64, spec: &IpuSpec) -> VertexCycles {
    let cost = spec.costs().get(Kernel::ConvertSr);
    VertexCycles::AllWorkers(cost.multi_thread_cycles(n, spec.workers_per_tile()))
}
