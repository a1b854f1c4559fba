//! Vector kernels: every SIMD kernel against its scalar twin bit for bit
//! on every backend the CPU can run, `ExactSum` against a big-integer
//! reference, partition invariance of the reductions, the documented
//! semantics (order, NaN, found_inf) and pinned outputs.

use std::cmp::Ordering;

use proptest::prelude::*;
use tessera_core::fp::{HalfFloat, Overflow, Rounding, Stochastic, bf16, f16};
use tessera_core::kernels::{self, BLOCK, ExactSum, LANES, MaxAbs, scalar};
use tessera_core::rng::RandomStream;

mod exact_sum;
mod matmul;
mod optimizers;
mod partition;
mod semantics;
mod stability;
mod twins;

// ---------------------------------------------------------------------------
// Backends.

use tessera_core::arch::{self, Backend};

/// Runs `check` on every backend this CPU can run, forced on this thread,
/// and prints which ran; backends the CPU lacks are skipped with a printed
/// line (forcing one is an error, which is how they are found).
pub(crate) fn on_every_backend(test: &str, check: impl Fn()) {
    let mut ran = Vec::new();
    for backend in Backend::ALL {
        // Printed first, so a failure's captured output names the backend.
        println!("{test}: {backend}");
        match arch::with_backend(backend, &check) {
            Ok(()) => ran.push(backend.name()),
            Err(e) => println!("{test}: skipped {backend}: {e}"),
        }
    }
    println!("{test}: ran on {}", ran.join(", "));
}

#[test]
fn forcing_a_backend_the_cpu_lacks_is_an_error() {
    for backend in Backend::ALL {
        let result = arch::with_backend(backend, || kernels::sum_of_squares(&[3.0]));
        if backend.is_available() {
            assert_eq!(result, Ok(9.0));
        } else {
            assert_eq!(result, Err(arch::BackendError::Unavailable(backend)));
            assert_eq!(
                arch::force(Some(backend)),
                Err(arch::BackendError::Unavailable(backend))
            );
        }
        assert_eq!(Backend::from_name(backend.name()), Ok(backend));
    }
    assert_eq!(Backend::from_name("avx3"), Err(arch::BackendError::Unknown));
    assert!(Backend::Scalar.is_available() && arch::best().is_available());
}

// ---------------------------------------------------------------------------
// Data.

use crate::support::Gen;

const SPECIAL_F32: [f32; 22] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::from_bits(0xffc0_1234), // negative quiet NaN with payload
    f32::from_bits(0x7f80_0001), // signalling NaN
    f32::MIN_POSITIVE,
    -f32::MIN_POSITIVE,
    f32::from_bits(1), // smallest subnormal
    f32::from_bits(0x807f_ffff),
    f32::MAX,
    f32::MIN,
    65504.0,
    65520.0,
    -1.0e-8,
    3.0,
    0.1,
    1.0e30,
    -2.5e-39,
];

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Special values mixed with moderate ones.
    Special,
    /// Exponents in -30..=30.
    Moderate,
    /// Any bit pattern.
    Bits,
    /// Huge and tiny values: lane overflow, cancellation, subnormals.
    Extreme,
}

const KINDS: [Kind; 4] = [Kind::Special, Kind::Moderate, Kind::Bits, Kind::Extreme];

fn f32_data(kind: Kind, n: usize, seed: u64) -> Vec<f32> {
    let mut g = Gen(seed ^ 0x006b_6572_6e65_6c73);
    (0..n)
        .map(|_| match kind {
            Kind::Special => {
                if g.below(3) == 0 {
                    SPECIAL_F32[g.below(SPECIAL_F32.len() as u64) as usize]
                } else {
                    g.in_range(-10, 10)
                }
            }
            Kind::Moderate => g.in_range(-30, 30),
            Kind::Bits => f32::from_bits(g.next() as u32),
            Kind::Extreme => match g.below(4) {
                0 => g.in_range(120, 127),
                1 => f32::from_bits(g.next() as u32 & 0x807f_ffff),
                2 => g.in_range(-126, -100),
                _ => g.in_range(-5, 5),
            },
        })
        .collect()
}

/// Bit access for the two 16-bit formats.
trait Bits16: HalfFloat {
    fn from_bits16(b: u16) -> Self;
    fn bits16(self) -> u16;
}

impl Bits16 for f16 {
    fn from_bits16(b: u16) -> Self {
        f16::from_bits(b)
    }
    fn bits16(self) -> u16 {
        self.to_bits()
    }
}

impl Bits16 for bf16 {
    fn from_bits16(b: u16) -> Self {
        bf16::from_bits(b)
    }
    fn bits16(self) -> u16 {
        self.to_bits()
    }
}

fn half_data<H: Bits16>(kind: Kind, n: usize, seed: u64) -> Vec<H> {
    match kind {
        Kind::Bits => {
            let mut g = Gen(seed ^ 0x6269_7473);
            (0..n).map(|_| H::from_bits16(g.next() as u16)).collect()
        }
        Kind::Moderate => f32_data(Kind::Moderate, n, seed)
            .into_iter()
            .map(|v| H::from_f32(v * 1.0e-5))
            .collect(),
        _ => f32_data(kind, n, seed)
            .into_iter()
            .map(H::from_f32)
            .collect(),
    }
}

/// Lengths 0..=70 and larger ones around and between block boundaries,
/// including runs that take the four-block interleaved path.
fn lengths() -> impl Iterator<Item = usize> {
    (0..=70).chain([
        255,
        256,
        257,
        263,
        511,
        512,
        1000,
        4 * BLOCK - 1,
        4 * BLOCK,
        4 * BLOCK + 5,
        5 * BLOCK,
        8 * BLOCK + 9,
        9 * BLOCK + 255,
    ])
}

fn assert_bits_eq(simd: &[f32], reference: &[f32], what: &str) {
    assert_eq!(simd.len(), reference.len());
    for (i, (s, r)) in simd.iter().zip(reference).enumerate() {
        assert_eq!(
            s.to_bits(),
            r.to_bits(),
            "{what}: element {i}: simd {s:e} vs scalar {r:e}"
        );
    }
}

fn assert_half_eq<H: Bits16>(simd: &[H], reference: &[H], what: &str) {
    assert_eq!(simd.len(), reference.len());
    for (i, (s, r)) in simd.iter().zip(reference).enumerate() {
        assert_eq!(
            s.bits16(),
            r.bits16(),
            "{what}: element {i}: simd {s:?} vs scalar {r:?}"
        );
    }
}

const FACTORS: [f32; 9] = [
    0.0,
    -0.0,
    1.0,
    1.5,
    -3.25e-3,
    1.0e30,
    f32::MIN_POSITIVE,
    f32::INFINITY,
    f32::NAN,
];

const INV_SCALES: [f32; 9] = [
    1.0,
    0.5,
    1.0 / 65536.0,
    2.0,
    1.0e30,
    0.0,
    f32::INFINITY,
    f32::NAN,
    -1.0,
];

fn roundings() -> [Rounding; 5] {
    let sr = |seed, overflow, first_index| Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(seed, 3), overflow),
        first_index,
    };
    [
        Rounding::Nearest,
        sr(1, Overflow::Infinity, 0),
        sr(2, Overflow::Saturate, 12_345),
        // Crosses a 2^32 block of random positions mid-slice.
        sr(3, Overflow::Infinity, (1 << 32) - 13),
        // Wraps around the end of the position space.
        sr(4, Overflow::Saturate, u64::MAX - 5),
    ]
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<u32>().prop_map(f32::from_bits),
        // Finite values of all magnitudes, with a sign.
        (0u32..0x7f80_0000, any::<bool>())
            .prop_map(|(b, s)| f32::from_bits(b | u32::from(s) << 31)),
        (-30i32..30, any::<u32>()).prop_map(|(e, m)| pow2(e) * (1.0 + (m >> 9) as f32 * pow2(-23))),
        prop::sample::select(SPECIAL_F32.to_vec()),
    ]
}

fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut g = Gen(seed);
    for i in (1..v.len()).rev() {
        let j = g.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// `2^e` as f32 (normal or subnormal).
fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}
