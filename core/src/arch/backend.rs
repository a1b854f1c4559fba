//! Which backend runs: the CPU's features detected once and cached, or a
//! backend forced through [`force`], `with_backend` or the
//! `TESSERA_BACKEND` environment variable.

use core::fmt;
use core::sync::atomic::{AtomicU8, Ordering};

/// A set of kernels, all computing bitwise the same results at different
/// speeds. Ordered from the most portable to the fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backend {
    /// The scalar twins, one element at a time: the definitions.
    Scalar,
    /// Eight lanes through the `wide` crate, with whatever the build's
    /// target features give it (SSE2 on a default x86-64 build, NEON on
    /// aarch64). The only vector backend on targets other than x86-64.
    Portable,
    /// Eight lanes as two SSE2 registers (every x86-64 CPU).
    Sse2,
    /// Eight lanes in one AVX2 register, f16 conversions by F16C.
    Avx2,
    /// Sixteen lanes in one AVX-512 register (F, BW and VL).
    Avx512,
    /// [`Backend::Avx512`] with bf16 rounding by the AVX512-BF16
    /// conversion instruction.
    Avx512Bf16,
}

impl Backend {
    /// Every backend, in order.
    pub const ALL: [Self; 6] = [
        Self::Scalar,
        Self::Portable,
        Self::Sse2,
        Self::Avx2,
        Self::Avx512,
        Self::Avx512Bf16,
    ];

    /// The name [`Backend::from_name`] and `TESSERA_BACKEND` accept.
    ///
    /// ```
    /// use tessera_core::arch::Backend;
    ///
    /// assert_eq!(Backend::Avx2.name(), "avx2");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Portable => "portable",
            Self::Sse2 => "sse2",
            Self::Avx2 => "avx2",
            Self::Avx512 => "avx512",
            Self::Avx512Bf16 => "avx512bf16",
        }
    }

    /// The backend called `name`.
    ///
    /// ```
    /// use tessera_core::arch::{Backend, BackendError};
    ///
    /// assert_eq!(Backend::from_name("sse2"), Ok(Backend::Sse2));
    /// assert_eq!(Backend::from_name("neon"), Err(BackendError::Unknown));
    /// ```
    ///
    /// # Errors
    /// [`BackendError::Unknown`] if no backend has that name.
    pub fn from_name(name: &str) -> Result<Self, BackendError> {
        Self::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or(BackendError::Unknown)
    }

    /// Whether this CPU can run the backend: detected at run time under
    /// `std`, the build's target features without it.
    ///
    /// ```
    /// use tessera_core::arch::Backend;
    ///
    /// assert!(Backend::Scalar.is_available() && Backend::Portable.is_available());
    /// ```
    #[must_use]
    pub fn is_available(self) -> bool {
        let x86 = cfg!(target_arch = "x86_64");
        match self {
            Self::Scalar | Self::Portable => true,
            Self::Sse2 => x86,
            Self::Avx2 => x86 && has("avx2") && has("f16c"),
            Self::Avx512 => {
                Self::Avx2.is_available() && has("avx512f") && has("avx512bw") && has("avx512vl")
            }
            Self::Avx512Bf16 => Self::Avx512.is_available() && has("avx512bf16"),
        }
    }

    /// The `#[target_feature]`s its kernels are compiled with (empty for
    /// the scalar and portable backends, which use the build's).
    ///
    /// ```
    /// use tessera_core::arch::Backend;
    ///
    /// assert_eq!(Backend::Scalar.target_features(), "");
    /// assert!(Backend::Avx2.target_features().contains("f16c"));
    /// ```
    #[must_use]
    pub const fn target_features(self) -> &'static str {
        match self {
            Self::Scalar | Self::Portable => "",
            Self::Sse2 => "sse2",
            Self::Avx2 => "avx2,f16c",
            Self::Avx512 => "avx2,f16c,avx512f,avx512bw,avx512vl",
            Self::Avx512Bf16 => "avx2,f16c,avx512f,avx512bw,avx512vl,avx512bf16",
        }
    }

    const fn index(self) -> u8 {
        self as u8
    }

    fn from_index(i: u8) -> Option<Self> {
        Self::ALL.get(usize::from(i)).copied()
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a backend cannot be forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendError {
    /// No backend has the name given.
    Unknown,
    /// The CPU (or, without `std`, the build) lacks the backend's features.
    Unavailable(Backend),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |f: &mut fmt::Formatter<'_>, which: fn(Backend) -> bool| {
            let mut first = true;
            for b in Backend::ALL.into_iter().filter(|b| which(*b)) {
                write!(f, "{}{b}", if first { "" } else { ", " })?;
                first = false;
            }
            Ok(())
        };
        match self {
            Self::Unknown => {
                f.write_str("no such backend; the backends are ")?;
                names(f, |_| true)
            }
            Self::Unavailable(b) => {
                write!(f, "this CPU cannot run the {b} backend; it can run ")?;
                names(f, Backend::is_available)
            }
        }
    }
}

impl core::error::Error for BackendError {}

/// Whether the CPU (and the operating system) support `feature` (an
/// `is_x86_feature_detected!` name), detected with `cpuid` also without
/// `std`.
fn has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::cpuid::Feature::from_name(feature).is_some_and(super::cpuid::has)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

/// The best backend the build's target features guarantee: the choice
/// without run-time detection.
const STATIC_BEST: Backend = if cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "avx512bw",
    target_feature = "avx512vl",
    target_feature = "avx2",
    target_feature = "f16c"
)) {
    if cfg!(target_feature = "avx512bf16") {
        Backend::Avx512Bf16
    } else {
        Backend::Avx512
    }
} else if cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "f16c"
)) {
    Backend::Avx2
} else if cfg!(target_arch = "x86_64") {
    Backend::Sse2
} else {
    Backend::Portable
};

/// No backend stored yet.
const UNSET: u8 = u8::MAX;

/// The default backend once chosen (detection and the environment variable
/// are consulted once).
static DEFAULT: AtomicU8 = AtomicU8::new(UNSET);
/// The backend forced process-wide by [`force`], or `UNSET`.
static FORCED: AtomicU8 = AtomicU8::new(UNSET);

#[cfg(feature = "std")]
std::thread_local! {
    /// The backend forced on this thread by `with_backend`, or `UNSET`.
    static SCOPED: core::cell::Cell<u8> = const { core::cell::Cell::new(UNSET) };
}

/// The backend the kernels run on this thread now: the one forced by
/// `with_backend` on this thread, else by [`force`], else the default
/// (`TESSERA_BACKEND` if set, else the best the CPU can run).
///
/// ```
/// use tessera_core::arch;
///
/// assert!(arch::active().is_available());
/// ```
///
/// # Panics
/// The first time it is called, if `TESSERA_BACKEND` is set (under `std`)
/// to a name that is not a backend or to a backend this CPU cannot run.
/// Programs can check the variable first with [`backend_from_env`].
#[must_use]
#[inline]
pub fn active() -> Backend {
    #[cfg(feature = "std")]
    {
        let scoped = SCOPED.with(core::cell::Cell::get);
        if let Some(b) = Backend::from_index(scoped) {
            return b;
        }
    }
    if let Some(b) = Backend::from_index(FORCED.load(Ordering::Relaxed)) {
        return b;
    }
    if let Some(b) = Backend::from_index(DEFAULT.load(Ordering::Relaxed)) {
        return b;
    }
    choose_default()
}

#[cold]
fn choose_default() -> Backend {
    let chosen = match backend_from_env() {
        Ok(Some(b)) => b,
        Ok(None) => best(),
        Err(e) => panic!("TESSERA_BACKEND: {e}"),
    };
    DEFAULT.store(chosen.index(), Ordering::Relaxed);
    chosen
}

/// The fastest backend this CPU can run (compile-time when the build's
/// target features already guarantee it), with or without `std`.
///
/// ```
/// use tessera_core::arch::{self, Backend};
///
/// let best = arch::best();
/// assert!(best.is_available());
/// assert!(Backend::ALL.iter().all(|b| !b.is_available() || *b <= best));
/// ```
#[must_use]
pub fn best() -> Backend {
    if STATIC_BEST >= Backend::Avx512 {
        return STATIC_BEST;
    }
    Backend::ALL
        .into_iter()
        .rev()
        .find(|b| b.is_available())
        .unwrap_or(Backend::Scalar)
}

/// The backend named by the environment variable `TESSERA_BACKEND`, if it
/// is set (always `None` without `std`).
///
/// ```
/// use tessera_core::arch;
///
/// // `TESSERA_BACKEND=avx2 program` picks AVX2; a bad name is an error here,
/// // not a panic in the first kernel call.
/// match arch::backend_from_env() {
///     Ok(chosen) => assert!(chosen.is_none_or(|b| b.is_available())),
///     Err(e) => eprintln!("TESSERA_BACKEND: {e}"),
/// }
/// ```
///
/// # Errors
/// If the name is not a backend's, or the CPU cannot run that backend.
pub fn backend_from_env() -> Result<Option<Backend>, BackendError> {
    #[cfg(feature = "std")]
    if let Some(name) = std::env::var_os("TESSERA_BACKEND") {
        let b = Backend::from_name(name.to_str().unwrap_or(""))?;
        return if b.is_available() {
            Ok(Some(b))
        } else {
            Err(BackendError::Unavailable(b))
        };
    }
    Ok(None)
}

/// Forces `backend` for every thread (`None` returns to the default).
///
/// ```
/// use tessera_core::arch::{self, Backend};
///
/// arch::force(Some(Backend::Scalar))?; // every thread: the scalar twins
/// assert_eq!(arch::active(), Backend::Scalar);
/// arch::force(None)?; // back to the default
/// # Ok::<(), tessera_core::arch::BackendError>(())
/// ```
///
/// # Errors
/// [`BackendError::Unavailable`] if the CPU cannot run it; nothing changes.
pub fn force(backend: Option<Backend>) -> Result<(), BackendError> {
    let index = match backend {
        Some(b) if !b.is_available() => return Err(BackendError::Unavailable(b)),
        Some(b) => b.index(),
        None => UNSET,
    };
    FORCED.store(index, Ordering::Relaxed);
    Ok(())
}

/// Runs `f` with `backend` forced on this thread (other threads, such as a
/// thread pool's workers, keep theirs), then restores the previous choice,
/// also if `f` panics.
///
/// ```
/// use tessera_core::arch::{self, Backend};
/// use tessera_core::kernels;
///
/// let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.01).collect();
/// let twin = arch::with_backend(Backend::Scalar, || kernels::sum_of_squares(&x))?;
/// assert_eq!(twin.to_bits(), kernels::sum_of_squares(&x).to_bits()); // every backend: the same bits
/// # Ok::<(), tessera_core::arch::BackendError>(())
/// ```
///
/// # Errors
/// [`BackendError::Unavailable`] if the CPU cannot run it; `f` is not run.
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub fn with_backend<R>(backend: Backend, f: impl FnOnce() -> R) -> Result<R, BackendError> {
    struct Restore(u8);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|s| s.set(self.0));
        }
    }
    if !backend.is_available() {
        return Err(BackendError::Unavailable(backend));
    }
    let _restore = Restore(SCOPED.with(|s| s.replace(backend.index())));
    Ok(f())
}
