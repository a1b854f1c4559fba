//! The recipe of low-precision matrix products: per role (weights,
//! activations, gradients) a core [`Format`], a [`Round`] and a
//! [`Scaling`], and the accumulator. The model's layers build it into
//! the graph (`layers/quant.rs`).
//!
//! Elements always saturate (the scale is chosen from the amax, so only
//! MX's top binade, and a delayed scale, can exceed the format's largest
//! value); a non-finite value makes its whole tensor (or block; with a
//! delayed scale, its cast's block) NaN, so that the step's gradients are
//! non-finite and the loss scaler skips the step.
//!
//! # Delayed scaling
//!
//! [`Scaling::Delayed`]`(n)` is Transformer Engine's delayed scaling
//! with the `max` algorithm: each delayed operand (per layer, product and
//! role: `layer1.dw.gradients`) keeps an [`AmaxHistory`] of the last `n`
//! applied steps' amaxes. A step's casts use the power-of-two scale of the
//! history's max ([`tensor_exponent`] of it), known before the step runs,
//! so a cast needs no amax pass first: each cast block records its own
//! amax as it rounds. Then:
//! - **The entry** a step pushes is its amax over every micro-batch of
//!   every replica (an all-reduced max): the same on every replica and
//!   instance and for every accumulation split of the same batch.
//! - **The first step** finds the history all zeros (as TE's, which also
//!   starts its scale at 1) and casts with scale `2^0`; so does a history
//!   whose every entry is zero.
//! - **Overflow**: a value above the format's largest after the delayed
//!   scale saturates and is counted in the operand's `saturated`; it
//!   skips no step. Only a non-finite value skips one (its block is NaN).
//! - **Loss scaling**: a step the loss scaler skips pushes nothing, so an
//!   overflowing step's infinite amaxes never enter the history; the
//!   gradients' entries are of loss-scaled values, so after the loss scale
//!   grows the first step's gradients can saturate (counted), and after
//!   it falls their scale is small for up to `n` steps.
//! - **The history is model state**: saved in checkpoints (as buffers
//!   `{operand}.amax_history`, oldest entry first) and restored on resume;
//!   evaluation casts with the training history's scale and pushes
//!   nothing.

use core::fmt;
use core::str::FromStr;

use tessera_core::fp::{self, Format, Mode, Mx, MxFormat, Nvfp4, Overflow, Round};
use tessera_core::rng::{RandomBits, RandomStream};

mod history;
pub use history::{AmaxHistory, max_or_nan};

/// How a tensor is scaled before its elements are rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scaling {
    /// One power-of-two scale per tensor from its current absolute
    /// maximum: the largest `2^k` with `amax 2^k <= max` (Perez et al.
    /// 2023).
    Tensor,
    /// One per tensor from the largest amax of the last `n` applied
    /// steps (Transformer Engine's delayed scaling; see the module's
    /// rules).
    Delayed(u16),
    /// OCP MX: blocks of 32 along the product's reduction, E8M0 scales
    /// (the spec's floor rule); the format must be an MX element format.
    Mx,
    /// NVFP4: blocks of 16 along the product's reduction with E4M3
    /// scales under one f32 tensor scale from the tensor's amax (core's
    /// [`Nvfp4`]); the format must be E2M1.
    Nvfp4,
}

/// What one role's tensors become before a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoleQuant {
    /// The elements' format.
    pub format: Format,
    /// How elements round (they saturate, whatever its overflow says).
    pub round: Round,
    /// How the tensor is scaled.
    pub scaling: Scaling,
}

pub use crate::kernels::matmul::Accumulator;

/// A role of a product's operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A layer's weights.
    Weights,
    /// A layer's input (a convolution's patches).
    Activations,
    /// The gradient of a layer's output.
    Gradients,
}

impl Role {
    /// Its name: `weights`, `activations`, `gradients`.
    ///
    /// ```
    /// use tessera_sim::model::quant::Role;
    ///
    /// assert_eq!(Role::Gradients.name(), "gradients");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Weights => "weights",
            Self::Activations => "activations",
            Self::Gradients => "gradients",
        }
    }
}

/// One quantised operand's record of a micro-batch: its scale and what
/// its rounding lost.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorQuant {
    /// The operand: `layer{l}.{product}.{role}`, product `fwd`, `dw`,
    /// `da` (`dcols` for a convolution's input gradient).
    pub tensor: String,
    /// Its scale's exponent: values were multiplied by `2^exponent`
    /// before rounding (MX: the largest over its blocks); negative where
    /// values were scaled down, 0 if no value was scaled (a NaN cast).
    pub exponent: i32,
    /// Values that saturated.
    pub saturated: u64,
    /// Nonzero values that became zero.
    pub underflowed: u64,
}

/// The quantised products of a training run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Recipe {
    /// The weights' quantisation.
    pub weights: RoleQuant,
    /// The activations'.
    pub activations: RoleQuant,
    /// The output gradients'.
    pub gradients: RoleQuant,
    /// The accumulator.
    pub accumulator: Accumulator,
}

/// `format` rounded by `mode`, scaled by `scaling`.
const fn role(format: Format, mode: Mode, scaling: Scaling) -> RoleQuant {
    RoleQuant {
        format,
        round: Round::new(mode).with_overflow(Overflow::Saturate),
        scaling,
    }
}

impl Recipe {
    /// `8.x`: Graphcore's F143 (E4M3, bias 8) weights and activations, F152
    /// gradients, per-tensor scales from the current amax, round to nearest
    /// (Noune et al. 2022, Perez et al. 2023).
    pub const FP8: Self = Self {
        weights: role(Format::F143, Mode::NearestEven, Scaling::Tensor),
        activations: role(Format::F143, Mode::NearestEven, Scaling::Tensor),
        gradients: role(Format::F152, Mode::NearestEven, Scaling::Tensor),
        accumulator: Accumulator::F32,
    };

    /// `mxfp8.x`: MXFP8 E4M3 weights and activations, E5M2 gradients, to
    /// nearest (Rouhani et al. 2023).
    pub const MXFP8: Self = Self {
        weights: role(Format::E4M3FN, Mode::NearestEven, Scaling::Mx),
        activations: role(Format::E4M3FN, Mode::NearestEven, Scaling::Mx),
        gradients: role(Format::E5M2, Mode::NearestEven, Scaling::Mx),
        accumulator: Accumulator::F32,
    };

    /// `mxfp6.x`: MXFP6 E2M3 weights and activations, E3M2 gradients, to
    /// nearest.
    pub const MXFP6: Self = Self {
        weights: role(Format::E2M3FN, Mode::NearestEven, Scaling::Mx),
        activations: role(Format::E2M3FN, Mode::NearestEven, Scaling::Mx),
        gradients: role(Format::E3M2FN, Mode::NearestEven, Scaling::Mx),
        accumulator: Accumulator::F32,
    };

    /// `mxfp4.x`: MXFP4 everywhere; gradients rounded stochastically, so
    /// that the backward products (sums over the batch and the layer's
    /// width of E2M1 values, one binade each way of a few values) are
    /// unbiased (Tseng et al. 2025); weights and activations to nearest.
    pub const MXFP4: Self = Self {
        weights: role(Format::E2M1FN, Mode::NearestEven, Scaling::Mx),
        activations: role(Format::E2M1FN, Mode::NearestEven, Scaling::Mx),
        gradients: role(Format::E2M1FN, Mode::Stochastic, Scaling::Mx),
        accumulator: Accumulator::F32,
    };

    /// NVFP4 everywhere (not a precision's default: chosen role by role):
    /// E2M1 in blocks of 16 with E4M3 scales and an f32 tensor scale,
    /// gradients rounded stochastically as in [`Recipe::MXFP4`].
    pub const NVFP4: Self = Self {
        weights: role(Format::E2M1FN, Mode::NearestEven, Scaling::Nvfp4),
        activations: role(Format::E2M1FN, Mode::NearestEven, Scaling::Nvfp4),
        gradients: role(Format::E2M1FN, Mode::Stochastic, Scaling::Nvfp4),
        accumulator: Accumulator::F32,
    };

    /// The quantisation of `role`.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    /// use tessera_sim::model::quant::{Recipe, Role};
    ///
    /// assert_eq!(Recipe::FP8.of(Role::Gradients).format, Format::F152);
    /// ```
    #[must_use]
    pub const fn of(&self, role: Role) -> RoleQuant {
        match role {
            Role::Weights => self.weights,
            Role::Activations => self.activations,
            Role::Gradients => self.gradients,
        }
    }

    /// The first role whose quantisation cannot be built, and why.
    ///
    /// ```
    /// use tessera_sim::model::quant::{Recipe, Scaling};
    ///
    /// assert!(Recipe::MXFP4.check().is_ok());
    /// let mut r = Recipe::FP8;
    /// r.weights.scaling = Scaling::Mx; // F143 is not an MX element format
    /// assert!(r.check().unwrap_err().starts_with("weights: "));
    /// ```
    ///
    /// # Errors
    /// A one-line message naming the role.
    pub fn check(&self) -> Result<(), String> {
        for (name, q) in [
            ("weights", self.weights),
            ("activations", self.activations),
            ("gradients", self.gradients),
        ] {
            q.check().map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(())
    }
}

/// The format names a role accepts, with their core formats.
const FORMATS: [(&str, Format); 11] = [
    ("e4m3", Format::E4M3),
    ("e4m3fn", Format::E4M3FN),
    ("f143", Format::F143),
    ("e4m3fnuz", Format::E4M3FNUZ),
    ("e5m2", Format::E5M2),
    ("f152", Format::F152),
    ("e5m2fnuz", Format::E5M2FNUZ),
    ("e2m3", Format::E2M3FN),
    ("e3m2", Format::E3M2FN),
    ("e2m1", Format::E2M1FN),
    ("f16", Format::F16),
];

/// The rounding names a role accepts.
const MODES: [(&str, Mode); 3] = [
    ("nearest", Mode::NearestEven),
    ("stochastic", Mode::Stochastic),
    ("toward-zero", Mode::TowardZero),
];

/// The MX element format of `format`, if it is one.
///
/// ```
/// use tessera_core::fp::{Format, MxFormat};
/// use tessera_sim::model::quant::mx_format;
///
/// assert_eq!(mx_format(Format::E2M1FN), Some(MxFormat::E2M1));
/// assert_eq!(mx_format(Format::F143), None);
/// ```
#[must_use]
pub fn mx_format(format: Format) -> Option<MxFormat> {
    MxFormat::ALL
        .into_iter()
        .find(|m| m.element() == Some(format))
}

impl RoleQuant {
    /// How tile memory and the exchange hold a tensor quantised so: MX
    /// blocks, NVFP4 blocks, or the format's elements (a per-tensor scale
    /// is one scalar beside them).
    ///
    /// ```
    /// use tessera_core::fp::{Format, MxFormat};
    /// use tessera_sim::ipu::Encoding;
    /// use tessera_sim::model::quant::{Recipe, Role};
    ///
    /// assert_eq!(Recipe::FP8.of(Role::Weights).encoding(), Encoding::Scalar(Format::F143));
    /// assert_eq!(Recipe::MXFP4.of(Role::Weights).encoding(), Encoding::Mx(MxFormat::E2M1));
    /// ```
    #[must_use]
    pub fn encoding(&self) -> crate::ipu::Encoding {
        use crate::ipu::Encoding;
        match (self.scaling, mx_format(self.format)) {
            (Scaling::Mx, Some(m)) => Encoding::Mx(m),
            (Scaling::Nvfp4, _) => Encoding::Nvfp4,
            _ => Encoding::Scalar(self.format),
        }
    }

    /// Whether this quantisation can be built.
    fn check(&self) -> Result<(), String> {
        match self.scaling {
            Scaling::Tensor | Scaling::Delayed(_) => Ok(()),
            Scaling::Mx if mx_format(self.format).is_some() => Ok(()),
            Scaling::Mx => Err(format!(
                "{} is not an MX element format (e4m3fn, e5m2, e2m3, e3m2, e2m1)",
                name_of(self.format)
            )),
            Scaling::Nvfp4 if self.format == Format::E2M1FN => Ok(()),
            Scaling::Nvfp4 => Err(format!(
                "{} is not NVFP4's element format (e2m1)",
                name_of(self.format)
            )),
        }
    }
}

fn name_of(format: Format) -> &'static str {
    FORMATS
        .iter()
        .find(|(_, f)| *f == format)
        .map_or("the format", |(n, _)| n)
}

fn scaling_name(s: Scaling) -> String {
    match s {
        Scaling::Tensor => "tensor".into(),
        Scaling::Delayed(n) => format!("delayed{n}"),
        Scaling::Mx => "mx".into(),
        Scaling::Nvfp4 => "nvfp4".into(),
    }
}

impl fmt::Display for RoleQuant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = MODES
            .iter()
            .find(|(_, m)| *m == self.round.mode)
            .map_or("nearest", |(n, _)| n);
        let scaling = scaling_name(self.scaling);
        write!(f, "{}:{mode}:{scaling}", name_of(self.format))
    }
}

impl FromStr for RoleQuant {
    type Err = String;

    /// `FORMAT[:ROUNDING[:SCALING]]`, as `e4m3fn:nearest:tensor`
    /// (defaults: nearest, tensor).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let format = parts.next().unwrap_or_default();
        let names = |list: &[&str]| list.join(", ");
        let Some(&(_, format)) = FORMATS.iter().find(|(n, _)| *n == format) else {
            let known: Vec<&str> = FORMATS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown format `{format}` in `{s}`: expected one of {}",
                names(&known)
            ));
        };
        let mode = parts.next().unwrap_or("nearest");
        let Some(&(_, mode)) = MODES.iter().find(|(n, _)| *n == mode) else {
            return Err(format!(
                "unknown rounding `{mode}` in `{s}`: expected nearest, stochastic or toward-zero"
            ));
        };
        let scaling = match parts.next().unwrap_or("tensor") {
            "tensor" => Scaling::Tensor,
            "mx" => Scaling::Mx,
            "nvfp4" => Scaling::Nvfp4,
            "delayed" => Scaling::Delayed(16),
            d => match d.strip_prefix("delayed").map(str::parse::<u16>) {
                Some(Ok(n)) if n > 0 => Scaling::Delayed(n),
                _ => {
                    return Err(format!(
                        "unknown scaling `{d}` in `{s}`: expected tensor, delayed[N], mx or nvfp4"
                    ));
                }
            },
        };
        if let Some(extra) = parts.next() {
            return Err(format!("`{extra}` after the scaling in `{s}`"));
        }
        Ok(role(format, mode, scaling))
    }
}

/// What a quantisation did to a tensor (or a block of one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantStats {
    /// The largest scale exponent `k` (values were multiplied by `2^k`);
    /// [`QuantStats::NONE`] until a value is scaled, so that a negative
    /// exponent is reported as itself.
    pub exponent: i32,
    /// Finite nonzero values whose scaled magnitude exceeded the format's
    /// largest (they saturated).
    pub saturated: u64,
    /// Nonzero values that became zero.
    pub underflowed: u64,
}

impl QuantStats {
    /// The exponent of stats that have scaled nothing yet.
    pub const NONE: i32 = i32::MIN;
}

impl Default for QuantStats {
    /// Nothing scaled, saturated or lost.
    ///
    /// ```
    /// use tessera_sim::model::quant::QuantStats;
    ///
    /// let s = QuantStats::default();
    /// assert_eq!((s.exponent, s.saturated, s.underflowed), (QuantStats::NONE, 0, 0));
    /// ```
    fn default() -> Self {
        Self {
            exponent: Self::NONE,
            saturated: 0,
            underflowed: 0,
        }
    }
}

/// The exponent `k` of the per-tensor scale for a tensor whose largest
/// magnitude is `amax`: the largest `k` with `amax 2^k <= max` (0 for a
/// zero tensor, clamped to f32's exponents), or `None` if `amax` is not
/// finite.
///
/// ```
/// use tessera_core::fp::Format;
/// use tessera_sim::model::quant::tensor_exponent;
///
/// assert_eq!(tensor_exponent(Format::F143, 240.0), Some(0));
/// assert_eq!(tensor_exponent(Format::F143, 1.0), Some(7)); // 128 <= 240 < 256
/// assert_eq!(tensor_exponent(Format::F143, f32::INFINITY), None);
/// ```
#[must_use]
pub fn tensor_exponent(format: Format, amax: f32) -> Option<i32> {
    if !amax.is_finite() {
        return None;
    }
    if amax == 0.0 {
        return Some(0);
    }
    // amax = ma 2^ea and max = mm 2^em with significands in [1, 2).
    let (ea, ma) = split(amax);
    let (em, mm) = split(format.max());
    let k = em - ea - i32::from(ma > mm);
    Some(k.clamp(-126, 126))
}

/// `x = m 2^e` with `m` in `[1, 2)`, for finite positive `x`.
fn split(x: f32) -> (i32, f32) {
    let e = libm::floorf(libm::log2f(x)) as i32;
    let m = x / pow2(e);
    // log2 may be off by one at a binade's edge.
    if m >= 2.0 {
        (e + 1, m / 2.0)
    } else if m < 1.0 {
        (e - 1, m * 2.0)
    } else {
        (e, m)
    }
}

/// `2^k` for `k` in f32's normal exponents, exactly.
#[must_use]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k.clamp(-126, 127) + 127) as u32) << 23)
}

/// The random bits of a quantisation: element `i`'s bits are those of the
/// stream at a key made of its position in the matrix and its value's
/// bits, so they do not depend on how the batch is split (a sample's
/// position in its micro-batch never changes) and differ from step to
/// step as the values do.
///
/// The values are lines of `line` elements each (the last ones may be
/// padding): element `t` of line `j` is at matrix position `first + j
/// line_step + t step`.
#[derive(Clone, Copy, Debug)]
pub struct Keyed<'a> {
    /// The stream (one per product operand).
    pub stream: RandomStream,
    /// The values, by element.
    pub values: &'a [f32],
    /// The matrix position of the first line's first element.
    pub first: u64,
    /// The distance in the matrix between a line's elements.
    pub step: u64,
    /// Elements per line (`u64::MAX`: one line).
    pub line: u64,
    /// The distance in the matrix between lines' first elements.
    pub line_step: u64,
}

impl Keyed<'_> {
    /// Bits of `values`, one line from `first`, `step` apart.
    ///
    /// ```
    /// use tessera_core::rng::{RandomBits, RandomStream};
    /// use tessera_sim::model::quant::Keyed;
    ///
    /// let s = RandomStream::new(1, 2);
    /// let (a, b) = (Keyed::line(s, &[0.5, 1.0], 10, 3), Keyed::line(s, &[1.0], 13, 0));
    /// assert_eq!(a.word(1, 0), b.word(0, 0)); // the same position and value
    /// ```
    #[must_use]
    pub const fn line(stream: RandomStream, values: &[f32], first: u64, step: u64) -> Keyed<'_> {
        Keyed {
            stream,
            values,
            first,
            step,
            line: u64::MAX,
            line_step: 0,
        }
    }

    fn key(&self, index: u64) -> u64 {
        let v = self.values.get(index as usize).map_or(0, |v| v.to_bits());
        let (j, t) = (index / self.line, index % self.line);
        (self.first + j * self.line_step + t * self.step) << 32 | u64::from(v)
    }
}

impl RandomBits for Keyed<'_> {
    fn half_bits(&self, index: u64) -> u16 {
        self.stream.half_bits(self.key(index))
    }

    fn word(&self, index: u64, word: u32) -> u32 {
        self.stream.word(self.key(index), word)
    }
}

impl RoleQuant {
    /// `x` scaled by `2^k`, rounded into the format (saturating), scaled
    /// back into `out` (exactly); `bits` for stochastic modes (element `i`
    /// at index `i`). A `k` of `None` (a non-finite amax) gives NaN.
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    /// use tessera_sim::model::quant::{QuantStats, Recipe, tensor_exponent};
    ///
    /// let q = Recipe::FP8.weights; // F143, max 240
    /// let x = [1.0f32, 0.3, -0.001];
    /// let k = tensor_exponent(q.format, 1.0);
    /// let (mut out, mut stats) = ([0.0f32; 3], QuantStats::default());
    /// q.round_scaled(&x, k, &RandomStream::new(0, 0), &mut out, &mut stats);
    /// assert_eq!(out, [1.0, 0.3125, -0.0009765625]);
    /// assert_eq!((stats.exponent, stats.saturated, stats.underflowed), (7, 0, 0));
    ///
    /// // Values past the format's range are scaled down: a negative exponent.
    /// let k = tensor_exponent(q.format, 1000.0);
    /// let (mut out, mut stats) = ([0.0f32; 1], QuantStats::default());
    /// q.round_scaled(&[1000.0], k, &RandomStream::new(0, 0), &mut out, &mut stats);
    /// assert_eq!((k, stats.exponent, out[0]), (Some(-3), -3, 1024.0));
    /// ```
    pub fn round_scaled<B: RandomBits + ?Sized>(
        &self,
        x: &[f32],
        k: Option<i32>,
        bits: &B,
        out: &mut [f32],
        stats: &mut QuantStats,
    ) {
        let Some(k) = k else {
            out.fill(f32::NAN);
            return;
        };
        let (up, down, max) = (pow2(k), pow2(-k), self.format.max());
        stats.exponent = stats.exponent.max(k);
        let out = &mut out[..x.len()];
        for (v, o) in x.iter().zip(out.iter_mut()) {
            *o = v * up;
        }
        stats.saturated += out.iter().filter(|o| o.abs() > max).count() as u64;
        fp::chop_slice(self.format, out, self.round, bits, 0);
        for (v, o) in x.iter().zip(out.iter_mut()) {
            stats.underflowed += u64::from(*o == 0.0 && *v != 0.0);
            *o *= down;
        }
    }

    /// One line of `x` (a whole row or column of the reduction) in MX
    /// blocks of 32 from its start: quantised by core's [`Mx`] and
    /// decoded into `out`. The format must be an MX element format.
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    /// use tessera_sim::model::quant::{QuantStats, Recipe};
    ///
    /// let q = Recipe::MXFP4.weights; // E2M1 elements, max 6
    /// let (mut out, mut stats) = ([0.0f32; 3], QuantStats::default());
    /// q.round_mx(&[12.0, 5.0, 0.2], &RandomStream::new(0, 0), &mut out, &mut stats);
    /// assert_eq!(out, [12.0, 4.0, 0.0]); // scale 2^1: 5 -> 4, 0.2 -> 0
    /// assert_eq!(stats.underflowed, 1);
    /// ```
    pub fn round_mx<B: RandomBits + ?Sized>(
        &self,
        x: &[f32],
        bits: &B,
        out: &mut [f32],
        stats: &mut QuantStats,
    ) {
        let Some(format) = mx_format(self.format) else {
            out.fill(f32::NAN);
            return;
        };
        let mx = Mx::new(format).with_round(self.round);
        let mut codes = vec![0u8; format.codes_len(x.len())];
        let mut scales = vec![0u8; Mx::scales_len(x.len())];
        let ok = mx.quantize(x, &mut codes, &mut scales, bits, 0).is_ok()
            && format.dequantize(&codes, &scales, out).is_ok();
        if !ok {
            out.fill(f32::NAN);
        }
        let max = self.format.max();
        for (block, s) in x.chunks(tessera_core::fp::MX_BLOCK).zip(&scales) {
            // A scale that multiplies values by 2^k, as per tensor.
            let k = 127 - i32::from(*s);
            stats.exponent = stats.exponent.max(k);
            let up = pow2(k);
            stats.saturated += block.iter().filter(|v| (*v * up).abs() > max).count() as u64;
        }
        stats.underflowed += x
            .iter()
            .zip(out.iter())
            .filter(|(v, o)| **o == 0.0 && **v != 0.0)
            .count() as u64;
    }
}

impl RoleQuant {
    /// One line of `x` in NVFP4 blocks of 16 from its start under tensor
    /// scale `t` (core's [`Nvfp4::tensor_scale`] of the whole tensor, or
    /// `None` for a non-finite amax: NaN), quantised by core's [`Nvfp4`]
    /// and decoded into `out`. The stats' exponent is the largest over the
    /// blocks of `-ceil(log2(S t))` for block scale `S`.
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    /// use tessera_core::rng::RandomStream;
    /// use tessera_sim::model::quant::{QuantStats, Recipe};
    ///
    /// let q = Recipe::NVFP4.weights;
    /// let x = [2688.0f32, -448.0, 200.0, 1300.0];
    /// let t = Nvfp4::tensor_scale(&x); // 1: the block's scale is 448
    /// let (mut out, mut stats) = ([0.0f32; 4], QuantStats::default());
    /// q.round_nvfp4(&x, Some(t), &RandomStream::new(0, 0), &mut out, &mut stats);
    /// assert_eq!(out, [2688.0, -448.0, 224.0, 1344.0]); // 6, -1, 0.5, 3 times 448
    /// ```
    pub fn round_nvfp4<B: RandomBits + ?Sized>(
        &self,
        x: &[f32],
        t: Option<f32>,
        bits: &B,
        out: &mut [f32],
        stats: &mut QuantStats,
    ) {
        let Some(t) = t else {
            out.fill(f32::NAN);
            return;
        };
        let nv = Nvfp4::new(self.round);
        let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
        let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
        let ok = nv.quantize(x, t, &mut codes, &mut scales, bits, 0).is_ok()
            && Nvfp4::dequantize(&codes, &scales, t, out).is_ok();
        if !ok {
            out.fill(f32::NAN);
        }
        let max = self.format.max();
        for (block, s) in x.chunks(fp::NVFP4_BLOCK).zip(&scales) {
            let divisor = Format::E4M3FN.decode(u32::from(*s)) * t;
            if divisor > 0.0 && divisor.is_finite() {
                let (e, m) = split(divisor);
                stats.exponent = stats.exponent.max(-e - i32::from(m > 1.0));
                let over = block.iter().filter(|v| (**v / divisor).abs() > max);
                stats.saturated += over.count() as u64;
            }
        }
        stats.underflowed += x
            .iter()
            .zip(out.iter())
            .filter(|(v, o)| **o == 0.0 && **v != 0.0)
            .count() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_read_back() {
        for q in [
            Recipe::FP8,
            Recipe::MXFP8,
            Recipe::MXFP6,
            Recipe::MXFP4,
            Recipe::NVFP4,
        ] {
            for r in [Role::Weights, Role::Activations, Role::Gradients] {
                let text = q.of(r).to_string();
                assert_eq!(text.parse::<RoleQuant>(), Ok(q.of(r)), "{text}");
            }
            assert_eq!(q.check(), Ok(()));
        }
        assert!("e9m9".parse::<RoleQuant>().is_err());
        assert!("e4m3:up".parse::<RoleQuant>().is_err());
        assert!("e4m3:nearest:delayed0".parse::<RoleQuant>().is_err());
        let f143_mx: RoleQuant = "f143:nearest:mx".parse().unwrap();
        assert!(f143_mx.check().is_err());
    }

    #[test]
    fn delayed_scalings_parse_print_and_check() {
        let d16: RoleQuant = "e4m3:nearest:delayed16".parse().unwrap();
        assert_eq!(d16.scaling, Scaling::Delayed(16));
        assert_eq!(d16.to_string(), "e4m3:nearest:delayed16");
        assert_eq!("e4m3:nearest:delayed".parse::<RoleQuant>(), Ok(d16));
        let d1: RoleQuant = "f152:stochastic:delayed1".parse().unwrap();
        assert_eq!(
            (d1.scaling, d1.round.mode),
            (Scaling::Delayed(1), Mode::Stochastic)
        );
        assert_eq!(d1.check(), Ok(()));
        for bad in ["e4m3:nearest:delayedx", "e4m3:nearest:delayed70000"] {
            assert!(bad.parse::<RoleQuant>().is_err(), "{bad}");
        }
    }
}
