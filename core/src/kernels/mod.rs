//! Vector kernels over slices.
