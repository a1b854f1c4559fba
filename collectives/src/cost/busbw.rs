//! nccl-tests' algorithm and bus bandwidths.

use tessera_core::collective::Collective;

/// nccl-tests' bus-bandwidth factor: `2 (p - 1) / p` for all-reduce,
/// `(p - 1) / p` for reduce-scatter and all-gather, 1 for reduce and
/// broadcast. Bus bandwidth = algorithm bandwidth times the factor, so it
/// compares with the link's speed whatever `p`.
///
/// ```
/// use tessera_collectives::Collective;
/// use tessera_collectives::cost::bus_factor;
///
/// assert_eq!(bus_factor(Collective::AllReduce, 4), 1.5);
/// assert_eq!(bus_factor(Collective::AllGather, 4), 0.75);
/// assert_eq!(bus_factor(Collective::Broadcast { root: 0 }, 4), 1.0);
/// ```
#[must_use]
pub fn bus_factor(collective: Collective, p: usize) -> f64 {
    let pf = p as f64;
    match collective {
        Collective::AllReduce => 2.0 * (pf - 1.0) / pf,
        Collective::ReduceScatter | Collective::AllGather => (pf - 1.0) / pf,
        Collective::Reduce { .. } | Collective::Broadcast { .. } => 1.0,
    }
}

/// nccl-tests' algorithm bandwidth: the buffer's `bytes` over `seconds`.
///
/// ```
/// use tessera_collectives::cost::algbw;
///
/// assert_eq!(algbw(4_000_000, 0.002), 2.0e9);
/// ```
#[must_use]
pub fn algbw(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds
}

/// nccl-tests' bus bandwidth: [`algbw`] times [`bus_factor`].
///
/// ```
/// use tessera_collectives::Collective;
/// use tessera_collectives::cost::busbw;
///
/// // 4 MB all-reduced over 4 ranks in 2 ms: 2 GB/s of algorithm bandwidth.
/// assert_eq!(busbw(Collective::AllReduce, 4, 4_000_000, 0.002), 3.0e9);
/// ```
#[must_use]
pub fn busbw(collective: Collective, p: usize, bytes: usize, seconds: f64) -> f64 {
    algbw(bytes, seconds) * bus_factor(collective, p)
}
