//! Tests: kernels.
