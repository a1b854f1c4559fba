//! Slices of f32 to and from any [`Format`]: the public entry points of
//! the SIMD kernels in `code_kernels.rs` and `decode_kernels.rs`, bitwise equal to loops over the
//! scalar twins on every backend.

pub use super::code::Code;
use super::code::sealed::{Codes, CodesRef};
use super::code_kernels::{ChopValues, EncodeCodes};
use super::decode_kernels::DecodeCodes;
use super::format::Format;
use super::round::Round;
use crate::arch;
use crate::rng::{Erased, RandomBits};

/// # Panics
/// If the lengths differ or `C` is narrower than the format.
fn check<C: Code>(format: Format, a: usize, b: usize, what: &str) {
    assert_eq!(a, b, "{what}: length mismatch");
    assert!(
        format.bits() <= C::BITS,
        "{what}: a {}-bit format does not fit {}-bit codes",
        format.bits(),
        C::BITS
    );
}

/// Rounds every f32 of `src` into `format` by `round` and stores the
/// encodings in `dst`; element `i` reads the random bits of position
/// `first_index + i` of `bits` (so a slice converted whole or in pieces,
/// each with its offset, gives the same codes). Bitwise
/// [`Format::encode_with`] element by element.
///
/// Returns how many inputs were NaN in a format without NaN (FP6, FP4),
/// whose codes hold the largest magnitude instead: 0 for every other
/// format.
///
/// ```
/// use tessera_core::fp::{self, Format, Round};
/// use tessera_core::rng::RandomStream;
///
/// let s = RandomStream::new(2, 0);
/// let mut codes = [0u8; 4];
/// let nans = fp::encode_slice(Format::E4M3FN, &[1.0, -2.0, 448.0, 0.0], &mut codes, Round::NEAREST_EVEN, &s, 0);
/// assert_eq!((codes, nans), ([0x38, 0xc0, 0x7e, 0x00], 0));
/// let nans = fp::encode_slice(Format::E2M1FN, &[f32::NAN; 4], &mut codes, Round::NEAREST_EVEN, &s, 0);
/// assert_eq!(nans, 4);
/// ```
///
/// # Panics
/// If `src` and `dst` differ in length, or `C` is narrower than the format.
#[must_use = "NaN inputs to a format without NaN are reported, not encoded"]
pub fn encode_slice<C: Code, B: RandomBits + ?Sized>(
    format: Format,
    src: &[f32],
    dst: &mut [C],
    round: Round,
    bits: &B,
    first_index: u64,
) -> usize {
    check::<C>(format, src.len(), dst.len(), "encode_slice");
    encode_codes(
        format,
        src,
        C::codes(dst),
        round,
        &Erased(bits),
        first_index,
    )
}

/// [`encode_slice`]'s kernels, instantiated once, in this crate, for every
/// caller: a caller's crate compiles only the generic lines above (the
/// kernels are large, and compiling them again for each caller's types
/// multiplied every downstream build's time).
fn encode_codes(
    format: Format,
    src: &[f32],
    dst: Codes<'_>,
    round: Round,
    bits: &dyn RandomBits,
    first_index: u64,
) -> usize {
    fn run<C: Code>(
        format: Format,
        src: &[f32],
        dst: &mut [C],
        round: Round,
        bits: &dyn RandomBits,
        first_index: u64,
    ) -> usize {
        arch::dispatch(EncodeCodes {
            format,
            src,
            dst,
            round,
            bits,
            first_index,
        })
    }
    match dst {
        Codes::U8(dst) => run(format, src, dst, round, bits, first_index),
        Codes::U16(dst) => run(format, src, dst, round, bits, first_index),
        Codes::U32(dst) => run(format, src, dst, round, bits, first_index),
    }
}

/// Decodes every code of `src` (in `format`) into `dst`, exactly; bitwise
/// [`Format::decode`] element by element.
///
/// ```
/// use tessera_core::fp::{self, Format};
///
/// let mut x = [0.0f32; 3];
/// fp::decode_slice(Format::E5M2, &[0x3cu8, 0x7b, 0x80], &mut x);
/// assert_eq!(x, [1.0, 57344.0, -0.0]);
/// ```
///
/// # Panics
/// If `src` and `dst` differ in length, or `C` is narrower than the format.
pub fn decode_slice<C: Code>(format: Format, src: &[C], dst: &mut [f32]) {
    check::<C>(format, src.len(), dst.len(), "decode_slice");
    decode_codes(format, C::codes_ref(src), dst);
}

/// [`decode_slice`]'s kernels, instantiated once, in this crate (as
/// [`encode_codes`]).
fn decode_codes(format: Format, src: CodesRef<'_>, dst: &mut [f32]) {
    match src {
        CodesRef::U8(src) => arch::dispatch(DecodeCodes { format, src, dst }),
        CodesRef::U16(src) => arch::dispatch(DecodeCodes { format, src, dst }),
        CodesRef::U32(src) => arch::dispatch(DecodeCodes { format, src, dst }),
    }
}

/// Rounds every f32 of `x` in place to `format`'s values by `round`,
/// keeping f32 (CPFloat's chop); element `i` reads the random bits of
/// position `first_index + i`. Bitwise [`Format::chop_with`] element by
/// element.
///
/// ```
/// use tessera_core::fp::{self, Format, Round};
/// use tessera_core::rng::RandomStream;
///
/// let mut x = [0.1f32, 1.0, 5.0, 100.0];
/// fp::chop_slice(Format::E2M1FN, &mut x, Round::NEAREST_EVEN, &RandomStream::new(0, 0), 0);
/// assert_eq!(x, [0.0, 1.0, 4.0, 6.0]); // FP4 saturates: it has no infinity or NaN
/// ```
pub fn chop_slice<B: RandomBits + ?Sized>(
    format: Format,
    x: &mut [f32],
    round: Round,
    bits: &B,
    first_index: u64,
) {
    chop_values(format, x, round, &Erased(bits), first_index);
}

/// [`chop_slice`]'s kernels, instantiated once, in this crate (as
/// [`encode_codes`]).
fn chop_values(
    format: Format,
    x: &mut [f32],
    round: Round,
    bits: &dyn RandomBits,
    first_index: u64,
) {
    arch::dispatch(ChopValues {
        format,
        x,
        round,
        bits,
        first_index,
    });
}
