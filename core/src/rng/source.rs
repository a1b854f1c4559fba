//! Position-addressed sources of random bits: the counter-based
//! [`RandomStream`], or bits the caller supplies ([`Replay`]), for
//! comparing generators or replaying a recorded sequence.

use core::num::NonZeroUsize;

use super::RandomStream;

/// Random bits addressed by element position, as stochastic rounding reads
/// them: 16 bits first ([`RandomBits::half_bits`]), then whole words `1,
/// 2, ...` of the same position where more are needed
/// ([`RandomBits::word`]). Results must depend on the position only.
///
/// ```
/// use tessera_core::rng::{RandomBits, RandomStream};
///
/// fn first_bits<B: RandomBits + ?Sized>(bits: &B) -> u16 {
///     bits.half_bits(0)
/// }
/// let s = RandomStream::new(1, 0);
/// assert_eq!(first_bits(&s), s.half_bits(0));
/// ```
pub trait RandomBits {
    /// The 16 bits read first for element `index`.
    ///
    /// ```
    /// use tessera_core::rng::{RandomBits, RandomStream};
    ///
    /// let s = RandomStream::new(1, 0);
    /// assert_eq!(RandomBits::half_bits(&s, 3), s.half_bits(3));
    /// ```
    fn half_bits(&self, index: u64) -> u16;

    /// Word `word` (1 or more) of element `index`.
    ///
    /// ```
    /// use tessera_core::rng::{RandomBits, RandomStream};
    ///
    /// let s = RandomStream::new(1, 0);
    /// assert_eq!(RandomBits::word(&s, 3, 1), s.word(3, 1));
    /// ```
    fn word(&self, index: u64, word: u32) -> u32;

    /// The counter-based stream these bits are, if they are one: the SIMD
    /// format kernels then draw eight or sixteen lanes at once instead of
    /// one element at a time (same bits either way).
    #[doc(hidden)]
    #[inline(always)]
    fn as_stream(&self) -> Option<RandomStream> {
        None
    }
}

impl RandomBits for RandomStream {
    #[inline(always)]
    fn half_bits(&self, index: u64) -> u16 {
        RandomStream::half_bits(*self, index)
    }

    #[inline(always)]
    fn word(&self, index: u64, word: u32) -> u32 {
        RandomStream::word(*self, index, word)
    }

    #[inline(always)]
    fn as_stream(&self) -> Option<RandomStream> {
        Some(*self)
    }
}

/// Any source behind one type, so that the kernels taking random bits are
/// compiled once, here, for every source (as `&dyn RandomBits`), instead
/// of once more in each caller's crate for each caller's type: the
/// stream's fast paths are found through [`RandomBits::as_stream`], and
/// other sources are read one element at a time either way.
pub(crate) struct Erased<'a, B: ?Sized>(pub(crate) &'a B);

impl<B: RandomBits + ?Sized> RandomBits for Erased<'_, B> {
    #[inline(always)]
    fn half_bits(&self, index: u64) -> u16 {
        self.0.half_bits(index)
    }

    #[inline(always)]
    fn word(&self, index: u64, word: u32) -> u32 {
        self.0.word(index, word)
    }

    #[inline(always)]
    fn as_stream(&self) -> Option<RandomStream> {
        self.0.as_stream()
    }
}

/// Caller-supplied random bits: `per_element` words per element, element
/// `index` owning `words[index * per_element..][..per_element]`. Its
/// [`RandomBits::half_bits`] is the low half of its first word, and its
/// word `k` is its word `k` (`1..per_element`).
///
/// ```
/// use core::num::NonZeroUsize;
/// use tessera_core::fp::{Format, Round};
/// use tessera_core::rng::{RandomStream, Replay};
///
/// // Record a stream's bits for 4 elements (2 words each), replay them.
/// let (s, per) = (RandomStream::new(5, 0), NonZeroUsize::new(2).unwrap());
/// let mut words = [0u32; 8];
/// for i in 0..4 {
///     words[2 * i] = u32::from(s.half_bits(i as u64));
///     words[2 * i + 1] = s.word(i as u64, 1);
/// }
/// let replay = Replay::new(&words, per);
/// let f = Format::E4M3FN;
/// for i in 0..4 {
///     let x = 0.3 + i as f32;
///     assert_eq!(f.encode_with(x, Round::STOCHASTIC, &replay, i), f.encode(x, Round::STOCHASTIC, s, i));
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay<'a> {
    words: &'a [u32],
    per_element: NonZeroUsize,
}

impl<'a> Replay<'a> {
    /// Replays `words`, `per_element` of them per element.
    ///
    /// ```
    /// use core::num::NonZeroUsize;
    /// use tessera_core::rng::{RandomBits, Replay};
    ///
    /// let r = Replay::new(&[0x1234_5678, 9], NonZeroUsize::MIN);
    /// assert_eq!((r.half_bits(0), r.half_bits(1)), (0x5678, 9));
    /// ```
    #[must_use]
    pub const fn new(words: &'a [u32], per_element: NonZeroUsize) -> Self {
        Self { words, per_element }
    }

    fn at(&self, index: u64, word: u32) -> u32 {
        let per = self.per_element.get();
        assert!(
            (word as usize) < per,
            "Replay: word {word} asked for, {per} per element"
        );
        let at = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_mul(per))
            .and_then(|i| i.checked_add(word as usize))
            .filter(|&i| i < self.words.len());
        match at {
            Some(i) => self.words[i],
            None => panic!("Replay: element {index} is past the words supplied"),
        }
    }
}

/// # Panics
/// If the element's words are past the slice, or `word >= per_element`.
impl RandomBits for Replay<'_> {
    fn half_bits(&self, index: u64) -> u16 {
        self.at(index, 0) as u16
    }

    fn word(&self, index: u64, word: u32) -> u32 {
        self.at(index, word)
    }
}
