//! The digests that make a checkpoint refuse to load once changed: one per
//! tensor over its name, type, shape and bytes, and one over the metadata
//! (which holds the tensors' digests), both xxh3-128 in hex.
//!
//! They detect accidents (bit rot, a torn copy, an edited file), not an
//! adversary: there is no key, so whoever can change the file can also
//! recompute its digests.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::{Xxh3Default, xxh3_128};

use super::{CheckpointError, DType, Damage, json};

/// The metadata key of the tensors' digests: a JSON object from tensor
/// name to digest.
pub(super) const TENSORS_KEY: &str = "digest.tensors";
/// The metadata key of the metadata's digest: over the compact JSON of
/// the metadata without this key (keys in order).
pub(super) const METADATA_KEY: &str = "digest.metadata";

/// The digest of a tensor: its name, type and shape (each length-prefixed)
/// and its little-endian bytes.
pub(super) fn tensor(name: &str, dtype: DType, shape: &[usize], bytes: &[u8]) -> String {
    let mut h = Xxh3Default::new();
    for part in [name.as_bytes(), dtype.to_string().as_bytes()] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(&(shape.len() as u64).to_le_bytes());
    for &d in shape {
        h.update(&(d as u64).to_le_bytes());
    }
    h.update(bytes);
    format!("{:032x}", h.digest128())
}

fn metadata(metadata: &BTreeMap<String, String>) -> String {
    format!("{:032x}", xxh3_128(json(metadata).as_bytes()))
}

/// `user`'s metadata with the digests of `tensors` (name and digest) and
/// of the metadata itself added.
///
/// # Errors
/// [`CheckpointError::Reserved`] when `user` already has a digest key.
pub(super) fn sign(
    user: &BTreeMap<String, String>,
    tensors: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, CheckpointError> {
    if let Some(key) = [TENSORS_KEY, METADATA_KEY]
        .into_iter()
        .find(|k| user.contains_key(*k))
    {
        return Err(CheckpointError::Reserved {
            key: key.to_owned(),
        });
    }
    let digests: BTreeMap<String, String> = tensors.into_iter().collect();
    let mut signed = user.clone();
    signed.insert(TENSORS_KEY.to_owned(), json(&digests));
    let own = metadata(&signed);
    signed.insert(METADATA_KEY.to_owned(), own);
    Ok(signed)
}

/// Checks `file`'s metadata against its digest and `tensors` (name and
/// digest of the bytes read) against the listed digests, and returns the
/// metadata without the digests.
///
/// # Errors
/// The first [`Damage`]: no digests, the metadata's, then the tensors' in
/// name order (a changed, missing or extra tensor).
pub(super) fn verify(
    mut file: BTreeMap<String, String>,
    tensors: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, Damage> {
    let own = file.remove(METADATA_KEY).ok_or(Damage::NoDigests)?;
    // The digest covers the tensors' digests, so it is checked first.
    if metadata(&file) != own {
        return Err(Damage::Metadata);
    }
    let listed = file.remove(TENSORS_KEY).ok_or(Damage::NoDigests)?;
    let listed: BTreeMap<String, String> =
        serde_json::from_str(&listed).map_err(|_| Damage::Metadata)?;
    for (name, digest) in tensors {
        match listed.get(name) {
            None => return Err(Damage::Extra(name.clone())),
            Some(expected) if expected != digest => return Err(Damage::Tensor(name.clone())),
            Some(_) => {}
        }
    }
    if let Some(name) = listed.keys().find(|n| !tensors.contains_key(*n)) {
        return Err(Damage::Missing(name.clone()));
    }
    Ok(file)
}
