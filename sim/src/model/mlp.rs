//! One replica's MLP: the graph built once for a micro-batch size, run per
//! micro-batch.

use core::num::NonZeroU64;
use core::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::codelets::{
    ActGrad, BiasAct, BnApply, BnGrad, BnGradSums, BnStats, CrossEntropy, GroupLink,
    GroupSumVertex, round, update_running,
};
use super::config::{MlpConfig, ParamSpec};
use super::placement::{Placement, StageCycles, stage_cycles};
use super::{GroupSum, MIN_BLOCK_FLOPS, ModelError};
use crate::ipu::{
    self, Codelet, DType, Direction, Engine, EngineOptions, Graph, Interval, Kernel, Mapping,
    Program, StreamId, TensorId, TensorSlice, Tile,
};
use crate::kernels::matmul::{
    BlockLayout, Cut, Operand, Output, Problem, ProductPlan, Source, matmul,
};

/// The arithmetic of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compute {
    /// f32 throughout, nothing rounded.
    F32,
    /// Mixed precision: f16 weights (given), activations and gradients
    /// rounded to nearest f16, products accumulated in f32 (see the
    /// [module docs](super#numerics)).
    F16,
}

/// What one micro-batch gives back besides the gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MicroBatchOutput {
    /// The sum over samples of the (unscaled) cross-entropy losses, added
    /// in f64 in sample order and rounded once.
    pub loss_sum: f32,
    /// Samples whose first largest logit is the label.
    pub correct: usize,
    /// Simulated cycles of this run.
    pub cycles: u64,
}

/// Grain of the linear mapping of parameters and inputs (elements).
const PARAM_GRAIN: u64 = 4096;

/// Batch-norm tensors of one hidden layer.
#[derive(Debug)]
struct BnIds {
    gamma: TensorId,
    beta: TensorId,
    /// Train: the group's forward sums `[S1, S2, n]`; eval: unused.
    group: Option<TensorId>,
    /// Train: the local backward sums per block `[S_dy, S_dyxhat]`.
    grad_sums: Option<(TensorId, Vec<Range<u64>>)>,
    /// Eval: the running `[mean, var]` staged per block.
    running: Option<(TensorId, Vec<Range<u64>>)>,
}

/// One layer's tensors.
#[derive(Debug)]
struct LayerIds {
    fan_in: usize,
    width: usize,
    out: BlockLayout,
    w: TensorId,
    /// The weights' layout (column blocks).
    w_layout: BlockLayout,
    b: TensorId,
    bn: Option<BnIds>,
    /// Train: `dW` and `db` with their layouts.
    grads: Option<((TensorId, BlockLayout), (TensorId, BlockLayout))>,
}

/// Copies of one exchange.
type Copies = Vec<(TensorSlice, TensorSlice)>;

/// A layer's forward tensors the backward pass reads.
#[derive(Debug)]
struct Acts {
    /// The activation (empty for the last layer).
    a: TensorId,
    /// The pre-activation (the logits for the last layer).
    z: TensorId,
    /// Batch norm's normalised values.
    xhat: Option<TensorId>,
    /// Bias (gamma, beta) staged per block, and each block's piece.
    stage: TensorId,
    stage_ranges: Vec<Range<u64>>,
    /// Batch norm's group totals staged per block.
    fwd_stage: Option<TensorId>,
}

/// One engine (or, before it is built, its graph: [`Unbuilt`]) and where
/// its tensors are.
#[derive(Debug)]
pub(super) struct Net<E = Engine> {
    pub(super) engine: E,
    x: StreamId,
    labels: StreamId,
    scale: TensorId,
    scale_len: usize,
    losses: TensorId,
    correct: TensorId,
    layers: Vec<LayerIds>,
    /// Group sums per run (two per batch-norm layer when training).
    group_calls: usize,
}

/// A [`Net`]'s graph and program, before its engine is built.
#[derive(Debug)]
pub(super) struct Unbuilt {
    pub(super) graph: Graph,
    program: Program,
    /// The ones of `db = 1^T dZ` (training graphs), to write once.
    ones: Option<TensorId>,
}

impl<E> Net<E> {
    /// The same net over `make(its engine)`.
    fn try_map<F, X>(self, make: impl FnOnce(E) -> Result<F, X>) -> Result<Net<F>, X> {
        Ok(Net {
            engine: make(self.engine)?,
            x: self.x,
            labels: self.labels,
            scale: self.scale,
            scale_len: self.scale_len,
            losses: self.losses,
            correct: self.correct,
            layers: self.layers,
            group_calls: self.group_calls,
        })
    }
}

/// A tensor of a piece per block of `layout` (`len(block)` elements each,
/// on the block's tile); the pieces' ranges.
fn per_block(
    graph: &mut Graph,
    name: &str,
    layout: &BlockLayout,
    len: impl Fn(&crate::kernels::matmul::Block) -> u64,
) -> Result<(TensorId, Vec<Range<u64>>), ModelError> {
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
    let t = graph.add_tensor(name, DType::F32, &[at], Mapping::Explicit(intervals))?;
    Ok((t, ranges))
}

/// Copies of columns `cols` of each listed vector (`[len]`, at `offset`)
/// into a piece, one after the other.
fn copy_cols(
    copies: &mut Vec<(TensorSlice, TensorSlice)>,
    sources: &[(TensorId, u64)],
    cols: &Range<usize>,
    dst: TensorId,
    mut at: u64,
) -> u64 {
    for &(src, offset) in sources {
        let n = cols.len() as u64;
        copies.push((
            TensorSlice::new(src, offset + cols.start as u64..offset + cols.end as u64),
            TensorSlice::new(dst, at..at + n),
        ));
        at += n;
    }
    at
}

fn vertex(
    graph: &mut Graph,
    cs: ipu::ComputeSetId,
    tile: Tile,
    codelet: &Arc<dyn Codelet>,
    fields: &[TensorSlice],
) -> Result<(), ModelError> {
    Ok(graph.add_vertex(cs, tile, codelet.clone(), fields)?)
}

/// What a replica's graphs are built from.
#[derive(Clone, Copy)]
pub(super) struct Recipe<'a> {
    pub(super) config: &'a MlpConfig,
    pub(super) target: &'a ipu::Target,
    pub(super) placement: &'a Placement,
    pub(super) batch: usize,
    pub(super) compute: Compute,
    pub(super) link: &'a GroupLink,
}

impl<'a> Recipe<'a> {
    /// The recipe of [`Mlp::placed`]'s arguments, checked.
    pub(super) fn checked(
        config: &'a MlpConfig,
        target: &'a ipu::Target,
        placement: &'a Placement,
        batch: usize,
        compute: Compute,
        link: &'a GroupLink,
    ) -> Result<Self, ModelError> {
        config.validate()?;
        placement.validate(config, target)?;
        if batch == 0 {
            return Err(ModelError::ZeroMicroBatch);
        }
        super::check_sizes(config, batch)?;
        Ok(Self {
            config,
            target,
            placement,
            batch,
            compute,
            link,
        })
    }

    /// Builds the training (`train`) or inference graph and its engine.
    fn net(self, train: bool) -> Result<Net, ModelError> {
        self.graph(train, false)?.try_map(|u| {
            let mut engine = Engine::new(u.graph, u.program, EngineOptions::default())?;
            if let Some(ones) = u.ones {
                engine
                    .write_tensor(ones, &vec![1.0f32; self.batch])
                    .expect("ones tensor");
            }
            Ok(engine)
        })
    }

    /// The training (`train`) or inference graph, a [`Graph::sizing`] one
    /// if `sizing`.
    pub(super) fn graph(self, train: bool, sizing: bool) -> Result<Net<Unbuilt>, ModelError> {
        graph(self, train, sizing)
    }
}

/// Plans the products of a layer over the tiles of its placement.
struct Planner<'a> {
    placement: &'a Placement,
    target: &'a ipu::Target,
    kernel: Kernel,
}

impl Planner<'_> {
    fn problem<'p>(
        &self,
        (m, k, n): (usize, usize, usize),
        a: Source<'p>,
        b: Source<'p>,
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
            kernel: self.kernel,
        }
    }

    /// Layer `l`'s product of `dims` cut freely within `cut`.
    fn plan(
        &self,
        l: usize,
        dims: (usize, usize, usize),
        a: Source<'_>,
        b: Source<'_>,
        cut: Cut,
    ) -> ProductPlan {
        let tiles = self.placement.tiles(l, self.target);
        let problem = self.problem(dims, a, b, &tiles);
        ProductPlan::choose(&problem, self.target.spec(), self.target.sync_cycles(), cut)
    }

    /// Layer `l`'s product of `dims` onto the layout `out`.
    fn onto(
        &self,
        l: usize,
        out: &BlockLayout,
        dims: (usize, usize, usize),
        a: Source<'_>,
        b: Source<'_>,
    ) -> ProductPlan {
        let tiles = self.placement.tiles(l, self.target);
        let problem = self.problem(dims, a, b, &tiles);
        ProductPlan::onto(out, &problem, self.target.spec(), self.target.sync_cycles())
    }
}

/// [`Recipe::graph`].
#[allow(clippy::too_many_lines)]
fn graph(recipe: Recipe<'_>, train: bool, sizing: bool) -> Result<Net<Unbuilt>, ModelError> {
    let Recipe {
        config,
        target,
        placement,
        batch,
        compute,
        link,
    } = recipe;
    let f16 = compute == Compute::F16;
    let kernel = if f16 {
        Kernel::MatmulF16
    } else {
        Kernel::MatmulF32
    };
    // Gradients come out of their products rounded (the AMP writes f16).
    let grad_output = if f16 { Output::F16 } else { Output::F32 };
    let grain = NonZeroU64::new(PARAM_GRAIN).expect("nonzero");
    let mut g = if sizing {
        Graph::sizing(*target)
    } else {
        Graph::new(*target)
    };
    let planner = Planner {
        placement,
        target,
        kernel,
    };
    // Small tensors of layer `l`, linear over its tiles.
    let linear_on = |l: usize| match placement {
        Placement::Spread => Mapping::linear(grain),
        Placement::Ipus(_) => Mapping::Linear {
            grain,
            tiles: Some(placement.tiles(l, target)),
        },
    };
    let layers = config.layers();
    let last = layers.len() - 1;
    let f = |n: usize| n as u64;

    let x = g.add_tensor("x", DType::F32, &[f(batch * config.inputs)], linear_on(0))?;
    let x_stream = g.add_stream("x", x, Direction::ToDevice);
    let mut programs = vec![Program::HostWrite(x_stream)];
    let mut stage_copies = Vec::new();
    let mut ids: Vec<LayerIds> = Vec::new();
    let mut forward = Vec::new();
    let mut acts: Vec<Acts> = Vec::new();
    let mut group_calls = 0;

    for (l, &(fan_in, width)) in layers.iter().enumerate() {
        let hidden = l < last;
        let bn = config.batch_norm && hidden;
        let in_layout = match l {
            0 => BlockLayout::dense(batch, fan_in, 0),
            _ => ids[l - 1].out.clone(),
        };
        let cut = Cut {
            full_rows: !hidden,
            full_cols: bn,
        };
        let fwd = planner.plan(
            l,
            (batch, fan_in, width),
            Source::Layout(&in_layout, false),
            Source::Planned,
            cut,
        );
        let out = fwd.output().clone();
        // The weights in the blocks the forward product's parts read in
        // place.
        let w_layout = fwd.b_layout();
        let w = g.add_tensor(
            &format!("layer{l}.weight"),
            DType::F32,
            &[f(fan_in * width)],
            w_layout.mapping(),
        )?;
        let b = g.add_tensor(
            &format!("layer{l}.bias"),
            DType::F32,
            &[f(width)],
            linear_on(l),
        )?;
        let (gamma, beta) = if bn {
            (
                Some(g.add_tensor(
                    &format!("layer{l}.bn.gamma"),
                    DType::F32,
                    &[f(width)],
                    linear_on(l),
                )?),
                Some(g.add_tensor(
                    &format!("layer{l}.bn.beta"),
                    DType::F32,
                    &[f(width)],
                    linear_on(l),
                )?),
            )
        } else {
            (None, None)
        };
        // The product.
        let y = g.add_tensor(
            &format!("layer{l}.y"),
            DType::F32,
            &[f(batch * width)],
            out.mapping(),
        )?;
        let a_in = Operand {
            tensor: if l == 0 { x } else { acts[l - 1].a },
            layout: in_layout,
            transposed: false,
        };
        let w_op = Operand {
            tensor: w,
            layout: w_layout.clone(),
            transposed: false,
        };
        forward.push(matmul(
            &mut g,
            &format!("layer{l}.fwd"),
            &a_in,
            &w_op,
            y,
            &fwd,
            kernel,
            Output::F32,
        )?);
        // Per-block parameters: bias (and gamma, beta), staged each run.
        let params_per_col = if bn { 3 } else { 1 };
        let (stage, stage_ranges) = per_block(&mut g, &format!("layer{l}.params"), &out, |b| {
            f(b.cols.len() * params_per_col)
        })?;
        let mut sources = vec![(b, 0)];
        if let (Some(ga), Some(be)) = (gamma, beta) {
            sources.extend([(ga, 0), (be, 0)]);
        }
        for (blk, r) in out.blocks().iter().zip(&stage_ranges) {
            copy_cols(&mut stage_copies, &sources, &blk.cols, stage, r.start);
        }
        let z = g.add_tensor(
            &format!("layer{l}.z"),
            DType::F32,
            &[f(batch * width)],
            out.mapping(),
        )?;
        let a = g.add_tensor(
            &format!("layer{l}.a"),
            DType::F32,
            &[f(if hidden { batch * width } else { 0 })],
            if hidden {
                out.mapping()
            } else {
                Mapping::Explicit(Vec::new())
            },
        )?;
        let mut xhat = None;
        let mut fwd_stage = None;
        let mut bn_ids = None;
        let blocks = out.blocks();
        if !bn {
            let codelet: Arc<dyn Codelet> =
                Arc::new(BiasAct::new(hidden.then_some(config.activation), f16));
            let cs = g.add_compute_set(&format!("layer{l}.bias_act"));
            for (blk, r) in blocks.iter().zip(&stage_ranges) {
                let mut fields = vec![
                    TensorSlice::new(y, blk.elements.clone()),
                    TensorSlice::new(stage, r.clone()),
                    TensorSlice::new(z, blk.elements.clone()),
                ];
                if hidden {
                    fields.push(TensorSlice::new(a, blk.elements.clone()));
                }
                vertex(&mut g, cs, blk.tile, &codelet, &fields)?;
            }
            forward.push(Program::Execute(cs));
        } else {
            let (gamma, beta) = (gamma.expect("bn"), beta.expect("bn"));
            let xh = g.add_tensor(
                &format!("layer{l}.bn.xhat"),
                DType::F32,
                &[f(batch * width)],
                out.mapping(),
            )?;
            let pre = g.add_tensor(
                &format!("layer{l}.bn.x"),
                DType::F32,
                &[f(batch * width)],
                out.mapping(),
            )?;
            xhat = Some(xh);
            let w_of = |r: &Range<u64>| (r.end - r.start) / 3;
            let apply_stats;
            let mut group_t = None;
            let mut running = None;
            let mut grad_sums = None;
            if train {
                // Pass 1: x = y + bias, column sums.
                let (sums, sum_ranges) =
                    per_block(&mut g, &format!("layer{l}.bn.sums"), &out, |b| {
                        f(2 * b.cols.len())
                    })?;
                let c1: Arc<dyn Codelet> = Arc::new(BnStats::new(f16));
                let cs1 = g.add_compute_set(&format!("layer{l}.bn.stats"));
                for ((blk, r), s) in blocks.iter().zip(&stage_ranges).zip(&sum_ranges) {
                    vertex(
                        &mut g,
                        cs1,
                        blk.tile,
                        &c1,
                        &[
                            TensorSlice::new(y, blk.elements.clone()),
                            TensorSlice::new(stage, r.start..r.start + w_of(r)),
                            TensorSlice::new(pre, blk.elements.clone()),
                            TensorSlice::new(sums, s.clone()),
                        ],
                    )?;
                }
                forward.push(Program::Execute(cs1));
                // The group's sums.
                let home = blocks[0].tile;
                let group = g.add_tensor(
                    &format!("layer{l}.bn.group"),
                    DType::F32,
                    &[f(2 * width + 1)],
                    Mapping::one_tile(home, f(2 * width + 1)),
                )?;
                let (fstage, franges) =
                    per_block(&mut g, &format!("layer{l}.bn.totals"), &out, |b| {
                        f(2 * b.cols.len() + 1)
                    })?;
                let (gather, bcast) = sums_exchanges(
                    &blocks,
                    sums,
                    &sum_ranges,
                    group,
                    width,
                    fstage,
                    &franges,
                    true,
                );
                forward.push(Program::Exchange(
                    g.add_exchange(&format!("layer{l}.bn.gather"), &gather)?,
                ));
                let cs_g = g.add_compute_set(&format!("layer{l}.bn.group_sum"));
                let cg: Arc<dyn Codelet> =
                    Arc::new(GroupSumVertex::new(link.clone(), Some(batch as f32)));
                let all = g.all(group);
                vertex(&mut g, cs_g, home, &cg, &[all])?;
                forward.push(Program::Execute(cs_g));
                forward.push(Program::Exchange(
                    g.add_exchange(&format!("layer{l}.bn.broadcast"), &bcast)?,
                ));
                group_calls += 2;
                apply_stats = (fstage, franges);
                group_t = Some(group);
                fwd_stage = Some(fstage);
                let (gs, gr) = per_block(&mut g, &format!("layer{l}.bn.grad_sums"), &out, |b| {
                    f(2 * b.cols.len())
                })?;
                grad_sums = Some((gs, gr));
            } else {
                // Inference: x = y + bias, then the running moments.
                let c1: Arc<dyn Codelet> = Arc::new(BiasAct::new(None, f16));
                let cs1 = g.add_compute_set(&format!("layer{l}.bias"));
                for (blk, r) in blocks.iter().zip(&stage_ranges) {
                    vertex(
                        &mut g,
                        cs1,
                        blk.tile,
                        &c1,
                        &[
                            TensorSlice::new(y, blk.elements.clone()),
                            TensorSlice::new(stage, r.start..r.start + w_of(r)),
                            TensorSlice::new(pre, blk.elements.clone()),
                        ],
                    )?;
                }
                forward.push(Program::Execute(cs1));
                let (rt, rr) = per_block(&mut g, &format!("layer{l}.bn.running"), &out, |b| {
                    f(2 * b.cols.len())
                })?;
                running = Some((rt, rr.clone()));
                apply_stats = (rt, rr);
            }
            let c2: Arc<dyn Codelet> = Arc::new(BnApply::new(config.activation, train, f16));
            let cs2 = g.add_compute_set(&format!("layer{l}.bn.apply"));
            for ((blk, r), s) in blocks.iter().zip(&stage_ranges).zip(&apply_stats.1) {
                let wd = w_of(r);
                vertex(
                    &mut g,
                    cs2,
                    blk.tile,
                    &c2,
                    &[
                        TensorSlice::new(pre, blk.elements.clone()),
                        TensorSlice::new(apply_stats.0, s.clone()),
                        TensorSlice::new(stage, r.start + wd..r.start + 2 * wd),
                        TensorSlice::new(stage, r.start + 2 * wd..r.end),
                        TensorSlice::new(xh, blk.elements.clone()),
                        TensorSlice::new(z, blk.elements.clone()),
                        TensorSlice::new(a, blk.elements.clone()),
                    ],
                )?;
            }
            forward.push(Program::Execute(cs2));
            bn_ids = Some(BnIds {
                gamma,
                beta,
                group: group_t,
                grad_sums,
                running,
            });
        }
        acts.push(Acts {
            a,
            z,
            xhat,
            stage,
            stage_ranges,
            fwd_stage,
        });
        ids.push(LayerIds {
            fan_in,
            width,
            out,
            w,
            w_layout,
            b,
            bn: bn_ids,
            grads: None,
        });
    }
    let stage_ex = g.add_exchange("params.stage", &stage_copies)?;
    programs.push(Program::Exchange(stage_ex));
    programs.extend(forward);

    // The loss on whole rows of logits.
    let out = ids[last].out.clone();
    let rows: Vec<(Tile, Range<u64>)> = out
        .blocks()
        .into_iter()
        .filter(|b| !b.rows.is_empty())
        .map(|b| (b.tile, f(b.rows.start)..f(b.rows.end)))
        .collect();
    let row_mapping = Mapping::Explicit(
        rows.iter()
            .map(|(t, r)| Interval::new(*t, r.clone()))
            .collect(),
    );
    let labels = g.add_tensor("labels", DType::F32, &[f(batch)], row_mapping.clone())?;
    let label_stream = g.add_stream("labels", labels, Direction::ToDevice);
    programs.insert(1, Program::HostWrite(label_stream));
    let losses = g.add_tensor("losses", DType::F32, &[f(batch)], row_mapping.clone())?;
    let correct = g.add_tensor("correct", DType::F32, &[f(batch)], row_mapping)?;
    let scale = g.add_tensor(
        "scale",
        DType::F32,
        &[f(rows.len())],
        Mapping::Explicit(
            rows.iter()
                .enumerate()
                .map(|(k, (t, _))| Interval::new(*t, f(k)..f(k + 1)))
                .collect(),
        ),
    )?;
    let classes = config.classes;
    let dz_last = g.add_tensor(
        &format!("layer{last}.dz"),
        DType::F32,
        &[f(if train { batch * classes } else { 0 })],
        if train {
            out.mapping()
        } else {
            Mapping::Explicit(Vec::new())
        },
    )?;
    let ce: Arc<dyn Codelet> = Arc::new(CrossEntropy::new(classes, train, f16));
    let cs = g.add_compute_set("loss");
    for (k, (blk, (_, r))) in out
        .blocks()
        .iter()
        .filter(|b| !b.rows.is_empty())
        .zip(&rows)
        .enumerate()
    {
        let mut fields = vec![
            TensorSlice::new(acts[last].z, blk.elements.clone()),
            TensorSlice::new(labels, r.clone()),
            TensorSlice::new(scale, f(k)..f(k + 1)),
            TensorSlice::new(losses, r.clone()),
            TensorSlice::new(correct, r.clone()),
        ];
        if train {
            fields.push(TensorSlice::new(dz_last, blk.elements.clone()));
        }
        vertex(&mut g, cs, blk.tile, &ce, &fields)?;
    }
    programs.push(Program::Execute(cs));

    let mut ones = None;
    if train {
        let one = g.add_tensor(
            "ones",
            DType::F32,
            &[f(batch)],
            Mapping::one_tile(0, f(batch)),
        )?;
        let mut dz = dz_last;
        for l in (0..=last).rev() {
            let (fan_in, width) = (ids[l].fan_in, ids[l].width);
            let dz_op = Operand {
                tensor: dz,
                layout: ids[l].out.clone(),
                transposed: false,
            };
            // dW = A^T dZ.
            let a_in = match l {
                0 => Operand {
                    tensor: x,
                    layout: BlockLayout::dense(batch, fan_in, 0),
                    transposed: true,
                },
                _ => Operand {
                    tensor: acts[l - 1].a,
                    layout: ids[l - 1].out.clone(),
                    transposed: true,
                },
            };
            let dw_plan = planner.plan(
                l,
                (fan_in, batch, width),
                Source::Layout(&a_in.layout, true),
                Source::Layout(&dz_op.layout, false),
                Cut::default(),
            );
            let dw_layout = dw_plan.output().clone();
            let dw = g.add_tensor(
                &format!("layer{l}.weight.grad"),
                DType::F32,
                &[f(fan_in * width)],
                dw_layout.mapping(),
            )?;
            programs.push(matmul(
                &mut g,
                &format!("layer{l}.dw"),
                &a_in,
                &dz_op,
                dw,
                &dw_plan,
                kernel,
                grad_output,
            )?);
            // db = 1^T dZ.
            let ones_layout = BlockLayout::dense(1, batch, 0);
            let db_plan = planner.plan(
                l,
                (1, batch, width),
                Source::Layout(&ones_layout, false),
                Source::Layout(&dz_op.layout, false),
                Cut {
                    full_rows: false,
                    full_cols: true,
                },
            );
            let db_layout = db_plan.output().clone();
            let db = g.add_tensor(
                &format!("layer{l}.bias.grad"),
                DType::F32,
                &[f(width)],
                db_layout.mapping(),
            )?;
            let ones_op = Operand {
                tensor: one,
                layout: ones_layout,
                transposed: false,
            };
            programs.push(matmul(
                &mut g,
                &format!("layer{l}.db"),
                &ones_op,
                &dz_op,
                db,
                &db_plan,
                kernel,
                grad_output,
            )?);
            ids[l].grads = Some(((dw, dw_layout), (db, db_layout)));
            if l == 0 {
                break;
            }
            // dA = dZ W^T, then the previous layer's activation (and batch norm).
            let p = l - 1;
            let prev = ids[p].out.clone();
            let da = g.add_tensor(
                &format!("layer{p}.da"),
                DType::F32,
                &[f(batch * ids[p].width)],
                prev.mapping(),
            )?;
            let w_op = Operand {
                tensor: ids[l].w,
                layout: ids[l].w_layout.clone(),
                transposed: true,
            };
            let da_plan = planner.onto(
                l,
                &prev,
                (batch, width, fan_in),
                Source::Layout(&dz_op.layout, false),
                Source::Layout(&w_op.layout, true),
            );
            programs.push(matmul(
                &mut g,
                &format!("layer{l}.da"),
                &dz_op,
                &w_op,
                da,
                &da_plan,
                kernel,
                Output::F32,
            )?);
            let dzp = g.add_tensor(
                &format!("layer{p}.dz"),
                DType::F32,
                &[f(batch * ids[p].width)],
                prev.mapping(),
            )?;
            let blocks = prev.blocks();
            let Acts {
                z: zp,
                xhat,
                stage,
                stage_ranges,
                fwd_stage: fstage,
                ..
            } = &acts[p];
            if let Some(bn) = &ids[p].bn {
                let xhat = xhat.expect("bn");
                let fstage = fstage.expect("bn");
                let (gs, gr) = bn.grad_sums.clone().expect("train");
                let dy = g.add_tensor(
                    &format!("layer{p}.bn.dy"),
                    DType::F32,
                    &[f(batch * ids[p].width)],
                    prev.mapping(),
                )?;
                let c1: Arc<dyn Codelet> = Arc::new(BnGradSums::new(config.activation, f16));
                let cs1 = g.add_compute_set(&format!("layer{p}.bn.grad_sums"));
                for (blk, s) in blocks.iter().zip(&gr) {
                    vertex(
                        &mut g,
                        cs1,
                        blk.tile,
                        &c1,
                        &[
                            TensorSlice::new(da, blk.elements.clone()),
                            TensorSlice::new(*zp, blk.elements.clone()),
                            TensorSlice::new(xhat, blk.elements.clone()),
                            TensorSlice::new(dy, blk.elements.clone()),
                            TensorSlice::new(gs, s.clone()),
                        ],
                    )?;
                }
                programs.push(Program::Execute(cs1));
                let pw = ids[p].width;
                let home = blocks[0].tile;
                let group = g.add_tensor(
                    &format!("layer{p}.bn.grad_group"),
                    DType::F32,
                    &[f(2 * pw)],
                    Mapping::one_tile(home, f(2 * pw)),
                )?;
                let (bstage, branges) =
                    per_block(&mut g, &format!("layer{p}.bn.grad_totals"), &prev, |b| {
                        f(2 * b.cols.len())
                    })?;
                let (gather, bcast) =
                    sums_exchanges(&blocks, gs, &gr, group, pw, bstage, &branges, false);
                programs.push(Program::Exchange(
                    g.add_exchange(&format!("layer{p}.bn.grad_gather"), &gather)?,
                ));
                let cs_g = g.add_compute_set(&format!("layer{p}.bn.grad_group_sum"));
                let cg: Arc<dyn Codelet> = Arc::new(GroupSumVertex::new(link.clone(), None));
                let all = g.all(group);
                vertex(&mut g, cs_g, home, &cg, &[all])?;
                programs.push(Program::Execute(cs_g));
                programs.push(Program::Exchange(
                    g.add_exchange(&format!("layer{p}.bn.grad_broadcast"), &bcast)?,
                ));
                let (_, franges) = (fstage, fstage_ranges(&prev));
                let c2: Arc<dyn Codelet> = Arc::new(BnGrad::new(f16));
                let cs2 = g.add_compute_set(&format!("layer{p}.bn.grad"));
                for (((blk, r), fr), br) in
                    blocks.iter().zip(stage_ranges).zip(&franges).zip(&branges)
                {
                    let wd = (r.end - r.start) / 3;
                    vertex(
                        &mut g,
                        cs2,
                        blk.tile,
                        &c2,
                        &[
                            TensorSlice::new(dy, blk.elements.clone()),
                            TensorSlice::new(xhat, blk.elements.clone()),
                            TensorSlice::new(*stage, r.start + wd..r.start + 2 * wd),
                            TensorSlice::new(fstage, fr.clone()),
                            TensorSlice::new(bstage, br.clone()),
                            TensorSlice::new(dzp, blk.elements.clone()),
                        ],
                    )?;
                }
                programs.push(Program::Execute(cs2));
            } else {
                let c: Arc<dyn Codelet> = Arc::new(ActGrad::new(config.activation, f16));
                let cs = g.add_compute_set(&format!("layer{p}.activation_grad"));
                for blk in &blocks {
                    vertex(
                        &mut g,
                        cs,
                        blk.tile,
                        &c,
                        &[
                            TensorSlice::new(da, blk.elements.clone()),
                            TensorSlice::new(*zp, blk.elements.clone()),
                            TensorSlice::new(dzp, blk.elements.clone()),
                        ],
                    )?;
                }
                programs.push(Program::Execute(cs));
            }
            dz = dzp;
        }
        // The ones of db = 1^T dZ are written once, by `build`.
        ones = Some(one);
    }
    Ok(Net {
        engine: Unbuilt {
            graph: g,
            program: Program::Sequence(programs),
            ones,
        },
        x: x_stream,
        labels: label_stream,
        scale,
        scale_len: rows.len(),
        losses,
        correct,
        layers: ids,
        group_calls,
    })
}

/// The ranges of the per-block forward totals (`2 w + 1` per block), as
/// [`per_block`] laid them out.
fn fstage_ranges(layout: &BlockLayout) -> Vec<Range<u64>> {
    let mut at = 0;
    layout
        .blocks()
        .iter()
        .map(|b| {
            let n = 2 * b.cols.len() as u64 + 1;
            at += n;
            at - n..at
        })
        .collect()
}

/// The exchanges that gather per-block column sums (`[S_a, S_b]` of the
/// block's columns) into one group vector `[S_a (width), S_b (width), n?]`
/// and broadcast its totals back to per-block pieces (with `n` if
/// `count`).
#[allow(clippy::too_many_arguments)]
fn sums_exchanges(
    blocks: &[crate::kernels::matmul::Block],
    sums: TensorId,
    sum_ranges: &[Range<u64>],
    group: TensorId,
    width: usize,
    stage: TensorId,
    stage_ranges: &[Range<u64>],
    count: bool,
) -> (Copies, Copies) {
    let (mut gather, mut bcast) = (Vec::new(), Vec::new());
    let width = width as u64;
    for ((blk, s), st) in blocks.iter().zip(sum_ranges).zip(stage_ranges) {
        let (c0, c1) = (blk.cols.start as u64, blk.cols.end as u64);
        let w = c1 - c0;
        for (half, off) in [(0, 0), (1, width)] {
            let src = s.start + half * w;
            gather.push((
                TensorSlice::new(sums, src..src + w),
                TensorSlice::new(group, off + c0..off + c1),
            ));
            let dst = st.start + half * w;
            bcast.push((
                TensorSlice::new(group, off + c0..off + c1),
                TensorSlice::new(stage, dst..dst + w),
            ));
        }
        if count {
            bcast.push((
                TensorSlice::new(group, 2 * width..2 * width + 1),
                TensorSlice::new(stage, st.start + 2 * w..st.start + 2 * w + 1),
            ));
        }
    }
    (gather, bcast)
}

/// One replica's model: the training and the inference graphs, each built
/// once into an engine for a fixed micro-batch size.
#[derive(Debug)]
pub struct Mlp {
    config: MlpConfig,
    specs: Vec<ParamSpec>,
    batch: usize,
    compute: Compute,
    placement: Placement,
    /// The stages' cycles in the last training run.
    stages: Option<Vec<StageCycles>>,
    train: Net,
    eval: Net,
    link: GroupLink,
    /// Running `(mean, var)` of each batch-norm layer, by layer.
    running: Vec<Option<(Vec<f32>, Vec<f32>)>>,
    profile: Option<ipu::Profile>,
}

impl Mlp {
    /// Builds the model for micro-batches of `micro_batch` samples on
    /// `target` (one replica's IPUs), every layer spread over all its
    /// tiles: the forward and backward pass, and a separate inference
    /// program. Parameters start at zero: call [`Mlp::set_params`].
    ///
    /// # Errors
    /// [`ModelError::ZeroWidth`], [`ModelError::ZeroMicroBatch`],
    /// [`ModelError::TooLarge`];
    /// [`ModelError::Build`] carrying [`BuildError::OutOfTileMemory`](ipu::BuildError::OutOfTileMemory)
    /// if a tile does not have the memory.
    pub fn new(
        config: &MlpConfig,
        target: ipu::Target,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        Self::placed(config, target, &Placement::Spread, micro_batch, compute)
    }

    /// As [`Mlp::new`], with the layers placed by `placement` (on the
    /// replica's IPUs one by one: model sharding, pipeline stages). The
    /// results are bitwise those of every other placement.
    ///
    /// # Errors
    /// As [`Mlp::new`], and [`ModelError::Placement`].
    pub fn placed(
        config: &MlpConfig,
        target: ipu::Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        let link: GroupLink = Arc::new(Mutex::new(None));
        let recipe = Recipe::checked(config, &target, placement, micro_batch, compute, &link)?;
        let train = recipe.net(true)?;
        let eval = recipe.net(false)?;
        let running = train
            .layers
            .iter()
            .map(|l| {
                l.bn.as_ref()
                    .map(|_| (vec![0.0; l.width], vec![1.0; l.width]))
            })
            .collect();
        Ok(Self {
            config: config.clone(),
            specs: config.params(),
            batch: micro_batch,
            compute,
            placement: placement.clone(),
            stages: None,
            train,
            eval,
            link,
            running,
            profile: None,
        })
    }

    /// The configuration.
    #[must_use]
    pub const fn config(&self) -> &MlpConfig {
        &self.config
    }

    /// The arithmetic.
    #[must_use]
    pub const fn compute(&self) -> Compute {
        self.compute
    }

    /// Samples per micro-batch.
    #[must_use]
    pub const fn micro_batch(&self) -> usize {
        self.batch
    }

    /// Where the layers run.
    #[must_use]
    pub const fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The cycles of each stage of the placement, forward and backward, in
    /// the last training micro-batch (`None` before one ran): see
    /// [`StageCycles`].
    #[must_use]
    pub fn stage_cycles(&self) -> Option<&[StageCycles]> {
        self.stages.as_deref()
    }

    /// Sets the parameters, in the order of [`MlpConfig::params`].
    ///
    /// # Errors
    /// [`ModelError::ParamCount`], [`ModelError::ParamLength`]; nothing is
    /// written then.
    pub fn set_params(&mut self, params: &[&[f32]]) -> Result<(), ModelError> {
        self.check_lengths(params.iter().map(|p| p.len()))?;
        let mut k = 0;
        for l in 0..self.train.layers.len() {
            for net in [&mut self.train, &mut self.eval] {
                let layer = &net.layers[l];
                let mut ts = vec![layer.w, layer.b];
                if let Some(bn) = &layer.bn {
                    ts.extend([bn.gamma, bn.beta]);
                }
                let weights = layer.w_layout.from_row_major(params[k]);
                for (j, t) in ts.into_iter().enumerate() {
                    let values = if j == 0 { &weights } else { params[k + j] };
                    net.engine.write_tensor(t, values).expect("lengths checked");
                }
            }
            k += if self.train.layers[l].bn.is_some() {
                4
            } else {
                2
            };
        }
        Ok(())
    }

    fn check_lengths(&self, lens: impl ExactSizeIterator<Item = usize>) -> Result<(), ModelError> {
        if lens.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: lens.len(),
            });
        }
        for (spec, got) in self.specs.iter().zip(lens) {
            if spec.len() != got {
                return Err(ModelError::ParamLength {
                    name: spec.name.clone(),
                    expected: spec.len(),
                    got,
                });
            }
        }
        Ok(())
    }

    fn check_batch(&self, inputs: &[f32], labels: &[u32]) -> Result<(), ModelError> {
        let expected = self.batch * self.config.inputs;
        if inputs.len() != expected {
            return Err(ModelError::InputLength {
                expected,
                got: inputs.len(),
            });
        }
        if labels.len() != self.batch {
            return Err(ModelError::LabelCount {
                expected: self.batch,
                got: labels.len(),
            });
        }
        let classes = self.config.classes;
        if let Some(sample) = labels.iter().position(|&l| l as usize >= classes) {
            return Err(ModelError::LabelOutOfRange {
                sample,
                label: labels[sample],
                classes,
            });
        }
        Ok(())
    }

    /// Writes a micro-batch's inputs, labels and scale into `net`.
    fn feed(net: &mut Net, inputs: &[f32], labels: &[u32], scale: f32) {
        let labels: Vec<f32> = labels.iter().map(|&l| l as f32).collect();
        net.engine.stream_write(net.x, inputs).expect("checked");
        net.engine
            .stream_write(net.labels, &labels)
            .expect("checked");
        net.engine
            .write_tensor(net.scale, &vec![scale; net.scale_len])
            .expect("scale tensor");
    }

    /// The losses and correct predictions of the last run of `net`.
    fn outputs(net: &Net, cycles: u64) -> MicroBatchOutput {
        let losses = net.engine.read_tensor::<f32>(net.losses).expect("f32");
        let correct = net.engine.read_tensor::<f32>(net.correct).expect("f32");
        MicroBatchOutput {
            loss_sum: losses.iter().map(|&l| f64::from(l)).sum::<f64>() as f32,
            correct: correct.iter().filter(|&&c| c > 0.5).count(),
            cycles,
        }
    }

    /// Forward and backward pass of one micro-batch (`inputs` row-major
    /// `[micro_batch, inputs]`, a label per sample): writes into `grads[i]`
    /// (resized to the shape of parameter `i`) the gradient of `scale *
    /// sum over samples of the cross-entropy`, f16-rounded in
    /// [`Compute::F16`]. With batch norm, `group` sums the statistics over
    /// the replica group (twice per batch-norm layer) and the running
    /// statistics are updated.
    ///
    /// # Errors
    /// [`ModelError::InputLength`], [`ModelError::LabelCount`],
    /// [`ModelError::LabelOutOfRange`], [`ModelError::InvalidScale`],
    /// [`ModelError::ParamCount`] (for `grads`), and the group's error.
    pub fn train_micro_batch(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
        scale: f32,
        group: &mut dyn GroupSum,
        grads: &mut [Vec<f32>],
    ) -> Result<MicroBatchOutput, ModelError> {
        self.check_batch(inputs, labels)?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(ModelError::InvalidScale(scale));
        }
        if grads.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: grads.len(),
            });
        }
        Self::feed(&mut self.train, inputs, labels, scale);
        let profile = if self.train.group_calls == 0 {
            self.train.engine.run()
        } else {
            run_with_group(&mut self.train, &self.link, group)?
        };
        let out = Self::outputs(&self.train, profile.total_cycles);
        self.stages = Some(stage_cycles(&profile, &self.placement));
        self.profile = Some(profile);
        let f16 = self.compute == Compute::F16;
        let mut k = 0;
        for (l, layer) in self.train.layers.iter().enumerate() {
            let ((dw, dwl), (db, dbl)) = layer.grads.as_ref().expect("training graph");
            let e = &self.train.engine;
            grads[k] = dwl.to_row_major(&e.read_tensor::<f32>(*dw).expect("f32"));
            grads[k + 1] = dbl.to_row_major(&e.read_tensor::<f32>(*db).expect("f32"));
            k += 2;
            if let Some(bn) = &layer.bn {
                let (gs, ranges) = bn.grad_sums.as_ref().expect("training graph");
                let sums = e.read_tensor::<f32>(*gs).expect("f32");
                let (mut dgamma, mut dbeta) = (vec![0.0; layer.width], vec![0.0; layer.width]);
                for (blk, r) in layer.out.blocks().iter().zip(ranges) {
                    let w = blk.cols.len();
                    let s = &sums[r.start as usize..r.end as usize];
                    for (j, c) in blk.cols.clone().enumerate() {
                        dbeta[c] = round(s[j], f16);
                        dgamma[c] = round(s[w + j], f16);
                    }
                }
                grads[k] = dgamma;
                grads[k + 1] = dbeta;
                k += 2;
                let stats = e
                    .read_tensor::<f32>(bn.group.expect("training graph"))
                    .expect("f32");
                if let Some((mean, var)) = &mut self.running[l] {
                    update_running(&stats, mean, var);
                }
            }
        }
        Ok(out)
    }

    /// The losses and correct predictions of one micro-batch, batch norm
    /// using the running statistics.
    ///
    /// # Errors
    /// [`ModelError::InputLength`], [`ModelError::LabelCount`],
    /// [`ModelError::LabelOutOfRange`].
    pub fn evaluate(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
    ) -> Result<MicroBatchOutput, ModelError> {
        self.check_batch(inputs, labels)?;
        Self::feed(&mut self.eval, inputs, labels, 1.0);
        for (layer, running) in self.eval.layers.iter().zip(&self.running) {
            if let (Some(bn), Some((mean, var))) = (&layer.bn, running) {
                let (t, ranges) = bn.running.as_ref().expect("inference graph");
                let mut staged = vec![0.0; ranges.last().map_or(0, |r| r.end as usize)];
                for (blk, r) in layer.out.blocks().iter().zip(ranges) {
                    let w = blk.cols.len();
                    let s = &mut staged[r.start as usize..r.end as usize];
                    s[..w].copy_from_slice(&mean[blk.cols.clone()]);
                    s[w..].copy_from_slice(&var[blk.cols.clone()]);
                }
                self.eval
                    .engine
                    .write_tensor(*t, &staged)
                    .expect("running tensor");
            }
        }
        let profile = self.eval.engine.run();
        let out = Self::outputs(&self.eval, profile.total_cycles);
        self.profile = Some(profile);
        Ok(out)
    }

    /// The batch-norm running statistics, `layer{l}.bn.running_mean` and
    /// `layer{l}.bn.running_var` per batch-norm layer (empty without batch
    /// norm), for checkpoints.
    #[must_use]
    pub fn buffers(&self) -> Vec<(String, Vec<f32>)> {
        let mut out = Vec::new();
        for (l, r) in self.running.iter().enumerate() {
            if let Some((mean, var)) = r {
                out.push((format!("layer{l}.bn.running_mean"), mean.clone()));
                out.push((format!("layer{l}.bn.running_var"), var.clone()));
            }
        }
        out
    }

    /// Restores buffers saved by [`Mlp::buffers`] (any subset, by name).
    ///
    /// # Errors
    /// [`ModelError::UnknownBuffer`], [`ModelError::ParamLength`]; nothing
    /// is written then.
    pub fn set_buffers(&mut self, buffers: &[(String, Vec<f32>)]) -> Result<(), ModelError> {
        let mut updates = Vec::new();
        for (name, values) in buffers {
            let found = self.running.iter().enumerate().find_map(|(l, r)| {
                let (mean, _) = r.as_ref()?;
                if *name == format!("layer{l}.bn.running_mean") {
                    Some((l, false, mean.len()))
                } else if *name == format!("layer{l}.bn.running_var") {
                    Some((l, true, mean.len()))
                } else {
                    None
                }
            });
            let (l, is_var, len) =
                found.ok_or_else(|| ModelError::UnknownBuffer { name: name.clone() })?;
            if values.len() != len {
                return Err(ModelError::ParamLength {
                    name: name.clone(),
                    expected: len,
                    got: values.len(),
                });
            }
            updates.push((l, is_var, values));
        }
        for (l, is_var, values) in updates {
            if let Some((mean, var)) = &mut self.running[l] {
                let dst = if is_var { var } else { mean };
                dst.copy_from_slice(values);
            }
        }
        Ok(())
    }

    /// The profile of the last run (training or evaluation).
    #[must_use]
    pub const fn last_profile(&self) -> Option<&ipu::Profile> {
        self.profile.as_ref()
    }

    /// Every tile's memory in the training program (the larger of the
    /// two).
    #[must_use]
    pub fn memory(&self) -> ipu::MemoryUsage {
        self.train.engine.memory().clone()
    }

    /// Every tile's memory in the inference program.
    #[must_use]
    pub fn inference_memory(&self) -> ipu::MemoryUsage {
        self.eval.engine.memory().clone()
    }

    /// Floating-point operations of the matrix products per sample:
    /// `(forward, backward)`, a multiply-add counted as two; the backward
    /// pass is `dW` for every layer and `dA` for all but the first.
    #[must_use]
    pub fn flops_per_sample(&self) -> (u64, u64) {
        let mut fwd = 0;
        let mut bwd = 0;
        for (l, (i, o)) in self.config.layers().into_iter().enumerate() {
            let f = 2 * i as u64 * o as u64;
            fwd += f;
            bwd += if l == 0 { f } else { 2 * f };
        }
        (fwd, bwd)
    }
}

/// Empties a [`GroupLink`] when dropped.
struct CloseLink<'a>(&'a GroupLink);

impl Drop for CloseLink<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Runs `net`'s program on a scoped thread while this thread serves its
/// group-sum vertices with `group` (which need not be `Send`). A failed sum
/// answers with the local values so the program finishes; its error is
/// returned.
fn run_with_group(
    net: &mut Net,
    link: &GroupLink,
    group: &mut dyn GroupSum,
) -> Result<ipu::Profile, ModelError> {
    let (to_host, requests) = mpsc::channel::<Vec<f32>>();
    let (answers, from_host) = mpsc::channel::<Vec<f32>>();
    *link.lock().unwrap_or_else(|e| e.into_inner()) = Some((to_host, from_host));
    let calls = net.group_calls;
    let engine = &mut net.engine;
    let (profile, error) = std::thread::scope(|s| {
        let runner = s.spawn(move || {
            // Drops the link's sender however the run ends (a panic too),
            // so that the loop below stops waiting.
            let _close = CloseLink(link);
            engine.run()
        });
        let mut error = None;
        for _ in 0..calls {
            let Ok(mut values) = requests.recv() else {
                break;
            };
            if error.is_none()
                && let Err(e) = group.sum(&mut values)
            {
                error = Some(e);
            }
            if answers.send(values).is_err() {
                break;
            }
        }
        let profile = runner.join();
        (profile, error)
    });
    *link.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let profile = profile.unwrap_or_else(|p| std::panic::resume_unwind(p));
    match error {
        Some(e) => Err(e),
        None => Ok(profile),
    }
}
