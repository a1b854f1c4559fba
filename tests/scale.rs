//! Tests: loss scaling.
