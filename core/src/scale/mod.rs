//! Loss scaling.
