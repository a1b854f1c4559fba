//! A replica's state besides its parameters: batch norm's running
//! statistics, the delayed scales' amax histories (the buffers a
//! checkpoint saves) and the quantised operands' statistics.

use super::Model;
use crate::model::error::ModelError;
use crate::model::layers::quant::QuantTensors;
use crate::model::quant::{QuantStats, TensorQuant, max_or_nan};

/// The suffix of a delayed-scaled operand's amax history's buffer name.
const HISTORY: &str = ".amax_history";

/// A buffer of [`Model::buffers`].
#[derive(Clone, Copy, Debug)]
enum Buffer {
    /// Batch-norm layer `k`'s running mean (`false`) or variance.
    Running(usize, bool),
    /// History `k`.
    History(usize),
}

impl Model {
    /// Each quantised operand's scale exponent and lost values in the last
    /// training micro-batch (empty unless the products are quantised).
    #[must_use]
    pub(crate) fn quant_stats(&self) -> Vec<TensorQuant> {
        let e = &self.train.engine;
        let read = |q: &QuantTensors| {
            let s = e.read_tensor::<f32>(q.stats).expect("f32 stats");
            let blocks = s.chunks_exact(q.stride());
            TensorQuant {
                tensor: q.name.clone(),
                exponent: blocks
                    .clone()
                    .map(|b| b[0] as i32)
                    .filter(|&k| k != QuantStats::NONE)
                    .max()
                    .unwrap_or(0),
                saturated: blocks.clone().map(|b| b[1] as u64).sum(),
                underflowed: blocks.map(|b| b[2] as u64).sum(),
            }
        };
        self.train.ids.quant.iter().map(read).collect()
    }

    /// Each delayed-scaled operand's amax in the last training micro-batch
    /// (NaN if it held a NaN), in the order of [`Model::push_amaxes`]
    /// (empty without delayed scaling).
    #[must_use]
    pub(crate) fn quant_amaxes(&self) -> Vec<f32> {
        let e = &self.train.engine;
        let delayed = self.train.ids.quant.iter().filter(|q| q.delayed.is_some());
        delayed
            .map(|q| {
                let s = e.read_tensor::<f32>(q.stats).expect("f32 stats");
                let amaxes = s.chunks_exact(q.stride()).map(|b| b[3]);
                amaxes.fold(0.0, max_or_nan)
            })
            .collect()
    }

    /// Pushes a step's amax into each delayed-scaled operand's history (in
    /// the order of [`Model::quant_amaxes`]), so that the next step casts
    /// with the new histories' scales.
    ///
    /// # Errors
    /// [`ModelError::ParamCount`] if `amaxes` is not one per operand.
    pub(crate) fn push_amaxes(&mut self, amaxes: &[f32]) -> Result<(), ModelError> {
        if amaxes.len() != self.histories.len() {
            return Err(ModelError::ParamCount {
                expected: self.histories.len(),
                got: amaxes.len(),
            });
        }
        for ((_, h), a) in self.histories.iter_mut().zip(amaxes) {
            h.push(*a);
        }
        self.write_histories();
        Ok(())
    }

    /// Writes each history's amax onto its operand's tiles, in the
    /// training and inference engines.
    pub(super) fn write_histories(&mut self) {
        for net in [&mut self.train, &mut self.eval] {
            for q in &net.ids.quant {
                let Some(d) = q.delayed else { continue };
                let Some((_, h)) = self.histories.iter().find(|(n, _)| *n == q.name) else {
                    continue;
                };
                net.engine
                    .write_tensor(d.amax, &vec![h.amax(); d.blocks])
                    .expect("a value per block");
            }
        }
    }

    /// The model's state besides its parameters, for checkpoints: the
    /// batch-norm running statistics, `layer{l}.bn.running_mean` and
    /// `layer{l}.bn.running_var` per batch-norm layer, then each
    /// delayed-scaled operand's amax history, `{operand}.amax_history`
    /// (oldest entry first); empty without either.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: true };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// let buffers = model.buffers();
    /// assert_eq!(buffers[0], ("layer0.bn.running_mean".to_string(), vec![0.0; 3]));
    /// assert_eq!(buffers[1], ("layer0.bn.running_var".to_string(), vec![1.0; 3]));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn buffers(&self) -> Vec<(String, Vec<f32>)> {
        let values = self.running.iter().flat_map(|(m, v)| [m, v]);
        let names = self.buffer_names.iter().flatten();
        let running = names.cloned().zip(values.cloned());
        let histories = self
            .histories
            .iter()
            .map(|(name, h)| (format!("{name}{HISTORY}"), h.entries().to_vec()));
        running.chain(histories).collect()
    }

    /// Restores buffers saved by [`Model::buffers`] (any subset, by
    /// name).
    ///
    /// # Errors
    /// [`ModelError::UnknownBuffer`], [`ModelError::ParamLength`]; nothing
    /// is written then.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: true };
    /// let net = mlp.network();
    /// let mut model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// model.set_buffers(&[("layer0.bn.running_var".into(), vec![2.0; 3])])?;
    /// assert_eq!(model.buffers()[1].1, [2.0; 3]);
    /// let unknown = model.set_buffers(&[("layer9.bn.running_var".into(), vec![2.0; 3])]);
    /// assert!(matches!(unknown, Err(ModelError::UnknownBuffer { .. })));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn set_buffers(&mut self, buffers: &[(String, Vec<f32>)]) -> Result<(), ModelError> {
        let mut updates = Vec::new();
        for (name, values) in buffers {
            let at = self.buffer_at(name);
            let at = at.ok_or_else(|| ModelError::UnknownBuffer { name: name.clone() })?;
            let len = match at {
                Buffer::Running(k, _) => self.running[k].0.len(),
                Buffer::History(k) => self.histories[k].1.entries().len(),
            };
            if values.len() != len {
                return Err(ModelError::ParamLength {
                    name: name.clone(),
                    expected: len,
                    got: values.len(),
                });
            }
            updates.push((at, values));
        }
        for (at, values) in updates {
            match at {
                Buffer::Running(k, is_var) => {
                    let (mean, var) = &mut self.running[k];
                    let dst = if is_var { var } else { mean };
                    dst.copy_from_slice(values);
                }
                Buffer::History(k) => {
                    let restored = self.histories[k].1.restore(values);
                    restored.expect("length checked");
                }
            }
        }
        self.write_histories();
        Ok(())
    }

    /// Where buffer `name` lives.
    fn buffer_at(&self, name: &str) -> Option<Buffer> {
        if let Some(operand) = name.strip_suffix(HISTORY) {
            let k = self.histories.iter().position(|(n, _)| n == operand)?;
            return Some(Buffer::History(k));
        }
        self.buffer_names.iter().enumerate().find_map(|(k, names)| {
            let is_var = names.iter().position(|n| n == name)?;
            Some(Buffer::Running(k, is_var == 1))
        })
    }
}
