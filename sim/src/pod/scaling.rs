//! How data-parallel training scales over Pod sizes.

use serde::Serialize;

use super::error::PodError;
use super::layout::{CollectiveTime, Distribution, Layout};
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
    /// Compute over step time: the fraction of perfect scaling reached.
    pub efficiency: f64,
    /// Samples per step relative to one replica without communication:
    /// `replicas * efficiency`.
    pub speedup: f64,
}

/// Weak scaling of data parallelism over `pods`: one replica per IPU
/// ([`Layout::data_parallel`]), each step `compute_s` seconds of compute
/// per replica and an all-reduce of `gradient_bytes`. `compute_s` is
/// taken as given (a negative or NaN figure gives meaningless rows).
///
/// ```
/// use tessera_sim::pod::{scaling_table, PodSpec};
///
/// let pods = [PodSpec::pod16(), PodSpec::pod64(), PodSpec::pods(4)?];
/// let rows = scaling_table(&pods, 4 * 25_000_000, 0.1);
/// assert_eq!(rows.iter().map(|r| r.replicas).collect::<Vec<_>>(), [16, 64, 256]);
/// assert_eq!(rows[1].all_reduce.gw_link_s, 0.0);
/// assert!(rows[2].all_reduce.gw_link_s > 0.0);
/// assert!(rows.iter().all(|r| r.efficiency > 0.0 && r.efficiency <= 1.0));
/// # Ok::<(), tessera_sim::pod::PodError>(())
/// ```
#[must_use]
pub fn scaling_table(pods: &[PodSpec], gradient_bytes: u64, compute_s: f64) -> Vec<ScalingRow> {
    pods.iter()
        .map(|pod| row(pod, &Layout::data_parallel(pod), gradient_bytes, compute_s))
        .collect()
}

/// [`scaling_table`] for replicas of `ipus_per_replica` IPUs each (a
/// pipelined model): every Pod filled with `pod.ipus() / ipus_per_replica`
/// replicas (at least one), one instance; `gradient_bytes` per replica,
/// spread over its IPUs as [`Layout::all_reduce_time`] says; `compute_s`
/// everything of a step that does not depend on the Pod's size.
///
/// ```
/// use tessera_sim::pod::{scaling_table_with, PodSpec};
///
/// let pods = [PodSpec::pod16(), PodSpec::pod64()];
/// let rows = scaling_table_with(&pods, 4, 2 * 340_000_000, 0.5)?;
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
            .layout(pod)?;
            Ok(row(pod, &layout, gradient_bytes, compute_s))
        })
        .collect()
}

/// One row: `compute_s`, then the all-reduce and a sync of `layout`.
fn row(pod: &PodSpec, layout: &Layout, gradient_bytes: u64, compute_s: f64) -> ScalingRow {
    let all_reduce = layout.all_reduce_time(gradient_bytes);
    let sync_s = layout.sync_time();
    let step_s = compute_s + all_reduce.total() + sync_s;
    let efficiency = if step_s > 0.0 {
        compute_s / step_s
    } else {
        1.0
    };
    ScalingRow {
        pod: pod.name().to_owned(),
        replicas: layout.replicas(),
        ipus_per_replica: layout.ipus_per_replica(),
        all_reduce,
        sync_s,
        step_s,
        efficiency,
        speedup: layout.replicas() as f64 * efficiency,
    }
}
