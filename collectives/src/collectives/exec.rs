//! One collective call: the schedule chosen, the exponent phase of
//! [`Order::Free`], the run.

use std::time::Instant;

use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Order, ReduceOp, Reducer, grid,
};
use tessera_core::fp::Element;

use super::{AlgorithmChoice, Options, OrderChoice, Report};
use crate::comm::Communicator;
use crate::cost::CostModel;
use crate::error::CommError;
use crate::run::{self, Scratch, own_failure};

/// The schedule for a call, and the model's prediction.
pub(super) fn choose<T: Element, D: Communicator + ?Sized>(
    comm: &D,
    options: &Options,
    model: &CostModel,
    collective: Collective,
    len: usize,
    op: ReduceOp,
) -> Result<(CollectiveSchedule, f64), CommError> {
    let p = comm.size();
    let link = *model
        .topology()
        .link_for((0..p).map(|r| comm.world_rank(r)));
    let summed = collective.reduces() && op.depends_on_order();
    let deterministic = options.order == OrderChoice::Use(Order::Deterministic);
    // Order::Free gives the same bits whatever the algorithm; only these
    // fold the exponent phase into the reduction (`run::folds_exponents`):
    // the others pay an exponent call and f64 grid sums (the MPI model
    // picks the double binary tree from 4 MiB).
    let free_folding = options.order == OrderChoice::Use(Order::Free)
        && matches!(
            collective,
            Collective::AllReduce | Collective::ReduceScatter
        );
    let estimate = match options.algorithm {
        AlgorithmChoice::Use(a) => model.estimate(a, collective, p, len, size_of::<T>(), &link)?,
        AlgorithmChoice::Auto => {
            let only_hd = [Algorithm::HalvingDoubling];
            let folding: &[Algorithm] = if p == 2 {
                &[Algorithm::Ring, Algorithm::HalvingDoubling]
            } else {
                &[Algorithm::Ring]
            };
            let candidates: &[Algorithm] = if deterministic && summed && p > 2 {
                &only_hd
            } else if free_folding && summed {
                folding
            } else {
                &Algorithm::ALL
            };
            model.select(collective, p, len, size_of::<T>(), &link, candidates)?
        }
    };
    let mut s = CollectiveSchedule::new(estimate.algorithm, collective, p, len)?;
    if let OrderChoice::Use(order) = options.order {
        s = s.with_order(order);
    }
    Ok((s, estimate.seconds))
}

/// The exponent phase of [`Order::Free`]: this rank's block exponents
/// of `buf`, all-reduced (Max, exact in any order) in the same call number
/// `seq` (its headers name another operation and length, so a rank that
/// skipped it is found at its first message), by the algorithm the cost
/// model picks for their size (1/256 of the buffer's elements: a
/// latency-bound call, where the ring's `2 (p - 1)` steps cost most).
fn grid_exponents<T: Element, D: Communicator + ?Sized>(
    comm: &D,
    model: &CostModel,
    buf: &[T],
    seq: u32,
    deadline: Instant,
    scratch: &mut Scratch,
) -> Result<(Vec<f32>, run::Traffic), CommError> {
    let mut exponents = vec![0.0f32; grid::blocks(buf.len())];
    grid::block_exponents(buf, &mut exponents);
    let (phase, _) = choose::<f32, D>(
        comm,
        &Options::new(),
        model,
        Collective::AllReduce,
        exponents.len(),
        ReduceOp::Max,
    )?;
    let max = Reducer::new(ReduceOp::Max);
    let traffic = run::run(
        comm,
        &phase,
        &max,
        &mut exponents,
        seq,
        deadline,
        scratch,
        &[],
    )?;
    Ok((exponents, traffic))
}

/// One collective on `comm`, numbered `*seq`.
#[allow(clippy::too_many_arguments)]
pub(super) fn exec<T: Element, D: Communicator + ?Sized>(
    comm: &D,
    seq: &mut u32,
    options: &Options,
    model: &CostModel,
    scratch: &mut Scratch,
    collective: Collective,
    buf: &mut [T],
    reduction: &Reducer,
) -> Result<Report, CommError> {
    let start = Instant::now();
    let n = *seq;
    *seq = seq.wrapping_add(1);
    let result = (|| -> Result<Report, CommError> {
        // Arguments first (see `hierarchical_inner`).
        let (s, predicted) =
            choose::<T, D>(comm, options, model, collective, buf.len(), reduction.op)?;
        comm.check()?;
        let deadline = start + options.timeout;
        let (exponents, mut traffic) =
            if s.on_grid(reduction.op) && !run::folds_exponents(&s, reduction.op) {
                grid_exponents(comm, model, buf, n, deadline, scratch)?
            } else {
                (Vec::new(), run::Traffic::default())
            };
        traffic += run::run(comm, &s, reduction, buf, n, deadline, scratch, &exponents)?;
        Ok(Report {
            algorithm: s.algorithm(),
            order: s.order(),
            steps: s.steps(),
            messages: traffic.messages,
            bytes: traffic.bytes,
            elapsed: start.elapsed(),
            predicted,
        })
    })();
    if let Err(e) = &result
        && e.failure(comm.world_rank(comm.rank())).is_none()
    {
        // An argument error found before anything was sent: abort anyway,
        // so ranks called correctly do not wait for their deadlines.
        comm.fail(own_failure(comm));
    }
    result
}
