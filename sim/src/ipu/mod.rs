//! The IPU model. Today: the machine description ([`IpuSpec`]).
//!
//! An IPU is a mosaic of tiles, each a processor with its own memory and a
//! few hardware worker threads; tiles compute on their own memory only, then
//! synchronise and exchange data (bulk-synchronous parallel).

mod spec;

pub use spec::{IpuParams, IpuSpec, SpecError, SpecField};
