//! x86-64 feature detection from `cpuid` and `xgetbv`, without `std`.
//!
//! `std::is_x86_feature_detected!` is not available to a `no_std` build,
//! which would otherwise be stuck on the build's baseline (SSE2) however
//! capable the CPU. Both instructions are in `core::arch`, so the crate
//! detects the features itself, the way `std` does: an instruction set is
//! usable only if the CPU has it *and* the operating system saves the
//! registers it uses (the XCR0 bits read by `xgetbv`). A test checks that
//! this agrees with `std`'s detection for every feature the backends use.

use core::arch::x86_64::{__cpuid, __cpuid_count, CpuidResult};
use core::sync::atomic::{AtomicU32, Ordering};

/// A feature the backends compile with, as a bit of [`Features`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Feature {
    Avx2 = 1 << 0,
    F16c = 1 << 1,
    Avx512f = 1 << 2,
    Avx512bw = 1 << 3,
    Avx512vl = 1 << 4,
    Avx512bf16 = 1 << 5,
}

impl Feature {
    /// Every feature, with the name `is_x86_feature_detected!` gives it.
    pub(crate) const ALL: [(Self, &'static str); 6] = [
        (Self::Avx2, "avx2"),
        (Self::F16c, "f16c"),
        (Self::Avx512f, "avx512f"),
        (Self::Avx512bw, "avx512bw"),
        (Self::Avx512vl, "avx512vl"),
        (Self::Avx512bf16, "avx512bf16"),
    ];

    /// The feature `is_x86_feature_detected!` calls `name`.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }
}

/// Detected features, one bit per [`Feature`], with a marker bit so that
/// zero means "not detected yet".
static DETECTED: AtomicU32 = AtomicU32::new(0);
const DONE: u32 = 1 << 31;

/// Whether the CPU and the operating system support `feature` (detected
/// once, then cached).
pub(crate) fn has(feature: Feature) -> bool {
    let mut bits = DETECTED.load(Ordering::Relaxed);
    if bits == 0 {
        bits = detect() | DONE;
        DETECTED.store(bits, Ordering::Relaxed);
    }
    bits & feature as u32 != 0
}

// Register bits, from the Intel SDM vol. 2A (CPUID) and vol. 1 ch. 13 (XCR0).
const LEAF1_ECX_F16C: u32 = 1 << 29;
const LEAF1_ECX_OSXSAVE: u32 = 1 << 27;
const LEAF1_ECX_AVX: u32 = 1 << 28;
const LEAF7_EBX_AVX2: u32 = 1 << 5;
const LEAF7_EBX_AVX512F: u32 = 1 << 16;
const LEAF7_EBX_AVX512BW: u32 = 1 << 30;
const LEAF7_EBX_AVX512VL: u32 = 1 << 31;
const LEAF7_1_EAX_AVX512BF16: u32 = 1 << 5;
/// XCR0: the SSE and AVX (upper YMM) state is saved.
const XCR0_YMM: u64 = 0b110;
/// XCR0: the opmask, upper ZMM0-15 and ZMM16-31 state is saved too.
const XCR0_ZMM: u64 = 0b1110_0000;

fn detect() -> u32 {
    let max_leaf = __cpuid(0).eax;
    let leaf1 = __cpuid(1);
    let (leaf7, leaf7_1) = if max_leaf >= 7 {
        (__cpuid_count(7, 0), __cpuid_count(7, 1))
    } else {
        let none = CpuidResult {
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        };
        (none, none)
    };
    let os_saves = if leaf1.ecx & LEAF1_ECX_OSXSAVE != 0 {
        // SAFETY: CPUID reported OSXSAVE, so XGETBV is supported and
        // enabled by the operating system.
        unsafe { xcr0() }
    } else {
        0
    };
    let ymm = os_saves & XCR0_YMM == XCR0_YMM && leaf1.ecx & LEAF1_ECX_AVX != 0;
    let zmm = ymm && os_saves & XCR0_ZMM == XCR0_ZMM;
    let mut bits = 0;
    let mut set = |feature: Feature, present: bool| {
        if present {
            bits |= feature as u32;
        }
    };
    set(Feature::Avx2, ymm && leaf7.ebx & LEAF7_EBX_AVX2 != 0);
    set(Feature::F16c, ymm && leaf1.ecx & LEAF1_ECX_F16C != 0);
    set(Feature::Avx512f, zmm && leaf7.ebx & LEAF7_EBX_AVX512F != 0);
    set(
        Feature::Avx512bw,
        zmm && leaf7.ebx & LEAF7_EBX_AVX512BW != 0,
    );
    set(
        Feature::Avx512vl,
        zmm && leaf7.ebx & LEAF7_EBX_AVX512VL != 0,
    );
    set(
        Feature::Avx512bf16,
        zmm && leaf7.eax >= 1 && leaf7_1.eax & LEAF7_1_EAX_AVX512BF16 != 0,
    );
    bits
}

/// XCR0, the register in which the operating system says which register
/// state it saves on a context switch.
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller checked OSXSAVE; XCR0 (register 0) always exists.
    unsafe { core::arch::x86_64::_xgetbv(0) }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::{Feature, has};

    #[test]
    fn agrees_with_std_for_every_feature() {
        for (feature, name) in Feature::ALL {
            let std_says = match name {
                "avx2" => std::is_x86_feature_detected!("avx2"),
                "f16c" => std::is_x86_feature_detected!("f16c"),
                "avx512f" => std::is_x86_feature_detected!("avx512f"),
                "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
                "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
                "avx512bf16" => std::is_x86_feature_detected!("avx512bf16"),
                _ => unreachable!("{name}"),
            };
            assert_eq!(has(feature), std_says, "{name}");
            assert_eq!(Feature::from_name(name), Some(feature));
        }
    }
}
