//! A device mapping as TF IPU writes it: the IPU of each of an MLP's
//! layers or of a network's top-level blocks, and for a block of parallel
//! branches a nested list, one IPU per branch, that runs them as one
//! concurrent pipeline stage (`device_mapping=[0, [1, 2], 2]`). Written on
//! the command line as `0,[1,2],2` and in a run's TOML as
//! `[0, [1, 2], 2]`.

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

/// One entry of a [`DeviceMapping`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MappingEntry {
    /// The layer or block on one IPU.
    Ipu(u32),
    /// A block of parallel branches, branch `i` on IPU `ipus[i]`.
    Branches(Vec<u32>),
}

/// The IPU of each of an MLP's layers or a network's blocks, in order; a
/// list of IPUs for a block of parallel branches (`0,[1,2],2`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeviceMapping(pub Vec<MappingEntry>);

impl From<Vec<u32>> for DeviceMapping {
    fn from(ipus: Vec<u32>) -> Self {
        Self(ipus.into_iter().map(MappingEntry::Ipu).collect())
    }
}

impl MappingEntry {
    /// The IPUs it names, in order.
    ///
    /// ```
    /// use tessera_sim::model::MappingEntry;
    ///
    /// assert_eq!(MappingEntry::Ipu(2).ipus(), &[2]);
    /// assert_eq!(MappingEntry::Branches(vec![1, 2]).ipus(), &[1, 2]);
    /// ```
    #[must_use]
    pub fn ipus(&self) -> &[u32] {
        match self {
            Self::Ipu(i) => core::slice::from_ref(i),
            Self::Branches(ipus) => ipus,
        }
    }
}

impl DeviceMapping {
    /// One IPU per entry, or `None` if an entry maps branches.
    ///
    /// ```
    /// use tessera_sim::model::DeviceMapping;
    ///
    /// let flat: DeviceMapping = "0,1,1".parse().unwrap();
    /// assert_eq!(flat.flat(), Some(vec![0, 1, 1]));
    /// let branched: DeviceMapping = "0,[1,2],2".parse().unwrap();
    /// assert_eq!(branched.flat(), None);
    /// ```
    #[must_use]
    pub fn flat(&self) -> Option<Vec<u32>> {
        self.0
            .iter()
            .map(|e| match e {
                MappingEntry::Ipu(i) => Some(*i),
                MappingEntry::Branches(_) => None,
            })
            .collect()
    }

    /// Entries.
    ///
    /// ```
    /// use tessera_sim::model::DeviceMapping;
    ///
    /// assert_eq!("0,[1,2],2".parse::<DeviceMapping>().unwrap().len(), 3);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no entry.
    ///
    /// ```
    /// use tessera_sim::model::DeviceMapping;
    ///
    /// assert!(DeviceMapping::default().is_empty());
    /// assert!(!DeviceMapping::from(vec![0]).is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for DeviceMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, entry) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            match entry {
                MappingEntry::Ipu(i) => write!(f, "{i}")?,
                MappingEntry::Branches(ipus) => {
                    let list: Vec<String> = ipus.iter().map(u32::to_string).collect();
                    write!(f, "[{}]", list.join(","))?;
                }
            }
        }
        Ok(())
    }
}

impl FromStr for DeviceMapping {
    type Err = String;

    /// `0,[1,2],2`: IPU numbers separated by commas, a bracketed list of
    /// at least one for a block of branches; spaces are ignored.
    fn from_str(s: &str) -> Result<Self, String> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let ipu = |t: &str| {
            t.parse::<u32>().map_err(|_| {
                format!(
                    "`{t}` in device mapping `{s}` is not an IPU number: expected a whole number \
                     from 0 to {} (e.g. 0,0,1 or 0,[1,2],2)",
                    u32::MAX
                )
            })
        };
        let mut entries = Vec::new();
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let (entry, after) = if let Some(inner) = rest.strip_prefix('[') {
                let end = inner
                    .find(']')
                    .ok_or_else(|| format!("device mapping `{s}`: a `[` without its `]`"))?;
                let ipus = inner[..end]
                    .split(',')
                    .map(ipu)
                    .collect::<Result<Vec<_>, _>>()?;
                (MappingEntry::Branches(ipus), &inner[end + 1..])
            } else {
                let end = rest.find(',').unwrap_or(rest.len());
                (MappingEntry::Ipu(ipu(&rest[..end])?), &rest[end..])
            };
            entries.push(entry);
            rest = match after.strip_prefix(',') {
                _ if after.is_empty() => after,
                Some("") => return Err(format!("device mapping `{s}` ends with `,`")),
                Some(next) => next,
                None => {
                    return Err(format!(
                        "device mapping `{s}`: expected `,` before `{after}`"
                    ));
                }
            };
        }
        if entries.is_empty() {
            return Err("the device mapping is empty: expected e.g. 0,0,1 or 0,[1,2],2".into());
        }
        Ok(Self(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_nested_entries() {
        let m: DeviceMapping = "0, [1,2],2".parse().unwrap();
        assert_eq!(
            m.0,
            vec![
                MappingEntry::Ipu(0),
                MappingEntry::Branches(vec![1, 2]),
                MappingEntry::Ipu(2)
            ]
        );
        assert_eq!(m.to_string(), "0,[1,2],2");
        assert_eq!(m.flat(), None);
        let flat: DeviceMapping = "0,0,1".parse().unwrap();
        assert_eq!(flat, DeviceMapping::from(vec![0, 0, 1]));
        assert_eq!(flat.flat(), Some(vec![0, 0, 1]));
        assert_eq!(flat.to_string(), "0,0,1");
    }

    #[test]
    fn bad_text_is_refused_with_what_was_expected() {
        for (text, needle) in [
            ("", "empty"),
            ("0,,1", "`` in device mapping"),
            ("0,", "ends with `,`"),
            ("0,[1,2", "without its `]`"),
            ("0,[1,x]", "`x`"),
            ("0,[]", "`` in device mapping"),
            ("0,[1]2", "expected `,` before `2`"),
            ("-1", "`-1`"),
        ] {
            let e = text.parse::<DeviceMapping>().unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn round_trips_through_toml_as_nested_arrays() {
        #[derive(Serialize, Deserialize)]
        struct Run {
            device_mapping: DeviceMapping,
        }
        let run = Run {
            device_mapping: "0,[1,2],2".parse().unwrap(),
        };
        let text = toml::to_string(&run).unwrap();
        assert_eq!(text.trim(), "device_mapping = [0, [1, 2], 2]");
        let back: Run = toml::from_str(&text).unwrap();
        assert_eq!(back.device_mapping, run.device_mapping);
    }
}
