//! The IPU and Pod simulator.
