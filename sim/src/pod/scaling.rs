//! How data-parallel training scales over Pod sizes.

use serde::Serialize;

use super::error::PodError;
use super::layout::{Algorithms, CollectiveTime, Distribution, Layout};
use super::spec::PodSpec;

/// One Pod size of [`scaling_table`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScalingRow {
    /// The Pod's name.
    pub pod: String,
    /// Replicas (one per IPU in [`scaling_table`]).
    pub replicas: usize,
    /// IPUs per replica (1 in [`scaling_table`]).
    pub ipus_per_replica: usize,
    /// The gradients' all-reduce.
    pub all_reduce: CollectiveTime,
    /// One global sync.
    pub sync_s: f64,
    /// Seconds per step: compute, then all-reduce, then sync (no overlap).
    pub step_s: f64,
    /// Throughput per IPU relative to the first (smallest) Pod's: the
    /// fraction of linear scaling reached (1 for the first row).
    pub efficiency: f64,
    /// Throughput relative to the first Pod's: its IPUs over the first
    /// Pod's, times `efficiency`.
    pub speedup: f64,
}

/// Weak scaling of data parallelism over `pods` (smallest first): one
/// replica per IPU ([`Layout::data_parallel`]), each step `compute_s`
/// seconds of compute per replica and an all-reduce of `gradient_bytes`.
/// Every replica does the same work, so throughput per IPU goes as
/// `1 / step_s`: a row's efficiency is the first row's step time over its
/// own. `compute_s` is taken as given (a negative or NaN figure gives
/// meaningless rows).
///
/// ```
/// use tessera_sim::pod::{scaling_table, PodSpec};
///
/// let pods = [PodSpec::pod16(), PodSpec::pod64(), PodSpec::pods(4)?];
/// let rows = scaling_table(&pods, 4 * 25_000_000, 0.1);
/// assert_eq!(rows.iter().map(|r| r.replicas).collect::<Vec<_>>(), [16, 64, 256]);
/// assert_eq!(rows[1].all_reduce.gw_link_s, 0.0);
/// assert!(rows[2].all_reduce.gw_link_s > 0.0);
/// assert_eq!(rows[0].efficiency, 1.0); // relative to the smallest Pod
/// assert!(rows.iter().all(|r| r.efficiency > 0.0 && r.efficiency <= 1.0));
/// # Ok::<(), tessera_sim::pod::PodError>(())
/// ```
#[must_use]
pub fn scaling_table(pods: &[PodSpec], gradient_bytes: u64, compute_s: f64) -> Vec<ScalingRow> {
    relative(
        pods.iter()
            .map(|pod| row(pod, &Layout::data_parallel(pod), gradient_bytes, compute_s))
            .collect(),
    )
}

/// [`scaling_table`] for replicas of `ipus_per_replica` IPUs each (a
/// pipelined model), collectives priced over `algorithms`: every Pod filled with `pod.ipus() / ipus_per_replica`
/// replicas (at least one), one instance; `gradient_bytes` per replica,
/// spread over its IPUs as [`Layout::all_reduce_time`] says; `compute_s`
/// everything of a step that does not depend on the Pod's size.
///
/// ```
/// use tessera_sim::pod::{scaling_table_with, Algorithms, PodSpec};
///
/// let pods = [PodSpec::pod16(), PodSpec::pod64()];
/// let rows = scaling_table_with(&pods, 4, Algorithms::Gcl, 2 * 340_000_000, 0.5)?;
/// assert_eq!(rows.iter().map(|r| r.replicas).collect::<Vec<_>>(), [4, 16]);
/// assert!(rows.iter().all(|r| r.ipus_per_replica == 4));
/// # Ok::<(), tessera_sim::pod::PodError>(())
/// ```
///
/// # Errors
/// [`PodError`] from [`Distribution::layout`]: IPUs per replica of 0 or
/// not a power of two, or a replica larger than a Pod's IPU-Link domain
/// (or than the Pod).
pub fn scaling_table_with(
    pods: &[PodSpec],
    ipus_per_replica: usize,
    algorithms: Algorithms,
    gradient_bytes: u64,
    compute_s: f64,
) -> Result<Vec<ScalingRow>, PodError> {
    pods.iter()
        .map(|pod| {
            let layout = Distribution {
                instances: 1,
                replicas: (pod.ipus() / ipus_per_replica.max(1)).max(1),
                ipus_per_replica,
            }
            .layout(pod)?
            .with_algorithms(algorithms);
            Ok(row(pod, &layout, gradient_bytes, compute_s))
        })
        .collect::<Result<_, _>>()
        .map(relative)
}

/// Efficiency and speedup relative to the first row: per-IPU throughput
/// (same work per replica, so `1 / step_s`) and throughput.
fn relative(mut rows: Vec<ScalingRow>) -> Vec<ScalingRow> {
    let Some(first) = rows.first() else {
        return rows;
    };
    let (step0, ipus0) = (
        first.step_s,
        (first.replicas * first.ipus_per_replica) as f64,
    );
    for r in &mut rows {
        r.efficiency = if r.step_s > 0.0 {
            step0 / r.step_s
        } else {
            1.0
        };
        r.speedup = (r.replicas * r.ipus_per_replica) as f64 / ipus0 * r.efficiency;
    }
    rows
}

/// One row: `compute_s`, then the all-reduce and a sync of `layout`
/// (efficiency and speedup filled in by [`relative`]).
fn row(pod: &PodSpec, layout: &Layout, gradient_bytes: u64, compute_s: f64) -> ScalingRow {
    let all_reduce = layout.all_reduce_time(gradient_bytes);
    let sync_s = layout.sync_time();
    let step_s = compute_s + all_reduce.total() + sync_s;
    ScalingRow {
        pod: pod.name().to_owned(),
        replicas: layout.replicas(),
        ipus_per_replica: layout.ipus_per_replica(),
        all_reduce,
        sync_s,
        step_s,
        efficiency: 1.0,
        speedup: 1.0,
    }
}
