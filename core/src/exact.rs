//! Exact serde for floats (`#[serde(with = "crate::exact")]`): finite
//! values as numbers, the rest as strings (`"inf"`, `"-inf"`, `"NaN"`,
//! or `"NaN:0x7fc00001"` for any other NaN bits), because JSON has no
//! infinity or NaN and `serde_json` writes them as `null`. Every value,
//! NaN payloads and `-0.0` included, reads back with the bits it had.
//!
//! Numbers are written as the shortest decimal that reads back as the same
//! float; a reader must parse them correctly rounded (`toml` does;
//! `serde_json` does with its `float_roundtrip` feature).

use core::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A float that serializes exactly.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Exact<T>(pub(crate) T);

macro_rules! exact {
    ($t:ty, $bits:ty, $quiet:expr) => {
        impl Serialize for Exact<$t> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let x = self.0;
                if x.is_finite() {
                    x.serialize(s)
                } else if x == <$t>::INFINITY {
                    s.serialize_str("inf")
                } else if x == <$t>::NEG_INFINITY {
                    s.serialize_str("-inf")
                } else if x.to_bits() == $quiet {
                    s.serialize_str("NaN")
                } else {
                    s.collect_str(&format_args!("NaN:{:#x}", x.to_bits()))
                }
            }
        }

        impl<'de> Deserialize<'de> for Exact<$t> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a number, \"inf\", \"-inf\", \"NaN\" or \"NaN:0x<bits>\"")
                    }
                    #[allow(clippy::cast_possible_truncation)]
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$t, E> {
                        Ok(v as $t)
                    }
                    #[allow(clippy::cast_precision_loss)]
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$t, E> {
                        Ok(v as $t)
                    }
                    #[allow(clippy::cast_precision_loss)]
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$t, E> {
                        Ok(v as $t)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$t, E> {
                        let bits = |hex: &str| <$bits>::from_str_radix(hex, 16).ok();
                        match v {
                            "inf" => Ok(<$t>::INFINITY),
                            "-inf" => Ok(<$t>::NEG_INFINITY),
                            "NaN" => Ok(<$t>::from_bits($quiet)),
                            _ => v
                                .strip_prefix("NaN:0x")
                                .and_then(bits)
                                .map(<$t>::from_bits)
                                .filter(|x| x.is_nan())
                                .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self)),
                        }
                    }
                }
                d.deserialize_any(V).map(Exact)
            }
        }

        impl Wrap for $t {
            type Wrapped = Exact<$t>;
            fn wrap(&self) -> Exact<$t> {
                Exact(*self)
            }
            fn unwrap(w: Exact<$t>) -> Self {
                w.0
            }
        }
    };
}

exact!(f32, u32, 0x7fc0_0000);
exact!(f64, u64, 0x7ff8_0000_0000_0000);

/// A value made of floats, serialized through [`Exact`].
pub(crate) trait Wrap: Sized {
    /// Its exact form.
    type Wrapped: Serialize + for<'de> Deserialize<'de>;
    /// To the exact form.
    fn wrap(&self) -> Self::Wrapped;
    /// Back from it.
    fn unwrap(w: Self::Wrapped) -> Self;
}

impl<T: Wrap> Wrap for Option<T> {
    type Wrapped = Option<T::Wrapped>;
    fn wrap(&self) -> Self::Wrapped {
        self.as_ref().map(T::wrap)
    }
    fn unwrap(w: Self::Wrapped) -> Self {
        w.map(T::unwrap)
    }
}

impl<A: Wrap, B: Wrap> Wrap for (A, B) {
    type Wrapped = (A::Wrapped, B::Wrapped);
    fn wrap(&self) -> Self::Wrapped {
        (self.0.wrap(), self.1.wrap())
    }
    fn unwrap(w: Self::Wrapped) -> Self {
        (A::unwrap(w.0), B::unwrap(w.1))
    }
}

/// `serialize_with` for any [`Wrap`] field.
pub(crate) fn serialize<T: Wrap, S: Serializer>(x: &T, s: S) -> Result<S::Ok, S::Error> {
    x.wrap().serialize(s)
}

/// `deserialize_with` for any [`Wrap`] field.
pub(crate) fn deserialize<'de, T: Wrap, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    T::Wrapped::deserialize(d).map(T::unwrap)
}

/// Tensors as their bit patterns (`u32` per f32): exact with any reader,
/// for state that only a program reads back.
#[cfg(feature = "alloc")]
pub(crate) mod bits {
    use alloc::vec::Vec;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(x: &[Vec<f32>], s: S) -> Result<S::Ok, S::Error> {
        let bits: Vec<Vec<u32>> = x
            .iter()
            .map(|t| t.iter().map(|v| v.to_bits()).collect())
            .collect();
        bits.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f32>>, D::Error> {
        let bits = Vec::<Vec<u32>>::deserialize(d)?;
        Ok(bits
            .into_iter()
            .map(|t| t.into_iter().map(f32::from_bits).collect())
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Asserts `value` reads back equal through JSON and TOML (as a TOML
    /// table's field, since a TOML document is a table).
    pub(crate) fn round_trips<T>(value: &T)
    where
        T: Serialize + for<'de> Deserialize<'de> + PartialEq + fmt::Debug,
    {
        #[derive(Serialize, Deserialize)]
        struct Doc<T> {
            value: T,
        }
        let json = serde_json::to_string(value).unwrap();
        let back: T = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(&back, value, "JSON {json}");
        let text = toml::to_string(&Doc { value }).unwrap();
        let back: Doc<T> = toml::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(&back.value, value, "TOML {text}");
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct Bits(#[serde(with = "super")] f32, #[serde(with = "super")] f64);

    fn same_bits(a: f32, b: f64) {
        for json in [true, false] {
            let back: Bits = if json {
                serde_json::from_str(&serde_json::to_string(&Bits(a, b)).unwrap()).unwrap()
            } else {
                #[derive(Serialize, Deserialize)]
                struct Doc {
                    v: Bits,
                }
                let text = toml::to_string(&Doc { v: Bits(a, b) }).unwrap();
                toml::from_str::<Doc>(&text).unwrap().v
            };
            assert_eq!(
                (back.0.to_bits(), back.1.to_bits()),
                (a.to_bits(), b.to_bits())
            );
        }
    }

    #[test]
    fn special_values_keep_their_bits() {
        let nan_payload = f32::from_bits(0xffc0_0001);
        for (a, b) in [
            (f32::INFINITY, f64::NEG_INFINITY),
            (f32::NAN, f64::NAN),
            (nan_payload, f64::from_bits(0x7ff0_0000_0000_0001)),
            (-0.0, -0.0),
            (f32::MIN_POSITIVE, f64::MIN_POSITIVE),
            (f32::from_bits(1), f64::from_bits(1)),
            (f32::MAX, f64::MAX),
            (0.1, 0.1),
        ] {
            same_bits(a, b);
        }
    }

    /// Finite values read back exactly (a sample of bit patterns spread
    /// over every exponent, and the f32 decimals read through f64).
    #[test]
    fn finite_values_keep_their_bits() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let a = f32::from_bits(x);
            if a.is_finite() {
                same_bits(a, f64::from(a) * 3.0);
            }
        }
    }

    #[test]
    fn bad_strings_are_refused() {
        for bad in ["\"nan\"", "\"NaN:0x1\"", "\"infinity\"", "null"] {
            assert!(serde_json::from_str::<Exact<f32>>(bad).is_err(), "{bad}");
        }
    }
}

/// Every serializable type of the crate reads back equal through JSON and
/// TOML, infinities and NaN included.
#[cfg(test)]
mod round_trip {
    use core::num::NonZeroU32;

    use super::tests::round_trips;
    use crate::fp::{Mode, NanEncoding, Overflow, Round, Subnormals};
    use crate::optim::{
        AdamWConfig, Decay, LambConfig, LarsConfig, LrSchedule, OptimizerConfig, Precision,
        SgdConfig, StepCounter,
    };
    use crate::scale::{
        AutomaticConfig, AutomaticLossScaler, BinCounts, DynamicConfig, DynamicLossScaler,
        HistogramWindow, HysteresisReset, StaticLossScaler,
    };

    #[test]
    fn optimizer_settings() {
        let lamb = LambConfig::default();
        assert_eq!(lamb.max_weight_norm, f32::INFINITY);
        round_trips(&lamb);
        round_trips(&LambConfig {
            min_weight_norm: -0.0,
            ..lamb
        });
        round_trips(&AdamWConfig {
            amsgrad: true,
            eps: f32::MIN_POSITIVE,
            ..AdamWConfig::default()
        });
        round_trips(&SgdConfig {
            momentum: 0.9,
            ..SgdConfig::default()
        });
        round_trips(&LarsConfig::default());
        for config in [
            OptimizerConfig::from(lamb),
            AdamWConfig::default().into(),
            SgdConfig::default().into(),
            LarsConfig::default().into(),
        ] {
            round_trips(&config);
        }
    }

    /// NaN compares unequal, so a NaN setting is checked by its bits.
    #[test]
    fn nan_settings_keep_their_bits() {
        let config = LambConfig {
            max_weight_norm: f32::from_bits(0x7fc0_0123),
            ..LambConfig::default()
        };
        let json = serde_json::to_string(&config).unwrap();
        let back: LambConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back.max_weight_norm.to_bits(), 0x7fc0_0123, "{json}");
    }

    #[test]
    fn schedules_and_counter() {
        for decay in [
            Decay::Constant,
            Decay::Cosine { final_factor: 0.1 },
            Decay::Polynomial {
                power: 2.0,
                final_factor: f32::INFINITY,
            },
        ] {
            round_trips(&decay);
            round_trips(&LrSchedule {
                warmup: 3,
                decay,
                total: 9,
            });
        }
        round_trips(&StepCounter::resumed(12));
    }

    #[test]
    fn precision() {
        let stochastic = [
            Mode::Stochastic,
            Mode::StochasticBits(7),
            Mode::StochasticEqual,
        ];
        for overflow in [Overflow::Infinity, Overflow::Saturate] {
            round_trips(&overflow);
            for mode in Mode::DETERMINISTIC.into_iter().chain(stochastic) {
                round_trips(&Round::new(mode).with_overflow(overflow));
            }
        }
        round_trips(&Subnormals::Flush);
        round_trips(&NanEncoding::NegativeZero);
        round_trips(&Precision {
            weights: Round::NEAREST_EVEN,
            state: Round::STOCHASTIC.with_overflow(Overflow::Saturate),
            seed: 1 << 62,
        });
    }

    #[test]
    fn loss_scalers() {
        round_trips(&HysteresisReset::OnGoodStep);
        round_trips(&HistogramWindow::Period);
        round_trips(&BinCounts { lower: 5, upper: 7 });
        let dynamic = DynamicConfig {
            growth_factor: 1.5,
            min_scale: Some(1.0),
            hysteresis: NonZeroU32::new(3).unwrap(),
            ..DynamicConfig::APEX
        };
        round_trips(&dynamic);
        let mut scaler = DynamicLossScaler::new(dynamic).unwrap();
        let _ = scaler.update(true);
        let _ = scaler.update(false);
        round_trips(&scaler);
        round_trips(&scaler.state());
        let automatic = AutomaticConfig {
            update_period: NonZeroU32::new(4).unwrap(),
            window: HistogramWindow::Period,
            ..AutomaticConfig::default()
        };
        round_trips(&automatic);
        let mut scaler = AutomaticLossScaler::new(automatic).unwrap();
        let _ = scaler.update(crate::scale::GradStats {
            found_inf: false,
            bins: BinCounts { lower: 9, upper: 1 },
        });
        round_trips(&scaler);
        round_trips(&StaticLossScaler::new(128.0).unwrap());
    }

    /// A saved scaler in a state it cannot be in is refused when read.
    #[test]
    fn invalid_states_are_refused() {
        let mut state = DynamicLossScaler::default().state();
        state.growth_tracker = 5000;
        let json = serde_json::to_string(&state).unwrap();
        let e = serde_json::from_str::<DynamicLossScaler>(&json).unwrap_err();
        assert!(alloc::format!("{e}").contains("growth_tracker"), "{e}");
        assert!(serde_json::from_str::<StaticLossScaler>("\"inf\"").is_err());
        assert!(serde_json::from_str::<StaticLossScaler>("-1.0").is_err());
    }
}
