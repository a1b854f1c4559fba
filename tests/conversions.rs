//! Tests: conversions.
