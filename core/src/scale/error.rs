//! [`ScalerConfigError`]: why a loss-scaling configuration was refused.

use core::fmt;

/// A loss-scaling hyperparameter that was refused, with the offending value.
///
/// Returned by the constructors ([`StaticLossScaler::new`],
/// [`DynamicLossScaler::new`], [`AutomaticLossScaler::new`],
/// [`BinEdge::new`]); a scaler that exists is always valid, and its
/// `update` never fails.
///
/// A *usable scale* is a finite, positive f32 whose reciprocal
/// `f32(1 / f64(scale))` is finite too (every positive f32 from about
/// `2^-128` up): a scale whose reciprocal overflows would unscale every
/// gradient to infinity or NaN.
///
/// [`StaticLossScaler::new`]: super::StaticLossScaler::new
/// [`DynamicLossScaler::new`]: super::DynamicLossScaler::new
/// [`AutomaticLossScaler::new`]: super::AutomaticLossScaler::new
/// [`BinEdge::new`]: super::BinEdge::new
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalerConfigError {
    /// A static or initial loss scale that is not a usable scale (NaN,
    /// infinite, zero, negative, or so small its reciprocal overflows).
    Scale(f32),
    /// A `min_scale` that is not a usable scale.
    MinScale(f32),
    /// A `max_scale` that is not a usable scale.
    MaxScale(f32),
    /// `min_scale` is above `max_scale`.
    BoundsOrder {
        /// The lower bound given.
        min: f32,
        /// The upper bound given.
        max: f32,
    },
    /// The initial scale lies outside `[min_scale, max_scale]`.
    ScaleOutsideBounds {
        /// The initial scale given.
        scale: f32,
        /// The lower bound, if any.
        min: Option<f32>,
        /// The upper bound, if any.
        max: Option<f32>,
    },
    /// A growth factor that is not a finite number above 1 (NaN included).
    GrowthFactor(f64),
    /// A backoff factor outside the open interval `(0, 1)` (NaN included).
    BackoffFactor(f64),
    /// A growth interval above `i32::MAX` (GradScaler's growth tracker is
    /// an `i32`, so it could never count that far).
    GrowthInterval(u32),
    /// A histogram bin-edge location outside `[0, 1]` (NaN included).
    BinEdgeLocation(f32),
    /// A histogram bin edge that is NaN or negative.
    BinEdge(f32),
    /// An upper-count threshold outside `[0, 1]` (NaN included).
    Threshold(f32),
    /// A saved counter (restoring a scaler's state) outside its range.
    Counter {
        /// Which counter.
        name: &'static str,
        /// The value given.
        value: i64,
        /// The largest value allowed (the smallest is 0).
        max: i64,
    },
}

impl fmt::Display for ScalerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const USABLE: &str = "not a finite positive f32 whose reciprocal f32(1 / f64(s)) is finite";
        match *self {
            Self::Scale(s) => write!(f, "loss scale {s:e} is {USABLE}"),
            Self::MinScale(s) => write!(f, "min_scale {s:e} is {USABLE}"),
            Self::MaxScale(s) => write!(f, "max_scale {s:e} is {USABLE}"),
            Self::BoundsOrder { min, max } => {
                write!(f, "min_scale {min:e} is above max_scale {max:e}")
            }
            Self::ScaleOutsideBounds { scale, min, max } => {
                write!(f, "initial loss scale {scale:e} is outside [")?;
                match min {
                    Some(min) => write!(f, "{min:e}, ")?,
                    None => f.write_str("0, ")?,
                }
                match max {
                    Some(max) => write!(f, "{max:e}]"),
                    None => f.write_str("inf)"),
                }
            }
            Self::GrowthFactor(g) => {
                write!(f, "growth factor {g} is not a finite number above 1")
            }
            Self::BackoffFactor(b) => {
                write!(f, "backoff factor {b} is not in the open interval (0, 1)")
            }
            Self::GrowthInterval(n) => write!(
                f,
                "growth interval {n} is above i32::MAX, the growth tracker's range"
            ),
            Self::BinEdgeLocation(l) => {
                write!(f, "bin edge location {l} is not in [0, 1]")
            }
            Self::BinEdge(e) => write!(f, "histogram bin edge {e} is NaN or negative"),
            Self::Threshold(t) => {
                write!(f, "upper-count threshold {t:e} is not in [0, 1]")
            }
            Self::Counter { name, value, max } => {
                write!(f, "saved {name} {value} is not in 0..={max}")
            }
        }
    }
}

impl core::error::Error for ScalerConfigError {}
