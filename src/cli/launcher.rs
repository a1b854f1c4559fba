//! Whether an MPI launcher (`mpirun`, `mpiexec`) started this process, read
//! from the variables it sets: a job started as K processes by a `tessera`
//! built without the `mpi` feature would run K whole jobs into one run
//! directory, so it is refused; with the feature, only rank 0 writes.

use super::Failure;

/// The process-count and rank variables of the MPI launchers: Open MPI,
/// MPICH's Hydra (and Intel MPI), MVAPICH2.
const VARIABLES: [(&str, &str); 3] = [
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
    ("PMI_SIZE", "PMI_RANK"),
    ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"),
];

/// This process as an MPI launcher describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Launch {
    /// The variable that gave the process count.
    pub(super) variable: &'static str,
    /// Processes the launcher started.
    pub(super) size: usize,
    /// This process's rank (0 if the launcher did not say).
    pub(super) rank: usize,
}

impl Launch {
    /// The first launcher whose size variable `var` holds a number.
    pub(super) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        VARIABLES.iter().find_map(|&(size, rank)| {
            let count = var(size)?.trim().parse().ok()?;
            Some(Self {
                variable: size,
                size: count,
                rank: var(rank).and_then(|r| r.trim().parse().ok()).unwrap_or(0),
            })
        })
    }

    /// This process's launch, from its environment.
    pub(super) fn from_env() -> Option<Self> {
        Self::from_vars(|v| std::env::var(v).ok())
    }
}

/// Refuses a job launched as several processes by a binary without MPI.
///
/// # Errors
/// [`Failure::Usage`] naming the variable and the feature.
pub(super) fn check(launch: Option<Launch>) -> Result<(), Failure> {
    match launch {
        Some(l) if l.size > 1 && !cfg!(feature = "mpi") => Err(Failure::Usage(format!(
            "an MPI launcher started this job as {} processes ({}={}), but this tessera was \
             built without MPI, so each would run the whole job into the same run directory: \
             build with `cargo build --release --features mpi`, or run tessera without mpirun",
            l.size, l.variable, l.size
        ))),
        _ => Ok(()),
    }
}

/// Whether this process writes the run's files and report: rank 0, or
/// the only process.
pub(super) fn reports(launch: Option<Launch>) -> bool {
    launch.is_none_or(|l| l.rank == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(vars: &[(&str, &str)]) -> Option<Launch> {
        Launch::from_vars(|v| {
            vars.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| (*x).to_owned())
        })
    }

    #[test]
    fn launchers_are_read_from_their_variables() {
        assert_eq!(launch(&[]), None);
        let l = launch(&[("PMI_SIZE", "4"), ("PMI_RANK", "3")]).unwrap();
        assert_eq!((l.variable, l.size, l.rank), ("PMI_SIZE", 4, 3));
        assert!(!reports(Some(l)));
        let l = launch(&[("OMPI_COMM_WORLD_SIZE", " 2 ")]).unwrap();
        assert_eq!((l.size, l.rank), (2, 0));
        assert!(reports(Some(l)) && reports(None));
        // One process is no launch to refuse.
        assert!(check(launch(&[("MV2_COMM_WORLD_SIZE", "1")])).is_ok());
        let refused = check(Some(l));
        if cfg!(feature = "mpi") {
            assert!(refused.is_ok());
        } else {
            let Err(Failure::Usage(m)) = refused else {
                panic!("{refused:?}")
            };
            assert!(m.contains("--features mpi") && m.contains("OMPI_COMM_WORLD_SIZE=2"));
        }
    }
}
