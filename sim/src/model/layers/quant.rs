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
            Scaling::Mx => self.lines(l, name, op, k_rows)?,
            _ => Operand {
                transposed: k_rows,
                ..op.clone()
            },
        };
        let out = self.matrix(name, &layout.layout)?;
        self.g.hold(out.tensor, q.encoding());
        let stats = self.per_block(&format!("{name}.stats"), &layout.layout, |_| 3)?;
        self.quant_stats.push((name.to_owned(), stats.tensor));
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
                    memo,
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
                    memo,
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
        let x = io.read::<f32>(0).to_vec();
        let exponent = (self.fields.len() == 4)
            .then(|| tensor_exponent(self.q.format, amax(io.read::<f32>(3))));
        let (out, stats) = memo::get_or(self, &x, exponent, || self.cast(&x, exponent));
        io.write::<f32>(1).copy_from_slice(&out);
        let s = io.write::<f32>(2);
        s[0] = stats.exponent as f32;
        s[1] = stats.saturated as f32;
        s[2] = stats.underflowed as f32;
    }
}

impl Cast {
    /// The block `x` quantised, per tensor with `exponent` (`Some`) or
    /// MX along its lines, and its stats.
    fn cast(&self, x: &[f32], exponent: Option<Option<i32>>) -> (Vec<f32>, QuantStats) {
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
        (out, stats)
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

    use super::{Cast, QuantStats};

    /// Entries kept before the memo starts over.
    const MAX_ENTRIES: usize = 1024;

    type Entry = Arc<(Vec<u32>, Vec<f32>, QuantStats)>;

    static MEMO: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);

    /// `cast()`'s result for `x`, from the memo if it holds it.
    pub(super) fn get_or(
        c: &Cast,
        x: &[f32],
        exponent: Option<Option<i32>>,
        cast: impl FnOnce() -> (Vec<f32>, QuantStats),
    ) -> (Vec<f32>, QuantStats) {
        if !c.memo {
            return cast();
        }
        let bits: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
        let mut h = DefaultHasher::new();
        (&bits, exponent, c.q, &c.block, c.k_rows).hash(&mut h);
        c.stream.bits(0).hash(&mut h);
        let key = h.finish();
        let found = MEMO
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.get(&key).cloned());
        if let Some(e) = found.filter(|e| e.0 == bits) {
            return (e.1.clone(), e.2);
        }
        let (out, stats) = cast();
        let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        let map = memo.get_or_insert_with(HashMap::new);
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(key, Arc::new((bits, out.clone(), stats)));
        (out, stats)
    }
}

/// A conversion's cycles: `n` elements over all workers.
fn convert_cycles(n: u64, spec: &IpuSpec) -> VertexCycles {
    let cost = spec.costs().get(Kernel::ConvertSr);
    VertexCycles::AllWorkers(cost.multi_thread_cycles(n, spec.workers_per_tile()))
}

#[cfg(test)]
mod tests {
    use super::super::{Placement, dense, standalone_link, write_rows};
    use super::*;
    use crate::ipu::{IpuParams, IpuSpec, Target};
    use crate::model::quant::Recipe;

    /// An f64 oracle of a quantisation of the stored `rows x cols` matrix
    /// `x` for a reduction along its rows (`k_rows`) or columns: the
    /// exponent from the f64 amax by search, MX scales by the spec's floor
    /// rule, each element rounded by core's `chop` with its keyed bits.
    fn oracle_quant(
        q: RoleQuant,
        x: &[f32],
        (rows, cols, k_rows): (usize, usize, bool),
        stream: RandomStream,
    ) -> Vec<f32> {
        let max = f64::from(q.format.max());
        let exp_of = |amax: f64| {
            let mut k = 0i32;
            if amax > 0.0 {
                while amax * 2f64.powi(k) > max {
                    k -= 1;
                }
                while amax * 2f64.powi(k + 1) <= max {
                    k += 1;
                }
            }
            k
        };
        let chop = |v: f32, k: i32, pos: usize| {
            let bits = Keyed {
                stream,
                values: &[v],
                first: pos as u64,
                step: 0,
            };
            let scaled = (f64::from(v) * 2f64.powi(k)) as f32;
            let r = q.format.chop_with(scaled, q.round, &bits, 0);
            (f64::from(r) * 2f64.powi(-k)) as f32
        };
        if q.scaling == Scaling::Tensor {
            let amax = x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
            let k = exp_of(amax);
            return x.iter().enumerate().map(|(p, v)| chop(*v, k, p)).collect();
        }
        let emax = libm::floor(libm::log2(max)) as i32;
        let (lines, len) = if k_rows { (cols, rows) } else { (rows, cols) };
        let pos = |i: usize, t: usize| if k_rows { t * cols + i } else { i * cols + t };
        let mut out = vec![0.0; x.len()];
        for i in 0..lines {
            for b in (0..len).step_by(32) {
                let ts = b..(b + 32).min(len);
                let amax = ts
                    .clone()
                    .fold(0.0f64, |m, t| m.max(f64::from(x[pos(i, t)].abs())));
                let k = if amax > 0.0 {
                    emax - libm::floor(libm::log2(amax)) as i32
                } else {
                    127
                };
                for t in ts {
                    out[pos(i, t)] = chop(x[pos(i, t)], k, pos(i, t));
                }
            }
        }
        out
    }

    /// `op(a) op(b)` of row-major stored matrices, products in f64 (exact)
    /// added in increasing `k` and rounded to f32 after each addition:
    /// core's `RoundedMatmul` with an f32 accumulator, for `k <= 128`
    /// (one leaf of the product's tree).
    fn oracle_product(
        (a, ta): (&[f32], bool),
        (b, tb): (&[f32], bool),
        (m, k, n): (usize, usize, usize),
    ) -> Vec<f32> {
        let at = |i: usize, t: usize| if ta { a[t * m + i] } else { a[i * k + t] };
        let bt = |t: usize, j: usize| if tb { b[j * k + t] } else { b[t * n + j] };
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).fold(0.0f32, |s, t| {
                    (f64::from(s) + f64::from(at(i, t)) * f64::from(bt(t, j))) as f32
                });
            }
        }
        c
    }

    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let s = RandomStream::new(u64::from(seed), 3);
        (0..n as u64)
            .map(|i| (s.bits(i) as f32 / u32::MAX as f32 - 0.5) * scale)
            .collect()
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    /// A dense layer's three products in every new mode's recipe, on 8
    /// tiles (so operands are cut and MX lines regathered), against the
    /// oracle bit for bit.
    #[test]
    fn dense_products_equal_the_oracle_of_the_quantised_inputs() {
        let (batch, fan_in, width) = (6, 70, 24);
        let spec = IpuSpec::new(IpuParams {
            tiles: 8,
            ..IpuParams::default()
        })
        .unwrap();
        let target = Target::single(spec);
        let x = values(batch * fan_in, 1, 4.0);
        let w = values(fan_in * width, 2, 0.3);
        let dz = values(batch * width, 3, 1e-3);
        for recipe in [Recipe::FP8, Recipe::MXFP8, Recipe::MXFP6, Recipe::MXFP4] {
            let (placement, link) = (Placement::Spread, standalone_link());
            let mut b = Builder::standalone(&target, &placement, &link, batch);
            b.quant = Some(recipe);
            let layout = BlockLayout::grid(batch, fan_in, 2, 3, 8);
            let input = b.matrix("x", &layout).unwrap();
            let cut = Cut::default();
            let layer = dense::forward(&mut b, 1, &input, width, cut).unwrap();
            let dz_t = b.matrix("dz", &layer.y.layout).unwrap();
            let ones = b.tensor(
                "ones",
                batch,
                crate::ipu::Mapping::one_tile(0, batch as u64),
            );
            let ((dw, _), da) = dense::backward(
                &mut b,
                1,
                (&layer, &input),
                &dz_t,
                ones.unwrap(),
                Some(&layout),
            )
            .unwrap();
            let mut e = b.engine().unwrap();
            write_rows(&mut e, &input, &x);
            write_rows(&mut e, &layer.w, &w);
            write_rows(&mut e, &dz_t, &dz);
            e.run();
            let read = |a: &Act| super::super::read_rows(&e, a);
            let stream = |name: &str| RandomStream::new(SEED, fnv(name));
            let (act, wq, gq) = (recipe.activations, recipe.weights, recipe.gradients);
            // Y = X W.
            let qx = oracle_quant(
                act,
                &x,
                (batch, fan_in, false),
                stream("layer1.fwd.activations"),
            );
            let qw = oracle_quant(wq, &w, (fan_in, width, true), stream("layer1.fwd.weights"));
            let y = oracle_product((&qx, false), (&qw, false), (batch, fan_in, width));
            assert_eq!(bits(&read(&layer.y)), bits(&y), "{recipe:?} forward");
            // dW = X^T dZ.
            let qx = oracle_quant(
                act,
                &x,
                (batch, fan_in, true),
                stream("layer1.dw.activations"),
            );
            let qd = oracle_quant(gq, &dz, (batch, width, true), stream("layer1.dw.gradients"));
            let dw_o = oracle_product((&qx, true), (&qd, false), (fan_in, batch, width));
            assert_eq!(bits(&read(&dw)), bits(&dw_o), "{recipe:?} dW");
            // dA = dZ W^T.
            let qd = oracle_quant(
                gq,
                &dz,
                (batch, width, false),
                stream("layer1.da.gradients"),
            );
            let qw = oracle_quant(wq, &w, (fan_in, width, false), stream("layer1.da.weights"));
            let da_o = oracle_product((&qd, false), (&qw, true), (batch, width, fan_in));
            assert_eq!(bits(&read(&da.unwrap())), bits(&da_o), "{recipe:?} dA");
        }
    }

    /// A convolution's forward and weight-gradient products in every new
    /// mode's recipe against the oracle of its quantised patches.
    #[test]
    fn conv_products_equal_the_oracle_of_the_quantised_inputs() {
        use crate::model::shapes::Conv2d;
        let conv = Conv2d {
            in_channels: 3,
            out_channels: 5,
            kernel: (3, 3),
            stride: 1,
            padding: 1,
        };
        let (n, hw) = (2, 4);
        let shape = conv.on(n, (hw, hw)).unwrap();
        let spec = IpuSpec::new(IpuParams {
            tiles: 4,
            ..IpuParams::default()
        })
        .unwrap();
        let target = Target::single(spec);
        let (rows, patch, cout) = (shape.out_rows(), shape.patch(), 5);
        let x = values(shape.in_rows() * 3, 4, 2.0);
        let w = values(patch * cout, 5, 0.5);
        let dy = values(rows * cout, 6, 1e-2);
        for recipe in [Recipe::FP8, Recipe::MXFP8, Recipe::MXFP6, Recipe::MXFP4] {
            let (placement, link) = (Placement::Spread, standalone_link());
            let mut b = Builder::standalone(&target, &placement, &link, n);
            b.quant = Some(recipe);
            let layout = BlockLayout::grid(shape.in_rows(), 3, 4, 1, 4);
            let input = b.matrix("x", &layout).unwrap();
            let layer = super::super::conv2d::forward(&mut b, 2, &shape, &input, Cut::default());
            let layer = layer.unwrap();
            let dy_t = b.matrix("dy", &layer.y.layout).unwrap();
            let back = super::super::conv2d::backward(&mut b, 2, &shape, &layer, &dy_t, None);
            let (dw, _) = back.unwrap();
            let mut e = b.engine().unwrap();
            write_rows(&mut e, &input, &x);
            write_rows(&mut e, &layer.w, &w);
            write_rows(&mut e, &dy_t, &dy);
            e.run();
            let read = |a: &Act| super::super::read_rows(&e, a);
            let cols = read(&layer.cols);
            let stream = |name: &str| RandomStream::new(SEED, fnv(name));
            let (act, wq, gq) = (recipe.activations, recipe.weights, recipe.gradients);
            let qc = oracle_quant(
                act,
                &cols,
                (rows, patch, false),
                stream("layer2.fwd.activations"),
            );
            let qw = oracle_quant(wq, &w, (patch, cout, true), stream("layer2.fwd.weights"));
            let y = oracle_product((&qc, false), (&qw, false), (rows, patch, cout));
            assert_eq!(bits(&read(&layer.y)), bits(&y), "{recipe:?} forward");
            let qc = oracle_quant(
                act,
                &cols,
                (rows, patch, true),
                stream("layer2.dw.activations"),
            );
            let qd = oracle_quant(gq, &dy, (rows, cout, true), stream("layer2.dw.gradients"));
            let dw_o = oracle_product((&qc, true), (&qd, false), (patch, rows, cout));
            assert_eq!(bits(&read(&dw)), bits(&dw_o), "{recipe:?} dW");
        }
    }
}
