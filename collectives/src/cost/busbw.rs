//! nccl-tests' algorithm and bus bandwidths.

use tessera_core::collective::Collective;

/// nccl-tests' bus-bandwidth factor: `2 (p - 1) / p` for all-reduce,
/// `(p - 1) / p` for reduce-scatter and all-gather, 1 for reduce and
/// broadcast. Bus bandwidth = algorithm bandwidth times the factor, so it
/// compares with the link's speed whatever `p`.
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
#[must_use]
pub fn algbw(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds
}

/// nccl-tests' bus bandwidth: [`algbw`] times [`bus_factor`].
#[must_use]
pub fn busbw(collective: Collective, p: usize, bytes: usize, seconds: f64) -> f64 {
    algbw(bytes, seconds) * bus_factor(collective, p)
}
