//! The position-addressed generator: pinned values, `rand_core` adapter,
//! and statistical tests beyond "looks random".
//!
//! The seeds are fixed, so every test is deterministic; the thresholds are
//! set at tail probabilities of about 1e-6 for a good generator, so a
//! failure means a real defect, not bad luck.

use rand_core::{Rng, SeedableRng};
use tessera_core::rng::{RandomStream, StreamRng, mix64};

const N: u64 = 1 << 20;

/// Pearson's chi-square statistic of observed counts against equal
/// expected counts.
fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// Upper critical value of chi-square with `dof` degrees of freedom at a
/// tail probability near 1e-6 (Wilson-Hilferty approximation, z = 4.75).
fn chi_square_limit(dof: usize) -> f64 {
    let k = dof as f64;
    let z = 4.75;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

fn words(stream: RandomStream, n: u64) -> impl Iterator<Item = u32> {
    (0..n).map(move |i| stream.bits(i))
}

#[test]
fn value_stability() {
    let s = RandomStream::new(0, 0);
    let got: Vec<u32> = (0..4).map(|i| s.bits(i)).collect();
    let more = [
        s.word(0, 1),
        s.bits(1 << 32),
        s.bits(u64::MAX),
        RandomStream::new(1, 0).bits(0),
        RandomStream::new(0, 1).bits(0),
        s.substream(5).bits(0),
    ];
    assert_eq!(got, PINNED_WORDS);
    assert_eq!(more, PINNED_MORE);
    assert_eq!(mix64(0), 0);
    assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
}

const PINNED_WORDS: [u32; 4] = [4255858932, 474866524, 2659891849, 2981941809];
const PINNED_MORE: [u32; 6] = [
    3032102336, 3936548578, 1462415071, 4168454114, 1482759492, 707712726,
];

#[test]
fn bytes_are_uniform() {
    for (seed, stream) in [(0, 0), (1, 0), (0, 1), (0xdead_beef, 77)] {
        let mut counts = [0u64; 256];
        for w in words(RandomStream::new(seed, stream), N) {
            for byte in w.to_le_bytes() {
                counts[usize::from(byte)] += 1;
            }
        }
        let chi = chi_square(&counts);
        assert!(
            chi < chi_square_limit(255),
            "seed {seed} stream {stream}: {chi}"
        );
    }
}

#[test]
fn every_bit_position_is_fair() {
    let mut ones = [0u64; 32];
    for w in words(RandomStream::new(42, 0), N) {
        for (bit, count) in ones.iter_mut().enumerate() {
            *count += u64::from(w >> bit & 1);
        }
    }
    let sigma = (N as f64 / 4.0).sqrt();
    for (bit, count) in ones.iter().enumerate() {
        let z = (*count as f64 - N as f64 / 2.0) / sigma;
        assert!(z.abs() < 5.0, "bit {bit}: z = {z}");
    }
}

#[test]
fn low_bits_used_by_rounding_are_uniform() {
    // Stochastic rounding to f16 uses the low 13 bits of each word.
    let mut counts = vec![0u64; 1 << 13];
    for w in words(RandomStream::new(3, 1), 1 << 22) {
        counts[(w & 0x1fff) as usize] += 1;
    }
    let chi = chi_square(&counts);
    assert!(chi < chi_square_limit(counts.len() - 1), "{chi}");
}

#[test]
fn consecutive_words_are_independent() {
    // Serial test: top 4 bits of consecutive words as a pair (256 cells).
    let mut counts = [0u64; 256];
    let s = RandomStream::new(5, 5);
    for i in 0..N {
        let cell = (s.bits(i) >> 28) << 4 | s.bits(i + 1) >> 28;
        counts[cell as usize] += 1;
    }
    let chi = chi_square(&counts);
    assert!(chi < chi_square_limit(255), "{chi}");
}

#[test]
fn neighbouring_streams_and_seeds_are_uncorrelated() {
    let pairs = [
        (RandomStream::new(0, 0), RandomStream::new(0, 1)),
        (RandomStream::new(0, 0), RandomStream::new(1, 0)),
        (
            RandomStream::new(9, 9),
            RandomStream::new(9, 9).substream(0),
        ),
        (
            RandomStream::new(9, 9).substream(1),
            RandomStream::new(9, 9).substream(2),
        ),
    ];
    for (a, b) in pairs {
        // Pearson correlation of the words as uniforms on [0, 1).
        let (mut sab, mut sa, mut sb, mut saa, mut sbb) = (0.0, 0.0, 0.0, 0.0, 0.0);
        let mut xor_counts = [0u64; 256];
        for i in 0..N {
            let (x, y) = (a.bits(i), b.bits(i));
            let (u, v) = (f64::from(x) / 2f64.powi(32), f64::from(y) / 2f64.powi(32));
            sab += u * v;
            sa += u;
            sb += v;
            saa += u * u;
            sbb += v * v;
            xor_counts[((x ^ y) >> 24) as usize] += 1;
        }
        let n = N as f64;
        let cov = sab / n - (sa / n) * (sb / n);
        let corr = cov / ((saa / n - (sa / n).powi(2)) * (sbb / n - (sb / n).powi(2))).sqrt();
        assert!(corr.abs() < 5.0 / n.sqrt(), "{a:?} vs {b:?}: {corr}");
        let chi = chi_square(&xor_counts);
        assert!(chi < chi_square_limit(255), "xor: {chi}");
    }
}

#[test]
fn words_of_one_position_are_independent() {
    // Words 0 to 3 of a position feed the tiny-value rule together.
    let s = RandomStream::new(11, 0);
    let mut counts = [0u64; 256];
    for i in 0..N {
        let cell = (s.word(i, 0) >> 28) << 4 | s.word(i, 1) >> 28;
        counts[cell as usize] += 1;
    }
    let chi = chi_square(&counts);
    assert!(chi < chi_square_limit(255), "{chi}");
}

#[test]
fn stream_rng_reads_the_stream_in_order() {
    let stream = RandomStream::new(123, 4);
    let mut rng = StreamRng::new(stream);
    for i in 0..10 {
        assert_eq!(rng.next_u32(), stream.bits(i));
    }
    let lo = stream.bits(10);
    let hi = stream.bits(11);
    assert_eq!(rng.next_u64(), u64::from(hi) << 32 | u64::from(lo));
    let mut bytes = [0u8; 7];
    rng.fill_bytes(&mut bytes);
    assert_eq!(bytes[..4], stream.bits(12).to_le_bytes());
    assert_eq!(bytes[4..], stream.bits(13).to_le_bytes()[..3]);
    assert_eq!(rng.position(), 14);
    let mut a = StreamRng::seed_from_u64(99);
    let mut b = StreamRng::from_seed(99u64.to_le_bytes());
    assert_eq!(a.next_u64(), b.next_u64());
    assert_eq!(
        StreamRng::seed_from_u64(99).next_u32(),
        RandomStream::new(99, 0).bits(0)
    );
}

/// The SIMD draws of an 8-bit stochastic encode's bits (aligned and not,
/// across 2^16 and 2^32 boundaries of word 0's and word 1's positions, and
/// the wrap of element indices) equal the scalar words on every backend.
#[test]
fn encode_bits_sum_draws_the_scalar_words() {
    use tessera_core::arch::{self, Backend};
    let s = RandomStream::new(11, 4);
    let twin = |first: u64, len: u64| {
        (0..len).fold(0u32, |sum, i| {
            let index = first.wrapping_add(i);
            let bits = u32::from(s.half_bits(index)) | s.word(index, 1) << 16;
            sum.wrapping_add(bits)
        })
    };
    let starts = [
        0,
        5,
        (1 << 17) - 40,
        (1 << 33) - 77,
        (1 << 32) - 64,
        u64::MAX - 90,
    ];
    for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
        for first in starts {
            let got = arch::with_backend(backend, || s.encode_bits_sum(first, 200)).unwrap();
            assert_eq!(got, twin(first, 200), "{backend:?} from {first}");
        }
    }
}
