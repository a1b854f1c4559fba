//! The `allreduce` suite: f32 Sum all-reduce through `tessera-collectives`,
//! reported like nccl-tests (size, algorithm, time, algbw, busbw).
//!
//! - **Threads** (`--transport threads`, the default): a [`ThreadWorld`] of
//!   2 ranks, and of 4 unless `--quick` (on a 2-core machine 4 ranks
//!   oversubscribe the cores; the heading says how many there are). The
//!   reference, `memcpy`, is `copy_from_slice` of the same bytes on rank 0
//!   while the other ranks wait (blocked, not spinning) in the next barrier;
//!   its GB/s are bytes copied per second (a copy's bytes counted once, not
//!   read plus written), and `ratio` = busbw / memcpy GB/s.
//! - **MPI** (`--transport mpi`, a binary built with `--features mpi` and
//!   launched by `mpirun -n K`): the same over
//!   `tessera_collectives::mpi::MpiCommunicator`, each rank a process. The
//!   reference, `MPI_Allreduce`, is the MPI library's own all-reduce
//!   (`MPI_SUM` on `MPI_FLOAT`, out of place from the same input buffer into
//!   a second one), timed in the same run; `ratio` = MPI_Allreduce's time /
//!   ours (above 1: ours is faster). Only rank 0 prints.
//!
//! Every algorithm is measured, plus the cost model's choice (`auto`) and,
//! for buffers larger than one slice, `ring_chunked`: the same ring
//! all-reduce issued by the caller as consecutive calls on slices of
//! `p` x [`MESSAGE_BYTES`], so that every message is [`MESSAGE_BYTES`] and
//! stays in cache between the sender's copy and the receiver's reduction.
//! The table gives `auto`'s time over the best of the four algorithms'
//! (`auto/best`): how well the cost model chose. Two more rows compare the
//! reproducible modes, each with the cost model's algorithm:
//! `deterministic` ([`Order::Deterministic`]) and `order_free`
//! ([`Order::Free`]: integer sums on a grid per block of positions, the
//! blocks' exponents taken from the contributions as they are reduced
//! where the algorithm allows, else all-reduced first).
//!
//! Timing: one warm-up call per variant (whose result is checked: rank `r`
//! contributes `r + 1`, every element must be `p (p + 1) / 2`), then
//! samples in interleaved rounds (reference, then every variant), each
//! sample after a barrier of all ranks and of `k` back-to-back calls (`k`
//! above 1 only for buffers below 256 KiB); a sample's time per call is the
//! slowest rank's, the reported time the best sample. busbw = algbw x
//! 2 (p - 1) / p ([`bus_factor`]), algbw = bytes / time.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Instant;

use tessera_collectives::cost::{CostModel, bus_factor};
use tessera_collectives::{
    Algorithm, Collective, Collectives, CommError, Communicator, Options, Order, ReduceOp, Reducer,
    ThreadCommunicator, ThreadWorld, Topology,
};

use super::report::Sink;
use super::{BenchError, Plan, Record, Suite, try_zeroed};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "allreduce",
    about: "f32 all-reduce, every algorithm, 2 and 4 thread ranks (or MPI ranks) vs memcpy \
            (or MPI_Allreduce), nccl-tests columns",
    run,
};

/// Where the ranks run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Transport {
    /// Threads of this process (`ThreadWorld`).
    #[default]
    Threads,
    /// MPI processes launched by `mpirun` (`MpiCommunicator`).
    Mpi,
}

/// Buffer sizes in bytes: 4 KiB to 256 MiB in powers of 4.
const SIZES: [usize; 9] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];
/// `--quick`: up to 1 MiB.
const QUICK_SIZES: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];

/// The message size of `ring_chunked`: its calls are on slices of `p` times
/// this, whose ring messages (a `1/p` share each) fit in a core's L2 (1 MiB
/// on the machine the README's figures come from). Of the 256 KiB to 4 MiB
/// messages tried on that machine, 512 KiB was among the best with both 2
/// and 4 ranks; 256 KiB and below cost more in per-call latency than they
/// save in cache misses.
const MESSAGE_BYTES: usize = 512 << 10;

/// Elements per call of `ring_chunked` on `p` ranks.
const fn chunk_elements(p: usize) -> usize {
    p * MESSAGE_BYTES / 4
}

/// Samples of at least this many bytes make one call each; smaller buffers
/// make `k` calls per sample, for about this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// The most calls in one sample.
const MAX_BATCH: usize = 32;

/// What is timed: one algorithm, the cost model's choice (in the default,
/// the deterministic or the order-free order), or the ring in caller-side
/// slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Use(Algorithm),
    Auto,
    RingChunked,
    Deterministic,
    OrderFree,
}

impl Variant {
    const fn label(self) -> &'static str {
        match self {
            Self::Use(Algorithm::Ring) => "ring",
            Self::Use(Algorithm::BidirectionalRing) => "bidirectional_ring",
            Self::Use(Algorithm::DoubleBinaryTree) => "double_binary_tree",
            Self::Use(Algorithm::HalvingDoubling) => "halving_doubling",
            Self::Auto => "auto",
            Self::RingChunked => "ring_chunked",
            Self::Deterministic => "deterministic",
            Self::OrderFree => "order_free",
        }
    }

    fn options(self) -> Options {
        match self {
            Self::Use(a) => Options::new().with_algorithm(a),
            Self::Auto => Options::new(),
            Self::RingChunked => Options::new().with_algorithm(Algorithm::Ring),
            Self::Deterministic => Options::new().deterministic(),
            Self::OrderFree => Options::new().with_order(Order::Free),
        }
    }

    /// One all-reduce of `buf` (Sum, in place).
    fn call<C: Communicator>(
        self,
        c: &mut Collectives<C>,
        buf: &mut [f32],
    ) -> Result<(), CommError> {
        let sum = Reducer::new(ReduceOp::Sum);
        if self == Self::RingChunked {
            for part in buf.chunks_mut(chunk_elements(c.size())) {
                c.all_reduce(part, sum)?;
            }
        } else {
            c.all_reduce(buf, sum)?;
        }
        Ok(())
    }
}

/// The variants measured on `n` f32 elements over `p` ranks.
fn variants(n: usize, p: usize) -> Vec<Variant> {
    let mut v: Vec<Variant> = Algorithm::ALL.into_iter().map(Variant::Use).collect();
    v.push(Variant::Auto);
    if n > chunk_elements(p) {
        v.push(Variant::RingChunked);
    }
    v.extend([Variant::Deterministic, Variant::OrderFree]);
    v
}

/// `allreduce_<variant>_p<ranks>` (`_mpi` over MPI): the `kernel` field,
/// which [`NcclTable`] reads back.
fn kernel_name(v: Variant, p: usize, mpi: bool) -> &'static str {
    let name = format!(
        "allreduce_{}_p{p}{}",
        v.label(),
        if mpi { "_mpi" } else { "" }
    );
    // A few dozen short names per run, for `Record`'s `&'static str`.
    Box::leak(name.into_boxed_str())
}

/// The algorithm `auto` runs on `p` ranks for `n` f32 elements: the
/// cheapest by the cost model of the transport's topology, as
/// `Collectives` chooses with default options.
fn auto_choice(p: usize, n: usize, mpi: bool) -> Option<Algorithm> {
    let model = CostModel::new(if mpi {
        Topology::processes()
    } else {
        Topology::shared_memory()
    });
    let link = model.topology().link_for(0..p);
    model
        .select(Collective::AllReduce, p, n, 4, link, &Algorithm::ALL)
        .ok()
        .map(|e| e.algorithm)
}

/// How many samples and calls per sample.
#[derive(Clone, Copy, Debug)]
struct Sampling {
    samples: usize,
    /// All-reduce calls per sample.
    calls: usize,
    /// memcpy calls per sample.
    copies: usize,
}

impl Sampling {
    fn new(quick: bool, bytes: usize, p: usize) -> Self {
        let samples = if quick {
            5
        } else if bytes <= 64 << 20 {
            10
        } else {
            5
        };
        // Repeated sums of 1.0 grow as p^calls: stay far below f32's 2^128.
        let doubling = p.next_power_of_two().ilog2().max(1) as usize;
        let calls = (BATCH_BYTES / bytes.max(1)).clamp(1, MAX_BATCH.min(96 / doubling));
        let copies = ((4 << 20) / bytes.max(1)).clamp(1, 256);
        Self {
            samples,
            calls,
            copies,
        }
    }
}

/// One rank's sample times: `[variant][sample]` seconds per call, and the
/// reference's per sample (empty on ranks that do not time it).
struct RankTimes {
    variants: Vec<Vec<f64>>,
    reference: Vec<f64>,
}

/// Why a rank stopped: its own failure, or a consequence of another
/// rank's (which the report should not prefer).
enum Failed {
    Own(BenchError),
    Peer(BenchError),
}

impl From<BenchError> for Failed {
    fn from(e: BenchError) -> Self {
        Self::Own(e)
    }
}

impl Failed {
    fn into_inner(self) -> BenchError {
        match self {
            Self::Own(e) | Self::Peer(e) => e,
        }
    }
}

fn collective(e: CommError) -> Failed {
    let peer = matches!(e, CommError::PeerFailed { .. });
    let e = BenchError::Collective(e.to_string());
    if peer {
        Failed::Peer(e)
    } else {
        Failed::Own(e)
    }
}

/// One sample of the reference on this rank: seconds per call, or `None`
/// if this rank does not time it.
type RefSample = Result<Option<f64>, Failed>;

/// Runs one rank's part for `n` elements: warm-up and check of every
/// variant, then `s.samples` rounds of (reference, every variant).
/// `reference` times the reference once (`None` if this rank does not),
/// and `barrier` synchronises the ranks before every sample.
fn rank_samples<C: Communicator>(
    c: &mut Collectives<C>,
    n: usize,
    vs: &[Variant],
    s: Sampling,
    mut reference: impl FnMut(&[f32]) -> RefSample,
    mut barrier: impl FnMut(&Collectives<C>) -> Result<(), Failed>,
) -> Result<RankTimes, Failed> {
    let (r, p) = (c.rank(), c.size());
    let mut buf = try_zeroed::<f32>(n)?;
    let expected = (p * (p + 1) / 2) as f32;
    for &v in vs {
        c.set_options(v.options());
        buf.fill(r as f32 + 1.0);
        v.call(c, &mut buf).map_err(collective)?;
        if let Some(i) = buf.iter().position(|&x| x != expected) {
            return Err(Failed::Own(BenchError::Collective(format!(
                "{}: rank {r} holds {} at element {i} of {n}, expected {expected}",
                v.label(),
                buf[i]
            ))));
        }
    }
    buf.fill(1.0);
    reference(&buf)?; // warm-up
    let mut times = RankTimes {
        variants: vec![Vec::with_capacity(s.samples); vs.len()],
        reference: Vec::with_capacity(s.samples),
    };
    for _ in 0..s.samples {
        if let Some(t) = reference(&buf)? {
            times.reference.push(t);
        }
        for (&v, t) in vs.iter().zip(&mut times.variants) {
            c.set_options(v.options());
            if s.calls > 1 {
                buf.fill(1.0);
            }
            barrier(c)?;
            let start = Instant::now();
            for _ in 0..s.calls {
                v.call(c, &mut buf).map_err(collective)?;
            }
            t.push(start.elapsed().as_secs_f64() / s.calls as f64);
        }
    }
    Ok(times)
}

/// The best over samples of the slowest rank per sample.
fn best_of_slowest<'a>(per_rank: impl Iterator<Item = &'a [f64]>) -> f64 {
    let mut slowest: Vec<f64> = Vec::new();
    for times in per_rank {
        if slowest.is_empty() {
            slowest = times.to_vec();
        }
        for (m, &t) in slowest.iter_mut().zip(times) {
            *m = m.max(t);
        }
    }
    slowest.into_iter().fold(f64::INFINITY, f64::min)
}

fn sizes(plan: &Plan) -> Vec<usize> {
    match &plan.elements {
        Some(sizes) => sizes.iter().map(|n| n.get()).collect(),
        None if plan.quick => QUICK_SIZES.iter().map(|b| b / 4).collect(),
        None => SIZES.iter().map(|b| b / 4).collect(),
    }
}

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    match plan.transport {
        Transport::Threads => threads(plan, sink),
        Transport::Mpi => mpi_transport(plan, sink),
    }
}

fn build_note() -> &'static str {
    if cfg!(debug_assertions) {
        "; DEBUG build, use --release for meaningful numbers"
    } else {
        ""
    }
}

/// The thread transport's heading: ranks, cores, what is timed.
fn threads_heading(plan: &Plan, ranks: &[usize], cores: usize) -> String {
    let over: Vec<String> = ranks
        .iter()
        .filter(|&&p| p > cores)
        .map(|p| format!("{p} ranks oversubscribe them"))
        .collect();
    format!(
        "allreduce, thread transport: f32 Sum in place, {} ranks as threads on {cores} core(s){}; \
         best of {} samples after a barrier, time = slowest rank; busbw = algbw x 2(p-1)/p; \
         ref memcpy = copy_from_slice of the same bytes, GB/s = bytes copied / s; \
         ratio = busbw / memcpy GB/s; ring_chunked = the ring as calls on slices of \
         p x {} KiB{}",
        ranks
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        if over.is_empty() {
            String::new()
        } else {
            format!(" ({})", over.join(", "))
        },
        if plan.quick { "5" } else { "5 to 10" },
        MESSAGE_BYTES >> 10,
        build_note(),
    )
}

/// Every rank's times, or the failure that explains the others: the
/// first rank's own failure, else the first failure.
fn first_failure(
    results: Vec<std::thread::Result<Result<RankTimes, Failed>>>,
) -> Result<Vec<RankTimes>, BenchError> {
    let mut ok = Vec::with_capacity(results.len());
    let mut failure: Option<Failed> = None;
    for (rank, r) in results.into_iter().enumerate() {
        let f = match r {
            Ok(Ok(t)) => {
                ok.push(t);
                continue;
            }
            Ok(Err(f)) => f,
            Err(_) => Failed::Own(BenchError::Collective(format!("rank {rank} panicked"))),
        };
        if matches!(
            (&failure, &f),
            (None, _) | (Some(Failed::Peer(_)), Failed::Own(_))
        ) {
            failure = Some(f);
        }
    }
    match failure {
        Some(f) => Err(f.into_inner()),
        None => Ok(ok),
    }
}

fn threads(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let ranks: &[usize] = if plan.quick { &[2] } else { &[2, 4] };
    sink.start(&threads_heading(plan, ranks, cores))?;
    for &p in ranks {
        for n in sizes(plan) {
            let bytes = n * 4;
            let vs = variants(n, p);
            let s = Sampling::new(plan.quick, bytes, p);
            let names: Vec<&'static str> = vs.iter().map(|&v| kernel_name(v, p, false)).collect();
            let results = ThreadWorld::run(p, |comm| {
                let rank = comm.rank();
                let mut c = Collectives::new(comm);
                let mut dst = if rank == 0 {
                    try_zeroed::<f32>(n)?
                } else {
                    Vec::new()
                };
                let memcpy = |src: &[f32]| -> RefSample {
                    if rank != 0 {
                        return Ok(None);
                    }
                    let start = Instant::now();
                    for _ in 0..s.copies {
                        std::hint::black_box(&mut dst).copy_from_slice(std::hint::black_box(src));
                    }
                    Ok(Some(start.elapsed().as_secs_f64() / s.copies as f64))
                };
                let barrier = |c: &Collectives<ThreadCommunicator>| c.barrier().map_err(collective);
                rank_samples(&mut c, n, &vs, s, memcpy, barrier)
            })
            .map_err(|e| collective(e).into_inner())?;
            let ok = first_failure(results)?;
            let memcpy = ok[0]
                .reference
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let memcpy_gbps = bytes as f64 / memcpy / 1e9;
            for (i, name) in names.iter().enumerate() {
                let t = best_of_slowest(ok.iter().map(|r| r.variants[i].as_slice()));
                let busbw = bytes as f64 / t * bus_factor(Collective::AllReduce, p) / 1e9;
                sink.record(&Record {
                    suite: SUITE.name,
                    kernel: name,
                    elements: n,
                    seconds: t,
                    gbps: busbw,
                    reference: "memcpy",
                    ratio: busbw / memcpy_gbps,
                    reference_seconds: memcpy,
                    reference_gbps: memcpy_gbps,
                })?;
            }
        }
    }
    Ok(())
}

/// Whether this process was started by `mpirun` (Open MPI, or a PMI/PMIx
/// launcher such as MPICH's Hydra).
#[cfg(feature = "mpi")]
pub(crate) fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

#[cfg(not(feature = "mpi"))]
fn mpi_transport(_plan: &Plan, _sink: &mut dyn Sink) -> Result<(), BenchError> {
    Err(BenchError::Unavailable(
        "--transport mpi needs a tessera built with `--features mpi` (cargo build --release \
         --features mpi), launched by mpirun: `mpirun -n 2 target/release/tessera bench \
         allreduce --transport mpi` (see scripts/allreduce-vs-mpi.sh)"
            .to_owned(),
    ))
}

#[cfg(feature = "mpi")]
fn mpi_transport(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    use ::mpi::collective::{CommunicatorCollectives, SystemOperation};
    use tessera_collectives::mpi::{self as tmpi, MpiCommunicator};

    if !launched_by_mpirun() {
        return Err(BenchError::Unavailable(
            "--transport mpi: this process was not launched by mpirun (no OMPI_COMM_WORLD_SIZE, \
             PMI_SIZE or PMIX_RANK in the environment); run `mpirun -n 2 target/release/tessera \
             bench allreduce --transport mpi` (see scripts/allreduce-vs-mpi.sh)"
                .to_owned(),
        ));
    }
    let universe = tmpi::initialize().ok_or_else(|| {
        BenchError::Unavailable("--transport mpi: MPI was already initialised".to_owned())
    })?;
    let world = universe.world();
    let comm = MpiCommunicator::world(&universe);
    let (rank, p) = (comm.rank(), comm.size());
    let mut c = Collectives::new(comm);
    if rank == 0 {
        sink.start(&format!(
            "allreduce, MPI transport: f32 Sum in place, {p} MPI processes; best of {} samples \
             after MPI_Barrier, time = slowest rank; busbw = algbw x 2(p-1)/p; ref \
             MPI_Allreduce = the MPI library's MPI_SUM out of place from the same buffer, timed \
             in the same run; ratio = MPI_Allreduce time / ours; ring_chunked = the ring as \
             calls on slices of p x {} KiB{}",
            if plan.quick { "5" } else { "5 to 10" },
            MESSAGE_BYTES >> 10,
            build_note(),
        ))?;
    }
    for n in sizes(plan) {
        let bytes = n * 4;
        let vs = variants(n, p);
        let s = Sampling::new(plan.quick, bytes, p);
        let mut out = try_zeroed::<f32>(n)?;
        let mut checked = false;
        let reference = |src: &[f32]| -> RefSample {
            world.barrier();
            let start = Instant::now();
            for _ in 0..s.calls {
                world.all_reduce_into(src, &mut out[..], SystemOperation::sum());
            }
            let t = start.elapsed().as_secs_f64() / s.calls as f64;
            // The warm-up call's input is all ones.
            if !checked {
                checked = true;
                let expected = p as f32;
                if let Some(i) = out.iter().position(|&x| x != expected) {
                    return Err(Failed::Own(BenchError::Collective(format!(
                        "MPI_Allreduce: rank {rank} holds {} at element {i} of {n}, \
                         expected {expected}",
                        out[i]
                    ))));
                }
            }
            Ok(Some(t))
        };
        let barrier = |_: &Collectives<MpiCommunicator>| {
            world.barrier();
            Ok(())
        };
        let times =
            rank_samples(&mut c, n, &vs, s, reference, barrier).map_err(Failed::into_inner)?;
        let slowest = slowest_samples(&world, &times);
        if rank == 0 {
            mpi_records(sink, (n, p, s.samples), &vs, &slowest)?;
        }
    }
    drop(c);
    drop(universe);
    Ok(())
}

/// Each sample's time on the slowest rank: `times`' variants then its
/// reference, element-wise max over the ranks.
#[cfg(feature = "mpi")]
fn slowest_samples(
    world: &impl ::mpi::collective::CommunicatorCollectives,
    times: &RankTimes,
) -> Vec<f64> {
    use ::mpi::collective::SystemOperation;
    let local: Vec<f64> = times
        .variants
        .iter()
        .chain([&times.reference])
        .flatten()
        .copied()
        .collect();
    let mut slowest = vec![0.0f64; local.len()];
    world.all_reduce_into(&local[..], &mut slowest[..], SystemOperation::max());
    slowest
}

/// The MPI rows of `n` elements over `p` ranks from the slowest ranks'
/// `samples` per variant (the reference last): best of each, as a ratio
/// to MPI_Allreduce's.
#[cfg(feature = "mpi")]
fn mpi_records(
    sink: &mut dyn Sink,
    (n, p, per): (usize, usize, usize),
    vs: &[Variant],
    slowest: &[f64],
) -> Result<(), BenchError> {
    let bytes = n * 4;
    let best = |i: usize| {
        slowest[i * per..(i + 1) * per]
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    };
    let factor = bus_factor(Collective::AllReduce, p);
    let t_ref = best(vs.len());
    let ref_busbw = bytes as f64 / t_ref * factor / 1e9;
    for (i, &v) in vs.iter().enumerate() {
        let t = best(i);
        sink.record(&Record {
            suite: SUITE.name,
            kernel: kernel_name(v, p, true),
            elements: n,
            seconds: t,
            gbps: bytes as f64 / t * factor / 1e9,
            reference: "MPI_Allreduce",
            ratio: t_ref / t,
            reference_seconds: t_ref,
            reference_gbps: ref_busbw,
        })?;
    }
    Ok(())
}

/// An nccl-tests-like table for people: size, count, ranks, algorithm,
/// time, algbw, busbw, then the reference and the ratio, and on `auto`'s
/// rows its time over the best algorithm's at the same size and ranks.
pub(crate) struct NcclTable<W: Write> {
    out: W,
    /// The fastest of the four algorithms so far: where (ranks, elements,
    /// over MPI), and its seconds.
    best: Option<((usize, usize, bool), f64)>,
}

impl<W: Write> NcclTable<W> {
    pub(crate) const fn new(out: W) -> Self {
        Self { out, best: None }
    }

    fn line(&mut self, text: &str) -> Result<(), BenchError> {
        writeln!(self.out, "{text}").map_err(|e| BenchError::Output(e.kind()))?;
        self.out.flush().map_err(|e| BenchError::Output(e.kind()))
    }

    /// Notes record `r` of `label` at `at`; for `auto`, its time over the
    /// best algorithm's there (`None` if none was measured).
    fn versus_best(&mut self, label: &str, at: (usize, usize, bool), seconds: f64) -> Option<f64> {
        let best = self.best.filter(|(w, _)| *w == at).map(|(_, t)| t);
        if Algorithm::ALL
            .iter()
            .any(|&a| Variant::Use(a).label() == label)
        {
            self.best = Some((at, best.map_or(seconds, |t| t.min(seconds))));
            return None;
        }
        if label != Variant::Auto.label() {
            return None;
        }
        best.map(|t| seconds / t)
    }
}

/// `(variant label, ranks, over MPI)` from a [`kernel_name`].
fn parse_kernel(kernel: &str) -> Option<(&str, usize, bool)> {
    let rest = kernel.strip_prefix("allreduce_")?;
    let (rest, mpi) = match rest.strip_suffix("_mpi") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let (label, p) = rest.rsplit_once("_p")?;
    Some((label, p.parse().ok()?, mpi))
}

impl<W: Write> Sink for NcclTable<W> {
    fn start(&mut self, heading: &str) -> Result<(), BenchError> {
        self.line(&format!("{heading}\n"))?;
        self.line(&format!(
            "{:>12} {:>10} {:>5}  {:<32} {:>11} {:>7} {:>7}   {:<13} {:>11} {:>8} {:>7} {:>9}",
            "size",
            "count",
            "ranks",
            "algorithm",
            "time",
            "algbw",
            "busbw",
            "reference",
            "ref time",
            "ref",
            "ratio",
            "auto/best"
        ))?;
        self.line(&format!(
            "{:>12} {:>10} {:>5}  {:<32} {:>11} {:>7} {:>7}   {:<13} {:>11} {:>8} {:>7} {:>9}",
            "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "", ""
        ))
    }

    fn record(&mut self, r: &Record) -> Result<(), BenchError> {
        let (label, p, mpi) = parse_kernel(r.kernel).unwrap_or((r.kernel, 0, false));
        let versus = self
            .versus_best(label, (p, r.elements, mpi), r.seconds)
            .map_or_else(String::new, |x| format!("{x:.2}x"));
        let mut algorithm = label.to_owned();
        if label == "auto"
            && let Some(a) = auto_choice(p, r.elements, mpi)
        {
            let _ = write!(algorithm, " ({})", Variant::Use(a).label());
        }
        if mpi {
            algorithm.push_str(" [mpi]");
        }
        let factor = bus_factor(Collective::AllReduce, p);
        let algbw = if factor > 0.0 { r.gbps / factor } else { 0.0 };
        self.line(&format!(
            "{:>12} {:>10} {:>5}  {:<32} {:>11.2} {:>7.2} {:>7.2}   {:<13} {:>11.2} {:>8.2} {:>6.2}x {versus:>9}",
            r.elements * 4,
            r.elements,
            p,
            algorithm,
            r.seconds * 1e6,
            algbw,
            r.gbps,
            r.reference,
            r.reference_seconds * 1e6,
            r.reference_gbps,
            r.ratio
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_parse_back() {
        for (v, p, mpi) in [
            (Variant::Use(Algorithm::Ring), 2, false),
            (Variant::Use(Algorithm::HalvingDoubling), 4, true),
            (Variant::RingChunked, 16, false),
            (Variant::Auto, 3, true),
            (Variant::OrderFree, 8, false),
        ] {
            assert_eq!(
                parse_kernel(kernel_name(v, p, mpi)),
                Some((v.label(), p, mpi))
            );
        }
        assert_eq!(parse_kernel("f32_to_f16_rn"), None);
    }

    #[test]
    fn samples_never_overflow_f32() {
        for p in 1..=64usize {
            for bytes in [4, 4096, 1 << 20] {
                let s = Sampling::new(false, bytes, p);
                assert!(s.calls >= 1);
                assert!((p as f64).powf(s.calls as f64) < 2f64.powi(100), "p {p}");
            }
        }
    }

    #[test]
    fn the_table_gives_autos_time_over_the_best_algorithms() {
        let mut table = NcclTable::new(Vec::new());
        let record = |v: Variant, p: usize, seconds: f64| Record {
            suite: SUITE.name,
            kernel: kernel_name(v, p, false),
            elements: 1024,
            seconds,
            gbps: 1.0,
            reference: "memcpy",
            ratio: 1.0,
            reference_seconds: 1.0,
            reference_gbps: 1.0,
        };
        let times = [(Algorithm::Ring, 4.0), (Algorithm::BidirectionalRing, 3.0)];
        for (a, t) in times {
            table.record(&record(Variant::Use(a), 2, t)).unwrap();
        }
        table.record(&record(Variant::Auto, 2, 3.3)).unwrap();
        table.record(&record(Variant::RingChunked, 2, 1.0)).unwrap();
        // Another rank count: the best so far does not carry over.
        table.record(&record(Variant::Auto, 4, 2.0)).unwrap();
        let text = String::from_utf8(table.out).unwrap();
        // The last two columns: ref GB/s and ratio, or ratio and auto/best.
        let last: Vec<[&str; 2]> = text
            .lines()
            .map(|l| {
                let mut w = l.split_whitespace().rev();
                let last = w.next().unwrap();
                [w.next().unwrap(), last]
            })
            .collect();
        assert_eq!(last[0], ["1.00", "1.00x"], "{text}");
        assert_eq!(last[2], ["1.00x", "1.10x"], "auto: 3.3 / 3.0\n{text}");
        assert_eq!(
            last[3],
            ["1.00", "1.00x"],
            "ring_chunked is not an algorithm\n{text}"
        );
        assert_eq!(
            last[4],
            ["1.00", "1.00x"],
            "no algorithm at 4 ranks\n{text}"
        );
    }

    #[test]
    fn the_slowest_rank_of_the_best_sample() {
        let a = [3.0, 1.0, 2.0];
        let b = [1.0, 4.0, 2.5];
        assert_eq!(best_of_slowest([&a[..], &b[..]].into_iter()), 2.5);
    }
}
