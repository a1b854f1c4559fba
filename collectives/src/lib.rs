//! Communicators and topology-aware collectives for Tessera.
//!
//! `tessera-collectives` moves tensors between replicas: all-reduce,
//! reduce-scatter, all-gather, broadcast and reduce on slices of f32, f16
//! and bf16, between threads of one process and over MPI. The pure parts
//! (schedules, fragmenting, reduction operations, the deterministic order,
//! the in-memory executor) live in [`tessera_core::collective`]; this crate
//! runs those schedules between ranks that only exchange messages.
//!
//! # Quick start
//!
//! Four ranks on threads all-reduce a gradient; every rank ends with the
//! same bits. Everything comes from this crate (it re-exports what it uses
//! of `tessera-core`):
//!
//! ```
//! use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld, f16};
//!
//! let results = ThreadWorld::run(4, |comm| {
//!     let mut c = Collectives::new(comm).with_options(Default::default());
//!     let mut grad = vec![f16::from_f32(c.rank() as f32); 1000];
//!     // The algorithm is chosen by the cost model for this size.
//!     let report = c.all_reduce(&mut grad, Reducer::new(ReduceOp::Mean)).unwrap();
//!     assert!(report.steps > 0);
//!     grad
//! })
//! .unwrap();
//! for grad in results {
//!     assert_eq!(grad.unwrap(), vec![f16::from_f32(1.5); 1000]);
//! }
//! ```
//!
//! Over MPI (feature `mpi`), take the communicator from
//! `mpi::MpiCommunicator::world` instead and launch with `mpirun`; the
//! rest is the same.
//!
//! # Contents
//!
//! - [`Communicator`]: rank, size, point-to-point messages with a timeout
//!   ([`Communicator::exchange`], [`send`](Communicator::send),
//!   [`recv`](Communicator::recv), typed slices), barrier, abort.
//! - Transports: [`ThreadWorld`] (threads of one process, shared memory,
//!   no serialisation) and, with the `mpi` feature, `mpi::MpiCommunicator`
//!   (Open MPI or any MPI through rsmpi, launched with `mpirun`).
//! - [`Collectives`]: the collective operations over any communicator, with
//!   the algorithm ([`Algorithm`]: ring, bidirectional ring, double binary
//!   tree, recursive halving-doubling) given or chosen by the cost model;
//!   replica groups ([`Collectives::in_group`], [`GroupComm`]) and the
//!   two-level [`Collectives::hierarchical_all_reduce`].
//! - [`group`]: replica groups ([`ReplicaGroup`]: All, Consecutive(k),
//!   Orthogonal(k), Graphcore's `CommGroup`).
//! - [`cost`]: the alpha-beta-gamma model over a [`Topology`] of link kinds,
//!   with costs fitted per algorithm for the thread and MPI transports
//!   ([`cost::Fitted`]), NCCL-style selection per message size, nccl-tests'
//!   bus bandwidth; the simulator charges communication with the same
//!   numbers.
//! - [`fit`]: time collectives on this machine and fit alpha and beta (or
//!   an algorithm's cost) by least squares, with the fit's error.
//! - [`fault`]: fault injection for tests.
//!
//! ```
//! use tessera_collectives::{
//!     Algorithm, Collectives, Options, ReduceOp, Reducer, ThreadWorld, bf16,
//! };
//!
//! let results = ThreadWorld::run(3, |comm| {
//!     let opts = Options::new().with_algorithm(Algorithm::BidirectionalRing);
//!     let mut c = Collectives::new(comm).with_options(opts);
//!     let mut x = vec![bf16::from_f32(c.rank() as f32); 7];
//!     let report = c.all_reduce(&mut x, Reducer::new(ReduceOp::Max)).unwrap();
//!     assert_eq!(report.algorithm, Algorithm::BidirectionalRing);
//!     x
//! })
//! .unwrap();
//! for x in results {
//!     assert_eq!(x.unwrap(), vec![bf16::from_f32(2.0); 7]);
//! }
//! ```
//!
//! # Cargo features
//!
//! - `mpi` (off by default): the MPI transport, through the `mpi` crate
//!   (rsmpi, without its libffi-based user operations). Building it needs
//!   an MPI library and libclang (Debian: `libopenmpi-dev openmpi-bin
//!   libclang-dev`); its test binary `tests/mpi.rs` runs itself under
//!   `mpirun -n 4`.
//!
//! # Determinism
//!
//! Every rank's result is bitwise the core executor's
//! ([`tessera_core::collective::execute`]) for the same schedule, so it is
//! bitwise the same on every rank and on every run. With
//! [`Order::Deterministic`] ([`Options::deterministic`]) Sum and Mean are,
//! moreover, the same for every algorithm and every number of ranks
//! holding the same contributions. Nothing depends on message arrival order: received
//! messages are combined in the order the schedule lists them. Group
//! membership is a pure function of (rank, replica count, group).
//!
//! # Numerics
//!
//! As [`tessera_core::collective`]: reductions in f32, 16-bit results
//! rounded once with the [`Reducer`]'s rounding at the element's
//! position, partial sums of 16-bit values sent in f32, copies bit-exact,
//! NaN canonical. Messages carry values in this
//! machine's byte order: every rank of a world must share it.
//!
//! # Failures
//!
//! Every operation has a timeout ([`Options::timeout`], default
//! [`DEFAULT_TIMEOUT`]). A rank that aborts, panics, drops its communicator
//! while awaited, sends a mismatched message or does not answer in time
//! aborts the world: every rank's pending and later operations return an
//! error naming it ([`CommError::PeerFailed`]), promptly, not at their own
//! deadlines. A timeout names the rank that stopped, found by following
//! the waits, or nobody if it cannot tell ([`CommError::Stalled`]); never
//! a live rank. A zero-length call meets its peers like any other, so a
//! length mismatch involving one is found at the first message. Under MPI
//! a rank that panics inside a collective ends the job (`MPI_Abort`). See
//! [`Communicator`] and the transports for details.

// No unsafe code, except in `loan` (the thread transport's zero-copy
// bodies), which allows it and argues its soundness.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod collectives;
pub mod comm;
pub mod cost;
pub mod error;
pub mod fault;
pub mod fit;
pub mod group;
mod loan;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub mod mpi;
pub mod route;
mod run;
pub mod subgroup;
pub mod thread;
pub mod topology;

pub use collectives::{
    AlgorithmChoice, Collectives, DEFAULT_TIMEOUT, HierarchicalReport, Options, OrderChoice,
    Report, fragment,
};
pub use comm::{
    Apply, ApplyMany, ApplyMut, Communicator, Incoming, MAX_USER_TAG, Outgoing, OutgoingMut, Tag,
};
pub use cost::{CostModel, Link, Ports};
pub use error::{Cause, CommError, ConfigError, Failure, Mismatch};
pub use group::{GroupError, Members, ReplicaGroup};
pub use subgroup::GroupComm;
pub use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Order, ReduceOp, Reducer,
};
pub use tessera_core::fp::{Element, Rounding, bf16, f16};
pub use thread::{AbortHandle, ThreadCommunicator, ThreadWorld};
pub use topology::{Edge, Fabric, FabricError, Topology};
