//! The bytes of a checkpoint: writing the safetensors layout with its
//! digests, and reading it back only once every digest matches.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::{Checkpoint, CheckpointError, DType, Damage, Tensor, TensorData, digest, json};

impl Checkpoint {
    /// The file's bytes, in safetensors format, with the digests in the
    /// metadata (see the [module docs](super#integrity)).
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Length`] when a tensor's element count is not its
    /// shape's product; [`CheckpointError::Reserved`] when the metadata
    /// uses a digest key.
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2], vec![1.0f32, 2.0]);
    /// let bytes = c.to_bytes()?;
    /// // An 8-byte little-endian header length, the JSON header, 8 data bytes.
    /// let header = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    /// assert_eq!(bytes.len() as u64, 8 + header + 8);
    /// assert_eq!(bytes, c.to_bytes()?); // the same checkpoint, the same bytes
    /// c.metadata.insert("digest.tensors".into(), "{}".into());
    /// assert!(matches!(c.to_bytes(), Err(CheckpointError::Reserved { .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
    pub fn to_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        for tensor in &self.tensors {
            let elements = tensor
                .shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d));
            if elements != Some(tensor.data.len()) {
                return Err(CheckpointError::Length {
                    name: tensor.name.clone(),
                    shape: tensor.shape.clone(),
                    elements: tensor.data.len(),
                });
            }
        }
        let metadata = digest::sign(
            &self.metadata,
            self.tensors.iter().map(|t| {
                let d = digest::tensor(&t.name, t.data.dtype(), &t.shape, &t.data.le_bytes());
                (t.name.clone(), d)
            }),
        )?;
        // The safetensors crate's order: larger alignment first, then name,
        // so that every tensor starts aligned for its element type.
        let mut order: Vec<&Tensor> = self.tensors.iter().collect();
        order.sort_by(|a, b| {
            let (a_type, b_type) = (a.data.dtype().safetensors(), b.data.dtype().safetensors());
            b_type.cmp(&a_type).then_with(|| a.name.cmp(&b.name))
        });

        // The header, written as the crate writes it (compact JSON, the
        // metadata first, tensors in data order).
        let mut header = String::from("{\"__metadata__\":");
        header.push_str(&json(&metadata));
        let mut offset = 0;
        for tensor in &order {
            let bytes = tensor.data.len() * tensor.data.dtype().safetensors().bitsize() / 8;
            header.push(',');
            header.push_str(&json(&tensor.name));
            header.push_str(":{\"dtype\":\"");
            header.push_str(&tensor.data.dtype().to_string());
            header.push_str("\",\"shape\":");
            header.push_str(&json(&tensor.shape));
            header.push_str(&format!(
                ",\"data_offsets\":[{offset},{}]}}",
                offset + bytes
            ));
            offset += bytes;
        }
        header.push('}');
        // Data starts 8-aligned.
        while header.len() % 8 != 0 {
            header.push(' ');
        }

        let mut file = Vec::with_capacity(8 + header.len() + offset);
        file.extend_from_slice(&(header.len() as u64).to_le_bytes());
        file.extend_from_slice(header.as_bytes());
        for tensor in order {
            file.extend_from_slice(&tensor.data.le_bytes());
        }
        Ok(file)
    }

    /// Reads a checkpoint from the bytes of a safetensors file, verifying
    /// its digests before anything else is done with it. `path` only names
    /// the source in errors.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Corrupt`] when the bytes are not a valid
    /// safetensors file or hold a type other than [`DType`]'s;
    /// [`CheckpointError::Damaged`] when the file is cut short or does not
    /// match its digests, naming the tensor where there is one.
    ///
    /// ```
    /// use std::path::Path;
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError, Damage};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2], vec![1.0f32, 2.0]);
    /// let mut bytes = c.to_bytes()?;
    /// let path = Path::new("w.safetensors");
    /// assert_eq!(Checkpoint::from_bytes(&bytes, path)?, c);
    /// *bytes.last_mut().unwrap() ^= 1; // a bit flip in the data of "w"
    /// assert!(matches!(
    ///     Checkpoint::from_bytes(&bytes, path),
    ///     Err(CheckpointError::Damaged { problem: Damage::Tensor(name), .. }) if name == "w"
    /// ));
    /// let cut = &bytes[..bytes.len() - 4];
    /// assert!(matches!(
    ///     Checkpoint::from_bytes(cut, path),
    ///     Err(CheckpointError::Damaged { problem: Damage::Truncated { tensor: Some(_), .. }, .. })
    /// ));
    /// # Ok::<(), CheckpointError>(())
    /// ```
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, CheckpointError> {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let (_, header) =
            SafeTensors::read_metadata(bytes).map_err(|e| match truncation(bytes) {
                Some(problem) => CheckpointError::Damaged {
                    path: path.to_path_buf(),
                    problem,
                },
                None => corrupt(e.to_string()),
            })?;
        let file = SafeTensors::deserialize(bytes).map_err(|e| corrupt(e.to_string()))?;

        let mut views = Vec::with_capacity(file.len());
        let mut digests = BTreeMap::new();
        for (name, view) in file.iter() {
            let dtype = match view.dtype() {
                Dtype::F32 => DType::F32,
                Dtype::F16 => DType::F16,
                Dtype::BF16 => DType::Bf16,
                Dtype::U64 => DType::U64,
                Dtype::U32 => DType::U32,
                other => {
                    return Err(corrupt(format!(
                        "tensor `{name}` has type {other}, which Tessera does not read"
                    )));
                }
            };
            digests.insert(
                name.to_owned(),
                digest::tensor(name, dtype, view.shape(), view.data()),
            );
            views.push((name, dtype, view));
        }
        let stored = header.metadata().clone().unwrap_or_default();
        let metadata =
            digest::verify(stored.into_iter().collect(), &digests).map_err(|problem| {
                CheckpointError::Damaged {
                    path: path.to_path_buf(),
                    problem,
                }
            })?;

        let mut tensors: Vec<Tensor> = views
            .into_iter()
            .map(|(name, dtype, view)| Tensor {
                name: name.to_owned(),
                shape: view.shape().to_vec(),
                data: TensorData::from_le_bytes(dtype, view.data()),
            })
            .collect();
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self { tensors, metadata })
    }
}

/// Whether `bytes`, which the safetensors crate refused, end before their
/// header says: the header itself cut short, or the first tensor (in file
/// order) that is.
fn truncation(bytes: &[u8]) -> Option<Damage> {
    let length = bytes.len() as u64;
    let Some(prefix) = bytes.first_chunk::<8>() else {
        return Some(Damage::Truncated {
            length,
            expected: 8,
            tensor: None,
        });
    };
    let header_end = u64::from_le_bytes(*prefix).checked_add(8)?;
    if header_end > length {
        return Some(Damage::Truncated {
            length,
            expected: header_end,
            tensor: None,
        });
    }
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..usize::try_from(header_end).ok()?]).ok()?;
    let ranges = header.iter().filter_map(|(name, info)| {
        let offsets = info.get("data_offsets")?;
        let at = |i: usize| header_end.checked_add(offsets.get(i)?.as_u64()?);
        Some((at(0)?, at(1)?, name))
    });
    let expected = ranges.clone().map(|(_, end, _)| end).max()?;
    // The tensor holding the first missing byte.
    let (_, _, cut) = ranges
        .filter(|&(start, end, _)| start < end && end > length)
        .min()?;
    Some(Damage::Truncated {
        length,
        expected,
        tensor: Some(cut.clone()),
    })
}
