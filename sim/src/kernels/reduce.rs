//! Within-IPU reductions of a distributed tensor, bitwise equal to one
//! call of the core reduction: each tile reduces its block-aligned runs
//! (and the halo blocks it owns) to an exact partial, the partials go up
//! a [`tree`] over the exchange, and the total is left on the
//! root tile, or broadcast to every tile that holds the tensor (an
//! all-reduce of the per-tile partials).
//!
//! [`Reduction::value`] reads the total as f32: bitwise
//! [`sum_of_squares`](tessera_core::kernels::sum_of_squares) (or
//! `dot`) of the whole tensor, f32, f16 or bf16, for any mapping and tile
//! count.

use core::marker::PhantomData;
use std::sync::Arc;

use tessera_core::fp::{Element, bf16, f16};
use tessera_core::kernels::{self, ExactSum};

use super::tree::{self, LIMBS};
use super::{BlockPlan, distinct};
use crate::ipu::{
    Access, AccessError, Codelet, DType, Engine, FieldSpec, Graph, GraphError, IpuSpec, Kernel,
    Program, Scalar, TensorId, TensorSlice, Tile, VertexCycles, VertexIo,
};

/// What to reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceKind {
    /// The sum of squares of the tensor.
    SumOfSquares,
    /// The dot product with another tensor of the same type and mapping.
    Dot(TensorId),
}

/// The element types the reductions run on: the core kernels' formats.
trait Reducible: Scalar + Element {}

impl<T: Scalar + Element> Reducible for T {}

/// One run's exact partial.
#[derive(Debug)]
struct Partial<T> {
    dot: bool,
    fields: Vec<FieldSpec>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Reducible> Codelet for Partial<T> {
    fn name(&self) -> &str {
        if self.dot {
            "reduce.dot"
        } else {
            "reduce.sum_of_squares"
        }
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::ReducePartial);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let sum = if self.dot {
            let sum = kernels::dot_partial(io.read::<T>(0), io.read::<T>(1));
            io.write::<i64>(2).copy_from_slice(&sum.limbs());
            return;
        } else {
            kernels::sum_of_squares_partial(io.read::<T>(0))
        };
        io.write::<i64>(1).copy_from_slice(&sum.limbs());
    }
}

/// A reduction built by [`reduce`].
#[derive(Clone, Debug)]
pub struct Reduction {
    /// The program.
    pub program: Program,
    /// The rows of partials; row 0 (on the root tile) holds the total.
    pub rows: TensorId,
    /// The total on every tile that holds the tensor (if broadcast).
    pub totals: Option<TensorId>,
    /// The tiles that hold the tensor.
    pub tiles: Vec<Tile>,
}

impl Reduction {
    /// The exact total after a run.
    ///
    /// # Errors
    /// None in practice (the rows are `i64`).
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Target};
    /// # use tessera_sim::kernels::{ReduceKind, reduce};
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// // 1000 f32 over 4 tiles in grains of 100: blocks straddle tiles.
    /// let spec = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// let grain = Mapping::linear(NonZeroU64::new(100).unwrap());
    /// let x = g.add_tensor("x", DType::F32, &[1000], grain).unwrap();
    /// let r = reduce(&mut g, "ss", x, ReduceKind::SumOfSquares, 2, false).unwrap();
    /// let mut e = Engine::new(g, r.program.clone(), EngineOptions::default()).unwrap();
    /// let values: Vec<f32> = (0..1000).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
    /// e.write_tensor(x, &values).unwrap();
    /// e.run();
    /// // The squares are multiples of 1/4: their exact sum is an f64 sum.
    /// let sum: f64 = values.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    /// let exact = r.exact(&e).unwrap();
    /// assert_eq!(f64::from(exact.to_f32()), sum);
    /// assert_eq!(exact.to_f32(), r.value(&e).unwrap());
    /// ```
    pub fn exact(&self, engine: &Engine) -> Result<ExactSum, AccessError> {
        let rows = engine.read_tensor::<i64>(self.rows)?;
        Ok(ExactSum::from_limbs(
            rows[..ExactSum::LIMBS].try_into().expect("limbs"),
        ))
    }

    /// The total rounded to f32, as the core kernel returns it.
    ///
    /// # Errors
    /// None in practice.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Target};
    /// # use tessera_sim::kernels::{ReduceKind, reduce};
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// // 1000 f32 over 4 tiles in grains of 100: blocks straddle tiles.
    /// let spec = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// let grain = Mapping::linear(NonZeroU64::new(100).unwrap());
    /// let x = g.add_tensor("x", DType::F32, &[1000], grain).unwrap();
    /// let r = reduce(&mut g, "ss", x, ReduceKind::SumOfSquares, 2, false).unwrap();
    /// let mut e = Engine::new(g, r.program.clone(), EngineOptions::default()).unwrap();
    /// let values: Vec<f32> = (0..1000).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
    /// e.write_tensor(x, &values).unwrap();
    /// e.run();
    /// // Bitwise one call of the core kernel.
    /// let expected = tessera_core::kernels::sum_of_squares(&values);
    /// assert_eq!(r.value(&e).unwrap().to_bits(), expected.to_bits());
    /// ```
    pub fn value(&self, engine: &Engine) -> Result<f32, AccessError> {
        Ok(self.exact(engine)?.to_f32())
    }
}

/// Adds the reduction `kind` of tensor `x` (f32, f16 or bf16): per-tile
/// exact partials, a tree with fan-in `fan_in` (at least 2), and if
/// `broadcast`, the total copied to every tile that holds `x`.
///
/// # Errors
/// [`GraphError::FieldType`] for an i64 tensor or a dot with another
/// type, [`GraphError::MappingMismatch`] for a dot with a tensor mapped
/// differently, and the graph's errors.
///
/// # Panics
/// If `fan_in < 2`.
///
/// ```
/// use core::num::NonZeroU64;
/// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, GraphError, Mapping, Target};
/// use tessera_sim::kernels::{ReduceKind, reduce};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 3, ..IpuParams::default() }).unwrap();
/// let mut g = Graph::new(Target::single(spec));
/// let grain = Mapping::linear(NonZeroU64::new(128).unwrap());
/// let x = g.add_tensor("x", DType::F32, &[600], grain.clone()).unwrap();
/// let y = g.add_tensor("y", DType::F32, &[600], grain).unwrap();
/// // x . y, the total broadcast to the 3 tiles that hold x.
/// let r = reduce(&mut g, "dot", x, ReduceKind::Dot(y), 2, true).unwrap();
/// assert_eq!(r.tiles, [0, 1, 2]);
/// let totals = r.totals.unwrap();
/// // A dot with a tensor of another type is refused.
/// let h = g.add_tensor("h", DType::F16, &[600], Mapping::one_tile(0, 600)).unwrap();
/// let err = reduce(&mut g, "bad", x, ReduceKind::Dot(h), 2, false).unwrap_err();
/// assert!(matches!(err, GraphError::FieldType { got: DType::F16, .. }));
///
/// let mut e = Engine::new(g, r.program.clone(), EngineOptions::default()).unwrap();
/// let xs: Vec<f32> = (0..600).map(|i| i as f32 / 7.0).collect();
/// let ys: Vec<f32> = (0..600).map(|i| 1.0 - i as f32 / 300.0).collect();
/// e.write_tensor(x, &xs).unwrap();
/// e.write_tensor(y, &ys).unwrap();
/// e.run();
/// let dot = tessera_core::kernels::dot(&xs, &ys);
/// assert_eq!(r.value(&e).unwrap().to_bits(), dot.to_bits());
/// // Every tile's copy holds the same exact total as the root's row.
/// let limbs = e.read_tensor::<i64>(totals).unwrap();
/// assert_eq!(limbs.len(), 3 * tessera_core::kernels::ExactSum::LIMBS);
/// assert!(limbs.chunks(limbs.len() / 3).all(|c| c == r.exact(&e).unwrap().limbs()));
/// ```
pub fn reduce(
    graph: &mut Graph,
    name: &str,
    x: TensorId,
    kind: ReduceKind,
    fan_in: usize,
    broadcast: bool,
) -> Result<Reduction, GraphError> {
    let dtype = graph.dtype(x);
    let mapping = graph.mapping(x);
    let mut inputs = vec![x];
    if let ReduceKind::Dot(y) = kind {
        if graph.dtype(y) != dtype {
            return Err(GraphError::FieldType {
                field: 1,
                expected: dtype,
                got: graph.dtype(y),
            });
        }
        if graph.mapping(y) != mapping {
            return Err(GraphError::MappingMismatch { tensor: y });
        }
        inputs.push(y);
    }
    let dot = inputs.len() == 2;
    let codelet: Arc<dyn Codelet> = match dtype {
        DType::F32 => partial::<f32>(dot),
        DType::F16 => partial::<f16>(dot),
        DType::Bf16 => partial::<bf16>(dot),
        DType::I64 => {
            return Err(GraphError::FieldType {
                field: 0,
                expected: DType::F32,
                got: DType::I64,
            });
        }
    };
    let plan = BlockPlan::new(graph.len(x), &mapping);
    let tiles = distinct(mapping.iter().map(|i| i.tile));
    let mut programs = Vec::new();
    let halos = plan.gather_halos(graph, name, &inputs)?;
    if let Some((_, p)) = &halos {
        programs.push(p.clone());
    }
    let row_tiles: Vec<Tile> = plan.runs().map(|(t, _)| t).collect();
    if row_tiles.is_empty() {
        // An empty tensor: one zero row on tile 0.
        let t = tree::build(graph, name, &[0], 1, fan_in.max(2))?;
        return Ok(Reduction {
            program: Program::Sequence(programs),
            rows: t.rows,
            totals: None,
            tiles,
        });
    }
    let tree = tree::build(graph, name, &row_tiles, 1, fan_in)?;
    let cs = graph.add_compute_set(&format!("{name}.partials"));
    let mut row = 0u64;
    let out = |row: u64| TensorSlice::new(tree.rows, row * LIMBS..(row + 1) * LIMBS);
    for (tile, range) in &plan.aligned {
        let mut fields: Vec<TensorSlice> = inputs
            .iter()
            .map(|&t| TensorSlice::new(t, range.clone()))
            .collect();
        fields.push(out(row));
        graph.add_vertex(cs, *tile, codelet.clone(), &fields)?;
        row += 1;
    }
    if let Some((h, _)) = &halos {
        let mut at = 0;
        for (tile, range) in &plan.straddling {
            let n = range.end - range.start;
            let mut fields: Vec<TensorSlice> =
                h.iter().map(|&t| TensorSlice::new(t, at..at + n)).collect();
            fields.push(out(row));
            graph.add_vertex(cs, *tile, codelet.clone(), &fields)?;
            row += 1;
            at += n;
        }
    }
    programs.push(Program::Execute(cs));
    programs.push(tree.program.clone());
    let totals = if broadcast {
        let (totals, p) = tree::broadcast(graph, name, &tree, 1, &tiles)?;
        programs.push(p);
        Some(totals)
    } else {
        None
    };
    Ok(Reduction {
        program: Program::Sequence(programs),
        rows: tree.rows,
        totals,
        tiles,
    })
}

fn partial<T: Reducible>(dot: bool) -> Arc<dyn Codelet> {
    let mut fields = vec![FieldSpec::new(T::DTYPE, Access::Read)];
    if dot {
        fields.push(FieldSpec::new(T::DTYPE, Access::Read));
    }
    fields.push(FieldSpec::new(DType::I64, Access::Write));
    Arc::new(Partial::<T> {
        dot,
        fields,
        _t: PhantomData,
    })
}
