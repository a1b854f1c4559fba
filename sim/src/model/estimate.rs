//! A model's memory, found before it is built: the same graphs as
//! [`Mlp::placed`](super::Mlp::placed) builds, as
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

use std::sync::{Arc, Mutex};

use super::mlp::{Compute, Recipe};
use super::{MlpConfig, ModelError, NetworkConfig, Placement, StageActivations};
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
    /// A network's stage parts' activations in the training graph, as
    /// the built network's ([`Network::stage_activations`]): what its
    /// pipeline stashes. Empty for the MLP, whose stashes follow from
    /// its shapes.
    ///
    /// [`Network::stage_activations`]: super::Network::stage_activations
    pub stage_activations: Vec<StageActivations>,
}

impl MemoryEstimate {
    /// Measures the model [`Mlp::placed`](super::Mlp::placed) would build
    /// from the same arguments, without building it.
    ///
    /// # Errors
    /// [`Mlp::placed`](super::Mlp::placed)'s checks of the arguments;
    /// [`ModelError::TooLarge`] for a tensor whose bytes a `u64` cannot
    /// count; [`ModelError::OutOfTileMemory`] naming the first tile over
    /// its memory in either graph (which the engine would refuse too).
    pub fn of(
        config: &MlpConfig,
        target: Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        let link = Arc::new(Mutex::new(None));
        let recipe = Recipe::checked(config, &target, placement, micro_batch, compute, &link)?;
        let mut usage = Vec::with_capacity(2);
        let mut host_bytes = 0u64;
        for train in [true, false] {
            let built = recipe.graph(train, true)?;
            let graph = &built.engine.graph;
            let memory = MemoryUsage::of(graph);
            memory.check(graph).map_err(ModelError::OutOfTileMemory)?;
            host_bytes = host_bytes.saturating_add(graph.host_bytes());
            usage.push(memory);
        }
        Ok(Self::of_pair(usage, host_bytes, Vec::new()))
    }

    /// Measures the network [`Network::placed`](super::Network::placed)
    /// would build from the same arguments, without building it.
    ///
    /// # Errors
    /// [`ModelError::ZeroMicroBatch`], the network's checks
    /// ([`NetworkConfig::validate`]); [`ModelError::OutOfTileMemory`]
    /// naming the first tile over its memory in either graph.
    pub fn of_network(
        config: &NetworkConfig,
        target: Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        if micro_batch == 0 {
            return Err(ModelError::ZeroMicroBatch);
        }
        config.validate()?;
        super::convnet::check_placement(config, placement, &target)?;
        let mut usage = Vec::with_capacity(2);
        let mut host_bytes = 0u64;
        let mut stage_activations = Vec::new();
        for train in [true, false] {
            let (graph, mut activations) = super::convnet::sizing_graph(
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

/// The most bytes a tensor of the model may have: 2^58 (256 PiB, beyond
/// any machine), so that the small multiples of it the accounting takes
/// (activations and their gradients, stashes, optimizer state) cannot
/// overflow 64 bits.
pub const MAX_TENSOR_BYTES: u64 = 1 << 58;

/// The bytes of a `rows x cols` f32 tensor, if at most
/// [`MAX_TENSOR_BYTES`].
pub(super) fn fits(rows: usize, cols: usize) -> Option<u64> {
    (rows as u64)
        .checked_mul(cols as u64)
        .and_then(|n| n.checked_mul(4))
        .filter(|&n| n <= MAX_TENSOR_BYTES)
}

/// Checks that every tensor of the model (a layer's weights, a
/// micro-batch's activations) has at most [`MAX_TENSOR_BYTES`], before
/// anything multiplies its sizes.
///
/// # Errors
/// [`ModelError::TooLarge`] naming the first tensor that does not.
pub fn check_sizes(config: &MlpConfig, micro_batch: usize) -> Result<(), ModelError> {
    let fits = |dims: [usize; 2]| fits(dims[0], dims[1]).is_some();
    let mut tensors = vec![("x".to_owned(), [micro_batch, config.inputs])];
    for (l, (fan_in, width)) in config.layers().into_iter().enumerate() {
        tensors.push((format!("layer{l}.weight"), [fan_in, width]));
        tensors.push((format!("layer{l}.y"), [micro_batch, width]));
    }
    match tensors.into_iter().find(|(_, dims)| !fits(*dims)) {
        Some((tensor, shape)) => Err(ModelError::TooLarge { tensor, shape }),
        None => Ok(()),
    }
}
