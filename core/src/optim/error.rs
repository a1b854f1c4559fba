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
                let close = if max_exclusive { ')' } else { ']' };
                write!(f, "{field} must be in [{min}, {max}{close}, got {value}")
            }
            Self::Conflict { reason } => f.write_str(reason),
        }
    }
}

impl core::error::Error for ConfigError {}

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
