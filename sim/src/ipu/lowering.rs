//! How an IPU runs a matrix product whose inputs are in a given
//! [`Encoding`]: on its FP8 units, or converted to f16 for the AMP's FP16
//! products when it has none (Mk2 GC200, Bow) or the format is one its
//! units do not take (MX and NVFP4 blocks, FP6, FP4: Graphcore's FP8 units
//! take one scale per tensor, not a scale per block).

use super::costs::Kernel;
use super::encoding::Encoding;
use super::spec::IpuSpec;

/// Which units a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProductPath {
    /// f32 products ([`Kernel::MatmulF32`]).
    F32,
    /// f16 inputs, f32 accumulation on the AMP ([`Kernel::MatmulF16`]).
    F16,
    /// 8-bit float inputs on the FP8 units ([`Kernel::MatmulF8`]).
    Fp8Units,
    /// Inputs converted to f16 ([`ProductPrice::convert`]), then FP16
    /// products.
    ConvertedToF16,
}

impl ProductPath {
    /// Words for reports: `f32`, `FP16`, `FP8 units`, `converted to FP16`.
    ///
    /// ```
    /// use tessera_sim::ipu::ProductPath;
    ///
    /// assert_eq!(ProductPath::ConvertedToF16.describe(), "converted to FP16 (no FP8 units for this format)");
    /// ```
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "FP16",
            Self::Fp8Units => "FP8 units",
            Self::ConvertedToF16 => "converted to FP16 (no FP8 units for this format)",
        }
    }
}

/// The price of a product on an IPU ([`IpuSpec::product`]): its kernel per
/// flop and, when its inputs are converted first, the conversion's kernel
/// per input element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProductPrice {
    /// Which units.
    pub path: ProductPath,
    /// The products' kernel, per flop.
    pub matmul: Kernel,
    /// The inputs' conversion to f16 before the products, per element of
    /// each operand a tile uses (`None`: the units take the inputs as
    /// stored).
    pub convert: Option<Kernel>,
}

impl ProductPrice {
    /// Tile cycles of the products of a tile doing `flops` flops on
    /// `elements` input elements, all its workers sharing each phase: a
    /// compute set for the conversion (when there is one) and one for the
    /// products, each `compute_set_cycles + workers x` the busiest
    /// worker's thread cycles, as the engine charges a multi-vertex.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Encoding;
    ///
    /// let fp8 = Encoding::Scalar(Format::E4M3FN);
    /// let (c600, bow) = (IpuSpec::C600.product(fp8), IpuSpec::BOW.product(fp8));
    /// let flops = 2 * 64 * 64 * 64;
    /// assert!(c600.tile_cycles(&IpuSpec::C600, flops, 2 * 64 * 64) < bow.tile_cycles(&IpuSpec::BOW, flops, 2 * 64 * 64));
    /// ```
    #[must_use]
    pub fn tile_cycles(&self, spec: &IpuSpec, flops: u64, elements: u64) -> u64 {
        let set = |kernel: Kernel, work: u64| {
            let workers = spec.workers_per_tile();
            let thread = spec.costs().get(kernel).multi_thread_cycles(work, workers);
            u64::from(spec.params().compute_set_cycles)
                .saturating_add(u64::from(workers).saturating_mul(thread))
        };
        let convert = self.convert.map_or(0, |k| set(k, elements));
        convert.saturating_add(set(self.matmul, flops))
    }
}

impl From<Kernel> for ProductPrice {
    /// Products of `kernel` on inputs as stored (no conversion): the path
    /// the kernel is ([`Kernel::MatmulF32`] f32, [`Kernel::MatmulF8`] the
    /// FP8 units, any other FP16).
    ///
    /// ```
    /// use tessera_sim::ipu::{Kernel, ProductPath, ProductPrice};
    ///
    /// let p = ProductPrice::from(Kernel::MatmulF16);
    /// assert_eq!((p.path, p.convert), (ProductPath::F16, None));
    /// ```
    fn from(matmul: Kernel) -> Self {
        let path = match matmul {
            Kernel::MatmulF32 => ProductPath::F32,
            Kernel::MatmulF8 => ProductPath::Fp8Units,
            _ => ProductPath::F16,
        };
        Self {
            path,
            matmul,
            convert: None,
        }
    }
}

impl IpuSpec {
    /// How this IPU runs a matrix product whose inputs are encoded as
    /// `inputs`: f32 and f16 on the AMP; 8-bit floats scaled per tensor on
    /// the FP8 units if it has them ([`IpuSpec::has_fp8_units`]), else
    /// converted to f16 ([`Kernel::ConvertF8`]) then FP16 products; MX and
    /// NVFP4 blocks ([`Kernel::ConvertMx`]) and per-tensor FP6 and FP4
    /// ([`Kernel::ConvertF8`]) converted to f16 on every IPU. Other
    /// formats of at most 16 bits (bf16) run as f16, wider ones as f32.
    ///
    /// ```
    /// use tessera_core::fp::{Format, MxFormat};
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{Encoding, Kernel, ProductPath};
    ///
    /// let fp8 = Encoding::Scalar(Format::E5M2);
    /// assert_eq!(IpuSpec::C600.product(fp8).path, ProductPath::Fp8Units);
    /// let bow = IpuSpec::BOW.product(fp8);
    /// assert_eq!((bow.path, bow.matmul, bow.convert), (ProductPath::ConvertedToF16, Kernel::MatmulF16, Some(Kernel::ConvertF8)));
    /// let mx = IpuSpec::C600.product(Encoding::Mx(MxFormat::E4M3));
    /// assert_eq!(mx.convert, Some(Kernel::ConvertMx));
    /// ```
    #[must_use]
    pub const fn product(&self, inputs: Encoding) -> ProductPrice {
        let path = if inputs.is_fp8() && self.has_fp8_units() {
            ProductPath::Fp8Units
        } else if inputs.conversion().is_some() {
            ProductPath::ConvertedToF16
        } else if inputs.element_bits() <= 16 {
            ProductPath::F16
        } else {
            ProductPath::F32
        };
        let (matmul, convert) = match path {
            ProductPath::F32 => (Kernel::MatmulF32, None),
            ProductPath::F16 => (Kernel::MatmulF16, None),
            ProductPath::Fp8Units => (Kernel::MatmulF8, None),
            ProductPath::ConvertedToF16 => (Kernel::MatmulF16, inputs.conversion()),
        };
        ProductPrice {
            path,
            matmul,
            convert,
        }
    }
}

impl IpuSpec {
    /// How this IPU runs a product of an operand encoded as `a` by one
    /// encoded as `b`: on the FP8 units if both go there; otherwise
    /// converted to f16 if either needs it (the first conversion named,
    /// for both operands' elements), else as [`IpuSpec::product`] of `a`.
    ///
    /// ```
    /// use tessera_core::fp::{Format, MxFormat};
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{Encoding, Kernel, ProductPath};
    ///
    /// let (w, g) = (Encoding::Scalar(Format::F143), Encoding::Scalar(Format::F152));
    /// assert_eq!(IpuSpec::C600.product_of(w, g).path, ProductPath::Fp8Units);
    /// // f16 inputs do not go to the FP8 units: the FP8 operand is converted.
    /// let p = IpuSpec::C600.product_of(Encoding::F16, g);
    /// assert_eq!((p.path, p.convert), (ProductPath::ConvertedToF16, Some(Kernel::ConvertF8)));
    /// ```
    #[must_use]
    pub const fn product_of(&self, a: Encoding, b: Encoding) -> ProductPrice {
        let (pa, pb) = (self.product(a), self.product(b));
        let both_fp8 =
            matches!(pa.path, ProductPath::Fp8Units) && matches!(pb.path, ProductPath::Fp8Units);
        if both_fp8 {
            return pa;
        }
        let convert = match (a.conversion(), b.conversion()) {
            (Some(k), _) | (None, Some(k)) => Some(k),
            (None, None) => None,
        };
        match convert {
            Some(_) => ProductPrice {
                path: ProductPath::ConvertedToF16,
                matmul: Kernel::MatmulF16,
                convert,
            },
            None => pa,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::fp::{Format, MxFormat};

    #[test]
    fn every_encoding_has_one_path_per_ipu() {
        let fp8 = Encoding::Scalar(Format::E4M3FN);
        for (spec, units) in [
            (IpuSpec::MK2_GC200, false),
            (IpuSpec::BOW, false),
            (IpuSpec::C600, true),
        ] {
            assert_eq!(spec.product(Encoding::F32).matmul, Kernel::MatmulF32);
            assert_eq!(spec.product(Encoding::F16).path, ProductPath::F16);
            assert_eq!(
                spec.product(Encoding::Scalar(Format::BF16)).path,
                ProductPath::F16
            );
            let p = spec.product(fp8);
            if units {
                assert_eq!(
                    (p.path, p.matmul, p.convert),
                    (ProductPath::Fp8Units, Kernel::MatmulF8, None)
                );
            } else {
                assert_eq!(
                    (p.path, p.matmul, p.convert),
                    (
                        ProductPath::ConvertedToF16,
                        Kernel::MatmulF16,
                        Some(Kernel::ConvertF8)
                    )
                );
            }
            for m in MxFormat::ALL {
                let p = spec.product(Encoding::Mx(m));
                assert_eq!(
                    (p.path, p.convert),
                    (ProductPath::ConvertedToF16, Some(Kernel::ConvertMx))
                );
            }
            let fp4 = spec.product(Encoding::Scalar(Format::E2M1FN));
            assert_eq!(fp4.convert, Some(Kernel::ConvertF8));
            assert_eq!(spec.product(Encoding::Nvfp4).matmul, Kernel::MatmulF16);
        }
    }

    #[test]
    fn fp8_on_a_c600_beats_conversion_and_fp16_on_a_bow() {
        let fp8 = Encoding::Scalar(Format::E4M3FN);
        // A 1,472-tile share of a [1024, 1024] x [1024, 1024] product: a
        // tile's 64 x 1024 x 16 block.
        let (flops, elements) = (2 * 64 * 1024 * 16, 64 * 1024 + 1024 * 16);
        let (c600, bow) = (IpuSpec::C600, IpuSpec::BOW);
        let on_units = c600.product(fp8).tile_cycles(&c600, flops, elements);
        let converted = bow.product(fp8).tile_cycles(&bow, flops, elements);
        let f16 = bow
            .product(Encoding::F16)
            .tile_cycles(&bow, flops, elements);
        // The units: 50 + 6 x (40 + ceil(8192 / 6)) at 256 flops a cycle.
        assert_eq!(on_units, 50 + 6 * (40 + 1366));
        // FP16 products at 128 flops a cycle, plus the conversion: 50 + 6 x
        // (10 + ceil(40,960 pairs / 6) x 6) cycles.
        assert_eq!(f16, 50 + 6 * (40 + 2731));
        assert_eq!(converted, f16 + 50 + 6 * (10 + 6827 * 6));
        // In seconds, at each IPU's clock: the C600 is faster than FP16 on
        // the Bow; the Bow's conversion in software costs more than its
        // products at this shape.
        assert!(c600.seconds(on_units) < bow.seconds(f16));
        assert!(bow.seconds(converted) > 5.0 * bow.seconds(f16));
    }
}
