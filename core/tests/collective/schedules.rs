//! Schedules, checked symbolically.

use super::*;

fn mask(r: tessera_core::collective::Ranks, p: usize) -> u64 {
    r.iter(p).fold(0, |m, x| m | 1 << x)
}

fn positions(span: Span) -> impl Iterator<Item = usize> {
    span.runs().flatten()
}

fn overlap(a: Span, b: Span) -> bool {
    a.runs()
        .any(|x| b.runs().any(|y| x.start < y.end && y.start < x.end))
}

/// A schedule replayed on sets: which contributions each rank's partial
/// covers at each padded position, who holds finished values, and how
/// often each position was finalized.
struct Replay<'s> {
    s: &'s CollectiveSchedule,
    what: String,
    held: Vec<Vec<u64>>,
    done: Vec<Vec<bool>>,
    finalized: Vec<usize>,
}

impl<'s> Replay<'s> {
    /// The state before the first step.
    fn new(s: &'s CollectiveSchedule) -> Self {
        let (p, np) = (s.size(), s.padded_len());
        let what = format!(
            "{:?} {:?} p={p} n={}",
            s.algorithm(),
            s.collective(),
            s.len()
        );
        let mut held = vec![vec![0u64; np]; p];
        let mut done = vec![vec![false; np]; p];
        match s.collective() {
            Collective::AllGather => {
                for (j, d) in done.iter_mut().enumerate() {
                    d[j * s.fragment_len()..(j + 1) * s.fragment_len()].fill(true);
                }
            }
            Collective::Broadcast { root } => done[root].fill(true),
            _ => {
                for (r, h) in held.iter_mut().enumerate() {
                    h.fill(1 << r);
                }
            }
        }
        Self {
            s,
            what,
            held,
            done,
            finalized: vec![0; np],
        }
    }

    /// Sends and receives match one to one, and no rank receives where it
    /// sends.
    fn check_matching(&self, step: usize, ops: &[Vec<Op>]) {
        let what = &self.what;
        let mut recvs: Vec<(usize, usize, Span, Kind)> = Vec::new();
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                if let Op::Recv { from, span, kind } = *op {
                    assert_ne!(from, r, "{what} step {step}: rank {r} receives from itself");
                    recvs.push((from, r, span, kind));
                }
            }
        }
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                if let Op::Send { to, span, kind } = *op {
                    let k = recvs
                        .iter()
                        .position(|&m| m == (r, to, span, kind))
                        .unwrap_or_else(|| {
                            panic!("{what} step {step}: unmatched send {r}->{to} {span:?}")
                        });
                    recvs.swap_remove(k);
                    for other in o {
                        if let Op::Recv { span: rs, .. } = *other {
                            assert!(
                                !overlap(span, rs),
                                "{what} step {step}: rank {r} sends and receives {span:?}"
                            );
                        }
                    }
                }
            }
        }
        assert!(
            recvs.is_empty(),
            "{what} step {step}: unmatched receives {recvs:?}"
        );
    }

    /// Applies the step's receives against the state before the step:
    /// reductions combine exactly what the sender and receiver hold
    /// (disjoint, adjacent), copies move finished values.
    fn receive(&mut self, step: usize, ops: &[Vec<Op>]) {
        let (p, np, what) = (self.s.size(), self.s.padded_len(), &self.what);
        let (held0, done0) = (self.held.clone(), self.done.clone());
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                let Op::Recv { from, span, kind } = *op else {
                    continue;
                };
                assert!(
                    positions(span).all(|x| x < np),
                    "{what}: span beyond padding"
                );
                match kind {
                    Kind::Reduce { covers, onto, .. } => {
                        assert!(self.s.collective().reduces(), "{what}: reduce in a copy");
                        let (c, h) = (mask(covers, p), mask(onto, p));
                        assert_eq!(c & h, 0, "{what} step {step}: overlapping sets");
                        let adjacent = (covers.start + covers.len) % p == onto.start % p
                            || (onto.start + onto.len) % p == covers.start % p;
                        assert!(adjacent, "{what} step {step}: sets not adjacent");
                        for x in positions(span) {
                            assert_eq!(
                                held0[from][x], c,
                                "{what} step {step}: {from}->{r} at {x}: sender holds other"
                            );
                            assert_eq!(
                                self.held[r][x], h,
                                "{what} step {step}: {from}->{r} at {x}: receiver holds other"
                            );
                            assert!(
                                !done0[from][x] && !self.done[r][x],
                                "{what}: reduce of a finished value"
                            );
                            self.held[r][x] |= c;
                        }
                    }
                    Kind::Copy => {
                        for x in positions(span) {
                            assert!(
                                done0[from][x],
                                "{what} step {step}: {from}->{r} copies unfinished {x}"
                            );
                            self.done[r][x] = true;
                        }
                    }
                }
            }
        }
    }

    /// Applies the step's finalizations: each from all contributions.
    fn finalize(&mut self, step: usize, ops: &[Vec<Op>]) {
        let p = self.s.size();
        let full: u64 = if p == 64 { !0 } else { (1 << p) - 1 };
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                if let Op::Finalize { span } = *op {
                    for x in positions(span) {
                        assert_eq!(
                            self.held[r][x], full,
                            "{} step {step}: rank {r} finalizes {x} early",
                            self.what
                        );
                        assert!(!self.done[r][x]);
                        self.done[r][x] = true;
                        self.finalized[x] += 1;
                    }
                }
            }
        }
    }

    /// Every position finalized once and the collective's postcondition.
    fn check_result(&self) {
        let (s, what, done) = (self.s, &self.what, &self.done);
        let f = s.fragment_len();
        for x in 0..s.padded_len() {
            if s.collective().reduces() {
                let n = self.finalized[x];
                assert_eq!(n, 1, "{what}: position {x} finalized {n} times");
            }
            match s.collective() {
                Collective::AllReduce | Collective::AllGather | Collective::Broadcast { .. } => {
                    assert!(
                        done.iter().all(|d| d[x]),
                        "{what}: position {x} missing somewhere"
                    );
                }
                Collective::ReduceScatter => {
                    assert!(done[x / f][x], "{what}: {x} not at its owner");
                }
                Collective::Reduce { root } => {
                    assert!(done[root][x], "{what}: {x} not at the root")
                }
            }
        }
    }
}

/// Replays `s` on sets ([`Replay`]): sends and receives match, no rank
/// receives where it sends, reductions combine exactly what the sender and
/// receiver hold (disjoint, adjacent), copies move finished values, every
/// position is finalized once from all contributions, and the collective's
/// postcondition holds.
fn check_schedule(s: &CollectiveSchedule) {
    let mut replay = Replay::new(s);
    let mut any_op_in_last = false;
    for step in 0..s.steps() {
        let ops: Vec<Vec<Op>> = (0..s.size()).map(|r| s.ops(r, step).to_vec()).collect();
        any_op_in_last |= step + 1 == s.steps() && ops.iter().any(|o| !o.is_empty());
        replay.check_matching(step, &ops);
        replay.receive(step, &ops);
        replay.finalize(step, &ops);
    }
    // With f >= 2 no span is empty, and then steps() is tight.
    if s.fragment_len() >= 2 && s.size() > 1 {
        assert!(any_op_in_last, "{}: the last step is idle", replay.what);
    }
    replay.check_result();
}

#[test]
fn schedules_are_consistent() {
    for p in (1..=33).chain([48, 64]) {
        let ns: Vec<usize> = if p <= 17 {
            counts(p)
        } else {
            vec![p + 1, 3 * p - 1]
        };
        for algorithm in Algorithm::ALL {
            for c in collectives(p) {
                for &n in &ns {
                    let s = CollectiveSchedule::new(algorithm, c, p, n).unwrap();
                    check_schedule(&s);
                    check_schedule(&s.with_order(Order::Deterministic));
                }
            }
        }
    }
}

#[test]
fn step_counts() {
    let steps = |a, c, p| CollectiveSchedule::new(a, c, p, 100).unwrap().steps();
    for p in 2..=16usize {
        let lg = p.ilog2() as usize;
        let fold = if p.is_power_of_two() { 0 } else { 2 };
        assert_eq!(
            steps(Algorithm::Ring, Collective::AllReduce, p),
            2 * (p - 1)
        );
        assert_eq!(
            steps(Algorithm::BidirectionalRing, Collective::ReduceScatter, p),
            p - 1
        );
        assert_eq!(
            steps(Algorithm::HalvingDoubling, Collective::AllReduce, p),
            2 * lg + fold
        );
        assert_eq!(
            steps(Algorithm::HalvingDoubling, Collective::ReduceScatter, p),
            lg + fold
        );
    }
    for a in Algorithm::ALL {
        assert_eq!(steps(a, Collective::AllReduce, 1), 1);
        assert_eq!(steps(a, Collective::AllGather, 1), 0);
    }
}
