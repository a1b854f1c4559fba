//! [`PlanConfig::plan`]: the layers' costs, the stages, the pipeline, the
//! Pod's step, and the summary, one function each.

use core::ops::Range;

use super::config::{PlanConfig, Schedule, ipu_name};
use super::memory::{StageShape, stage_memory, stage_params, stashed};
use super::table::SimulatedCost;
use super::time::{CostModel, LayerCost, StepBreakdown};
use super::{
    Calibrated, Flops, Overflow, POPLAR_PREFETCH_DEPTH, Plan, PlanError, StagePlan, WorstTile,
    scaling_pods,
};
use crate::IpuSpec;
use crate::ipu::ProductPath;
use crate::pod::{CollectiveTime, Layout, PodSpec, Prefetch, scaling_table_with};

/// What the stages add up to for the Pod's step.
struct Stages {
    plans: Vec<StagePlan>,
    /// The most parameters a stage owns.
    params_max: u64,
    /// The slowest stage's optimizer.
    optimizer_cycles: u64,
    /// The slowest stage's offload.
    offload_s: f64,
}

/// The pipeline's share of the step.
struct Pipeline {
    steps: u64,
    compute_s: f64,
    bubble_s: f64,
    stage_exchange_s: f64,
}

impl PlanConfig {
    /// Plans the configuration.
    ///
    /// # Errors
    /// [`PlanConfig::validate`]'s, and [`PlanError::LayerCostsMismatch`]
    /// when [`PlanConfig::layer_costs`] were priced for another model,
    /// micro-batch, precision or IPU. A model that does not fit is not an
    /// error: see [`Plan::fits`] and [`Plan::overflows`].
    ///
    /// ```
    /// use tessera_sim::plan::{Builtin, PlanConfig, PlanError};
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let config = PlanConfig::new(Builtin::Resnet50.table(), PodSpec::pod16());
    /// let plan = config.plan()?;
    /// assert_eq!(plan.global_batch, 16 * 8); // 16 replicas of micro-batch 8
    /// assert!(plan.step_s > 0.0 && plan.samples_per_second > 0.0);
    /// let none = PlanConfig { micro_batch: 0, ..config };
    /// assert_eq!(none.plan().unwrap_err(), PlanError::Zero("micro_batch"));
    /// # Ok::<(), PlanError>(())
    /// ```
    pub fn plan(&self) -> Result<Plan, PlanError> {
        let layout = self.validate()?;
        let simulated = self.simulated_costs()?;
        let spec = *self.machine().ipu();
        let cost = CostModel::new(
            &spec,
            self.ipus_per_replica,
            self.precision,
            &self.assumptions,
        );
        let assumed = self.assumed_costs(&cost);
        let costs: Vec<LayerCost> = assumed
            .iter()
            .zip(&simulated)
            .map(|(a, s)| s.map_or(*a, |s| a.simulated(&s)))
            .collect();
        let ranges = self.stage_ranges(&costs);
        let stages = self.stages(&layout, &cost, &costs, (&ranges, &simulated));
        let pipeline = self.pipeline(&cost, &ranges, &stages.plans);
        let step = self.step(&layout, &spec, &stages, &pipeline);
        let calibration = if simulated.iter().any(Option::is_some) {
            let without = Self {
                layer_costs: None,
                ..self.clone()
            };
            Some(Calibrated::new(
                self,
                (&assumed, &simulated),
                &without.plan()?,
            ))
        } else {
            None
        };
        self.summary(&spec, (stages, pipeline, step), calibration)
    }

    /// Each layer's simulated cost from [`PlanConfig::layer_costs`]
    /// (`None` where it has none), checked against the configuration.
    fn simulated_costs(&self) -> Result<Vec<Option<SimulatedCost>>, PlanError> {
        let layers = self.model.layers().len();
        let Some(c) = &self.layer_costs else {
            return Ok(vec![None; layers]);
        };
        let f16 = self.precision != super::Precision::Fp32;
        let mismatch = |what: &'static str, priced: String, planned: String| {
            Err(PlanError::LayerCostsMismatch {
                what,
                priced,
                planned,
            })
        };
        if c.layers.len() != layers {
            return mismatch("layers", c.layers.len().to_string(), layers.to_string());
        }
        if c.micro_batch != self.micro_batch {
            let planned = self.micro_batch.to_string();
            return mismatch("micro-batch", c.micro_batch.to_string(), planned);
        }
        if c.f16 != f16 {
            let compute = |f16: bool| if f16 { "f16" } else { "f32" }.to_owned();
            return mismatch("compute precision", compute(c.f16), compute(f16));
        }
        if c.recipe != self.precision.recipe() {
            let products = |r: Option<crate::model::quant::Recipe>| match r {
                Some(r) => format!("quantised ({} weights)", r.weights),
                None => "unquantised".to_owned(),
            };
            let planned = products(self.precision.recipe());
            return mismatch("products", products(c.recipe), planned);
        }
        if c.ipu != self.ipu {
            let (priced, planned) = (ipu_name(&c.ipu), ipu_name(&self.ipu));
            return mismatch("IPU", priced.to_owned(), planned.to_owned());
        }
        Ok(c.layers.clone())
    }

    /// Every layer's cycles by the assumptions, each layer's input on the
    /// tiles of the previous layer's output.
    fn assumed_costs(&self, cost: &CostModel<'_>) -> Vec<LayerCost> {
        let batch = self.micro_batch as u64;
        let mut costs: Vec<LayerCost> = Vec::with_capacity(self.model.layers().len());
        for i in 0..self.model.layers().len() {
            let in_tiles = costs.last().map_or(1, |c| c.out_tiles);
            costs.push(cost.layer(&self.model, i, batch, in_tiles));
        }
        costs
    }

    /// The layers cut into the pipeline's stages, balancing time and
    /// memory.
    fn stage_ranges(&self, costs: &[LayerCost]) -> Vec<Range<usize>> {
        let bytes = self.precision.bytes();
        let batch = self.micro_batch as u64;
        let recompute = u64::from(self.recompute);
        let times: Vec<f64> = costs
            .iter()
            .map(|c| c.forward as f64 * (1 + recompute) as f64 + c.backward as f64)
            .collect();
        let per_param = bytes.weights
            + bytes.gradients
            + if self.offload_optimizer_state {
                0
            } else {
                bytes.master + self.optimizer.state_tensors() * bytes.optimizer_state
            };
        // A tied layer will hold a copy of its owner's weights (and
        // gradients) on another stage.
        let memory: Vec<f64> = self
            .model
            .layers()
            .iter()
            .map(|l| {
                let tied = l.tied.as_ref().map_or(0, |t| t.params);
                l.params as f64 * per_param as f64
                    + tied as f64 * (bytes.weights + bytes.gradients) as f64
                    + l.activation_bytes as f64 * batch as f64
            })
            .collect();
        super::split::split(&times, &memory, self.ipus_per_replica)
    }

    /// Each stage's time and memory, and what the Pod's step needs of
    /// them.
    fn stages(
        &self,
        layout: &Layout,
        cost: &CostModel<'_>,
        costs: &[LayerCost],
        (ranges, simulated): (&[Range<usize>], &[Option<SimulatedCost>]),
    ) -> Stages {
        let spec = *self.machine().ipu();
        let stages = self.ipus_per_replica;
        let shards = if self.replicated_tensor_sharding {
            layout.replicas_per_domain() as u64
        } else {
            1
        };
        let mut out = Stages {
            plans: Vec::with_capacity(stages),
            params_max: 0,
            optimizer_cycles: 0,
            offload_s: 0.0,
        };
        for (s, range) in ranges.iter().enumerate() {
            let (memory, worst) = stage_memory(
                self,
                &StageShape {
                    layers: range.clone(),
                    stage: s,
                    stages,
                    shards,
                    received: costs[range.clone()]
                        .iter()
                        .map(|c| c.received_bytes)
                        .max()
                        .unwrap_or(0),
                    simulated_tile: simulated[range.clone()]
                        .iter()
                        .flatten()
                        .map(|c| c.max_tile_bytes)
                        .max()
                        .unwrap_or(0),
                    tiles: u64::from(spec.tiles()),
                },
            );
            let (own, _) = stage_params(&self.model, range);
            out.params_max = out.params_max.max(own);
            let owned = own.div_ceil(shards);
            out.optimizer_cycles = out
                .optimizer_cycles
                .max(cost.optimizer(owned, self.optimizer.needs_norms()));
            if self.offload_optimizer_state {
                let bytes = self.precision.bytes();
                let state = bytes.master + self.optimizer.state_tensors() * bytes.optimizer_state;
                let seconds =
                    2.0 * state as f64 * owned as f64 / spec.params().host_bytes_per_second as f64;
                out.offload_s = out.offload_s.max(seconds);
            }
            let timed = self.stage_time(cost, costs, s, range.clone());
            out.plans.push(StagePlan {
                memory,
                worst_tile_bytes: worst,
                fits: worst <= spec.memory_per_tile(),
                params: own,
                ..timed
            });
        }
        out
    }

    /// Stage `s`'s layers, passes and time per micro-batch (its memory
    /// left empty).
    fn stage_time(
        &self,
        cost: &CostModel<'_>,
        costs: &[LayerCost],
        s: usize,
        range: Range<usize>,
    ) -> StagePlan {
        let spec = *self.machine().ipu();
        let layers = self.model.layers();
        let stages = self.ipus_per_replica;
        let batch = self.micro_batch as u64;
        let recompute = u64::from(self.recompute);
        let c = &costs[range.clone()];
        let forward = c.iter().fold(0u64, |a, c| a.saturating_add(c.forward));
        let backward = c.iter().fold(0u64, |a, c| a.saturating_add(c.backward));
        let mut extra = 0u64;
        if s == 0 {
            extra = cost.host(batch.saturating_mul(self.model.input_bytes()));
        }
        if s + 1 == stages {
            extra = extra.saturating_add(cost.loss(costs[layers.len() - 1].out_block));
        }
        let total = forward
            .saturating_mul(1 + recompute)
            .saturating_add(backward)
            .saturating_add(extra);
        StagePlan {
            stage: s,
            first_layer: layers[range.start].name.clone(),
            last_layer: layers[range.end - 1].name.clone(),
            layers: range.len(),
            params: 0,
            memory: super::MemoryBreakdown::default(),
            worst_tile_bytes: 0,
            fits: true,
            stashed_micro_batches: stashed(self.schedule, s, stages, &self.assumptions),
            forward_s: spec.seconds(forward),
            backward_s: spec.seconds(backward),
            recompute_s: spec.seconds(forward.saturating_mul(recompute)),
            micro_batch_s: spec.seconds(total),
        }
    }

    /// The step's compute, the pipeline's ramp and the exchange between
    /// stages.
    fn pipeline(
        &self,
        cost: &CostModel<'_>,
        ranges: &[Range<usize>],
        plans: &[StagePlan],
    ) -> Pipeline {
        let spec = *self.machine().ipu();
        let layers = self.model.layers();
        let stages = self.ipus_per_replica;
        let accumulation = self.gradient_accumulation as u64;
        let slowest = plans.iter().map(|p| p.micro_batch_s).fold(0.0, f64::max);
        let sum: f64 = plans.iter().map(|p| p.micro_batch_s).sum();
        let pipelined = stages > 1 && self.schedule != Schedule::Sequential;
        let p = stages as u64;
        let steps = if pipelined {
            2 * (p - 1) + (accumulation - (p - 1))
        } else {
            accumulation * p
        };
        let boundaries: Vec<f64> = ranges[..stages - 1]
            .iter()
            .enumerate()
            .map(|(s, r)| {
                let b = self.precision.bytes().activation_bytes(
                    (self.micro_batch as u64).saturating_mul(layers[r.end - 1].boundary_bytes()),
                );
                // Activations forward, their gradients backward.
                2.0 * spec.seconds(cost.boundary(b, s, stages))
            })
            .collect();
        if pipelined {
            let link = boundaries.iter().copied().fold(0.0, f64::max);
            Pipeline {
                steps,
                compute_s: accumulation as f64 * slowest,
                bubble_s: (p - 1) as f64 * slowest,
                stage_exchange_s: steps as f64 * link,
            }
        } else {
            Pipeline {
                steps,
                compute_s: accumulation as f64 * sum,
                bubble_s: 0.0,
                stage_exchange_s: accumulation as f64 * boundaries.iter().fold(0.0, |a, b| a + b),
            }
        }
    }

    /// Bytes of gradients one replica all-reduces.
    fn gradient_bytes(&self, params_max: u64) -> u64 {
        params_max
            .saturating_mul(self.precision.bytes().gradients)
            .saturating_mul(self.ipus_per_replica as u64)
    }

    /// The step's parts on the Pod.
    fn step(
        &self,
        layout: &Layout,
        spec: &IpuSpec,
        stages: &Stages,
        pipeline: &Pipeline,
    ) -> StepBreakdown {
        let bytes = self.precision.bytes();
        let p = self.ipus_per_replica as u64;
        let grad_bytes = self.gradient_bytes(stages.params_max);
        let all_reduce = if self.replicated_tensor_sharding {
            let rs = layout.reduce_scatter_time(grad_bytes);
            let ag = layout.all_gather_time(
                stages
                    .params_max
                    .saturating_mul(bytes.weights)
                    .saturating_mul(p),
            );
            CollectiveTime {
                ipu_link_s: rs.ipu_link_s + ag.ipu_link_s,
                gw_link_s: rs.gw_link_s + ag.gw_link_s,
            }
        } else {
            layout.all_reduce_time(grad_bytes)
        };
        let busy = pipeline.compute_s + pipeline.bubble_s + pipeline.stage_exchange_s;
        StepBreakdown {
            compute_s: pipeline.compute_s,
            bubble_s: pipeline.bubble_s,
            stage_exchange_s: pipeline.stage_exchange_s,
            sync_s: layout.sync_time(),
            all_reduce,
            optimizer_s: spec.seconds(stages.optimizer_cycles),
            offload_s: stages.offload_s,
            host_io_s: layout.host_input_wait(
                (self.micro_batch as u64)
                    .saturating_mul(self.gradient_accumulation as u64)
                    .saturating_mul(self.model.input_bytes()),
                busy,
                Prefetch {
                    micro_batches_per_step: self.gradient_accumulation,
                    steps_per_run: self.device_iterations,
                    depth: POPLAR_PREFETCH_DEPTH,
                },
            ),
        }
    }

    /// The plan from its parts: throughput, scaling, the fullest tile and
    /// what overflows.
    fn summary(
        &self,
        spec: &IpuSpec,
        (stages, pipeline, step): (Stages, Pipeline, StepBreakdown),
        calibration: Option<Calibrated>,
    ) -> Result<Plan, PlanError> {
        let pod = self.machine();
        let n_stages = self.ipus_per_replica;
        let step_s = step.total();
        let global_batch = self
            .micro_batch
            .saturating_mul(self.gradient_accumulation)
            .saturating_mul(self.replicas);
        let samples_per_second = global_batch as f64 / step_s;
        let (fwd, bwd) = self.model.flops_per_sample();
        // The peak of the units that run the products: FP8's where the
        // FP8 units take them, FP16's otherwise.
        let on_fp8 = spec.product(self.precision.products()).path == ProductPath::Fp8Units;
        let peak_per_ipu = if on_fp8 {
            spec.peak_fp8_flops()
        } else {
            spec.peak_fp16_flops()
        };
        let peak = peak_per_ipu * self.replicas as f64 * n_stages as f64;
        let pod_independent = step_s - step.all_reduce.total() - step.sync_s;
        let pods: Vec<PodSpec> = scaling_pods(*spec)
            .into_iter()
            .filter(|pod| pod.ipus() >= n_stages && pod.domain_ipus() >= n_stages)
            .collect();
        let scaling = scaling_table_with(
            &pods,
            n_stages,
            self.collectives,
            self.gradient_bytes(stages.params_max),
            pod_independent,
        )?;
        let (worst, overflows) = fullest(&stages.plans, spec);
        Ok(Plan {
            model: self.model.name().to_owned(),
            pod: pod.name().to_owned(),
            pod_ipus: pod.ipus(),
            ipu: ipu_name(spec),
            precision: self.precision,
            products: spec.product(self.precision.products()).path.describe(),
            optimizer: self.optimizer,
            schedule: self.schedule,
            micro_batch: self.micro_batch,
            gradient_accumulation: self.gradient_accumulation,
            replicas: self.replicas,
            ipus_per_replica: n_stages,
            recompute: self.recompute,
            replicated_tensor_sharding: self.replicated_tensor_sharding,
            offload_optimizer_state: self.offload_optimizer_state,
            global_batch,
            params: self.model.params(),
            flops_per_sample: Flops {
                forward: fwd,
                backward: bwd,
            },
            fits: overflows.is_empty(),
            worst,
            overflows,
            stages: stages.plans,
            pipeline_steps: pipeline.steps,
            step,
            step_s,
            samples_per_second,
            flops_utilisation: samples_per_second * (fwd + bwd) as f64 / peak,
            utilisation_peak: if on_fp8 { "FP8" } else { "FP16" },
            scaling,
            assumptions: self.assumptions,
            calibration,
        })
    }
}

/// The fullest tile over the stages, and the stages that do not fit.
fn fullest(plans: &[StagePlan], spec: &IpuSpec) -> (WorstTile, Vec<Overflow>) {
    let capacity = spec.memory_per_tile();
    let worst = plans
        .iter()
        .fold(None::<&StagePlan>, |w, p| match w {
            Some(w) if w.worst_tile_bytes >= p.worst_tile_bytes => Some(w),
            _ => Some(p),
        })
        .map_or(
            WorstTile {
                stage: 0,
                bytes: 0,
                capacity,
                fraction: 0.0,
            },
            |w| WorstTile {
                stage: w.stage,
                bytes: w.worst_tile_bytes,
                capacity,
                fraction: w.worst_tile_bytes as f64 / capacity as f64,
            },
        );
    let overflows = plans
        .iter()
        .filter(|p| !p.fits)
        .map(|p| {
            let (largest, largest_bytes) = p.memory.largest();
            Overflow {
                stage: p.stage,
                tile_bytes_over: p.worst_tile_bytes - capacity,
                ipu_bytes_over: p.memory.total().saturating_sub(spec.total_memory()),
                largest,
                largest_bytes,
            }
        })
        .collect();
    (worst, overflows)
}
