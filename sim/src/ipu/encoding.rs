//! How a tensor's elements are held in tile memory and moved by the
//! exchange: a core [`Format`] per element, or blocks sharing a scale, and
//! the bytes that takes.
//!
//! An element of `b` bits takes `b / 8` bytes, packed as OCP MX packs its
//! codes (two FP4 per byte, four FP6 per three bytes): f32 4, f16 2, FP8 1,
//! FP6 0.75, FP4 0.5. A block format adds one scale byte per block (an E8M0
//! per 32 elements for MX, an E4M3 per 16 for NVFP4). A per-tensor scale
//! (FP8's, NVFP4's second level) is one scalar per tensor, held beside the
//! tensor's other scalars, and is not counted here.

use tessera_core::fp::{Format, MX_BLOCK, MxFormat, NVFP4_BLOCK};

use super::costs::Kernel;

/// The bits of an MX element whose format is not a float ([`MxFormat::Int8`]).
const INT8_BITS: u32 = 8;

/// How a tensor's elements are encoded.
///
/// ```
/// use tessera_core::fp::{Format, MxFormat};
/// use tessera_sim::ipu::Encoding;
///
/// assert_eq!(Encoding::F16.bytes(10), 20);
/// assert_eq!(Encoding::Scalar(Format::E4M3FN).bytes(10), 10);
/// // 64 FP6 codes in 48 bytes, and two E8M0 scales.
/// assert_eq!(Encoding::Mx(MxFormat::E3M2).bytes(64), 50);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Elements of a core format, unscaled or with one scale per tensor.
    Scalar(Format),
    /// OCP MX blocks: [`MX_BLOCK`] elements sharing an 8-bit E8M0 scale.
    Mx(MxFormat),
    /// NVFP4 blocks: [`NVFP4_BLOCK`] E2M1 elements sharing an 8-bit E4M3
    /// scale (and an f32 scale per tensor).
    Nvfp4,
}

impl Encoding {
    /// f32 elements.
    pub const F32: Self = Self::Scalar(Format::F32);
    /// f16 elements.
    pub const F16: Self = Self::Scalar(Format::F16);

    /// Bits per element code (packed codes share bytes).
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    /// use tessera_sim::ipu::Encoding;
    ///
    /// assert_eq!(Encoding::Mx(MxFormat::E2M1).element_bits(), 4);
    /// assert_eq!(Encoding::Nvfp4.element_bits(), 4);
    /// ```
    #[must_use]
    pub const fn element_bits(self) -> u32 {
        match self {
            Self::Scalar(f) => f.bits(),
            Self::Mx(MxFormat::Int8) => INT8_BITS,
            Self::Mx(m) => m.bits(),
            Self::Nvfp4 => 4,
        }
    }

    /// Elements per shared scale (`None`: no block scale).
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    /// use tessera_sim::ipu::Encoding;
    ///
    /// assert_eq!(Encoding::Mx(MxFormat::E4M3).block(), Some(32));
    /// assert_eq!(Encoding::Nvfp4.block(), Some(16));
    /// assert_eq!(Encoding::F16.block(), None);
    /// ```
    #[must_use]
    pub const fn block(self) -> Option<u64> {
        match self {
            Self::Scalar(_) => None,
            Self::Mx(_) => Some(MX_BLOCK as u64),
            Self::Nvfp4 => Some(NVFP4_BLOCK as u64),
        }
    }

    /// Bytes of `elements` elements: the packed codes, `ceil(elements x
    /// bits / 8)`, and one scale byte per block begun.
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    /// use tessera_sim::ipu::Encoding;
    ///
    /// // 33 FP4 codes in 17 bytes, and two scales (the second block partial).
    /// assert_eq!(Encoding::Mx(MxFormat::E2M1).bytes(33), 19);
    /// assert_eq!(Encoding::F32.bytes(3), 12);
    /// ```
    #[must_use]
    pub const fn bytes(self, elements: u64) -> u64 {
        let codes = (elements as u128 * self.element_bits() as u128).div_ceil(8);
        let scales = match self.block() {
            Some(block) => elements.div_ceil(block) as u128,
            None => 0,
        };
        let bytes = codes + scales;
        if bytes > u64::MAX as u128 {
            u64::MAX
        } else {
            bytes as u64
        }
    }

    /// Bytes per element in the limit of many elements: `bits / 8 + 1 /
    /// block` (f16 2, FP8 1, MXFP6 0.78125, MXFP4 0.53125).
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    /// use tessera_sim::ipu::Encoding;
    ///
    /// assert_eq!(Encoding::Mx(MxFormat::E2M1).bytes_per_element(), 0.53125);
    /// ```
    #[must_use]
    pub fn bytes_per_element(self) -> f64 {
        let scales = self.block().map_or(0.0, |b| 1.0 / b as f64);
        f64::from(self.element_bits()) / 8.0 + scales
    }

    /// The kernel that converts f16 or f32 values to this encoding and
    /// back, per element: [`Kernel::ConvertMx`] for blocks,
    /// [`Kernel::ConvertF8`] for a scalar format narrower than 16 bits
    /// (with its per-tensor scale), `None` for f16, bf16 and f32.
    ///
    /// ```
    /// use tessera_core::fp::{Format, MxFormat};
    /// use tessera_sim::ipu::{Encoding, Kernel};
    ///
    /// assert_eq!(Encoding::Scalar(Format::E5M2).conversion(), Some(Kernel::ConvertF8));
    /// assert_eq!(Encoding::Mx(MxFormat::E2M1).conversion(), Some(Kernel::ConvertMx));
    /// assert_eq!(Encoding::F16.conversion(), None);
    /// ```
    #[must_use]
    pub const fn conversion(self) -> Option<Kernel> {
        match self {
            Self::Mx(_) | Self::Nvfp4 => Some(Kernel::ConvertMx),
            Self::Scalar(f) if f.bits() < 16 => Some(Kernel::ConvertF8),
            Self::Scalar(_) => None,
        }
    }

    /// Whether the elements are 8-bit floats with one scale per tensor, the
    /// format FP8 units take (Graphcore's F143 and F152, OCP's E4M3 and
    /// E5M2, with 4 or 5 exponent bits).
    ///
    /// ```
    /// use tessera_core::fp::{Format, MxFormat};
    /// use tessera_sim::ipu::Encoding;
    ///
    /// assert!(Encoding::Scalar(Format::F143).is_fp8());
    /// assert!(!Encoding::Mx(MxFormat::E4M3).is_fp8());
    /// ```
    #[must_use]
    pub const fn is_fp8(self) -> bool {
        match self {
            Self::Scalar(f) => f.bits() == 8 && (f.exponent_bits() == 4 || f.exponent_bits() == 5),
            Self::Mx(_) | Self::Nvfp4 => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::fp::{Mx, Nvfp4};

    #[test]
    fn bytes_are_cores_codes_and_scales() {
        for n in [0usize, 1, 2, 3, 5, 31, 32, 33, 64, 100, 1000] {
            for m in MxFormat::ALL {
                let want = m.codes_len(n) + Mx::scales_len(n);
                assert_eq!(Encoding::Mx(m).bytes(n as u64), want as u64, "{m:?} {n}");
            }
            let nv = Nvfp4::codes_len(n) + Nvfp4::scales_len(n);
            assert_eq!(Encoding::Nvfp4.bytes(n as u64), nv as u64);
            let n = n as u64;
            assert_eq!(Encoding::F32.bytes(n), 4 * n);
            assert_eq!(Encoding::F16.bytes(n), 2 * n);
            for f in [Format::E4M3FN, Format::E5M2, Format::F143, Format::F152] {
                assert_eq!(Encoding::Scalar(f).bytes(n), n);
            }
            // Packed FP6 and FP4 with a per-tensor scale: 0.75 and 0.5.
            assert_eq!(
                Encoding::Scalar(Format::E3M2FN).bytes(n),
                (6 * n).div_ceil(8)
            );
            assert_eq!(Encoding::Scalar(Format::E2M1FN).bytes(n), n.div_ceil(2));
        }
        assert_eq!(Encoding::Mx(MxFormat::E3M2).bytes(1 << 20), 25 << 15);
        assert_eq!(Encoding::Nvfp4.bytes_per_element(), 0.5625);
        assert_eq!(Encoding::Mx(MxFormat::Int8).bytes_per_element(), 1.03125);
        assert_eq!(Encoding::F32.bytes(u64::MAX), u64::MAX);
        assert_eq!(
            Encoding::Nvfp4.bytes(u64::MAX),
            u64::MAX / 2 + 1 + u64::MAX / 16 + 1
        );
    }

    #[test]
    fn fp8_is_an_8_bit_float_scaled_per_tensor() {
        let fp8 = [
            Format::E4M3,
            Format::E4M3FN,
            Format::E5M2,
            Format::F143,
            Format::F152,
        ];
        assert!(fp8.iter().all(|f| Encoding::Scalar(*f).is_fp8()));
        for e in [
            Encoding::F16,
            Encoding::F32,
            Encoding::Scalar(Format::E3M4),
            Encoding::Scalar(Format::E8M0FNU),
            Encoding::Scalar(Format::E2M1FN),
            Encoding::Nvfp4,
        ] {
            assert!(!e.is_fp8(), "{e:?}");
        }
        assert!(MxFormat::ALL.iter().all(|m| !Encoding::Mx(*m).is_fp8()));
    }
}
