//! Which PopDist process (instance) this is.

use serde::Serialize;

use super::error::PodError;

/// The environment variable of the process index Open MPI's `mpirun` (and
/// so PopRun) sets.
pub const RANK_VARIABLE: &str = "OMPI_COMM_WORLD_RANK";

/// The environment variable of the process count Open MPI's `mpirun` sets.
pub const SIZE_VARIABLE: &str = "OMPI_COMM_WORLD_SIZE";

/// A process's identity among the instances of a run, as PopTorch's
/// `Distributed.configureProcessId(index, count)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ProcessId {
    /// This process, `0..count`.
    pub index: usize,
    /// Processes.
    pub count: usize,
}

impl ProcessId {
    /// The only process.
    pub const SINGLE: Self = Self { index: 0, count: 1 };

    /// Process `index` of `count`.
    ///
    /// # Errors
    /// [`PodError::ProcessOutOfRange`] unless `index < count`.
    ///
    /// ```
    /// use tessera_sim::pod::{PodError, ProcessId};
    ///
    /// assert_eq!(ProcessId::new(1, 4), Ok(ProcessId { index: 1, count: 4 }));
    /// assert_eq!(ProcessId::new(4, 4), Err(PodError::ProcessOutOfRange { index: 4, count: 4 }));
    /// ```
    pub const fn new(index: usize, count: usize) -> Result<Self, PodError> {
        if index >= count {
            return Err(PodError::ProcessOutOfRange { index, count });
        }
        Ok(Self { index, count })
    }

    /// The identity in Open MPI's variables: `rank` the value of
    /// [`RANK_VARIABLE`], `size` of [`SIZE_VARIABLE`] (`None` where unset);
    /// `None` if neither is set. A pure function of its inputs, which
    /// [`ProcessId::from_env`] calls with the process environment.
    ///
    /// ```
    /// use tessera_sim::pod::ProcessId;
    ///
    /// assert_eq!(ProcessId::from_vars(Some("3"), Some("4")), Ok(Some(ProcessId { index: 3, count: 4 })));
    /// assert_eq!(ProcessId::from_vars(None, None), Ok(None));
    /// assert!(ProcessId::from_vars(Some("4"), Some("4")).is_err());
    /// ```
    ///
    /// # Errors
    /// [`PodError::ProcessMissing`] if only one is set,
    /// [`PodError::ProcessNotANumber`] if one is not a decimal number
    /// (surrounding blanks allowed), [`PodError::ProcessOutOfRange`].
    pub fn from_vars(rank: Option<&str>, size: Option<&str>) -> Result<Option<Self>, PodError> {
        let parse = |value: &str, variable| {
            value
                .trim()
                .parse::<usize>()
                .map_err(|_| PodError::ProcessNotANumber { variable })
        };
        match (rank, size) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(PodError::ProcessMissing {
                variable: SIZE_VARIABLE,
            }),
            (None, Some(_)) => Err(PodError::ProcessMissing {
                variable: RANK_VARIABLE,
            }),
            (Some(rank), Some(size)) => {
                let index = parse(rank, RANK_VARIABLE)?;
                let count = parse(size, SIZE_VARIABLE)?;
                Self::new(index, count).map(Some)
            }
        }
    }

    /// The identity in this process's environment (see
    /// [`ProcessId::from_vars`]); a variable that is not valid Unicode is
    /// not a number.
    ///
    /// # Errors
    /// As [`ProcessId::from_vars`].
    ///
    /// ```
    /// use tessera_sim::pod::{ProcessId, RANK_VARIABLE, SIZE_VARIABLE};
    ///
    /// // Outside mpirun neither variable is set: no identity.
    /// if std::env::var_os(RANK_VARIABLE).is_none() && std::env::var_os(SIZE_VARIABLE).is_none() {
    ///     assert_eq!(ProcessId::from_env(), Ok(None));
    /// }
    /// ```
    pub fn from_env() -> Result<Option<Self>, PodError> {
        let read = |variable: &'static str| match std::env::var(variable) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(PodError::ProcessNotANumber { variable }),
        };
        let rank = read(RANK_VARIABLE)?;
        let size = read(SIZE_VARIABLE)?;
        Self::from_vars(rank.as_deref(), size.as_deref())
    }

    /// The identity: `explicit` (index, count) if given, else from the
    /// environment, else [`ProcessId::SINGLE`].
    ///
    /// # Errors
    /// [`PodError::ProcessOutOfRange`] for an invalid `explicit`; as
    /// [`ProcessId::from_env`] otherwise.
    ///
    /// ```
    /// use tessera_sim::pod::ProcessId;
    ///
    /// // An explicit identity wins over the environment.
    /// assert_eq!(ProcessId::resolve(Some((2, 4))), Ok(ProcessId { index: 2, count: 4 }));
    /// assert!(ProcessId::resolve(Some((4, 4))).is_err());
    /// ```
    pub fn resolve(explicit: Option<(usize, usize)>) -> Result<Self, PodError> {
        Self::resolve_from(explicit, Self::from_env)
    }

    /// [`ProcessId::resolve`] with the environment read by `env` (called
    /// only if `explicit` is `None`), for tests.
    ///
    /// # Errors
    /// As [`ProcessId::resolve`].
    ///
    /// ```
    /// use tessera_sim::pod::ProcessId;
    ///
    /// assert_eq!(ProcessId::resolve_from(None, || Ok(None)), Ok(ProcessId::SINGLE));
    /// let mpi = ProcessId::new(1, 2).unwrap();
    /// assert_eq!(ProcessId::resolve_from(None, || Ok(Some(mpi))), Ok(mpi));
    /// ```
    pub fn resolve_from(
        explicit: Option<(usize, usize)>,
        env: impl FnOnce() -> Result<Option<Self>, PodError>,
    ) -> Result<Self, PodError> {
        match explicit {
            Some((index, count)) => Self::new(index, count),
            None => Ok(env()?.unwrap_or(Self::SINGLE)),
        }
    }
}
