//! The precision of a run: compute and weights as Graphcore names them
//! (`compute.weights`), and the low-precision formats of the products.

use core::fmt;
use core::str::FromStr;

use tessera_core::fp::Round;

use crate::model::Compute;
use crate::model::quant::Recipe;

/// Compute and weight precision, as Graphcore names them: `compute.weights`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrecisionMode {
    /// `32.32`: f32 everywhere.
    Fp32,
    /// `16.32`: f16 compute and f16 model weights, rounded to nearest from
    /// an f32 master copy that the optimizer updates.
    Mixed,
    /// `16.16`: f16 compute, f16 weights with no master copy; the optimizer
    /// stores its update into them with this rounding (stochastic rounding
    /// is what makes it work: to nearest, updates under half an ulp are
    /// lost).
    Half(Round),
    /// `8.16`, `8.32`, `mxfp8.16`, `mxfp6.16`, `mxfp4.16`: `16.x` with the
    /// dense and convolution products' inputs quantised by a [`Recipe`].
    Low(LowPrecision),
}

/// The families of quantised products, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LowFamily {
    /// `8`: per-tensor scaled FP8 ([`Recipe::FP8`]).
    Fp8,
    /// `mxfp8` ([`Recipe::MXFP8`]).
    Mxfp8,
    /// `mxfp6` ([`Recipe::MXFP6`]).
    Mxfp6,
    /// `mxfp4` ([`Recipe::MXFP4`]).
    Mxfp4,
}

impl LowFamily {
    const ALL: [(Self, &'static str, Recipe); 4] = [
        (Self::Fp8, "8", Recipe::FP8),
        (Self::Mxfp8, "mxfp8", Recipe::MXFP8),
        (Self::Mxfp6, "mxfp6", Recipe::MXFP6),
        (Self::Mxfp4, "mxfp4", Recipe::MXFP4),
    ];

    /// Its name, the mode's `compute` part.
    ///
    /// ```
    /// use tessera_sim::train::LowFamily;
    ///
    /// assert_eq!(LowFamily::Mxfp8.name(), "mxfp8");
    /// ```
    #[must_use]
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(f, ..)| *f == self)
            .map_or("8", |(_, n, _)| n)
    }

    /// Its default recipe.
    ///
    /// ```
    /// use tessera_sim::model::quant::Recipe;
    /// use tessera_sim::train::LowFamily;
    ///
    /// assert_eq!(LowFamily::Fp8.recipe(), Recipe::FP8);
    /// ```
    #[must_use]
    pub fn recipe(self) -> Recipe {
        Self::ALL
            .iter()
            .find(|(f, ..)| *f == self)
            .map_or(Recipe::FP8, |(.., r)| *r)
    }
}

/// A quantised precision: the family it is named by, the weights'
/// storage and the recipe (the family's, or one the configuration
/// chose role by role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LowPrecision {
    /// The name's `compute` part.
    pub family: LowFamily,
    /// `.32`: f16 weights rounded to nearest from an f32 master copy (as
    /// `16.32`); `.16`: f16 weights updated with stochastic rounding (as
    /// `16.16`).
    pub master: bool,
    /// The products' quantisation.
    pub recipe: Recipe,
}

impl PrecisionMode {
    /// `16.16` with stochastic rounding (infinity on overflow).
    pub const HALF_SR: Self = Self::Half(Round::STOCHASTIC);
    /// `16.16` with round to nearest.
    pub const HALF_RN: Self = Self::Half(Round::NEAREST_EVEN);

    /// Whether the model computes in f16.
    ///
    /// ```
    /// use tessera_sim::train::PrecisionMode;
    ///
    /// assert!(PrecisionMode::HALF_SR.f16_compute());
    /// assert!(!PrecisionMode::Fp32.f16_compute());
    /// ```
    #[must_use]
    pub const fn f16_compute(self) -> bool {
        !matches!(self, Self::Fp32)
    }

    /// The model's arithmetic.
    ///
    /// ```
    /// use tessera_sim::model::{Compute, quant::Recipe};
    /// use tessera_sim::train::PrecisionMode;
    ///
    /// let p: PrecisionMode = "mxfp6.16".parse().unwrap();
    /// assert_eq!(p.compute(), Compute::Quantised(Recipe::MXFP6));
    /// ```
    #[must_use]
    pub const fn compute(self) -> Compute {
        match self {
            Self::Fp32 => Compute::F32,
            Self::Mixed | Self::Half(_) => Compute::F16,
            Self::Low(l) => Compute::Quantised(l.recipe),
        }
    }

    /// Whether the optimizer updates an f32 master copy (`16.32`, `8.32`).
    ///
    /// ```
    /// use tessera_sim::train::PrecisionMode;
    ///
    /// let master = |s: &str| s.parse::<PrecisionMode>().unwrap().f32_master();
    /// assert!(master("8.32") && master("16.32") && !master("8.16"));
    /// ```
    #[must_use]
    pub const fn f32_master(self) -> bool {
        matches!(
            self,
            Self::Mixed | Self::Low(LowPrecision { master: true, .. })
        )
    }

    /// How the optimizer stores its update into the weights.
    ///
    /// ```
    /// use tessera_core::fp::Round;
    /// use tessera_sim::train::PrecisionMode;
    ///
    /// let p: PrecisionMode = "mxfp4.16".parse().unwrap();
    /// assert_eq!(p.weight_round(), Round::STOCHASTIC);
    /// ```
    #[must_use]
    pub const fn weight_round(self) -> Round {
        match self {
            Self::Half(r) => r,
            Self::Low(LowPrecision { master: false, .. }) => Round::STOCHASTIC,
            _ => Round::NEAREST_EVEN,
        }
    }

    /// Bytes of a gradient or activation element on the device.
    ///
    /// ```
    /// use tessera_sim::train::PrecisionMode;
    ///
    /// assert_eq!(PrecisionMode::Mixed.compute_bytes(), 2);
    /// assert_eq!(PrecisionMode::Fp32.compute_bytes(), 4);
    /// ```
    #[must_use]
    pub const fn compute_bytes(self) -> u64 {
        if self.f16_compute() { 2 } else { 4 }
    }

    /// What a quantised mode rounds where, for the run's summary (`None`
    /// for the other modes).
    ///
    /// ```
    /// use tessera_sim::train::PrecisionMode;
    ///
    /// let p: PrecisionMode = "8.16".parse().unwrap();
    /// assert!(p.numerics().unwrap().starts_with("products of weights f143:nearest:tensor"));
    /// ```
    #[must_use]
    pub fn numerics(self) -> Option<String> {
        let Self::Low(l) = self else {
            return None;
        };
        let r = l.recipe;
        let weights = if l.master {
            "f16 weights from an f32 master (to nearest)"
        } else {
            "f16 weights (stochastic rounding)"
        };
        Some(format!(
            "products of weights {}, activations {}, gradients {} ({} accumulator); \
             bias, activation, batch norm, softmax and loss in f32 on f16 values, \
             their outputs f16; gradient reduction and optimizer f32; {weights}",
            r.weights, r.activations, r.gradients, r.accumulator
        ))
    }
}

impl fmt::Display for PrecisionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fp32 => f.write_str("32.32"),
            Self::Mixed => f.write_str("16.32"),
            Self::Half(r) if r.mode.is_stochastic() => f.write_str("16.16"),
            Self::Half(_) => f.write_str("16.16-rn"),
            Self::Low(l) => {
                let weights = if l.master { "32" } else { "16" };
                write!(f, "{}.{weights}", l.family.name())
            }
        }
    }
}

impl FromStr for PrecisionMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "32.32" => return Ok(Self::Fp32),
            "16.32" => return Ok(Self::Mixed),
            "16.16" | "16.16-sr" => return Ok(Self::HALF_SR),
            "16.16-rn" => return Ok(Self::HALF_RN),
            _ => {}
        }
        let low = s.split_once('.').and_then(|(compute, weights)| {
            let (family, _, recipe) = LowFamily::ALL.into_iter().find(|(_, n, _)| *n == compute)?;
            let master = match weights {
                "16" => false,
                "32" if family == LowFamily::Fp8 => true,
                _ => return None,
            };
            Some(LowPrecision {
                family,
                master,
                recipe,
            })
        });
        low.map(Self::Low).ok_or_else(|| {
            format!(
                "unknown precision `{s}`: expected 32.32, 16.32, 16.16 (stochastic rounding), 16.16-rn, 8.16, 8.32, mxfp8.16, mxfp6.16 or mxfp4.16"
            )
        })
    }
}
