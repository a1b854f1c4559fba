//! `rand_core` adapter for sequential use of a [`RandomStream`].

use core::convert::Infallible;

use rand_core::{SeedableRng, TryRng};

use super::RandomStream;

/// A [`RandomStream`] read in order: word 0 of positions 0, 1, 2, ...
///
/// Implements `rand_core`'s [`TryRng`] with `Error = Infallible` (hence
/// `Rng`) and [`SeedableRng`], so it plugs into `rand`'s distributions.
/// `next_u64` is two consecutive words, low word first.
///
/// ```
/// use rand_core::{Rng, SeedableRng};
/// use tessera_core::rng::{RandomStream, StreamRng};
/// let mut rng = StreamRng::new(RandomStream::new(7, 0));
/// let a = rng.next_u32();
/// assert_eq!(a, RandomStream::new(7, 0).bits(0));
/// let mut again = StreamRng::seed_from_u64(7);
/// assert_eq!(again.next_u32(), a);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRng {
    stream: RandomStream,
    position: u64,
}

impl StreamRng {
    /// Reads `stream` from position 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use rand_core::Rng;
    /// use tessera_core::rng::{RandomStream, StreamRng};
    ///
    /// let stream = RandomStream::new(42, 3);
    /// let mut rng = StreamRng::new(stream);
    /// assert_eq!(rng.position(), 0);
    /// assert_eq!([rng.next_u32(), rng.next_u32()], [stream.bits(0), stream.bits(1)]);
    /// ```
    #[must_use]
    pub const fn new(stream: RandomStream) -> Self {
        Self::at(stream, 0)
    }

    /// Reads `stream` from `position`.
    ///
    /// # Examples
    ///
    /// ```
    /// use rand_core::Rng;
    /// use tessera_core::rng::{RandomStream, StreamRng};
    ///
    /// let stream = RandomStream::new(42, 3);
    /// let mut rng = StreamRng::at(stream, 1000);
    /// assert_eq!(rng.next_u32(), stream.bits(1000));
    /// assert_eq!(rng.position(), 1001);
    /// ```
    #[must_use]
    pub const fn at(stream: RandomStream, position: u64) -> Self {
        Self { stream, position }
    }

    /// The position of the next word.
    ///
    /// # Examples
    ///
    /// ```
    /// use rand_core::Rng;
    /// use tessera_core::rng::{RandomStream, StreamRng};
    ///
    /// let mut rng = StreamRng::new(RandomStream::new(1, 0));
    /// rng.next_u64(); // two words
    /// rng.next_u32();
    /// assert_eq!(rng.position(), 3);
    /// ```
    #[must_use]
    pub const fn position(&self) -> u64 {
        self.position
    }
}

impl TryRng for StreamRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let word = self.stream.bits(self.position);
        self.position = self.position.wrapping_add(1);
        Ok(word)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let lo = self.try_next_u32()?;
        let hi = self.try_next_u32()?;
        Ok(u64::from(hi) << 32 | u64::from(lo))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        let mut chunks = dst.chunks_exact_mut(4);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.try_next_u32()?.to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let word = self.try_next_u32()?.to_le_bytes();
            rest.copy_from_slice(&word[..rest.len()]);
        }
        Ok(())
    }
}

/// Seeds are 8 bytes: a little-endian `u64` seed for stream 0.
impl SeedableRng for StreamRng {
    type Seed = [u8; 8];

    fn from_seed(seed: Self::Seed) -> Self {
        Self::new(RandomStream::new(u64::from_le_bytes(seed), 0))
    }

    fn seed_from_u64(state: u64) -> Self {
        Self::from_seed(state.to_le_bytes())
    }
}
