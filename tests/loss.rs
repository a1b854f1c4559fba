//! Tests: loss functions.
