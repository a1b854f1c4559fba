//! The alpha-beta-gamma cost model, algorithm selection, and nccl-tests'
//! bus bandwidth.
//!
//! A message of `b` bytes over a [`Link`] costs `alpha + b * beta`
//! (`alpha` the latency, `beta = 1 / (bandwidth * efficiency)`), and
//! combining `b` bytes of contributions costs `b * gamma`
//! ([`Topology::gamma`](crate::Topology::gamma)). An algorithm's time is the sum over its steps of
//! the busiest rank's cost (SEMANTICS.md section 4, MPICH's model; NCCL's
//! `tuning.cc` does the same per algorithm and protocol and takes the
//! minimum). With `p` ranks, `F` the fragment's bytes (`ceil(n / p)`
//! elements, so `p F` is the padded buffer) and `k = lg p`:
//!
//! | algorithm | all-reduce |
//! |---|---|
//! | ring | `2 (p - 1) alpha + 2 (p - 1) F beta + (p - 1) F gamma` |
//! | bidirectional ring | as the ring, with `beta / 2` when each peer has its own link ([`Ports::PerPeer`]) |
//! | halving-doubling, `p = 2^k` | `2 k alpha + 2 (p - 1) F beta + (p - 1) F gamma` |
//! | halving-doubling, other `p` | a fold and an unfold step of the whole buffer around the above for the `2^k` survivors |
//! | double binary tree | `S alpha + 2 p F beta + p F gamma` with `S = p - 1 + 2 H` pipelined steps (`H` the trees' height, about `lg p`): through one port a rank sends `p` half-fragment chunks up each tree and `2 p` down the tree where it is inner (`2 n beta`); with a link per peer, `S F / 2 beta`, towards `n beta / 2` |
//!
//! Reduce-scatter and all-gather are the halves of all-reduce (all-gather
//! without gamma); [`terms`] gives every collective. The step counts are
//! the core schedules' own ([`CollectiveSchedule::steps`](tessera_core::collective::CollectiveSchedule::steps)), so the latency terms are
//! exact. For [`Order::Deterministic`] on rings and trees, whose messages
//! carry several partial sums, and for anything the closed forms round
//! off, [`CostModel::schedule_time`] charges every message of the actual
//! schedule.
//!
//! A link may carry [`Fitted`] costs: alpha and beta per algorithm and
//! rank count, fitted to a transport's measured all-reduce times (with
//! [`crate::fit`]), for transports whose algorithms do not share one
//! alpha and beta. The thread transport's ring, for one, moves through
//! the buffer piece by piece with each piece in cache, while its
//! halving-doubling streams every step from memory: at 4 ranks on 2 cores
//! the ring was 1.6 to 2.4x faster from 4 MiB up, against the single
//! link's prediction that halving-doubling's fewer steps always win. Then an
//! algorithm's time is its terms' `latency` times its alpha plus their
//! `bandwidth` times its beta, reductions included (the fits fold them in),
//! with one beta while the buffer stays in cache and another beyond.
//!
//! [`Order::Deterministic`]: tessera_core::collective::Order::Deterministic
//!
//! The model's parts, one file each: a [`Link`] (`link.rs`), a
//! transport's [`Fitted`] costs (`fitted.rs`), an algorithm's [`Terms`]
//! (`terms.rs`), the [`CostModel`] over a [`Topology`](crate::Topology)
//! (`model.rs`, the topology itself beside [`Fabric`](crate::Fabric) in
//! `topology.rs`), and nccl-tests' bus bandwidth (`busbw.rs`).

mod busbw;
pub(crate) mod fitted;
pub(crate) mod link;
mod model;
mod terms;
#[cfg(test)]
mod tests;

pub use busbw::{algbw, bus_factor, busbw};
pub use fitted::{AlgorithmCost, Fitted};
pub use link::{Link, Ports};
pub use model::{CostModel, Estimate};
pub use terms::{Terms, terms};
