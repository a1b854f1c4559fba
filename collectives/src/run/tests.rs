use std::time::Duration;

use tessera_core::collective::{self, Algorithm, Collective, Order, ReduceOp, Reducer, grid};
use tessera_core::fp::{Element, Rounding, f16};

use super::fold::EXPONENT_BYTES;
use super::{CollectiveSchedule, Scratch, folds_exponents, run};
use crate::comm::{Apply, Communicator, Incoming, Outgoing};
use crate::error::{CommError, Failure};
use crate::fault::Faulty;
use crate::subgroup::GroupComm;
use crate::thread::ThreadWorld;
use crate::{ReplicaGroup, Topology};

/// `inner` lending bodies only to read ([`Communicator::exchange_apply`],
/// not `exchange_mut` or `exchange_mut_many`), as MPI: folded runs over
/// more than two ranks then hold contributions aside (`scatter.rs`).
/// Counts its exchanges.
struct ReadOnly<C> {
    inner: C,
    calls: std::cell::Cell<usize>,
}

impl<C: Communicator> Communicator for ReadOnly<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
    ) -> Result<(), CommError> {
        self.calls.set(self.calls.get() + 1);
        self.inner.exchange(sends, recvs, timeout)
    }

    fn exchange_apply(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
        apply: &mut Apply<'_>,
    ) -> Result<(), CommError> {
        self.calls.set(self.calls.get() + 1);
        self.inner.exchange_apply(sends, recvs, timeout, apply)
    }

    fn fail(&self, failure: Failure) {
        self.inner.fail(failure);
    }

    fn failure(&self) -> Option<Failure> {
        self.inner.failure()
    }

    fn world_rank(&self, rank: usize) -> usize {
        self.inner.world_rank(rank)
    }

    fn context(&self) -> u16 {
        self.inner.context()
    }

    fn piece_elements(&self) -> Option<usize> {
        self.inner.piece_elements()
    }

    fn topology(&self) -> Topology {
        self.inner.topology()
    }
}

fn input<T: Element>(r: usize, len: usize) -> Vec<T> {
    (0..len)
        .map(|i| {
            // Blocks of 256 whose magnitude differs between ranks, so the
            // grid exponents are not every rank's own.
            let scale = (1 << (3 * ((r + i / 256) % 5))) as f32;
            // A few spikes, on one rank each, set some blocks' exponents
            // from a position that only one fragment or piece holds.
            let spike = if i % 61 == 0 && i % 2 == r % 2 {
                4096.0
            } else {
                1.0
            };
            let x = (((r * 7919 + i * 104_729) % 1000) as f32 / 97.0 - 5.0) * scale * spike;
            T::store(x, Rounding::Nearest, i)
        })
        .collect()
}

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
}

/// Runs `s` with messages split into pieces of `piece` elements,
/// compares every rank's specified positions with the executor's, and
/// returns the number of messages sent.
fn check<T: Element + Send + Sync>(s: &CollectiveSchedule, op: ReduceOp, piece: usize) -> usize {
    let (p, len) = (s.size(), s.len());
    let red = Reducer::new(op);
    // The block exponents' Max over the ranks, as `Collectives` all-reduces them.
    let mut exponents = vec![f32::MIN; grid::blocks(len)];
    for r in 0..p {
        let mut mine = vec![0.0f32; exponents.len()];
        grid::block_exponents(&input::<T>(r, len), &mut mine);
        for (e, m) in exponents.iter_mut().zip(mine) {
            *e = e.max(m);
        }
    }
    let exponents = if s.on_grid(op) { &exponents[..] } else { &[] };
    // Over more than two ranks, folded runs meet where the transport lends
    // mutably to many (`meet.rs`), also through `Faulty` and a `GroupComm`
    // of all ranks; through `ReadOnly` they hold contributions aside
    // (`scatter.rs`): all are checked.
    let also_lent_to_read = folds_exponents(s, op) && p > 2;
    let got = ThreadWorld::run(p, |comm| {
        let mut scratch = Scratch {
            piece,
            ..Scratch::default()
        };
        // Folded: the run takes them itself.
        let exponents = if folds_exponents(s, op) {
            &[]
        } else {
            exponents
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut x = input::<T>(comm.rank(), len);
        let traffic = run(&comm, s, &red, &mut x, 0, deadline, &mut scratch, exponents).unwrap();
        if also_lent_to_read {
            let ctx = format!("{s:?} {op:?} piece {piece}");
            let mut y = input::<T>(comm.rank(), len);
            let read_only = ReadOnly {
                inner: &comm,
                calls: 0.into(),
            };
            let t = run(&read_only, s, &red, &mut y, 1, deadline, &mut scratch, &[]).unwrap();
            assert_eq!(bits(&y), bits(&x), "{ctx}");
            assert_eq!(t, traffic, "{ctx}");
            // Through `Faulty` (no fault) in a `GroupComm` of all ranks: the
            // loans pass through, so the same bits and traffic, in fewer
            // exchanges than held aside where the ranks meet.
            let mut z = input::<T>(comm.rank(), len);
            let faulty = Faulty::new(&comm, None);
            let group = GroupComm::new(&faulty, ReplicaGroup::All).unwrap();
            let t = run(&group, s, &red, &mut z, 2, deadline, &mut scratch, &[]).unwrap();
            assert_eq!(bits(&z), bits(&x), "{ctx}");
            assert_eq!(t, traffic, "{ctx}");
            // (All-reduces meet: `meet.rs`.)
            if s.collective() == Collective::AllReduce {
                assert!(faulty.calls() < read_only.calls.get(), "{ctx}");
            } else {
                assert_eq!(faulty.calls(), read_only.calls.get(), "{ctx}");
            }
        }
        (x, traffic.messages)
    })
    .unwrap();
    let mut want: Vec<Vec<T>> = (0..p).map(|r| input(r, len)).collect();
    let mut refs: Vec<&mut [T]> = want.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<T>(op)];
    collective::execute(s, &red, &mut refs, &mut scratch, |_| {}).unwrap();
    let m = len.div_ceil(p);
    let mut messages = 0;
    for (r, got) in got.into_iter().enumerate() {
        let (got, sent) = got.unwrap();
        messages += sent;
        let at = match s.collective() {
            Collective::ReduceScatter => (r * m).min(len)..((r + 1) * m).min(len),
            Collective::Reduce { root } if root != r => 0..0,
            _ => 0..len,
        };
        assert_eq!(
            bits(&got[at.clone()]),
            bits(&want[r][at]),
            "{} {s:?} {op:?} piece {piece} rank {r}",
            T::NAME
        );
    }
    messages
}

#[test]
fn messages_in_pieces_give_the_executors_bits() {
    for p in 2..=5 {
        for algorithm in Algorithm::ALL {
            for collective in [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::Reduce { root: p - 1 },
                Collective::Broadcast { root: p / 2 },
            ] {
                for (op, order) in [
                    (ReduceOp::Sum, Order::Schedule),
                    (ReduceOp::Sum, Order::Deterministic),
                    (ReduceOp::Sum, Order::Free),
                    (ReduceOp::Max, Order::Schedule),
                ] {
                    for len in [37, 200] {
                        let s = CollectiveSchedule::new(algorithm, collective, p, len)
                            .unwrap()
                            .with_order(order);
                        let whole = check::<f32>(&s, op, len);
                        for piece in [1, 5, 16] {
                            let split = check::<f32>(&s, op, piece);
                            // Only steps carrying frontiers stay whole.
                            let frontiers = s.carries_frontiers(op);
                            assert!(split > whole || frontiers || piece > 1, "{s:?} {op:?}");
                        }
                        check::<f16>(&s, op, 7);
                    }
                }
            }
        }
    }
}

#[test]
fn folded_exponents_give_the_all_reduced_ones_bits() {
    // Two ranks: the blocks straddle the fragments (500) and the pieces.
    let both = [Algorithm::Ring, Algorithm::HalvingDoubling];
    for (algorithm, collective) in both
        .into_iter()
        .zip([Collective::AllReduce, Collective::ReduceScatter])
    {
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            let s = CollectiveSchedule::new(algorithm, collective, 2, 1000)
                .unwrap()
                .with_order(Order::Free);
            assert!(folds_exponents(&s, op));
            for piece in [1000, 100, 7] {
                check::<f32>(&s, op, piece);
            }
            check::<f16>(&s, op, 300);
        }
    }
    // More ranks: the ring's direct reduce-scatter, fragments of 333 and
    // 250 cutting blocks, pieces cutting them again.
    for (p, len) in [(3, 999), (4, 1000)] {
        for collective in [Collective::AllReduce, Collective::ReduceScatter] {
            let s = CollectiveSchedule::new(Algorithm::Ring, collective, p, len)
                .unwrap()
                .with_order(Order::Free);
            assert!(folds_exponents(&s, ReduceOp::Sum));
            for piece in [len, 100, 7] {
                check::<f32>(&s, ReduceOp::Sum, piece);
            }
            check::<f32>(&s, ReduceOp::Mean, 64);
            check::<f16>(&s, ReduceOp::Sum, 300);
        }
    }
}

#[test]
fn the_order_free_ring_sends_the_plain_rings_bytes_and_messages() {
    // The direct reduce-scatter (`scatter.rs`): only contributions travel,
    // so over more than two ranks the grid's f64 partial sums never do;
    // folded, each of its p (p - 1) messages carries 8 bytes of exponents.
    for (p, len) in [(3, 1000), (4, 1000), (5, 1000), (3, 999)] {
        let free = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, p, len)
            .unwrap()
            .with_order(Order::Free);
        let folded = folds_exponents(&free, ReduceOp::Sum);
        assert_eq!(folded, len % p == 0);
        let traffic = |order: Order| {
            let s = free.with_order(order);
            let exponents = vec![0.0f32; grid::blocks(len)];
            let exponents = if order == Order::Free && !folded {
                &exponents[..]
            } else {
                &[]
            };
            let sent = ThreadWorld::run(p, |comm| {
                let mut x = input::<f32>(comm.rank(), len);
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                let red = Reducer::new(ReduceOp::Sum);
                let mut scratch = Scratch::default();
                run(
                    &comm,
                    &s,
                    &red,
                    &mut x,
                    0,
                    deadline,
                    &mut scratch,
                    exponents,
                )
                .unwrap()
            })
            .unwrap();
            let sent: Vec<_> = sent.into_iter().map(Result::unwrap).collect();
            (
                sent.iter().map(|t| t.bytes).sum::<usize>(),
                sent.iter().map(|t| t.messages).sum::<usize>(),
            )
        };
        let (bytes, messages) = traffic(Order::Schedule);
        let extra = if folded {
            EXPONENT_BYTES * p * (p - 1)
        } else {
            0
        };
        assert_eq!(traffic(Order::Free), (bytes + extra, messages), "p {p}");
    }
}
