//! Communicators and topology-aware collectives for Tessera.
//!
//! `tessera-collectives` moves tensors between replicas: reduce-scatter,
//! all-gather, all-reduce and broadcast, between threads of one process and
//! over MPI for runs that outgrow one process or one machine. The pure
//! parts of all-reduce (schedules, fragmenting, reduction kernels) live in
//! `tessera-core`; this crate adds who talks to whom, and how.
//!
//! # Contents
//!
//! Available now:
//! - [`group`]: replica groups ([`ReplicaGroup`]: All, Consecutive(k),
//!   Orthogonal(k), Graphcore's `CommGroup`), so a collective can run inside
//!   an IPU-Link domain and then across GW-Links.
//!
//! Planned (see `ARCHITECTURE.md`):
//! - a `Communicator` trait: rank, size, send/recv with deadlines, abort;
//! - transports: in-process threads (shared memory), and MPI behind the
//!   `mpi` feature;
//! - algorithm choice (ring, bidirectional ring, double binary tree,
//!   recursive halving-doubling) from an alpha-beta-gamma cost model over a
//!   topology description, the same model that gives the simulator its
//!   communication time.
//!
//! # Determinism
//!
//! Group membership is a pure function of (rank, replica count, group);
//! every rank computes the same groups without communicating.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod group;

pub use group::{GroupError, Members, ReplicaGroup};
