//! The words every description uses: the activation, the arithmetic,
//! the parameters' specs, the sizes a tensor may have, and the normals
//! weights start from. Nothing here builds or measures a graph.

use tessera_core::rng::RandomStream;

use crate::ipu::{Encoding, IpuSpec, ProductPrice};

/// The hidden layers' activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `max(x, 0)` (derivative 0 at 0).
    Relu,
    /// The tanh approximation `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    /// x^3)))`, with the exact derivative of that formula.
    Gelu,
}

/// The arithmetic of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compute {
    /// f32 throughout, nothing rounded.
    F32,
    /// Mixed precision: f16 weights (given), activations and gradients
    /// rounded to nearest f16, products accumulated in f32 (see the
    /// [module docs](super#numerics)).
    F16,
    /// [`Compute::F16`], with the dense and convolution products' inputs
    /// quantised by the recipe.
    Quantised(super::quant::Recipe),
}

impl Compute {
    /// Whether activations and gradients are rounded to f16.
    ///
    /// ```
    /// use tessera_sim::model::{Compute, quant::Recipe};
    ///
    /// assert!(Compute::Quantised(Recipe::FP8).f16() && !Compute::F32.f16());
    /// ```
    #[must_use]
    pub const fn f16(self) -> bool {
        !matches!(self, Self::F32)
    }

    /// How `spec` runs the dense and convolution products, as the
    /// trainer's graph prices them: the forward product (activations by
    /// weights), `dW` (activations by gradients) and `dA` (gradients by
    /// weights); quantised operands as [`IpuSpec::product_of`] says.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::ProductPath;
    /// use tessera_sim::model::{Compute, quant::Recipe};
    ///
    /// let fp8 = Compute::Quantised(Recipe::FP8);
    /// assert!(fp8.products(&IpuSpec::C600).iter().all(|p| p.path == ProductPath::Fp8Units));
    /// assert_eq!(fp8.products(&IpuSpec::BOW)[0].path, ProductPath::ConvertedToF16);
    /// assert_eq!(Compute::F16.products(&IpuSpec::C600)[1].path, ProductPath::F16);
    /// ```
    ///
    /// [`IpuSpec::product_of`]: crate::ipu::IpuSpec::product_of
    #[must_use]
    pub fn products(self, spec: &IpuSpec) -> [ProductPrice; 3] {
        use super::quant::Role::{Activations, Gradients, Weights};
        match self {
            Self::F32 => [spec.product(Encoding::F32); 3],
            Self::F16 => [spec.product(Encoding::F16); 3],
            Self::Quantised(r) => [
                (Activations, Weights),
                (Activations, Gradients),
                (Gradients, Weights),
            ]
            .map(|(a, b)| spec.product_of(r.of(a).encoding(), r.of(b).encoding())),
        }
    }

    /// The recipe of the quantised products, if any.
    ///
    /// ```
    /// use tessera_sim::model::{Compute, quant::Recipe};
    ///
    /// assert_eq!(Compute::Quantised(Recipe::MXFP8).recipe(), Some(Recipe::MXFP8));
    /// assert_eq!(Compute::F16.recipe(), None);
    /// ```
    #[must_use]
    pub const fn recipe(self) -> Option<super::quant::Recipe> {
        match self {
            Self::Quantised(r) => Some(r),
            _ => None,
        }
    }
}

/// What a parameter is, for the optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A layer's weight matrix.
    Weight,
    /// A layer's bias.
    Bias,
    /// Batch norm's gamma or beta (excluded from weight decay).
    Norm,
}

/// One parameter tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamSpec {
    /// Its name, as `layer0.weight`.
    pub name: String,
    /// Its shape (row-major).
    pub shape: Vec<usize>,
    /// What it is.
    pub kind: ParamKind,
}

impl ParamSpec {
    /// Its number of elements.
    ///
    /// ```
    /// use tessera_sim::model::{ParamKind, ParamSpec};
    ///
    /// let w = ParamSpec { name: "layer0.weight".into(), shape: vec![4, 3], kind: ParamKind::Weight };
    /// assert_eq!(w.len(), 12);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no elements.
    ///
    /// ```
    /// use tessera_sim::model::{ParamKind, ParamSpec};
    ///
    /// let b = ParamSpec { name: "layer0.bias".into(), shape: vec![0], kind: ParamKind::Bias };
    /// assert!(b.is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `count` normals of standard deviation `std` from `stream` (Box-Muller,
/// as [`MlpConfig::network`](super::MlpConfig::network) documents).
pub(super) fn normals(stream: &RandomStream, count: usize, std: f64) -> Vec<f32> {
    let unit = 1.0 / f64::from(1u32 << 24);
    (0..count as u64)
        .map(|e| {
            let p = e & !1;
            let u1 = f64::from((stream.bits(p) >> 8) + 1) * unit;
            let u2 = f64::from(stream.bits(p + 1) >> 8) * unit;
            let r = libm::sqrt(-2.0 * libm::log(u1));
            let t = 2.0 * core::f64::consts::PI * u2;
            let z = if e & 1 == 0 {
                libm::cos(t)
            } else {
                libm::sin(t)
            };
            (std * r * z) as f32
        })
        .collect()
}

/// The most bytes a tensor of the model may have: 2^58 (256 PiB, beyond
/// any machine), so that the small multiples of it the accounting takes
/// (activations and their gradients, stashes, optimizer state) cannot
/// overflow 64 bits.
pub const MAX_TENSOR_BYTES: u64 = 1 << 58;

/// The bytes of a `rows x cols` f32 tensor, if at most
/// [`MAX_TENSOR_BYTES`].
pub(super) fn fits(rows: usize, cols: usize) -> Option<u64> {
    (rows as u64)
        .checked_mul(cols as u64)
        .and_then(|n| n.checked_mul(4))
        .filter(|&n| n <= MAX_TENSOR_BYTES)
}

/// The fewest flops a product's output block gets (see the module docs):
/// 2^16, about 500 cycles of a tile's AMP unit in f16.
pub const MIN_BLOCK_FLOPS: u64 = 1 << 16;

/// Batch norm's `eps`.
pub const BN_EPSILON: f32 = 1e-5;

/// Batch norm's running-statistics momentum: `running = (1 - m) running +
/// m batch`.
pub const BN_MOMENTUM: f32 = 0.1;
