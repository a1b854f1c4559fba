//! [`Code`]: the integer types encodings are stored in.

/// Storage for encodings: `u8` (formats of up to 8 bits, sub-byte ones
/// one per byte; see [`pack_fp4`](super::pack_fp4)), `u16` or `u32`.
///
/// ```
/// use tessera_core::fp::Code;
///
/// assert_eq!(<u8 as Code>::BITS, 8);
/// assert_eq!(0x3cu8.code(), 0x3c);
/// ```
pub trait Code: Copy + sealed::Sealed {
    /// Its width.
    const BITS: u32;

    /// The encoding in the low bits of a `u32`.
    ///
    /// ```
    /// use tessera_core::fp::Code;
    ///
    /// assert_eq!(0xbeefu16.code(), 0xbeef);
    /// ```
    #[must_use]
    fn code(self) -> u32;

    /// From the low bits of a `u32` (higher bits are dropped).
    ///
    /// ```
    /// use tessera_core::fp::Code;
    ///
    /// assert_eq!(<u8 as Code>::from_code(0x1ff), 0xff);
    /// ```
    #[must_use]
    fn from_code(code: u32) -> Self;
}

pub(super) mod sealed {
    /// The slice as what it is, for the kernels' stores.
    pub enum Codes<'a> {
        U8(&'a mut [u8]),
        U16(&'a mut [u16]),
        U32(&'a mut [u32]),
    }

    /// The slice as what it is, for the kernels' loads.
    pub enum CodesRef<'a> {
        U8(&'a [u8]),
        U16(&'a [u16]),
        U32(&'a [u32]),
    }

    pub trait Sealed: Sized {
        fn codes(x: &mut [Self]) -> Codes<'_>;
        fn codes_ref(x: &[Self]) -> CodesRef<'_>;
    }
    impl Sealed for u8 {
        fn codes(x: &mut [Self]) -> Codes<'_> {
            Codes::U8(x)
        }
        fn codes_ref(x: &[Self]) -> CodesRef<'_> {
            CodesRef::U8(x)
        }
    }
    impl Sealed for u16 {
        fn codes(x: &mut [Self]) -> Codes<'_> {
            Codes::U16(x)
        }
        fn codes_ref(x: &[Self]) -> CodesRef<'_> {
            CodesRef::U16(x)
        }
    }
    impl Sealed for u32 {
        fn codes(x: &mut [Self]) -> Codes<'_> {
            Codes::U32(x)
        }
        fn codes_ref(x: &[Self]) -> CodesRef<'_> {
            CodesRef::U32(x)
        }
    }
}

macro_rules! code {
    ($($t:ty),*) => {$(
        impl Code for $t {
            const BITS: u32 = <$t>::BITS;

            #[inline(always)]
            fn code(self) -> u32 {
                u32::from(self)
            }

            #[inline(always)]
            #[allow(clippy::cast_possible_truncation)]
            fn from_code(code: u32) -> Self {
                code as $t
            }
        }
    )*};
}
code!(u8, u16, u32);
