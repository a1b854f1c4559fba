//! A tile-parallel LAMB step, bitwise equal to one call of
//! [`Lamb::step`](tessera_core::optim::Lamb::step) over the whole tensor.
//!
//! The program, for a parameter whose weights, gradients and two state
//! tensors are mapped alike:
//!
//! 1. (only if the mapping splits a block of 256) an exchange gathers
//!    each straddling block into halo buffers on its owner tile
//!    ([`BlockPlan`]);
//! 2. compute set `NAME.partials`: phase 1 on every block-aligned run and
//!    halo block ([`Lamb::partials`]), each writing its three exact sums
//!    into a row;
//! 3. the rows go up a [`tree`] of exchanges and merges to
//!    the root tile;
//! 4. an exchange broadcasts the total to every tile holding the
//!    parameter;
//! 5. compute set `NAME.apply`: phase 2 on every interval ([`Lamb::apply`]);
//! 6. compute set `NAME.advance`: each tile increments its step counter.
//!
//! The step number `t` lives on the device: a counter per tile (the
//! [`LambProgram::steps`] tensor) holds the steps applied so far, so a
//! freshly built engine applies step 1 and every run (or iteration of a
//! [`Program::Repeat`]) the next. Stochastic rounding of 16-bit weights or
//! state uses [`Precision::weight_stream`](tessera_core::optim::Precision::weight_stream)
//! of the options' seed: give every replica the same seed so replicated
//! weights stay identical.

use core::marker::PhantomData;
use std::sync::Arc;

use tessera_core::fp::Element;
use tessera_core::kernels::ExactSum;
use tessera_core::optim::{Lamb, Param, Partials, Precision, Step};

use super::tree::{self, LIMBS};
use super::{BlockPlan, distinct};
use crate::ipu::{
    Access, Codelet, DType, ExchangeId, FieldSpec, Graph, GraphError, Interval, IpuSpec, Kernel,
    Mapping, Program, Scalar, TensorId, TensorSlice, Tile, VertexCycles, VertexIo,
};

/// Settings of a tile-parallel LAMB step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LambOptions {
    /// The optimizer.
    pub lamb: Lamb,
    /// Storage rounding and its seed.
    pub precision: Precision,
    /// The parameter's id (addresses its random bits).
    pub id: u64,
    /// Every gradient is multiplied by this on load ([`Step::grad_scale`]).
    pub grad_scale: f32,
    /// The fan-in of the tree of partial statistics (at least 2).
    pub fan_in: usize,
}

impl LambOptions {
    /// `lamb` with the default precision, id 0, unscaled gradients and a
    /// fan-in of 8.
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig, Precision};
    /// use tessera_sim::kernels::lamb::LambOptions;
    ///
    /// let lamb = Lamb::new(LambConfig::default()).unwrap();
    /// let o = LambOptions::new(lamb);
    /// assert_eq!((o.id, o.grad_scale, o.fan_in), (0, 1.0, 8));
    /// assert_eq!(o.precision, Precision::default());
    /// ```
    #[must_use]
    pub fn new(lamb: Lamb) -> Self {
        Self {
            lamb,
            precision: Precision::default(),
            id: 0,
            grad_scale: 1.0,
            fan_in: 8,
        }
    }
}

/// The program [`lamb`] built and the tensors it added.
#[derive(Clone, Debug)]
pub struct LambProgram {
    /// One step.
    pub program: Program,
    /// Steps applied so far, one `i64` per tile that holds the parameter
    /// (all equal).
    pub steps: TensorId,
    /// The broadcast total statistics: per tile, three exact sums
    /// (`w`, `g`, `u`) of [`ExactSum::LIMBS`] limbs.
    pub totals: TensorId,
    /// The tiles that hold the parameter.
    pub tiles: Vec<Tile>,
    /// The halo exchange, if the mapping splits blocks.
    pub halo: Option<ExchangeId>,
}

/// The step a tile's counter stands for (the next one).
fn step(steps: i64, grad_scale: f32) -> Step {
    let done = u64::try_from(steps).unwrap_or(0);
    Step::after(done).with_grad_scale(grad_scale)
}

/// The element types of a LAMB codelet (weights, gradients, state).
type Types<W, G, S> = PhantomData<fn() -> (W, G, S)>;

/// Phase 1 over one run.
#[derive(Debug)]
struct LambPartials<W, G, S> {
    lamb: Lamb,
    grad_scale: f32,
    id: u64,
    /// The run's position in the tensor if its fields are a halo.
    offset: Option<u64>,
    fields: [FieldSpec; 6],
    _t: Types<W, G, S>,
}

impl<W, G, S> Codelet for LambPartials<W, G, S>
where
    W: Element + Scalar,
    G: Element + Scalar,
    S: Element + Scalar,
{
    fn name(&self) -> &str {
        "lamb.partials"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::LambPartials);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let offset = self.offset.unwrap_or_else(|| io.start(0));
        let [w, g, m, v, out, steps] = io.many([0, 1, 2, 3, 4, 5]);
        let step = step(steps.into_slice::<i64>()[0], self.grad_scale);
        let p = Param {
            weights: w.into_slice::<W>(),
            grads: &*g.into_slice::<G>(),
            state: [m.into_slice::<S>(), v.into_slice::<S>()],
            id: self.id,
            offset,
        };
        let partials = self.lamb.partials(step, &p);
        out.into_slice::<i64>()
            .copy_from_slice(partials.limbs().as_flattened());
    }
}

/// Phase 2 over one interval.
#[derive(Debug)]
struct LambApply<W, G, S> {
    lamb: Lamb,
    precision: Precision,
    grad_scale: f32,
    id: u64,
    fields: [FieldSpec; 6],
    _t: Types<W, G, S>,
}

impl<W, G, S> Codelet for LambApply<W, G, S>
where
    W: Element + Scalar,
    G: Element + Scalar,
    S: Element + Scalar,
{
    fn name(&self) -> &str {
        "lamb.apply"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::LambApply);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let offset = io.start(0);
        let [w, g, m, v, totals, steps] = io.many([0, 1, 2, 3, 4, 5]);
        let step = step(steps.into_slice::<i64>()[0], self.grad_scale);
        let totals = totals_of(totals.into_slice::<i64>());
        let mut p = Param {
            weights: w.into_slice::<W>(),
            grads: &*g.into_slice::<G>(),
            state: [m.into_slice::<S>(), v.into_slice::<S>()],
            id: self.id,
            offset,
        };
        self.lamb.apply(step, &totals, &self.precision, &mut p);
    }
}

/// [`Partials`] from 39 limbs.
fn totals_of(limbs: &[i64]) -> Partials {
    let sum = |k: usize| -> [i64; ExactSum::LIMBS] {
        limbs[k * ExactSum::LIMBS..(k + 1) * ExactSum::LIMBS]
            .try_into()
            .expect("limbs")
    };
    Partials::from_limbs([sum(0), sum(1), sum(2)])
}

/// Increments a tile's step counter.
#[derive(Debug)]
struct Advance {
    fields: [FieldSpec; 1],
}

impl Codelet for Advance {
    fn name(&self) -> &str {
        "lamb.advance"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        VertexCycles::Worker(spec.costs().get(Kernel::Scalar).thread_cycles(lens[0]))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        io.write::<i64>(0)[0] += 1;
    }
}

/// Adds a LAMB step over `weights` (type `W`), `grads` (`G`) and the
/// state `[m, v]` (`S`), all mapped alike (see the [module docs](self)).
/// After `k` runs the tensors are bitwise what `k` calls of
/// [`Lamb::step`] (steps `1..=k`, the same precision and id, offset 0)
/// give on the whole tensors.
///
/// # Errors
/// [`GraphError::FieldType`] if a tensor's type is not its type
/// parameter's, [`GraphError::MappingMismatch`] if the tensors are mapped
/// differently, and the graph's errors.
///
/// # Panics
/// If `options.fan_in < 2`.
///
/// ```
/// use core::num::NonZeroU64;
/// use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
/// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, GraphError, Mapping, Program, Target};
/// use tessera_sim::kernels::lamb::{LambOptions, lamb};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let opt = Lamb::new(LambConfig { weight_decay: 0.01, ..LambConfig::default() }).unwrap();
/// let n = 600;
/// let w0: Vec<f32> = (0..n).map(|i| (i as f32 * 0.1).sin()).collect();
/// let g: Vec<f32> = (0..n).map(|i| (i as f32 * 0.3).cos() * 0.01).collect();
///
/// // Three tiles in grains of 100: blocks of 256 straddle tiles.
/// let spec = IpuSpec::new(IpuParams { tiles: 3, ..IpuParams::default() }).unwrap();
/// let mut graph = Graph::new(Target::single(spec));
/// let wt = graph.add_tensor("w", DType::F32, &[n as u64], Mapping::linear(NonZeroU64::new(100).unwrap())).unwrap();
/// let [gt, mt, vt] = ["g", "m", "v"].map(|name| {
///     graph.add_tensor(name, DType::F32, &[n as u64], Mapping::Like(wt)).unwrap()
/// });
/// let options = LambOptions { id: 9, fan_in: 2, ..LambOptions::new(opt) };
/// // The weights as f16 while the tensor is f32: refused.
/// let err = lamb::<tessera_core::fp::f16, f32, f32>(&mut graph, "bad", wt, gt, [mt, vt], &options);
/// assert!(matches!(err, Err(GraphError::FieldType { field: 0, .. })));
/// let lp = lamb::<f32, f32, f32>(&mut graph, "lamb", wt, gt, [mt, vt], &options).unwrap();
/// let mut e = Engine::new(graph, Program::repeat(2, lp.program.clone()), EngineOptions::default()).unwrap();
/// e.write_tensor(wt, &w0).unwrap();
/// e.write_tensor(gt, &g).unwrap();
/// e.write_tensor(mt, &vec![0.0f32; n]).unwrap();
/// e.write_tensor(vt, &vec![0.0f32; n]).unwrap();
/// e.run();
///
/// // Bitwise two whole-tensor steps of the core optimizer.
/// let (mut w, mut m, mut v) = (w0.clone(), vec![0.0f32; n], vec![0.0f32; n]);
/// for t in 0..2 {
///     let mut p = Param::new(9, &mut w, &g, [&mut m, &mut v]);
///     opt.step(Step::after(t), &Precision::default(), &mut p);
/// }
/// assert_eq!(e.read_tensor::<f32>(wt).unwrap(), w);
/// assert_ne!(w, w0);
/// assert!(e.read_tensor::<i64>(lp.steps).unwrap().iter().all(|&s| s == 2));
/// ```
pub fn lamb<W, G, S>(
    graph: &mut Graph,
    name: &str,
    weights: TensorId,
    grads: TensorId,
    [m, v]: [TensorId; 2],
    options: &LambOptions,
) -> Result<LambProgram, GraphError>
where
    W: Element + Scalar,
    G: Element + Scalar,
    S: Element + Scalar,
{
    for (k, (t, dtype)) in [
        (weights, W::DTYPE),
        (grads, G::DTYPE),
        (m, S::DTYPE),
        (v, S::DTYPE),
    ]
    .into_iter()
    .enumerate()
    {
        if graph.dtype(t) != dtype {
            return Err(GraphError::FieldType {
                field: k,
                expected: dtype,
                got: graph.dtype(t),
            });
        }
    }
    let mapping = graph.mapping(weights);
    for t in [grads, m, v] {
        if graph.mapping(t) != mapping {
            return Err(GraphError::MappingMismatch { tensor: t });
        }
    }
    let len = graph.len(weights);
    let plan = BlockPlan::new(len, &mapping);
    let tiles = distinct(mapping.iter().map(|i| i.tile));
    let tile_index = |t: Tile| tiles.binary_search(&t).expect("a parameter tile") as u64;
    let steps = graph.add_tensor(
        &format!("{name}.steps"),
        DType::I64,
        &[tiles.len() as u64],
        Mapping::Explicit(
            tiles
                .iter()
                .enumerate()
                .map(|(k, &t)| Interval::new(t, k as u64..k as u64 + 1))
                .collect(),
        ),
    )?;
    let step_of = |t: Tile| {
        let k = tile_index(t);
        TensorSlice::new(steps, k..k + 1)
    };
    let mut programs = Vec::new();
    let halos = plan.gather_halos(graph, name, &[weights, grads, m, v])?;
    let mut halo = None;
    if let Some((_, p)) = &halos {
        if let Program::Exchange(ex) = p {
            halo = Some(*ex);
        }
        programs.push(p.clone());
    }
    let row_tiles: Vec<Tile> = plan.runs().map(|(t, _)| t).collect();
    let tree = tree::build(graph, name, &row_tiles, 3, options.fan_in)?;
    let width = 3 * LIMBS;
    let read = |d: DType| FieldSpec::new(d, Access::Read);
    let partial_fields = [
        read(W::DTYPE),
        read(G::DTYPE),
        read(S::DTYPE),
        read(S::DTYPE),
        FieldSpec::new(DType::I64, Access::Write),
        read(DType::I64),
    ];
    let partials = |offset| -> Arc<dyn Codelet> {
        Arc::new(LambPartials::<W, G, S> {
            lamb: options.lamb,
            grad_scale: options.grad_scale,
            id: options.id,
            offset,
            fields: partial_fields,
            _t: PhantomData,
        })
    };
    let cs = graph.add_compute_set(&format!("{name}.partials"));
    let aligned = partials(None);
    let mut row = 0u64;
    for (tile, range) in &plan.aligned {
        let f = |t| TensorSlice::new(t, range.clone());
        let out = TensorSlice::new(tree.rows, row * width..(row + 1) * width);
        graph.add_vertex(
            cs,
            *tile,
            aligned.clone(),
            &[f(weights), f(grads), f(m), f(v), out, step_of(*tile)],
        )?;
        row += 1;
    }
    if let Some((h, _)) = &halos {
        let mut at = 0;
        for (tile, range) in &plan.straddling {
            let n = range.end - range.start;
            let f = |k: usize| TensorSlice::new(h[k], at..at + n);
            let out = TensorSlice::new(tree.rows, row * width..(row + 1) * width);
            graph.add_vertex(
                cs,
                *tile,
                partials(Some(range.start)),
                &[f(0), f(1), f(2), f(3), out, step_of(*tile)],
            )?;
            row += 1;
            at += n;
        }
    }
    programs.push(Program::Execute(cs));
    programs.push(tree.program.clone());
    let (totals, bcast) = tree::broadcast(graph, name, &tree, 3, &tiles)?;
    programs.push(bcast);
    let apply: Arc<dyn Codelet> = Arc::new(LambApply::<W, G, S> {
        lamb: options.lamb,
        precision: options.precision,
        grad_scale: options.grad_scale,
        id: options.id,
        fields: [
            FieldSpec::new(W::DTYPE, Access::ReadWrite),
            read(G::DTYPE),
            FieldSpec::new(S::DTYPE, Access::ReadWrite),
            FieldSpec::new(S::DTYPE, Access::ReadWrite),
            read(DType::I64),
            read(DType::I64),
        ],
        _t: PhantomData,
    });
    let cs = graph.add_compute_set(&format!("{name}.apply"));
    for i in &mapping {
        let f = |t| TensorSlice::new(t, i.range.clone());
        let k = tile_index(i.tile);
        let total = TensorSlice::new(totals, k * width..(k + 1) * width);
        graph.add_vertex(
            cs,
            i.tile,
            apply.clone(),
            &[f(weights), f(grads), f(m), f(v), total, step_of(i.tile)],
        )?;
    }
    programs.push(Program::Execute(cs));
    let advance: Arc<dyn Codelet> = Arc::new(Advance {
        fields: [FieldSpec::new(DType::I64, Access::ReadWrite)],
    });
    let cs = graph.add_compute_set(&format!("{name}.advance"));
    for &t in &tiles {
        graph.add_vertex(cs, t, advance.clone(), &[step_of(t)])?;
    }
    programs.push(Program::Execute(cs));
    Ok(LambProgram {
        program: Program::Sequence(programs),
        steps,
        totals,
        tiles,
        halo,
    })
}
