//! Costs fitted per algorithm and rank count to a transport's measured
//! all-reduce times: [`Fitted`], [`AlgorithmCost`].

/// One algorithm's cost on a transport, fitted to measured all-reduce
/// times ([`crate::fit::fit_algorithm`]): seconds per step, and seconds per
/// byte of the algorithm's bandwidth term ([`Terms::bandwidth`](super::Terms::bandwidth)),
/// reductions included, while a rank's buffer fits in [`Fitted::cache`]
/// and for the bytes beyond.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlgorithmCost {
    /// Seconds per step.
    pub alpha: f64,
    /// Seconds per byte of a buffer that stays in cache.
    pub beta_cached: f64,
    /// Seconds per byte beyond [`Fitted::cache`].
    pub beta_streamed: f64,
}

/// A transport's measured costs: per rank count measured, each
/// algorithm's [`AlgorithmCost`], in [`Algorithm::ALL`](tessera_core::collective::Algorithm::ALL)'s order. A rank
/// count between two measured ones takes the lower one's costs (fewer
/// than the first, the first's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fitted {
    /// Bytes of a rank's buffer charged at `beta_cached`: of a buffer of
    /// `b` bytes, the bandwidth term's share `min(1, cache / b)`.
    pub cache: f64,
    /// `(ranks, costs)`, ranks increasing.
    pub ranks: &'static [(usize, [AlgorithmCost; 4])],
}

impl Fitted {
    /// The thread transport ([`crate::ThreadWorld`]) on the 2-core machine
    /// of the README's figures, 2 and 4 ranks, in cache up to 1 MiB per
    /// rank: fitted by
    /// `cargo run --release -p tessera-collectives --example fit -- --terms`
    /// to the best times of 8 runs of `tessera bench allreduce --json` (f32
    /// Sum, every algorithm, 4 KiB to 256 MiB) on a machine shared with
    /// other jobs, so noisy: root-mean-square relative errors of 17 to 22%
    /// at 2 ranks, 24 to 27% at 4. What matters is the choice, and in those
    /// runs every pick was within 3.2% of the fastest algorithm: at 4 ranks
    /// halving-doubling up to 64 KiB, the ring from 256 KiB.
    pub const THREADS: Self = Self {
        cache: THREADS_CACHE,
        ranks: THREADS_RANKS,
    };

    /// MPI processes on the same machine as [`Self::THREADS`] (Open MPI
    /// 4.1 over shared memory, the `mpi` feature), 2 and 4 ranks: fitted as
    /// it is, by `fit -- --terms --mpi`, to 3 runs each of `mpirun -n 2`
    /// and `mpirun -n 4 --oversubscribe tessera bench allreduce --transport
    /// mpi --json`, noisier still (root-mean-square relative errors 31 to
    /// 35% at 2 ranks, 17 to 36% at 4). Over those runs and 2 more of each,
    /// its picks were within 1.06x of the fastest algorithm (median of the
    /// runs) at every size; the single link's (the ring at 2 ranks,
    /// halving-doubling at 4) were up to 3.8x at 2 ranks and 1.22 to 1.46x
    /// at 4 from 1 MiB.
    pub const PROCESSES: Self = Self {
        cache: THREADS_CACHE,
        ranks: PROCESSES_RANKS,
    };

    /// The costs for `p` ranks.
    pub(super) fn costs(&self, p: usize) -> Option<&[AlgorithmCost; 4]> {
        let mut found = self.ranks.first().map(|(_, c)| c);
        for (ranks, costs) in self.ranks {
            if *ranks <= p {
                found = Some(costs);
            }
        }
        found
    }
}

/// Bytes of a rank's buffer that [`Fitted::THREADS`] charges at
/// `beta_cached`: the 1 MiB L2 of a core on the machine it was fitted on.
const THREADS_CACHE: f64 = 1_048_576.0;

/// [`Fitted::THREADS`]' costs: `(ranks, [ring, bidirectional ring, double
/// binary tree, halving-doubling])`, alpha in seconds, betas in seconds per
/// byte, as the fit example prints them (4 of its 8 runs measured 1 MiB and
/// up only).
const THREADS_RANKS: &[(usize, [AlgorithmCost; 4])] = &[
    (
        2,
        [
            cost(1.565e-6, 9.675e-11, 2.246e-10),
            cost(2.067e-6, 1.167e-10, 4.268e-10),
            cost(1.731e-6, 6.382e-11, 1.873e-10),
            cost(1.574e-6, 9.303e-11, 2.325e-10),
        ],
    ),
    (
        4,
        [
            cost(3.645e-6, 2.614e-10, 2.477e-10),
            cost(5.976e-6, 2.787e-10, 4.810e-10),
            cost(6.099e-6, 2.075e-10, 3.677e-10),
            cost(4.314e-6, 2.892e-10, 4.866e-10),
        ],
    ),
];

/// [`Fitted::PROCESSES`]' costs, as [`THREADS_RANKS`].
const PROCESSES_RANKS: &[(usize, [AlgorithmCost; 4])] = &[
    (
        2,
        [
            cost(2.157e-6, 2.360e-10, 4.864e-10),
            cost(2.543e-6, 2.584e-10, 4.698e-10),
            cost(2.172e-6, 1.220e-10, 2.107e-10),
            cost(2.130e-6, 2.196e-10, 4.767e-10),
        ],
    ),
    (
        4,
        [
            cost(8.221e-6, 4.203e-10, 1.426e-9),
            cost(8.929e-6, 4.267e-10, 8.970e-10),
            cost(8.926e-6, 3.749e-10, 5.382e-10),
            cost(9.194e-6, 5.011e-10, 1.088e-9),
        ],
    ),
];

pub(super) const fn cost(alpha: f64, beta_cached: f64, beta_streamed: f64) -> AlgorithmCost {
    AlgorithmCost {
        alpha,
        beta_cached,
        beta_streamed,
    }
}
