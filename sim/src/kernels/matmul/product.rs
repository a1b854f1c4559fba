//! A product on the tiles, as its [`ProductPlan`] cuts it: one exchange
//! gathers each part's operands, one compute set runs a vertex per part
//! (its leaves' [`gemm`](super::gemm)s and their subtree); with a split
//! reduction, one exchange sends each part's partial pieces to their
//! tiles and one compute set adds them in the tree's top levels.

use core::ops::Range;
use std::sync::Arc;

use tessera_core::fp::{f16, f32_to_half_slice, half_to_f32_slice};

use super::leaves::{gemm_leaves, tree_sum};
use super::{Accumulator, BlockLayout, GemmShape, Operand, Output, ProductPlan, gather_copies};
use crate::ipu::{
    Access, Codelet, DType, Encoding, FieldSpec, Graph, GraphError, Interval, IpuSpec, Kernel,
    Mapping, ProductPrice, Program, TensorId, TensorSlice, Tile, VertexCycles, VertexIo,
};

/// Rounds `c` to f16 values if `output` says so: the slice kernels, bitwise
/// `HalfFloat::from_f32` then `to_f32` element by element (the scalar
/// round trip took a tenth of a 16.16 training run).
fn finish(output: Output, c: &mut [f32]) {
    if output == Output::F16 {
        let mut half = [f16::ZERO; 512];
        for chunk in c.chunks_mut(half.len()) {
            let h = &mut half[..chunk.len()];
            f32_to_half_slice(chunk, h);
            half_to_f32_slice(h, chunk);
        }
    }
}

/// One part of a block: fields `a`, `b` (read), `c` (written): the block
/// (rounded by `output`) or, with `output == None`, the f32 partial of
/// its leaves, cut into column pieces of `col_pieces` widths if given.
#[derive(Debug)]
struct MatMul {
    shape: GemmShape,
    /// Leaf bounds within the part's reduction.
    bounds: Vec<usize>,
    price: ProductPrice,
    acc: Accumulator,
    output: Option<Output>,
    col_pieces: Option<Vec<usize>>,
    fields: [FieldSpec; 3],
}

impl Codelet for MatMul {
    fn name(&self) -> &str {
        "matmul"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    // The AMP unit accumulates a part's whole reduction: the leaves'
    // separate sums are the simulator's way to fix the order, not work.
    // Inputs the units do not take are converted first, every element of
    // both operands the vertex reads.
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let workers = spec.workers_per_tile();
        let convert = self.price.convert.map_or(0, |k| {
            let n = lens[0].saturating_add(lens[1]);
            spec.costs().get(k).multi_thread_cycles(n, workers)
        });
        let cost = spec.costs().get(self.price.matmul);
        VertexCycles::AllWorkers(
            convert.saturating_add(cost.multi_thread_cycles(self.shape.flops(), workers)),
        )
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let [a, b, c] = io.many([0, 1, 2]);
        let (a, b, c) = (
            a.into_slice::<f32>(),
            b.into_slice::<f32>(),
            c.into_slice::<f32>(),
        );
        match &self.col_pieces {
            None => gemm_leaves(self.shape, &self.bounds, (a, b), c, self.acc),
            Some(widths) => {
                let mut dense = vec![0.0; c.len()];
                gemm_leaves(self.shape, &self.bounds, (a, b), &mut dense, self.acc);
                let (mut at, mut col) = (0, 0);
                for &w in widths {
                    for row in dense.chunks_exact(self.shape.n) {
                        c[at..at + w].copy_from_slice(&row[col..col + w]);
                        at += w;
                    }
                    col += w;
                }
            }
        }
        if let Some(output) = self.output {
            finish(output, c);
        }
    }
}

/// The parts' partials of one piece added in the tree's top levels:
/// fields `own` (part `own`'s partial, read), `others` (the other parts',
/// in part order, read), `c` (written, rounded by `output`).
#[derive(Debug)]
struct ReduceParts {
    parts: usize,
    own: usize,
    acc: Accumulator,
    output: Output,
    fields: [FieldSpec; 3],
}

impl Codelet for ReduceParts {
    fn name(&self) -> &str {
        "matmul_reduce"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::Combine);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[1], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let own = io.read::<f32>(0).to_vec();
        let others = io.read::<f32>(1);
        let len = own.len();
        let parts = (0..self.parts)
            .map(|p| match p.cmp(&self.own) {
                core::cmp::Ordering::Equal => own.clone(),
                core::cmp::Ordering::Less => others[p * len..(p + 1) * len].to_vec(),
                core::cmp::Ordering::Greater => others[(p - 1) * len..p * len].to_vec(),
            })
            .collect();
        let sum = tree_sum(parts, self.acc);
        let c = io.write::<f32>(2);
        c.copy_from_slice(&sum);
        finish(self.output, c);
    }
}

/// Codelets shared by equal vertices, by key.
struct Shared<K>(Vec<(K, Arc<dyn Codelet>)>);

impl<K: PartialEq> Shared<K> {
    fn get(&mut self, key: K, make: impl FnOnce() -> Arc<dyn Codelet>) -> Arc<dyn Codelet> {
        if let Some((_, c)) = self.0.iter().find(|(k, _)| *k == key) {
            return c.clone();
        }
        let c = make();
        self.0.push((key, c.clone()));
        c
    }
}

fn fields3() -> [FieldSpec; 3] {
    [
        FieldSpec::new(DType::F32, Access::Read),
        FieldSpec::new(DType::F32, Access::Read),
        FieldSpec::new(DType::F32, Access::Write),
    ]
}

/// The stored sub-matrix of `op` that a part needs: rows and columns of
/// the stored (untransposed) matrix, given the part's rows (or columns)
/// of `op(X)` and its reduction range.
fn stored(
    op: &Operand,
    outer: &Range<usize>,
    k: &Range<usize>,
    left: bool,
) -> (Range<usize>, Range<usize>) {
    // op(A) is outer x k, op(B) is k x outer; stored transposed if so.
    let k_is_rows = op.transposed == left;
    if k_is_rows {
        (k.clone(), outer.clone())
    } else {
        (outer.clone(), k.clone())
    }
}

/// The field of operand `op`'s sub-matrix `rows x cols` on `tile`: read
/// in place if it is one block of the operand held there, else gathered
/// into a new staging tensor `name`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn operand_field(
    graph: &mut Graph,
    copies: &mut Vec<(TensorSlice, TensorSlice)>,
    name: &str,
    op: &Operand,
    rows: Range<usize>,
    cols: Range<usize>,
    tile: Tile,
) -> Result<TensorSlice, GraphError> {
    // The layout's tiles are a plan: the tensor's mapping decides.
    let held = |e: &Range<u64>| {
        graph
            .mapping(op.tensor)
            .iter()
            .any(|i| i.tile == tile && i.range.start <= e.start && e.end <= i.range.end)
    };
    if let Some(elements) = op.layout.block_on(&rows, &cols, tile).filter(held) {
        return Ok(TensorSlice::new(op.tensor, elements));
    }
    let len = (rows.len() * cols.len()) as u64;
    let staged = graph.add_tensor(name, DType::F32, &[len], Mapping::one_tile(tile, len))?;
    // A quantised operand arrives in its encoding's bytes.
    if let Some(encoding) = graph.held(op.tensor) {
        graph.hold(staged, encoding);
    }
    if graph.is_sizing() {
        let runs = op.layout.runs(&rows, &cols);
        graph.count_received_runs(tile, runs);
    } else {
        gather_copies(copies, op.tensor, &op.layout, rows, cols, staged, 0);
    }
    Ok(graph.all(staged))
}

/// Checks the operands' shapes against the plan's.
fn check(plan: &ProductPlan, a: &Operand, b: &Operand) -> Result<(), GraphError> {
    let dims = |l: &BlockLayout, t: bool| {
        if t {
            (l.cols(), l.rows())
        } else {
            (l.rows(), l.cols())
        }
    };
    let (m, k) = dims(&a.layout, a.transposed);
    let (kb, n) = dims(&b.layout, b.transposed);
    let out = plan.output();
    if (m, k, n) != plan.dims() || kb != k || out.rows() != m || out.cols() != n {
        return Err(GraphError::CopyMismatch { copy: 0 });
    }
    Ok(())
}

/// Adds `C = op(A) op(B)` into `c` (an f32 tensor laid out as
/// `plan.output()`), cut as `plan` says (see the module docs of `kernels::matmul`).
/// `price` (a [`Kernel`] such as [`Kernel::MatmulF16`], or an
/// [`IpuSpec::product`]'s price with its conversion) prices the products,
/// `acc` is where they accumulate; `output` says whether the result is
/// rounded to f16. The result is bitwise
/// [`gemm_leaves`](super::gemm_leaves) over [`leaves`](fn@super::leaves) of
/// the whole matrices in `acc` (with [`Accumulator::F32`],
/// [`gemm_tree`](super::gemm_tree)), then rounded, whatever the plan.
///
/// # Errors
/// [`GraphError::CopyMismatch`] if the shapes do not agree, and the
/// graph's errors.
///
/// ```
/// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Kernel, Target};
/// use tessera_sim::kernels::matmul::{Accumulator, BlockLayout, Operand, Output, ProductPlan, matmul};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// let mut g = Graph::new(Target::single(ipu));
/// let (al, bl) = (BlockLayout::dense(2, 3, 0), BlockLayout::dense(3, 2, 1));
/// let a = g.add_tensor("a", DType::F32, &[6], al.mapping())?;
/// let b = g.add_tensor("b", DType::F32, &[6], bl.mapping())?;
/// let plan = ProductPlan::unsplit(&BlockLayout::dense(2, 2, 0), 3);
/// let c = g.add_tensor("c", DType::F32, &[4], plan.output().mapping())?;
/// let a_op = Operand { tensor: a, layout: al, transposed: false };
/// let b_op = Operand { tensor: b, layout: bl, transposed: false };
/// let price = (Kernel::MatmulF32, Accumulator::F32);
/// let program = matmul(&mut g, "ab", &a_op, &b_op, c, &plan, price, Output::F32)?;
/// let mut engine = Engine::new(g, program, EngineOptions::default())?;
/// engine.write_tensor(a, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// engine.write_tensor(b, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0])?;
/// engine.run();
/// assert_eq!(engine.read_tensor::<f32>(c)?, [4.0, 5.0, 10.0, 11.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// The operands, the output and the arithmetic are each one argument.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    graph: &mut Graph,
    name: &str,
    a: &Operand,
    b: &Operand,
    c: TensorId,
    plan: &ProductPlan,
    (price, acc): (impl Into<ProductPrice>, Accumulator),
    output: Output,
) -> Result<Program, GraphError> {
    check(plan, a, b)?;
    let price = price.into();
    let pk = plan.k_parts();
    let mut copies = Vec::new();
    let cs = graph.add_compute_set(name);
    let partials = if pk > 1 {
        Some(partials(graph, name, plan, acc)?)
    } else {
        None
    };
    let mut codelets = Shared(Vec::new());
    for (index, block) in plan.blocks().iter().enumerate() {
        let (r, w) = (block.rows.len(), block.cols.len());
        if r * w == 0 {
            continue;
        }
        for q in 0..pk {
            let tile = block.tiles[q];
            let (kr, bounds) = plan.part_k(q);
            let (ar, ac) = stored(a, &block.rows, &kr, true);
            let (br, bc) = stored(b, &block.cols, &kr, false);
            let fa = operand_field(
                graph,
                &mut copies,
                &format!("{name}.a{index}.{q}"),
                a,
                ar,
                ac,
                tile,
            )?;
            let fb = operand_field(
                graph,
                &mut copies,
                &format!("{name}.b{index}.{q}"),
                b,
                br,
                bc,
                tile,
            )?;
            let out = match &partials {
                Some((p, starts)) => {
                    let at = starts[index] + (q * r * w) as u64;
                    TensorSlice::new(*p, at..at + (r * w) as u64)
                }
                None => TensorSlice::new(c, piece_of(plan, &block.pieces[0], tile)),
            };
            let shape = GemmShape {
                m: r,
                k: kr.len(),
                n: w,
                a_transposed: a.transposed,
                b_transposed: b.transposed,
            };
            let col_pieces = (pk > 1 && !plan.by_rows())
                .then(|| block.pieces.iter().map(|p| p.1.len()).collect::<Vec<_>>());
            let final_output = (pk == 1).then_some(output);
            let key = (shape, bounds.clone(), final_output, col_pieces.clone());
            let codelet = codelets.get(key, || {
                Arc::new(MatMul {
                    shape,
                    bounds,
                    price,
                    acc,
                    output: final_output,
                    col_pieces,
                    fields: fields3(),
                })
            });
            graph.add_vertex(cs, tile, codelet, &[fa, fb, out])?;
        }
    }
    let mut programs = Vec::new();
    if !copies.is_empty() {
        programs.push(Program::Exchange(
            graph.add_exchange(&format!("{name}.gather"), &copies)?,
        ));
    }
    programs.push(Program::Execute(cs));
    if let Some((p, starts)) = partials {
        programs.extend(reduce(graph, name, plan, (p, &starts), c, (acc, output))?);
    }
    Ok(match programs.len() {
        1 => programs.pop().expect("one program"),
        _ => Program::sequence(programs),
    })
}

/// The elements of `C` of a piece on `tile`.
fn piece_of(plan: &ProductPlan, piece: &(Range<usize>, Range<usize>), tile: Tile) -> Range<u64> {
    plan.output()
        .block_on(&piece.0, &piece.1, tile)
        .expect("a plan's piece is a block of its output on the piece's tile")
}

/// The partials tensor: the blocks' `k_parts` partials one after the
/// other, each on its part's tile; where each block's start.
fn partials(
    graph: &mut Graph,
    name: &str,
    plan: &ProductPlan,
    acc: Accumulator,
) -> Result<(TensorId, Vec<u64>), GraphError> {
    let mut intervals = Vec::new();
    let mut starts = Vec::new();
    let mut at = 0u64;
    for block in plan.blocks() {
        let len = (block.rows.len() * block.cols.len()) as u64;
        starts.push(at);
        for &tile in &block.tiles {
            if len > 0 {
                intervals.push(Interval::new(tile, at..at + len));
            }
            at += len;
        }
    }
    let t = graph.add_tensor(
        &format!("{name}.partials"),
        DType::F32,
        &[at],
        Mapping::Explicit(intervals),
    )?;
    hold_partials(graph, t, acc);
    Ok((t, starts))
}

/// Holds a tensor of a product's partials as the accumulator holds them:
/// an unpromoted f16 accumulator's partials are f16 values (the AMP
/// unit's half partials), two bytes each in tile memory and on the
/// exchange; f32 and promoted partials keep four.
fn hold_partials(graph: &mut Graph, t: TensorId, acc: Accumulator) {
    if acc == Accumulator::F16 {
        graph.hold(t, Encoding::F16);
    }
}

/// A piece of a reduction: its tile, length, part, its partial's start in
/// each part, and its elements of `C`.
type Piece = (Tile, u64, usize, Vec<u64>, Range<u64>);

/// Each piece's partials from the other parts, staged on its tile, added
/// there into `c`.
fn reduce(
    graph: &mut Graph,
    name: &str,
    plan: &ProductPlan,
    (partials, block_starts): (TensorId, &[u64]),
    c: TensorId,
    (acc, output): (Accumulator, Output),
) -> Result<Vec<Program>, GraphError> {
    let pk = plan.k_parts();
    // Each piece: its tile, length, part, its partial's start in each part,
    // and its elements of `C`.
    let mut pieces: Vec<Piece> = Vec::new();
    let mut at = 0u64;
    for (index, block) in plan.blocks().iter().enumerate() {
        let blen = (block.rows.len() * block.cols.len()) as u64;
        let mut offset = 0u64;
        for (q, piece) in block.pieces.iter().enumerate() {
            let len = (piece.0.len() * piece.1.len()) as u64;
            if len > 0 {
                let starts = (0..pk)
                    .map(|p| block_starts[index] + p as u64 * blen + offset)
                    .collect();
                pieces.push((
                    block.tiles[q],
                    len,
                    q,
                    starts,
                    piece_of(plan, piece, block.tiles[q]),
                ));
            }
            offset += len;
            at += len * (pk as u64 - 1);
        }
    }
    let mut intervals = Vec::new();
    let mut staged_at = 0u64;
    for (tile, len, ..) in &pieces {
        let n = len * (pk as u64 - 1);
        intervals.push(Interval::new(*tile, staged_at..staged_at + n));
        staged_at += n;
    }
    debug_assert_eq!(staged_at, at);
    let staging = graph.add_tensor(
        &format!("{name}.reduce"),
        DType::F32,
        &[staged_at],
        Mapping::Explicit(intervals),
    )?;
    hold_partials(graph, staging, acc);
    let cs = graph.add_compute_set(&format!("{name}.reduce"));
    let mut copies = Vec::new();
    let mut codelets = Shared(Vec::new());
    let mut staged_at = 0u64;
    for (tile, len, q, starts, out) in pieces {
        let mut to = staged_at;
        for (p, &s) in starts.iter().enumerate() {
            if p == q {
                continue;
            }
            if graph.is_sizing() {
                graph.count_received_runs(tile, 1);
            } else {
                copies.push((
                    TensorSlice::new(partials, s..s + len),
                    TensorSlice::new(staging, to..to + len),
                ));
            }
            to += len;
        }
        let codelet = codelets.get(q, || {
            Arc::new(ReduceParts {
                parts: pk,
                own: q,
                acc,
                output,
                fields: fields3(),
            })
        });
        let fields = [
            TensorSlice::new(partials, starts[q]..starts[q] + len),
            TensorSlice::new(staging, staged_at..to),
            TensorSlice::new(c, out),
        ];
        graph.add_vertex(cs, tile, codelet, &fields)?;
        staged_at = to;
    }
    let mut programs = Vec::new();
    if !copies.is_empty() {
        programs.push(Program::Exchange(
            graph.add_exchange(&format!("{name}.partials"), &copies)?,
        ));
    }
    programs.push(Program::Execute(cs));
    Ok(programs)
}
