//! Every efficiency factor and assumption of the planner, in one place.
//!
//! The machine's own figures (tiles, memory, clock, the per-kernel cycle
//! costs, exchange and link rates, syncs, host rates) are
//! [`IpuSpec`](crate::IpuSpec)'s and the [`pod`](crate::pod) module's, each
//! with its source in those modules' tables; the planner reads them from
//! there. What the planner adds is below: the fields of
//! [`PlanAssumptions`] (overridable), then the modelling rules that are
//! not numbers.
//!
//! | field | [`PlanAssumptions::ipu`] (default) | [`PlanAssumptions::simulator`] | source |
//! |---|---|---|---|
//! | [`matmul_plan`](PlanAssumptions::matmul_plan) | [`MatmulPlan::Balanced`] | [`MatmulPlan::Simulator`] | Balanced: assumption, the shape of the split Poplar's matmul planner searches (rows, columns and the reduction); Simulator: `kernels::matmul` |
//! | [`matmul_efficiency`](PlanAssumptions::matmul_efficiency) | 0.75 | 1.0 | assumption: the AMP vertices' fraction of their peak on real shapes (partial 16 x 16 blocks, pipeline fill); the simulator charges exactly `fp16_flops_per_tile_cycle` |
//! | [`min_tile_flops`](PlanAssumptions::min_tile_flops) | 2^16 | 2^16 | the simulator's [`crate::model::MIN_BLOCK_FLOPS`]: a product uses no more tiles than gives each this much work |
//! | [`exchange_element_bytes`](PlanAssumptions::exchange_element_bytes) | the precision's (2 or 4) | 4 | the simulator holds every value in an f32 tensor |
//! | [`tile_imbalance`](PlanAssumptions::tile_imbalance) | 1.15 | 1.15 | assumption: the fullest tile over the mean of an IPU's tensors (mappings in grains, odd shapes); PopVision reports of large models commonly show 10-20% |
//! | [`code_bytes_per_tile`](PlanAssumptions::code_bytes_per_tile) | 48 KiB | 48 KiB | assumption: control code, vertex code and state, exchange code common to a program (about 8% of a tile) |
//! | [`code_bytes_per_layer_per_tile`](PlanAssumptions::code_bytes_per_layer_per_tile) | 512 B | 512 B | assumption: a layer's vertices, their state and its exchanges' code on every tile it uses |
//! | [`interleaved_stash_fraction`](PlanAssumptions::interleaved_stash_fraction) | 0.5 | 0.5 | assumption: the Interleaved schedule runs a backward pass after each forward pass, so its stashes fill at half the Grouped schedule's rate (`P - s` micro-batches at stage `s` of `P`) |
//! | [`recompute_segment`](PlanAssumptions::recompute_segment) | `None`: `ceil(sqrt(layers of the stage))` | the same | Chen et al. 2016 ("Training deep nets with sublinear memory cost"): checkpoints every `sqrt(n)` layers; Graphcore's BERT checkpoints every encoder layer (5 rows here) |
//!
//! Modelling rules (not overridable):
//!
//! - **Phases.** A layer's pass is bulk-synchronous phases, each an
//!   exchange, a compute set (`compute_set_cycles` plus the busiest
//!   tile's workers running the kernel's cycle cost) and a sync of the
//!   replica's IPUs, as the simulator runs them: forward, the product
//!   then an element-wise phase (bias, normalisation, activation) over the
//!   output; backward, the weight gradient (a product), the bias and norm
//!   gradients (a reduction over the micro-batch), the input gradient (a
//!   product, unless the layer has none) and the activation's derivative
//!   (all but the last layer). The last stage adds the loss
//!   (`cross_entropy` per output element), the first the micro-batch's
//!   host transfer. A layer without a `gemm` is vector work (`activation`
//!   cost per operation) spread over up to every tile.
//! - **No overlap.** Compute, exchange, syncs, collectives, the optimizer,
//!   offloading and host IO run one after the other, as the trainer's
//!   [`StepTime`](crate::train::StepTime) adds them.
//! - **Precision** ([`Precision`](super::Precision)): bytes per parameter
//!   of weights, gradients, master weights and each optimizer state
//!   tensor: `32.32` 4, 4, 0, 4; `16.32` 2, 2, 4, 4; `16.16` 2, 2, 0, 2
//!   (Graphcore's 16.16 keeps optimizer state in FP16; the trainer keeps
//!   it in f32). Activations 2 bytes in 16-bit compute, 4 in `32.32`.
//!   Gradients cross the links at the compute precision, as the trainer's.
//! - **FP8 and MX** (`8.16`, `8.32`, `mxfp8.16`, `mxfp6.16`, `mxfp4.16`):
//!   weights, gradients, master and optimizer state as `16.16` (`8.32` as
//!   `16.32`); the products' inputs, and so the stashed and exchanged
//!   activations and the gradients between layers, in the products'
//!   [`Encoding`](crate::ipu::Encoding): FP8 1 byte, MXFP8 1 + 1/32,
//!   MXFP6 0.75 + 1/32, MXFP4 0.5 + 1/32 bytes per element (packed codes
//!   and an E8M0 scale per 32). Each product's output and its gradient are
//!   rounded into the encoding (`convert_f8` or `convert_mx` per element);
//!   the products run as [`IpuSpec::product`](crate::IpuSpec::product)
//!   says: on the FP8 units where the IPU has them (the C600, FP8 with a
//!   scale per tensor), otherwise each tile converts its operands to f16
//!   and runs FP16 products (Mk2 and Bow; MX on every IPU: Graphcore's FP8
//!   units take one scale per tensor, not one per block). The report says
//!   which. Vector layers (batch norm, pooling, residual adds) and the
//!   loss stay 16-bit. `--layer-costs simulated` builds the layers (or
//!   the network) as the trainer does in these precisions: quantised
//!   operands held and exchanged in their encoding, products priced as
//!   above. The flops utilisation is of the FP8 peak where the FP8 units
//!   run the products, of the FP16 peak otherwise, and the report says
//!   which.
//! - **Pipelining.** `P` stages (IPUs per replica), contiguous layers
//!   balanced on the larger of their compute and memory shares. With `G`
//!   micro-batches a step runs `N = 2(P - 1) + (G - (P - 1))` stage-steps,
//!   each as long as the slowest stage (plus the activations' and
//!   gradients' transfer to the next IPU over the IPU-Links of
//!   [`Target::route`](crate::ipu::Target::route)); `G` of them are
//!   compute, `P - 1` the ramp (the bubble). Micro-batches stashed at stage
//!   `s` (from 0): Grouped `2(P - s) - 1` (micro-batch `i`'s forward pass
//!   runs at stage-step `i + s`, its backward pass at `i + 2(P - 1) - s`),
//!   Interleaved the fraction above (at least 1), Sequential 1 (one stage
//!   at a time, as if sharded: `G` times the sum of the stages).
//! - **Recomputation** stores each stashed micro-batch's stage input and a
//!   checkpoint every `recompute_segment` layers, recomputes one segment
//!   at a time in the backward pass (one segment's activations live) and
//!   costs one more forward pass.
//! - **Replicated tensor sharding** splits optimizer state and master
//!   weights over the replicas of an IPU-Link domain (a POD64 at most);
//!   **offloading** keeps them in streaming memory, read and written every
//!   step at the IPU's host rate, as the trainer charges.

use serde::Serialize;

use super::PlanError;
use crate::model::MIN_BLOCK_FLOPS;

/// How a matrix product is cut over tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulPlan {
    /// As Poplar's planner: the output's rows and columns and the
    /// reduction split into the cheapest blocks (the busiest tile's
    /// exchange plus compute) over the tiles the product may use; each
    /// tile receives its blocks of both operands, and partial sums are
    /// exchanged and added when the reduction is split.
    Balanced,
    /// As the simulator's `kernels::matmul`
    /// ([`BlockLayout::plan`](crate::kernels::matmul::BlockLayout::plan)):
    /// the output cut into columns first, then rows (the last layer keeps
    /// its rows whole, for the loss), the reduction never split; a tile
    /// receives its rows of the left operand whole and, unless they are
    /// the weights it holds, its columns of the right one.
    Simulator,
}

impl MatmulPlan {
    /// Its name: `balanced` or `simulator`.
    ///
    /// ```
    /// use tessera_sim::plan::MatmulPlan;
    ///
    /// assert_eq!(MatmulPlan::Balanced.name(), "balanced");
    /// assert_eq!(MatmulPlan::Simulator.name(), "simulator");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Balanced => "balanced",
            Self::Simulator => "simulator",
        }
    }
}

/// The planner's efficiency factors and assumptions (see the [module
/// docs](self) for each one's source). Change fields and pass the result
/// in [`PlanConfig::assumptions`](super::PlanConfig::assumptions).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PlanAssumptions {
    /// How products are cut over tiles.
    pub matmul_plan: MatmulPlan,
    /// Fraction of the AMP's peak the matrix-product vertices reach, in
    /// `(0, 1]`.
    pub matmul_efficiency: f64,
    /// A product uses no more tiles than gives each this many FLOPs (at
    /// least 1).
    pub min_tile_flops: u64,
    /// Bytes per element exchanged between tiles (`None`: the activations'
    /// precision).
    pub exchange_element_bytes: Option<u64>,
    /// The fullest tile over the mean of an IPU's tensors (at least 1).
    pub tile_imbalance: f64,
    /// Code and exchange bytes every tile holds.
    pub code_bytes_per_tile: u64,
    /// More code bytes per tile for each layer of the stage.
    pub code_bytes_per_layer_per_tile: u64,
    /// Micro-batches the Interleaved schedule stashes, as a fraction of the
    /// Grouped schedule's, in `(0, 1]`.
    pub interleaved_stash_fraction: f64,
    /// Layers per recomputation segment (`None`: the square root of the
    /// stage's layers, rounded up); at least 1.
    pub recompute_segment: Option<usize>,
}

impl Default for PlanAssumptions {
    /// [`PlanAssumptions::ipu`].
    fn default() -> Self {
        Self::ipu()
    }
}

impl PlanAssumptions {
    /// The assumptions for a real IPU running Poplar (the default).
    ///
    /// ```
    /// use tessera_sim::plan::{MatmulPlan, PlanAssumptions};
    ///
    /// let ipu = PlanAssumptions::ipu();
    /// assert_eq!(ipu, PlanAssumptions::default());
    /// assert_eq!(ipu.matmul_plan, MatmulPlan::Balanced);
    /// assert!(ipu.validate().is_ok());
    /// ```
    #[must_use]
    pub const fn ipu() -> Self {
        Self {
            matmul_plan: MatmulPlan::Balanced,
            matmul_efficiency: 0.75,
            min_tile_flops: MIN_BLOCK_FLOPS,
            exchange_element_bytes: None,
            tile_imbalance: 1.15,
            code_bytes_per_tile: 48 << 10,
            code_bytes_per_layer_per_tile: 512,
            interleaved_stash_fraction: 0.5,
            recompute_segment: None,
        }
    }

    /// The assumptions that reproduce the simulator's own MLP
    /// implementation (its matmul plan, f32 tensors, the cost table's
    /// exact rates), to compare the planner with `tessera train`.
    ///
    /// ```
    /// use tessera_sim::plan::{MatmulPlan, PlanAssumptions};
    ///
    /// let sim = PlanAssumptions::simulator();
    /// assert_eq!(sim.matmul_plan, MatmulPlan::Simulator);
    /// assert_eq!((sim.matmul_efficiency, sim.exchange_element_bytes), (1.0, Some(4)));
    /// // The rest is the IPU's.
    /// assert_eq!(sim.tile_imbalance, PlanAssumptions::ipu().tile_imbalance);
    /// ```
    #[must_use]
    pub const fn simulator() -> Self {
        Self {
            matmul_plan: MatmulPlan::Simulator,
            matmul_efficiency: 1.0,
            exchange_element_bytes: Some(4),
            ..Self::ipu()
        }
    }

    /// Checks every field's range.
    ///
    /// # Errors
    /// [`PlanError::Assumption`] naming the first field out of range.
    ///
    /// ```
    /// use tessera_sim::plan::{PlanAssumptions, PlanError};
    ///
    /// let a = PlanAssumptions { matmul_efficiency: 1.5, ..PlanAssumptions::ipu() };
    /// assert_eq!(
    ///     a.validate(),
    ///     Err(PlanError::Assumption { field: "matmul_efficiency", value: 1.5 })
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |field: &'static str, value: f64| Err(PlanError::Assumption { field, value });
        let unit = |x: f64| x.is_finite() && x > 0.0 && x <= 1.0;
        if !unit(self.matmul_efficiency) {
            return bad("matmul_efficiency", self.matmul_efficiency);
        }
        if self.min_tile_flops == 0 {
            return bad("min_tile_flops", 0.0);
        }
        if self.exchange_element_bytes == Some(0) {
            return bad("exchange_element_bytes", 0.0);
        }
        if !(self.tile_imbalance.is_finite() && self.tile_imbalance >= 1.0) {
            return bad("tile_imbalance", self.tile_imbalance);
        }
        if !unit(self.interleaved_stash_fraction) {
            return bad(
                "interleaved_stash_fraction",
                self.interleaved_stash_fraction,
            );
        }
        if self.recompute_segment == Some(0) {
            return bad("recompute_segment", 0.0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_differ_where_documented() {
        let (ipu, sim) = (PlanAssumptions::ipu(), PlanAssumptions::simulator());
        assert_eq!(PlanAssumptions::default(), ipu);
        ipu.validate().unwrap();
        sim.validate().unwrap();
        assert_eq!(sim.matmul_plan, MatmulPlan::Simulator);
        assert_eq!(sim.exchange_element_bytes, Some(4));
        assert_eq!(sim.matmul_efficiency, 1.0);
        assert_eq!(
            PlanAssumptions {
                matmul_plan: ipu.matmul_plan,
                matmul_efficiency: ipu.matmul_efficiency,
                exchange_element_bytes: None,
                ..sim
            },
            ipu
        );
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let ok = PlanAssumptions::ipu();
        for (a, field) in [
            (
                PlanAssumptions {
                    matmul_efficiency: 0.0,
                    ..ok
                },
                "matmul_efficiency",
            ),
            (
                PlanAssumptions {
                    matmul_efficiency: 1.5,
                    ..ok
                },
                "matmul_efficiency",
            ),
            (
                PlanAssumptions {
                    matmul_efficiency: f64::NAN,
                    ..ok
                },
                "matmul_efficiency",
            ),
            (
                PlanAssumptions {
                    min_tile_flops: 0,
                    ..ok
                },
                "min_tile_flops",
            ),
            (
                PlanAssumptions {
                    exchange_element_bytes: Some(0),
                    ..ok
                },
                "exchange_element_bytes",
            ),
            (
                PlanAssumptions {
                    tile_imbalance: 0.9,
                    ..ok
                },
                "tile_imbalance",
            ),
            (
                PlanAssumptions {
                    interleaved_stash_fraction: 0.0,
                    ..ok
                },
                "interleaved_stash_fraction",
            ),
            (
                PlanAssumptions {
                    recompute_segment: Some(0),
                    ..ok
                },
                "recompute_segment",
            ),
        ] {
            match a.validate() {
                Err(PlanError::Assumption { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
