//! The bias added and the activation applied, and the activation's
//! derivative (ReLU, and GELU's tanh approximation with `libm`'s `tanhf`).

use super::common::{elementwise, f32_fields, round};
use crate::ipu::{Access, Codelet, FieldSpec, IpuSpec, Kernel, VertexCycles, VertexIo};
use crate::model::config::Activation;

const GELU_C: f32 = 0.797_884_6; // sqrt(2 / pi)
const GELU_A: f32 = 0.044_715;

/// The activation of `z`.
#[inline]
pub(super) fn activate(act: Activation, z: f32) -> f32 {
    match act {
        Activation::Relu => z.max(0.0),
        Activation::Gelu => {
            let t = libm::tanhf(GELU_C * (z + GELU_A * z * z * z));
            0.5 * z * (1.0 + t)
        }
    }
}

/// The activation's derivative at `z`.
#[inline]
pub(super) fn derivative(act: Activation, z: f32) -> f32 {
    match act {
        Activation::Relu => {
            if z > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        Activation::Gelu => {
            let t = libm::tanhf(GELU_C * (z + GELU_A * z * z * z));
            0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * z * z)
        }
    }
}

/// `z = round(y + bias)`, and with an activation `a = round(act(z))`.
/// Fields: `y`, `bias` (the block's columns), `z`, [`a`].
#[derive(Debug)]
pub(crate) struct BiasAct {
    pub(crate) act: Option<Activation>,
    pub(crate) f16: bool,
    fields: Vec<FieldSpec>,
}

impl BiasAct {
    pub(crate) fn new(act: Option<Activation>, f16: bool) -> Self {
        let mut access = vec![Access::Read, Access::Read, Access::Write];
        if act.is_some() {
            access.push(Access::Write);
        }
        Self {
            act,
            f16,
            fields: f32_fields(&access),
        }
    }
}

impl Codelet for BiasAct {
    fn name(&self) -> &str {
        "bias_activation"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::Activation, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        {
            let [y, bias, z] = io.many([0, 1, 2]);
            let (y, bias, z) = (
                y.into_slice::<f32>(),
                bias.into_slice::<f32>(),
                z.into_slice::<f32>(),
            );
            for ((y, z), b) in y.iter().zip(z.iter_mut()).zip(bias.iter().cycle()) {
                *z = round(y + b, self.f16);
            }
        }
        if let Some(act) = self.act {
            let [z, a] = io.many([2, 3]);
            for (z, a) in z.into_slice::<f32>().iter().zip(a.into_slice::<f32>()) {
                *a = round(activate(act, *z), self.f16);
            }
        }
    }
}

/// `dz = round(round(da) * act'(z))`. Fields: `da`, `z`, `dz`.
#[derive(Debug)]
pub(crate) struct ActGrad {
    pub(crate) act: Activation,
    pub(crate) f16: bool,
    fields: Vec<FieldSpec>,
}

impl ActGrad {
    pub(crate) fn new(act: Activation, f16: bool) -> Self {
        Self {
            act,
            f16,
            fields: f32_fields(&[Access::Read, Access::Read, Access::Write]),
        }
    }
}

impl Codelet for ActGrad {
    fn name(&self) -> &str {
        "activation_grad"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::ActivationGrad, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let [da, z, dz] = io.many([0, 1, 2]);
        let (da, z) = (da.into_slice::<f32>(), z.into_slice::<f32>());
        for ((da, z), dz) in da.iter().zip(z).zip(dz.into_slice::<f32>()) {
            let g = round(*da, self.f16);
            *dz = round(g * derivative(self.act, *z), self.f16);
        }
    }
}
