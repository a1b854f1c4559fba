//! What a call of [`Collectives`](super::Collectives) is asked to do
//! ([`Options`]: algorithm, order, timeout) and what it reports
//! ([`Report`], [`HierarchicalReport`]).

use std::time::Duration;

use tessera_core::collective::{Algorithm, Order};

/// The timeout of a collective unless [`Options::timeout`] says otherwise:
/// one minute. (NCCL leaves timeouts to the application; PyTorch's
/// watchdog waits 10 minutes, Gloo 30 seconds.) Tests use much shorter
/// ones.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Which algorithm a collective uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AlgorithmChoice {
    /// The cheapest by the [`CostModel`](crate::CostModel) for the message size, the number of
    /// ranks and the link between them (NCCL's rule); with
    /// [`Order::Deterministic`] asked for a Sum or Mean over more than two
    /// ranks, [`Algorithm::HalvingDoubling`], whose own order is the
    /// deterministic one (the others would send more bytes). The
    /// [`Report`] says which was used.
    #[default]
    Auto,
    /// This algorithm.
    Use(Algorithm),
}

/// In which order Sum and Mean add the ranks' contributions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OrderChoice {
    /// The algorithm's [default](Algorithm::default_order): deterministic
    /// for halving-doubling, where it costs nothing; the schedule's own for
    /// the others.
    #[default]
    AlgorithmDefault,
    /// This order for every algorithm. [`Order::Deterministic`] gives
    /// bitwise the same result for every algorithm and every number of
    /// ranks holding the same contributions (see
    /// [`tessera_core::collective`]).
    Use(Order),
}

/// How collectives run. All ranks must use the same options (a rank that
/// does not is found at its first message: [`CommError::CallMismatch`](crate::CommError::CallMismatch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    /// The algorithm.
    pub algorithm: AlgorithmChoice,
    /// The summation order.
    pub order: OrderChoice,
    /// How long one collective may take, from its start on this rank to its
    /// end; past it the rank fails with [`CommError::Timeout`](crate::CommError::Timeout) and aborts
    /// the world.
    pub timeout: Duration,
}

impl Options {
    /// Cost-model choice, the algorithm's order, [`DEFAULT_TIMEOUT`].
    ///
    /// ```
    /// use tessera_collectives::{AlgorithmChoice, DEFAULT_TIMEOUT, Options, OrderChoice};
    ///
    /// let o = Options::new();
    /// assert_eq!(o.algorithm, AlgorithmChoice::Auto);
    /// assert_eq!(o.order, OrderChoice::AlgorithmDefault);
    /// assert_eq!(o.timeout, DEFAULT_TIMEOUT);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self {
            algorithm: AlgorithmChoice::Auto,
            order: OrderChoice::AlgorithmDefault,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same with `algorithm`.
    ///
    /// ```
    /// use tessera_collectives::{Algorithm, AlgorithmChoice, Options};
    ///
    /// let o = Options::new().with_algorithm(Algorithm::Ring);
    /// assert_eq!(o.algorithm, AlgorithmChoice::Use(Algorithm::Ring));
    /// ```
    #[must_use]
    pub const fn with_algorithm(self, algorithm: Algorithm) -> Self {
        Self {
            algorithm: AlgorithmChoice::Use(algorithm),
            ..self
        }
    }

    /// The same with `order` for every algorithm.
    ///
    /// ```
    /// use tessera_collectives::{Options, Order, OrderChoice};
    ///
    /// let o = Options::new().with_order(Order::Schedule);
    /// assert_eq!(o.order, OrderChoice::Use(Order::Schedule));
    /// ```
    #[must_use]
    pub const fn with_order(self, order: Order) -> Self {
        Self {
            order: OrderChoice::Use(order),
            ..self
        }
    }

    /// The same with [`Order::Deterministic`].
    ///
    /// ```
    /// use tessera_collectives::{Options, Order};
    ///
    /// assert_eq!(Options::new().deterministic(), Options::new().with_order(Order::Deterministic));
    /// ```
    #[must_use]
    pub const fn deterministic(self) -> Self {
        self.with_order(Order::Deterministic)
    }

    /// The same with `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::Options;
    ///
    /// assert_eq!(Options::new().with_timeout(Duration::from_secs(5)).timeout.as_secs(), 5);
    /// ```
    #[must_use]
    pub const fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self::new()
    }
}

/// What a collective did on this rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Report {
    /// The algorithm used.
    pub algorithm: Algorithm,
    /// The summation order used.
    pub order: Order,
    /// The schedule's steps.
    pub steps: usize,
    /// Messages this rank sent.
    pub messages: usize,
    /// Bytes this rank sent (headers included).
    pub bytes: usize,
    /// Wall time on this rank.
    pub elapsed: Duration,
    /// The cost model's closed-form time for this algorithm, in seconds.
    pub predicted: f64,
}

/// The three phases of [`Collectives::hierarchical_all_reduce`](super::Collectives::hierarchical_all_reduce).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HierarchicalReport {
    /// Reduce-scatter inside the rank's `Consecutive(k)` group.
    pub reduce_scatter: Report,
    /// All-reduce of the rank's fragment across its `Orthogonal` group.
    pub all_reduce: Report,
    /// All-gather inside the `Consecutive(k)` group.
    pub all_gather: Report,
}
