//! The table of the trainer's MLP.

use super::error::ModelTableError;
use super::layer::{Gemm, Layer};
use super::model_table::ModelTable;
use crate::model::MlpConfig;

impl ModelTable {
    /// The table of the trainer's MLP ([`crate::model`]): a row per dense
    /// layer (`layer{l}`), with the simulator's FLOP counts
    /// ([`Mlp::flops_per_sample`](crate::model::Mlp::flops_per_sample)),
    /// the pre-activation and the activation stashed, and the trainer's
    /// host input per sample (f32 features and a `u32` label). Batch norm
    /// adds its parameters; its extra phases are not priced.
    ///
    /// # Errors
    /// [`ModelTableError::Field`] for a zero width,
    /// [`ModelTableError::Overflow`] for widths whose products overflow.
    pub fn from_mlp(config: &MlpConfig) -> Result<Self, ModelTableError> {
        let mut widths = vec![config.inputs];
        widths.extend(&config.hidden);
        widths.push(config.classes);
        let last = widths.len() - 2;
        let overflow = |field| ModelTableError::Overflow {
            origin: "mlp".into(),
            field,
        };
        let mut layers = Vec::with_capacity(widths.len() - 1);
        for (l, w) in widths.windows(2).enumerate() {
            let (i, o) = (w[0] as u64, w[1] as u64);
            let bn = if config.batch_norm && l < last {
                o.saturating_mul(2)
            } else {
                0
            };
            let weights = i.checked_mul(o).ok_or_else(|| overflow("params"))?;
            // 2 i o forward; the backward pass twice that (but the first
            // layer's): 4 i o must fit.
            let f = weights
                .checked_mul(4)
                .map(|x| x / 2)
                .ok_or_else(|| overflow("flops_backward"))?;
            layers.push(Layer {
                name: format!("layer{l}"),
                params: weights
                    .checked_add(o.saturating_add(bn))
                    .ok_or_else(|| overflow("params"))?,
                flops_forward: f,
                flops_backward: if l == 0 { f } else { 2 * f },
                activation_bytes: o.saturating_mul(4),
                output_bytes: None,
                gemm: Some(Gemm { m: 1, k: i, n: o }),
                tied: None,
                sim: None,
            });
        }
        Self::checked(
            format!("mlp {}", mlp_name(config)),
            "mlp",
            (config.inputs as u64).saturating_mul(4).saturating_add(4),
            layers,
        )
    }
}

/// `64-128-64-10`.
fn mlp_name(c: &MlpConfig) -> String {
    let mut w = vec![c.inputs];
    w.extend(&c.hidden);
    w.push(c.classes);
    w.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Activation;

    #[test]
    fn the_mlp_table_has_the_simulators_flops() {
        let c = MlpConfig {
            inputs: 64,
            hidden: vec![128, 64],
            classes: 10,
            activation: Activation::Relu,
            batch_norm: false,
        };
        let t = ModelTable::from_mlp(&c).unwrap();
        let params: usize = c.params().iter().map(|p| p.len()).sum();
        assert_eq!(t.params(), params as u64);
        // Mlp::flops_per_sample: the backward pass is dW for every layer and
        // dA for all but the first.
        let f = [2 * 64 * 128, 2 * 128 * 64, 2 * 64 * 10];
        assert_eq!(
            t.flops_per_sample(),
            (f.iter().sum(), f[0] + 2 * f[1] + 2 * f[2])
        );
        assert_eq!(t.input_bytes(), 4 * 64 + 4);
        let bn = ModelTable::from_mlp(&MlpConfig {
            batch_norm: true,
            ..c.clone()
        })
        .unwrap();
        assert_eq!(bn.params(), t.params() + 2 * (128 + 64));
        let zero = MlpConfig {
            hidden: vec![0],
            ..c
        };
        assert!(ModelTable::from_mlp(&zero).is_err());
    }
}
