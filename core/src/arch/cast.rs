//! Slices of one plain number type read as another of the same size
//! (`f32` as `u32`, `f16`/`bf16` as their `u16` bits), the one cast the
//! kernels need. Written here, not taken from `bytemuck` for the `half`
//! types, because `half`'s `bytemuck` feature brings `bytemuck`'s derive
//! macros (a second proc-macro stack) into every build of the crate.

use half::{bf16, f16};

/// A number type whose every bit pattern is a value, with no padding.
///
/// # Safety
/// Implement it only for such types.
pub unsafe trait Plain: Copy + Default + 'static {}

// SAFETY: primitive numbers: no padding, every bit pattern valid.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: `half::f16` is `#[repr(transparent)]` over a `u16`.
unsafe impl Plain for f16 {}
// SAFETY: `half::bf16` is `#[repr(transparent)]` over a `u16`.
unsafe impl Plain for bf16 {}

/// Whether `A` can be read as `B`: the same size, and `B` no more aligned.
const fn same_layout<A, B>() -> bool {
    size_of::<A>() == size_of::<B>() && align_of::<B>() <= align_of::<A>()
}

/// `x` read as `B`s.
///
/// # Panics
/// If `A` and `B` differ in size (or `B` is more aligned); a check on
/// types, so it folds away where the cast is used.
#[inline(always)]
pub(crate) fn cast_slice<A: Plain, B: Plain>(x: &[A]) -> &[B] {
    assert!(same_layout::<A, B>(), "cast between different layouts");
    // SAFETY: both types are plain (every bit pattern valid, no padding),
    // of the same size and `B` no more aligned than `A` (checked above),
    // so the same memory holds `x.len()` valid `B`s for the same lifetime.
    unsafe { core::slice::from_raw_parts(x.as_ptr().cast::<B>(), x.len()) }
}

/// `x` written as `B`s.
///
/// # Panics
/// As [`cast_slice`].
#[inline(always)]
pub(crate) fn cast_slice_mut<A: Plain, B: Plain>(x: &mut [A]) -> &mut [B] {
    assert!(same_layout::<A, B>(), "cast between different layouts");
    // SAFETY: as in `cast_slice`; the borrow is exclusive, and every `B`
    // written is a valid `A` (both plain).
    unsafe { core::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<B>(), x.len()) }
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
    // SAFETY: `T` is plain (no padding), so its `size_of` bytes are
    // initialised; they live as long as the borrow of `x`.
    unsafe { core::slice::from_raw_parts(core::ptr::from_ref(x).cast::<u8>(), size_of::<T>()) }
}

/// A `T` from `size_of::<T>()` bytes at any alignment.
///
/// # Panics
/// If `bytes` has another length.
#[cfg(feature = "alloc")]
#[inline(always)]
pub(crate) fn read_unaligned<T: Plain>(bytes: &[u8]) -> T {
    assert_eq!(bytes.len(), size_of::<T>(), "read_unaligned: length");
    // SAFETY: `bytes` holds `size_of::<T>()` readable bytes (checked), the
    // read needs no alignment, and every bit pattern is a `T` (plain).
    unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
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
