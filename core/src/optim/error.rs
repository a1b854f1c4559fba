//! Validation errors of optimizer configurations.

use core::fmt;

/// A hyperparameter that cannot be used, with its name and value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigError {
    /// NaN or infinite where a finite value is needed.
    NotFinite {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f32,
    },
    /// Outside the allowed range `[min, max]` (or `[min, max)` where
    /// `max_exclusive`).
    OutOfRange {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f32,
        /// Smallest allowed value.
        min: f32,
        /// Largest allowed value.
        max: f32,
        /// Whether `max` itself is excluded.
        max_exclusive: bool,
    },
    /// Two settings that cannot be combined.
    Conflict {
        /// What conflicts.
        reason: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NotFinite { field, value } => write!(f, "{field} must be finite, got {value}"),
            Self::OutOfRange {
                field,
                value,
                min,
                max,
                max_exclusive,
            } => {
                write!(f, "{field} must be ")?;
                // `f32::MAX` stands for "no bound but finiteness", and
                // `f32::MIN_POSITIVE` for "above 0": say so, not the digits.
                if max == f32::MAX && !max_exclusive {
                    f.write_str("finite and ")?;
                    if min == f32::MIN_POSITIVE {
                        f.write_str("> 0")?;
                    } else {
                        write!(f, ">= {}", Shown(min))?;
                    }
                } else {
                    let close = if max_exclusive { ')' } else { ']' };
                    write!(f, "in [{}, {}{close}", Shown(min), Shown(max))?;
                }
                write!(f, ", got {}", Shown(value))
            }
            Self::Conflict { reason } => f.write_str(reason),
        }
    }
}

impl core::error::Error for ConfigError {}

/// An optimizer that cannot be built or a step that cannot run, with the
/// parameter it concerns.
#[derive(Clone, Debug, PartialEq)]
pub enum StepError {
    /// A setting that cannot be used.
    Config(ConfigError),
    /// A parameter came with the wrong number of state tensors.
    StateTensors {
        /// The parameter's id.
        id: u64,
        /// What the optimizer keeps per parameter.
        expected: usize,
        /// What came.
        got: usize,
    },
    /// Two parameters share one id, so they would share random bits.
    DuplicateId {
        /// The id.
        id: u64,
    },
    /// A parameter the optimizer was not built for.
    UnknownId {
        /// The id.
        id: u64,
    },
    /// A step that leaves out registered parameters (it would clip over
    /// a subset and advance the left-out tensors' step count).
    #[cfg(feature = "alloc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
    Missing {
        /// The ids left out, in group order.
        ids: alloc::vec::Vec<u64>,
    },
    /// A saved state of other parameters (other ids, lengths or groups)
    /// than the optimizer it is loaded into.
    Layout,
    /// A parameter whose weights or gradients have the wrong length.
    Length {
        /// The parameter's id.
        id: u64,
        /// Its length when the optimizer was built.
        expected: usize,
        /// What came.
        got: usize,
    },
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Config(e) => e.fmt(f),
            #[cfg(feature = "alloc")]
            Self::Missing { ref ids } => {
                write!(f, "the step leaves out registered parameters {ids:?}")
            }
            Self::Layout => f.write_str("the saved state is of other parameters"),
            Self::StateTensors { id, expected, got } => write!(
                f,
                "parameter {id}: the optimizer keeps {expected} state tensors, got {got}"
            ),
            Self::DuplicateId { id } => write!(f, "parameter id {id} is used twice"),
            Self::UnknownId { id } => write!(f, "parameter id {id} is in no group"),
            Self::Length { id, expected, got } => {
                write!(f, "parameter {id}: expected {expected} elements, got {got}")
            }
        }
    }
}

impl core::error::Error for StepError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for StepError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

/// A value in a message: plain decimals for everyday magnitudes, the
/// exponent form for very large and very small ones (`3.4028235e38`, not
/// 39 digits).
struct Shown(f32);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0.abs();
        if a == 0.0 || !a.is_finite() || (1e-4..1e9).contains(&a) {
            write!(f, "{}", self.0)
        } else {
            write!(f, "{:e}", self.0)
        }
    }
}

/// Checks `min <= value <= max` (or `< max`), and finiteness.
pub(crate) fn check(
    field: &'static str,
    value: f32,
    min: f32,
    max: f32,
    max_exclusive: bool,
) -> Result<(), ConfigError> {
    if value.is_nan() || (value.is_infinite() && max.is_finite()) {
        return Err(ConfigError::NotFinite { field, value });
    }
    let above = if max_exclusive {
        value >= max
    } else {
        value > max
    };
    if value < min || above {
        return Err(ConfigError::OutOfRange {
            field,
            value,
            min,
            max,
            max_exclusive,
        });
    }
    Ok(())
}

/// A finite value `>= 0`.
pub(crate) fn non_negative(field: &'static str, value: f32) -> Result<(), ConfigError> {
    check(field, value, 0.0, f32::MAX, false)
}

/// A value in `[0, 1)`, like Adam's betas and momentum.
pub(crate) fn unit(field: &'static str, value: f32) -> Result<(), ConfigError> {
    check(field, value, 0.0, 1.0, true)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn ranges_read_as_what_is_allowed() {
        let lr = non_negative("lr", -1.0).unwrap_err();
        assert_eq!(lr.to_string(), "lr must be finite and >= 0, got -1");
        let big = non_negative("lr", -3e38).unwrap_err();
        assert_eq!(big.to_string(), "lr must be finite and >= 0, got -3e38");
        let positive = check("lr", 0.0, f32::MIN_POSITIVE, f32::MAX, false).unwrap_err();
        assert_eq!(positive.to_string(), "lr must be finite and > 0, got 0");
        let beta = unit("beta1", 1.0).unwrap_err();
        assert_eq!(beta.to_string(), "beta1 must be in [0, 1), got 1");
        let tiny = check("eps", 1e-30, 1e-20, 1.0, false).unwrap_err();
        assert_eq!(tiny.to_string(), "eps must be in [1e-20, 1], got 1e-30");
        let nan = non_negative("lr", f32::NAN).unwrap_err();
        assert_eq!(nan.to_string(), "lr must be finite, got NaN");
    }
}
