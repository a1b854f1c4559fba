//! The SIMD kernels of [`encode_slice`](super::encode_slice) and
//! [`chop_slice`](super::chop_slice), dispatched to the active backend
//! (decoding's is in `decode_kernels.rs`).
//!
//! Encoding and chopping run [`Encoder`] over each vector; the common
//! modes (nearest-even, exact stochastic) get loops of their own with the
//! mode a constant, the others share one (chop: the scalar twin, as only
//! the fast rule has a lane form of chop).

use super::code::Code;
use super::code::sealed::Codes;
use super::encode_fast::FastLanes;
use super::encode_lanes::{Encoder, LaneBits, LaneKernel, run_lanes_at};
use super::format::Format;
use super::round::{Mode, Round};
use crate::arch::{F32s, Kernel, Simd, U32s, each_vector};
use crate::rng::RandomBits;

/// Stores the low bits of `S::LANES` codes into `out`.
#[inline(always)]
pub(super) fn store_codes<S: Simd, C: Code>(codes: S::U, out: &mut [C]) {
    match C::codes(out) {
        Codes::U8(b) => S::store_bytes(codes, b),
        Codes::U16(h) => S::store_h(S::pack(codes), h),
        Codes::U32(w) => codes.write_to(w),
    }
}

/// Stores the low bits of four vectors of codes into `out`, bytes with
/// streaming stores if `streaming`.
#[inline(always)]
fn store_group<S: Simd, C: Code>(codes: [S::U; 4], out: &mut [C], streaming: bool) {
    match C::codes(out) {
        Codes::U8(b) if streaming => S::stream_bytes4(codes, b),
        Codes::U8(b) => S::store_bytes4(codes, b),
        Codes::U16(h) => {
            for (v, c) in codes.iter().enumerate() {
                S::store_h(S::pack(*c), &mut h[v * S::LANES..]);
            }
        }
        Codes::U32(w) => {
            for (v, c) in codes.iter().enumerate() {
                c.write_to(&mut w[v * S::LANES..]);
            }
        }
    }
}

/// Replaces the lanes of `codes` marked in `fallback` by `twin(lane)`.
#[inline(always)]
pub(super) fn patch<S: Simd>(
    codes: S::U,
    fallback: S::U,
    mut twin: impl FnMut(usize) -> u32,
) -> S::U {
    let (mut lanes, mut marks) = ([0u32; 16], [0u32; 16]);
    codes.write_to(&mut lanes);
    fallback.write_to(&mut marks);
    for (i, (l, m)) in lanes.iter_mut().zip(&marks).enumerate().take(S::LANES) {
        if *m != 0 {
            *l = out_of_line(&mut twin, i);
        }
    }
    S::U::from_slice(&lanes)
}

/// `twin(lane)` in a function of its own: the scalar twins are inlined
/// where they are called, and inlined in each of a vector's unrolled
/// lanes they made the kernels many times larger (and the release build
/// many times slower) for lanes that rarely take them.
#[inline(never)]
fn out_of_line<F: FnMut(usize) -> u32>(twin: &mut F, lane: usize) -> u32 {
    twin(lane)
}

/// [`encode_slice`](super::encode_slice)'s arguments.
pub(super) struct EncodeCodes<'a, C, B: ?Sized> {
    pub(super) format: Format,
    pub(super) src: &'a [f32],
    pub(super) dst: &'a mut [C],
    pub(super) round: Round,
    pub(super) bits: &'a B,
    pub(super) first_index: u64,
}

impl<C: Code, B: RandomBits + ?Sized> Kernel for EncodeCodes<'_, C, B> {
    type Output = usize;

    #[inline(always)]
    fn run<S: Simd>(self) -> usize {
        let (bits, mode, first) = (self.bits, self.round.mode, self.first_index);
        run_lanes_at::<S, _, _>(self, bits, mode, first)
    }

    fn scalar(self) -> usize {
        encode_twin(
            self.format,
            self.src,
            self.dst,
            self.round,
            self.bits,
            self.first_index,
        )
    }
}

impl<C: Code, B: RandomBits + ?Sized> LaneKernel for EncodeCodes<'_, C, B> {
    type Output = usize;

    #[inline(always)]
    fn lanes<S: Simd, L: LaneBits>(self, mode: Mode, lane_bits: &L) -> usize {
        let Self {
            format,
            src,
            dst,
            round,
            bits,
            first_index,
        } = self;
        let encoder = Encoder::new(format, round);
        let one = OneVector {
            encoder,
            mode,
            format,
            round,
            src,
            bits,
            lane_bits,
            first_index,
        };
        let mut nans = 0;
        // Groups of four vectors: one check of finiteness for 64 elements
        // on 16 lanes, one draw of word 0 for 16 elements in stochastic
        // rounding; large byte outputs are streamed (`tessera bench
        // formats`, docs/benchmarks.md).
        let fast = L::GROUPS
            && encoder.has_fast_rule()
            && matches!(mode, Mode::Stochastic | Mode::NearestEven);
        let streaming = crate::arch::wants_streaming(dst);
        let group = 4 * S::LANES;
        let grouped = if fast { src.len() / group * group } else { 0 };
        if grouped > 0 {
            // Stochastic rounding draws with no checks where it can.
            let drawn = match mode {
                Mode::Stochastic => lane_bits.grouped(first_index, grouped),
                _ => None,
            };
            let groups = Groups {
                mode,
                src: &src[..grouped],
                first_index,
                streaming,
                one: &one,
            };
            nans += FastLanes::<S>::new(&encoder).specialized(
                #[inline(always)]
                |rule| match &drawn {
                    Some(bits) => groups.encode::<S, C, _>(rule, bits, dst),
                    None => groups.encode::<S, C, _>(rule, lane_bits, dst),
                },
            );
        }
        let body = grouped
            + each_vector::<S>(
                src.len() - grouped,
                #[inline(always)]
                |at| nans += one.encode::<S, C>(grouped + at, dst),
            );
        let first = first_index.wrapping_add(body as u64);
        nans + encode_twin(format, &src[body..], &mut dst[body..], round, bits, first)
    }
}

/// [`EncodeCodes`]' loop over whole groups of four vectors by the fast
/// rule.
struct Groups<'a, B: ?Sized, L> {
    mode: Mode,
    src: &'a [f32],
    first_index: u64,
    streaming: bool,
    /// The vectors the fast rule leaves go this way.
    one: &'a OneVector<'a, B, L>,
}

impl<B: RandomBits + ?Sized, L: LaneBits> Groups<'_, B, L> {
    /// Encodes the groups into `dst` with `rule`, the random bits `bits`;
    /// returns the NaN count.
    #[inline(always)]
    fn encode<S: Simd, C: Code, G: LaneBits>(
        &self,
        rule: &FastLanes<S>,
        bits: &G,
        dst: &mut [C],
    ) -> usize {
        let mut nans = 0;
        let group = 4 * S::LANES;
        for at in (0..self.src.len()).step_by(group) {
            let index = self.first_index.wrapping_add(at as u64);
            match rule.group(self.mode, &self.src[at..], bits, index) {
                Some(codes) => store_group::<S, C>(codes, &mut dst[at..], self.streaming),
                None => {
                    for v in 0..4 {
                        nans += self.one.encode::<S, C>(at + v * S::LANES, dst);
                    }
                }
            }
        }
        if self.streaming {
            crate::arch::store_fence();
        }
        nans
    }
}

/// Encoding one vector the general way: the encoder, then the twin on the
/// lanes it marks.
struct OneVector<'a, B: ?Sized, L> {
    encoder: Encoder,
    mode: Mode,
    format: Format,
    round: Round,
    src: &'a [f32],
    bits: &'a B,
    lane_bits: &'a L,
    first_index: u64,
}

impl<B: RandomBits + ?Sized, L: LaneBits> OneVector<'_, B, L> {
    /// Encodes the vector of `src` at `at` into `dst`; returns its NaN
    /// count (see [`encode_twin`]). Not inlined without optimisation, as
    /// [`FastLanes::group`].
    #[cfg_attr(debug_assertions, inline(never))]
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn encode<S: Simd, C: Code>(&self, at: usize, dst: &mut [C]) -> usize {
        let Self {
            format,
            round,
            src,
            bits,
            ..
        } = *self;
        let index = self.first_index.wrapping_add(at as u64);
        let x = S::F::load(&src[at..]);
        let (mut codes, fallback) =
            self.encoder
                .encode::<S, L>(self.mode, x, self.lane_bits, index);
        let mut nans = 0;
        if fallback.any() {
            codes = patch::<S>(
                codes,
                fallback,
                #[inline(always)]
                |i| {
                    let v = src[at + i];
                    nans += usize::from(v.is_nan() && !format.has_nan());
                    format.encode_with(v, round, bits, index.wrapping_add(i as u64))
                },
            );
        }
        store_codes::<S, C>(codes, &mut dst[at..]);
        nans
    }
}

/// [`chop_slice`](super::chop_slice)'s arguments.
pub(super) struct ChopValues<'a, B: ?Sized> {
    pub(super) format: Format,
    pub(super) x: &'a mut [f32],
    pub(super) round: Round,
    pub(super) bits: &'a B,
    pub(super) first_index: u64,
}

impl<B: RandomBits + ?Sized> Kernel for ChopValues<'_, B> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        // Only the fast rule has a lane form of chop.
        if !Encoder::new(self.format, self.round).has_fast_rule() {
            return self.scalar();
        }
        let (bits, mode, first) = (self.bits, self.round.mode, self.first_index);
        run_lanes_at::<S, _, _>(self, bits, mode, first);
    }

    fn scalar(self) {
        chop_twin(self.format, self.x, self.round, self.bits, self.first_index);
    }
}

impl<B: RandomBits + ?Sized> LaneKernel for ChopValues<'_, B> {
    type Output = ();

    #[inline(always)]
    fn lanes<S: Simd, L: LaneBits>(self, mode: Mode, lane_bits: &L) {
        let Self {
            format,
            x,
            round,
            bits,
            first_index,
        } = self;
        let encoder = Encoder::new(format, round);
        let body = each_vector::<S>(
            x.len(),
            // As `OneVector::encode`: not inlined without optimisation.
            #[cfg_attr(debug_assertions, inline(never))]
            #[cfg_attr(not(debug_assertions), inline(always))]
            |at| {
                let index = first_index.wrapping_add(at as u64);
                let (mut y, fallback) =
                    encoder.chop::<S, L>(mode, S::F::load(&x[at..]), lane_bits, index);
                if fallback.any() {
                    y = patch::<S>(
                        y,
                        fallback,
                        #[inline(always)]
                        |i| {
                            let index = index.wrapping_add(i as u64);
                            format.chop_with(x[at + i], round, bits, index).to_bits()
                        },
                    );
                }
                S::F::from_bits(y).store(&mut x[at..]);
            },
        );
        let first = first_index.wrapping_add(body as u64);
        chop_twin(format, &mut x[body..], round, bits, first);
    }
}

/// The scalar twin of [`encode_slice`] (after its checks): returns the NaN
/// count.
pub(super) fn encode_twin<C: Code, B: RandomBits + ?Sized>(
    format: Format,
    src: &[f32],
    dst: &mut [C],
    round: Round,
    bits: &B,
    first_index: u64,
) -> usize {
    let mut nans = 0;
    for (i, (x, d)) in src.iter().zip(dst).enumerate() {
        let index = first_index.wrapping_add(i as u64);
        *d = C::from_code(format.encode_with(*x, round, bits, index));
        nans += usize::from(x.is_nan() && !format.has_nan());
    }
    nans
}

/// The scalar twin of [`chop_slice`](super::chop_slice).
pub(super) fn chop_twin<B: RandomBits + ?Sized>(
    format: Format,
    x: &mut [f32],
    round: Round,
    bits: &B,
    first_index: u64,
) {
    for (i, v) in x.iter_mut().enumerate() {
        *v = format.chop_with(*v, round, bits, first_index.wrapping_add(i as u64));
    }
}
