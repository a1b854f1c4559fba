//! The random bits of an exact stochastic encode into a format of 8 bits
//! or fewer, drawn as its kernels draw them and summed: the draws alone,
//! which bound the speed of every stochastic kernel that reads them.

use super::{BlockKeys, GroupDraws, RandomStream};
use crate::arch::{self, Kernel, Simd, U32s};

impl RandomStream {
    /// The wrapping sum, over elements `first_index..first_index + len`, of
    /// the 32 random bits an exact stochastic encode into a format of 8
    /// bits or fewer reads per element: its [`RandomStream::half_bits`] in
    /// the low 16 bits and the low 16 bits of its word 1 above them.
    ///
    /// Drawn as the SIMD kernels draw them (eight or sixteen lanes at once,
    /// on the active backend, one draw of word 0 per 16 elements, per 32 on
    /// sixteen lanes), so its speed is what the random bits alone cost such
    /// an encode: `tessera bench formats` times it against the
    /// `half` crate. The sum is the same on every backend and for every
    /// split of the range.
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(7, 1);
    /// let twin = (0..100u64).fold(0u32, |sum, i| {
    ///     let bits = u32::from(s.half_bits(i)) | s.word(i, 1) << 16;
    ///     sum.wrapping_add(bits)
    /// });
    /// assert_eq!(s.encode_bits_sum(0, 100), twin);
    /// // Split anywhere: the same sum.
    /// let parts = s.encode_bits_sum(0, 37).wrapping_add(s.encode_bits_sum(37, 63));
    /// assert_eq!(parts, twin);
    /// ```
    #[must_use]
    pub fn encode_bits_sum(self, first_index: u64, len: usize) -> u32 {
        arch::dispatch(EncodeBitsSum {
            stream: self,
            first_index,
            len,
        })
    }

    /// One element's term of [`RandomStream::encode_bits_sum`].
    #[inline(always)]
    const fn encode_bits(self, index: u64) -> u32 {
        self.half_bits(index) as u32 | self.word(index, 1) << 16
    }
}

/// [`RandomStream::encode_bits_sum`]'s arguments.
struct EncodeBitsSum {
    stream: RandomStream,
    first_index: u64,
    len: usize,
}

impl EncodeBitsSum {
    /// Elements `at..at + len` one at a time.
    fn one_by_one(&self, at: usize, len: usize) -> u32 {
        (at..at + len).fold(0u32, |sum, i| {
            let index = self.first_index.wrapping_add(i as u64);
            sum.wrapping_add(self.stream.encode_bits(index))
        })
    }
}

impl Kernel for EncodeBitsSum {
    type Output = u32;

    #[inline(always)]
    fn run<S: Simd>(self) -> u32 {
        let (stream, first, len) = (self.stream, self.first_index, self.len);
        // Up to the first index that is a multiple of 32, as the kernels'
        // group loops draw.
        let head = ((32 - first % 32) % 32).min(len as u64) as usize;
        let start = first.wrapping_add(head as u64);
        let group = 4 * S::LANES;
        let whole = (len - head) / group * group;
        let mut sums = S::U::splat(0);
        // The kernels' group loop, where its draws need no checks.
        let grouped = match GroupDraws::new(stream, start, whole as u64) {
            Some(draws) => {
                for at in (0..whole).step_by(group) {
                    let index = start.wrapping_add(at as u64);
                    let r = S::group_random(&draws, index, true);
                    sums += (r[0] + r[1]) + (r[2] + r[3]);
                }
                whole
            }
            None => 0,
        };
        let from = start.wrapping_add(grouped as u64);
        let word0 = BlockKeys::new(stream, from >> 1, 0);
        let word1 = BlockKeys::new(stream, from, 1);
        let body = grouped
            + arch::each_vector::<S>(
                len - head - grouped,
                #[inline(always)]
                |at| {
                    let index = from.wrapping_add(at as u64);
                    let half = S::keyed_halves(&word0, index) & S::U::splat(0xffff);
                    sums += half | S::keyed_words(&word1, index) << 16;
                },
            );
        let mut lanes = [0u32; 16];
        sums.write_to(&mut lanes);
        let vectors = lanes.iter().fold(0u32, |sum, l| sum.wrapping_add(*l));
        let ends = self
            .one_by_one(0, head)
            .wrapping_add(self.one_by_one(head + body, len - head - body));
        vectors.wrapping_add(ends)
    }

    fn scalar(self) -> u32 {
        self.one_by_one(0, self.len)
    }
}
