//! A model's memory, found before it is built: the same graphs as
//! [`Model::placed`](super::Model::placed) builds, as
//! [`Graph::sizing`](crate::ipu::Graph::sizing) graphs (no copies stored,
//! no tensor allocated), measured by the engine's own accounting
//! ([`MemoryUsage::of`]).
//!
//! Per tile, the tensors, the vertex state and the code are the engine's
//! to the byte; the exchange code counts the receiving side of a
//! product's gathers and every other exchange in full, so it is at most
//! the engine's. A tile the estimate puts over its memory is over it in
//! the engine too, and the estimate says so in well under a second where
//! building the engine of a huge model takes minutes and gigabytes.

use super::activations::StageActivations;
use super::config::Compute;
use super::error::ModelError;
use super::network::NetworkConfig;
use super::placement::Placement;
use crate::ipu::{MemoryUsage, Target};

/// A replica's model, measured ([`MemoryEstimate::of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// The training graph's memory per tile.
    pub train: MemoryUsage,
    /// The inference graph's.
    pub eval: MemoryUsage,
    /// Bytes the two engines hold on the host, at least
    /// ([`Graph::host_bytes`](crate::ipu::Graph::host_bytes)).
    pub host_bytes: u64,
    /// The stage parts' activations in the training graph, as the built
    /// model's ([`Model::stage_activations`]): what its pipeline stashes.
    ///
    /// [`Model::stage_activations`]: super::Model::stage_activations
    pub stage_activations: Vec<StageActivations>,
}

impl MemoryEstimate {
    /// Measures the model [`Model::placed`](super::Model::placed) would
    /// build from the same arguments, without building it.
    ///
    /// # Errors
    /// [`ModelError::ZeroMicroBatch`], the network's checks
    /// ([`NetworkConfig::validate`], [`ModelError::TooLarge`] for a tensor
    /// whose bytes a `u64` cannot count), the placement's
    /// ([`Placement::validate`]); [`ModelError::OutOfTileMemory`] naming
    /// the first tile over its memory in either graph (which the engine
    /// would refuse too).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    /// use tessera_sim::model::{Activation, Compute, MemoryEstimate, MlpConfig, ModelError, Placement};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let target = || Target::single(IpuSpec::MK2_GC200);
    /// let est = MemoryEstimate::of(&mlp.network(), target(), &Placement::Spread, 2, Compute::F32)?;
    /// assert!(est.host_bytes > 0);
    /// let none = MemoryEstimate::of(&mlp.network(), target(), &Placement::Spread, 0, Compute::F32);
    /// assert_eq!(none, Err(ModelError::ZeroMicroBatch));
    /// # Ok::<(), ModelError>(())
    /// ```
    pub fn of(
        config: &NetworkConfig,
        target: Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        if micro_batch == 0 {
            return Err(ModelError::ZeroMicroBatch);
        }
        config.ops(micro_batch)?;
        placement.validate(config, &target)?;
        let mut usage = Vec::with_capacity(2);
        let mut host_bytes = 0u64;
        let mut stage_activations = Vec::new();
        for train in [true, false] {
            let (graph, mut activations) = super::replica::sizing_graph(
                config,
                (&target, placement),
                (micro_batch, compute, train),
            )?;
            let memory = MemoryUsage::of(&graph);
            memory.check(&graph).map_err(ModelError::OutOfTileMemory)?;
            host_bytes = host_bytes.saturating_add(graph.host_bytes());
            usage.push(memory);
            stage_activations.append(&mut activations);
        }
        Ok(Self::of_pair(usage, host_bytes, stage_activations))
    }

    /// The estimate of the training and the inference graph's `usage`.
    fn of_pair(
        mut usage: Vec<MemoryUsage>,
        host_bytes: u64,
        stage_activations: Vec<StageActivations>,
    ) -> Self {
        let eval = usage.pop().expect("two graphs");
        let train = usage.pop().expect("two graphs");
        Self {
            train,
            eval,
            host_bytes,
            stage_activations,
        }
    }
}
