//! Slices of one plain number type read as another of the same size
//! (`f32` as `u32`, `f16`/`bf16` as their `u16` bits), the one cast the
//! kernels need, done by `bytemuck` (f32, u32) and `half`'s slice traits
//! (f16, bf16). [`Plain`] only routes a generic type to its crate: generic
//! code cannot name `bytemuck::Pod` for the `half` types without `half`'s
//! `bytemuck` feature, which brings `bytemuck`'s derive macros (a second
//! proc-macro stack) into every build of the crate.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

/// A slice as its bit patterns.
pub enum Bits<'a> {
    /// Four bytes an element.
    U32(&'a [u32]),
    /// Two bytes an element.
    U16(&'a [u16]),
}

/// A mutable slice as its bit patterns.
pub enum BitsMut<'a> {
    /// Four bytes an element.
    U32(&'a mut [u32]),
    /// Two bytes an element.
    U16(&'a mut [u16]),
}

/// A number type whose every bit pattern is a value, with no padding, and
/// its slices as their bits and back. Sealed (the module is private).
pub trait Plain: Copy + Default + 'static {
    /// `x` as bits.
    #[doc(hidden)]
    fn bits(x: &[Self]) -> Bits<'_>;
    /// `x` as bits, to write.
    #[doc(hidden)]
    fn bits_mut(x: &mut [Self]) -> BitsMut<'_>;
    /// Bits as `Self`s; `None` if they have another size.
    #[doc(hidden)]
    fn from_bits(x: Bits<'_>) -> Option<&[Self]>;
    /// Bits as `Self`s, to write; `None` if they have another size.
    #[doc(hidden)]
    fn from_bits_mut(x: BitsMut<'_>) -> Option<&mut [Self]>;
}

/// Implements [`Plain`] for `$t`, `$w` bits wide: `$cast` reads a slice
/// of it as bits and back (one generic call does both), `$cast_mut` writes.
macro_rules! plain {
    ($t:ty, $w:ident, |$x:ident| $cast:expr, $cast_mut:expr) => {
        impl Plain for $t {
            #[inline(always)]
            fn bits($x: &[Self]) -> Bits<'_> {
                Bits::$w($cast)
            }
            #[inline(always)]
            fn bits_mut($x: &mut [Self]) -> BitsMut<'_> {
                BitsMut::$w($cast_mut)
            }
            #[inline(always)]
            fn from_bits(x: Bits<'_>) -> Option<&[Self]> {
                match x {
                    Bits::$w($x) => Some($cast),
                    _ => None,
                }
            }
            #[inline(always)]
            fn from_bits_mut(x: BitsMut<'_>) -> Option<&mut [Self]> {
                match x {
                    BitsMut::$w($x) => Some($cast_mut),
                    _ => None,
                }
            }
        }
    };
}

plain!(u32, U32, |x| x, x);
plain!(u16, U16, |x| x, x);
plain!(
    f32,
    U32,
    |x| bytemuck::cast_slice(x),
    bytemuck::cast_slice_mut(x)
);
plain!(f16, U16, |x| x.reinterpret_cast(), x.reinterpret_cast_mut());
plain!(
    bf16,
    U16,
    |x| x.reinterpret_cast(),
    x.reinterpret_cast_mut()
);

/// `x` read as `B`s.
///
/// # Panics
/// If `A` and `B` differ in size; a check on types, so it folds away
/// where the cast is used.
#[inline(always)]
pub(crate) fn cast_slice<A: Plain, B: Plain>(x: &[A]) -> &[B] {
    B::from_bits(A::bits(x)).expect("cast between different layouts")
}

/// `x` written as `B`s.
///
/// # Panics
/// As [`cast_slice`].
#[inline(always)]
pub(crate) fn cast_slice_mut<A: Plain, B: Plain>(x: &mut [A]) -> &mut [B] {
    B::from_bits_mut(A::bits_mut(x)).expect("cast between different layouts")
}

/// `x` read as a `B`.
///
/// # Panics
/// As [`cast_slice`].
#[inline(always)]
pub(crate) fn cast<A: Plain, B: Plain>(x: A) -> B {
    cast_slice::<A, B>(core::slice::from_ref(&x))[0]
}

/// The bytes of `x` (in memory order).
#[cfg(feature = "alloc")]
#[inline(always)]
pub(crate) fn bytes_of<T: Plain>(x: &T) -> &[u8] {
    match T::bits(core::slice::from_ref(x)) {
        Bits::U32(b) => bytemuck::cast_slice(b),
        Bits::U16(b) => bytemuck::cast_slice(b),
    }
}

/// A `T` from `size_of::<T>()` bytes at any alignment.
///
/// # Panics
/// If `bytes` has another length.
#[cfg(feature = "alloc")]
#[inline(always)]
pub(crate) fn read_unaligned<T: Plain>(bytes: &[u8]) -> T {
    assert_eq!(bytes.len(), size_of::<T>(), "read_unaligned: length");
    let value = |b: Bits<'_>| T::from_bits(b).expect("a plain type of 2 or 4 bytes")[0];
    if size_of::<T>() == 4 {
        value(Bits::U32(&[bytemuck::pod_read_unaligned(bytes)]))
    } else {
        value(Bits::U16(&[bytemuck::pod_read_unaligned(bytes)]))
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_keep_the_bits() {
        assert_eq!(cast::<f16, u16>(f16::ONE), 0x3c00);
        assert_eq!(cast_slice::<bf16, u16>(&[bf16::ONE]), [0x3f80]);
        let mut x = [1.0f32];
        cast_slice_mut::<f32, u32>(&mut x)[0] = 0x4000_0000;
        assert_eq!(x, [2.0]);
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn bytes_read_back() {
        assert_eq!(bytes_of(&f16::ONE), 0x3c00u16.to_ne_bytes());
        let mut bytes = [0u8; 5];
        bytes[1..].copy_from_slice(&1.0f32.to_ne_bytes());
        assert_eq!(read_unaligned::<f32>(&bytes[1..]), 1.0);
    }

    #[test]
    #[should_panic = "different layouts"]
    fn casts_between_sizes_are_refused() {
        let _ = cast_slice::<f32, u16>(&[1.0]);
    }
}
