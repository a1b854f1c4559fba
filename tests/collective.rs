//! Tests: collective schedules and executor.
