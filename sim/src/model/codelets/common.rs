//! What the vertices share: f16 rounding, f32 fields, and the cost of
//! element-wise work over all six workers.

use tessera_core::fp::{HalfFloat, f16};

use crate::ipu::{Access, DType, FieldSpec, IpuSpec, Kernel, VertexCycles};

/// Rounds to nearest f16 (overflow to infinity) if `f16`.
#[inline]
pub(crate) fn round(x: f32, f16: bool) -> f32 {
    if f16 {
        <f16 as HalfFloat>::from_f32(x).to_f32()
    } else {
        x
    }
}

pub(super) fn f32_fields(access: &[Access]) -> Vec<FieldSpec> {
    access
        .iter()
        .map(|&a| FieldSpec::new(DType::F32, a))
        .collect()
}

/// All six workers over field `field`'s elements at `kernel`'s cost.
pub(super) fn elementwise(
    kernel: Kernel,
    lens: &[u64],
    field: usize,
    spec: &IpuSpec,
) -> VertexCycles {
    let cost = spec.costs().get(kernel);
    VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[field], spec.workers_per_tile()))
}
