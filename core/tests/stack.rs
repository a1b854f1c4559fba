//! Every dispatching kernel runs on a thread with a small stack in an
//! unoptimised build, on every backend this CPU has.
//!
//! The kernels are generic and `#[inline(always)]` into each backend's
//! entry, so a downstream crate instantiates them at its own optimisation
//! level. Without optimisation every inlined copy keeps its own stack
//! slots: a debug build's MX quantize once took a 12 MiB frame and aborted
//! on the main thread. The grouped and per-block bodies are therefore
//! functions of their own in unoptimised builds.
//!
//! This binary proves something only without optimisation; CI runs it
//! with `cargo test -p tessera-core --profile dev --test stack`. (The
//! workspace's `test` profile is optimised, where it passes trivially.)

use std::hint::black_box;
use std::num::NonZeroUsize;

use tessera_core::arch::{Backend, with_backend};
use tessera_core::fp::{
    self, Format, MatmulAccumulator, Mode, Mx, MxFormat, Nvfp4, Overflow, Round, RoundedMatmul,
    Rounding, Stochastic, bf16, f16,
};
use tessera_core::kernels::{self, GemmShape};
use tessera_core::rng::{RandomStream, Replay};

/// A quarter of a spawned thread's default stack (2 MiB), so a caller's
/// own frames fit beside any kernel's.
const STACK: usize = 1 << 19;

/// Three groups of 16 blocks of 32 and a tail, with every kind of value.
fn input() -> Vec<f32> {
    let mut x: Vec<f32> = (0..3 * 16 * 32 + 45)
        .map(|i| (i as f32 * 0.37).sin() * 2f32.powi(i % 23 - 11))
        .collect();
    for (i, v) in [f32::NAN, f32::INFINITY, -0.0, 1e-40, 7e5]
        .into_iter()
        .enumerate()
    {
        x[1100 + 97 * i] = v;
    }
    x
}

fn conversions(x: &[f32]) {
    let bits = RandomStream::new(3, 1);
    let words: Vec<u32> = (0..2 * x.len() as u32).collect();
    let replay = Replay::new(&words, NonZeroUsize::new(2).unwrap());
    let mut h = vec![f16::ZERO; x.len()];
    let mut b = vec![bf16::ZERO; x.len()];
    let mut y = vec![0f32; x.len()];
    fp::f32_to_half_slice(x, &mut h);
    fp::f32_to_half_slice(x, &mut b);
    fp::half_to_f32_slice(&h, &mut y);
    let sr = Stochastic::new(bits, Overflow::Saturate);
    fp::f32_to_half_sr_slice(x, &mut h, sr, 0);
    fp::f32_to_half_sr_slice(x, &mut b, sr, 0);
    let mut codes = vec![0u8; x.len()];
    let modes = [
        Mode::NearestEven,
        Mode::Stochastic,
        Mode::Down,
        Mode::StochasticBits(5),
    ];
    for format in [Format::E4M3FN, Format::E5M2, Format::E2M1FN, Format::F143] {
        for mode in modes {
            let round = Round::new(mode);
            black_box(fp::encode_slice(format, x, &mut codes, round, &bits, 0));
            black_box(fp::encode_slice(format, x, &mut codes, round, &replay, 0));
            fp::decode_slice(format, &codes, &mut y);
            y.copy_from_slice(x);
            fp::chop_slice(format, &mut y, round, &bits, 0);
        }
    }
}

fn blocks(x: &[f32]) {
    let bits = RandomStream::new(5, 0);
    let mut y = vec![0f32; x.len()];
    let mut scales = vec![0u8; Mx::scales_len(x.len())];
    for format in MxFormat::ALL {
        let mut codes = vec![0u8; format.codes_len(x.len())];
        for round in [Round::NEAREST_EVEN, Round::STOCHASTIC, Round::new(Mode::Up)] {
            let mx = Mx::new(format).with_round(round);
            mx.quantize(x, &mut codes, &mut scales, &bits, 0).unwrap();
            format.dequantize(&codes, &scales, &mut y).unwrap();
        }
    }
    let finite: Vec<f32> = x
        .iter()
        .map(|v| if v.is_finite() { *v } else { 1.0 })
        .collect();
    let t = Nvfp4::tensor_scale(&finite);
    let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
    let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
    for round in [Round::NEAREST_EVEN, Round::STOCHASTIC] {
        Nvfp4::new(round)
            .quantize(&finite, t, &mut codes, &mut scales, &bits, 0)
            .unwrap();
        Nvfp4::dequantize(&codes, &scales, t, &mut y).unwrap();
    }
}

fn matmuls(x: &[f32]) {
    let bits = RandomStream::new(0, 0);
    // Inputs of the matmul's format.
    let mut ab = x[..128].to_vec();
    fp::chop_slice(Format::E4M3FN, &mut ab, Round::NEAREST_EVEN, &bits, 0);
    let (a, b) = ab.split_at(64);
    let mut c = [0f32; 64];
    let acc = MatmulAccumulator::new(Format::F16, Round::STOCHASTIC);
    let mm = RoundedMatmul::new(Format::E4M3FN, acc);
    mm.gemm((8, 8, 8), a, b, &mut c, &bits, 0).unwrap();
    mm.dot(a, b, &bits, 0).unwrap();
    let shape = GemmShape {
        m: 8,
        k: 8,
        n: 8,
        a_transposed: false,
        b_transposed: false,
    };
    let mut scratch = vec![0f32; kernels::gemm_scratch_len(&shape)];
    kernels::gemm(shape, a, b, &mut c, &mut scratch);
}

fn vectors<T: fp::Element>(x: &[f32]) {
    let v: Vec<T> = x
        .iter()
        .map(|x| T::store(*x, Rounding::Nearest, 0))
        .collect();
    let mut y = v.clone();
    let mut acc = vec![0f32; x.len()];
    let stream = RandomStream::new(9, 0);
    let roundings = [
        Rounding::Nearest,
        Rounding::new(Round::STOCHASTIC, stream, 0),
        Rounding::new(Round::new(Mode::TowardZero), stream, 0),
    ];
    for rounding in roundings {
        kernels::axpy(0.5, &v, &mut y, rounding);
        kernels::scale(0.5, &mut y, rounding);
        kernels::add(&v, &mut y, rounding);
        black_box(kernels::unscale_and_check(&mut y, 0.25, rounding));
    }
    kernels::accumulate(&v, &mut acc);
    black_box(kernels::dot(&v, &y));
    black_box(kernels::sum_of_squares(&v));
    black_box(kernels::max_abs(&v));
    black_box(kernels::exact_sum(&v));
    black_box(kernels::exact_dot(&v, &y));
}

#[test]
fn every_kernel_runs_on_a_small_stack_on_every_backend() {
    let x = input();
    for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
        let x = x.clone();
        let run = move || {
            with_backend(backend, || {
                conversions(&x);
                blocks(&x);
                matmuls(&x);
                vectors::<f32>(&x);
                vectors::<f16>(&x);
                vectors::<bf16>(&x);
            })
            .unwrap();
        };
        let thread = std::thread::Builder::new().stack_size(STACK).spawn(run);
        thread.unwrap().join().unwrap();
        println!(
            "every kernel: ran on {} with a {STACK}-byte stack",
            backend.name()
        );
    }
}
