//! Tests: rng.
