//! A transport written from the public schedule alone: ranks on threads,
//! messages over `std::sync::mpsc` channels, bodies packed as
//! [`Kind::carries`] says. Every algorithm in both orders gets bitwise
//! [`collective::execute`]'s result.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};

use tessera_core::collective::{
    self, Algorithm, Carries, Collective, CollectiveSchedule, Frontier, Kind, Op, Order, ReduceOp,
    Reducer, Span, SumTree, combine,
};
use tessera_core::fp::{Element, Overflow, Rounding, Stochastic, bf16, f16};
use tessera_core::rng::RandomStream;

/// One message: which step and span it is for, from whom, and its body.
struct Message {
    step: usize,
    from: usize,
    span: Span,
    body: Vec<u8>,
}

/// The values of `bytes`, read as `V`s.
fn read<V: bytemuck::AnyBitPattern>(bytes: &[u8]) -> Vec<V> {
    bytes
        .chunks_exact(size_of::<V>())
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

/// The span's positions below `n` of `x`, in order.
fn payload<V: Copy>(x: &[V], span: Span, n: usize) -> Vec<V> {
    span.runs_below(n).flat_map(|r| x[r].to_vec()).collect()
}

/// One rank's half of the schedule. It keeps an f32 partial of every
/// position (its own contribution widened at first) and, for messages that
/// carry frontiers, a [`Frontier`] per span.
struct Rank<'a, T> {
    s: &'a CollectiveSchedule,
    reduction: Reducer,
    rank: usize,
    tree: SumTree,
    buf: Vec<T>,
    partial: Vec<f32>,
    frontiers: HashMap<Span, Frontier>,
    early: Vec<Message>,
}

impl<T: Element> Rank<'_, T> {
    fn frontier(&mut self, span: Span) -> Frontier {
        let own = payload(&self.buf, span, self.s.len());
        self.frontiers
            .remove(&span)
            .unwrap_or_else(|| Frontier::own(&self.tree, self.rank, &own))
    }

    fn body(&mut self, span: Span, kind: Kind) -> Vec<u8> {
        let (n, op) = (self.s.len(), self.reduction.op);
        let mut body = Vec::new();
        match kind.carries(op) {
            Carries::Values => body = bytemuck::cast_slice(&payload(&self.buf, span, n)).to_vec(),
            Carries::Partial { f32: true } => {
                body = bytemuck::cast_slice(&payload(&self.partial, span, n)).to_vec();
            }
            Carries::Partial { f32: false } => {
                for x in payload(&self.partial, span, n) {
                    body.extend_from_slice(bytemuck::bytes_of(&T::store(x, Rounding::Nearest, 0)));
                }
            }
            Carries::Frontier => {
                let f = self.frontier(span);
                f.pack::<T>(&self.tree, &mut body);
                self.frontiers.insert(span, f);
            }
            Carries::Grid => unreachable!("Order::Free is tested in tessera-collectives"),
        }
        body
    }

    fn receive(&mut self, rx: &Receiver<Message>, step: usize, from: usize, span: Span) -> Vec<u8> {
        let is = |m: &Message| m.step == step && m.from == from && m.span == span;
        if let Some(i) = self.early.iter().position(is) {
            return self.early.swap_remove(i).body;
        }
        loop {
            let m = rx.recv().expect("a peer hung up");
            if is(&m) {
                return m.body;
            }
            self.early.push(m);
        }
    }

    fn apply(&mut self, span: Span, kind: Kind, body: &[u8]) {
        let (n, op) = (self.s.len(), self.reduction.op);
        match (kind.carries(op), kind) {
            (Carries::Values, _) => {
                let vals = read::<T>(body);
                for (i, v) in span.runs_below(n).flatten().zip(vals) {
                    self.buf[i] = v;
                }
            }
            (Carries::Partial { f32 }, _) => {
                let (wide, narrow) = (read::<f32>(body), read::<T>(body));
                let mut k = 0;
                for run in span.runs_below(n) {
                    let dst = &mut self.partial[run.clone()];
                    if f32 {
                        combine(op, dst, &wide[k..k + run.len()]);
                    } else {
                        combine(op, dst, &narrow[k..k + run.len()]);
                    }
                    k += run.len();
                }
            }
            (Carries::Frontier, Kind::Reduce { covers, .. }) => {
                let len = span.elements_below(n);
                let incoming = Frontier::unpack::<T>(&self.tree, covers, len, body).unwrap();
                let mut f = self.frontier(span);
                f.merge(&self.tree, op, incoming);
                self.frontiers.insert(span, f);
            }
            (Carries::Frontier, Kind::Copy) => unreachable!("a copy carries values"),
            (Carries::Grid, _) => unreachable!("Order::Free is tested in tessera-collectives"),
        }
    }

    fn finalize(&mut self, span: Span) {
        let (n, p) = (self.s.len(), self.s.size());
        let values = match self.frontiers.remove(&span) {
            Some(f) => f.total(&self.tree).expect("finalized whole").to_vec(),
            None => payload(&self.partial, span, n),
        };
        for (i, x) in span.runs_below(n).flatten().zip(values) {
            let x = self.reduction.op.finish(x, p);
            self.buf[i] = T::store(x, self.reduction.rounding, i);
        }
    }

    fn run(mut self, tx: &[Sender<Message>], rx: &Receiver<Message>) -> Vec<T> {
        for step in 0..self.s.steps() {
            let ops = self.s.ops(self.rank, step);
            for o in &ops {
                if let Op::Send { to, span, kind } = *o {
                    let body = self.body(span, kind);
                    let from = self.rank;
                    tx[to]
                        .send(Message {
                            step,
                            from,
                            span,
                            body,
                        })
                        .unwrap();
                }
            }
            for o in &ops {
                if let Op::Recv { from, span, kind } = *o {
                    let body = self.receive(rx, step, from, span);
                    self.apply(span, kind, &body);
                }
            }
            for o in &ops {
                if let Op::Finalize { span } = *o {
                    self.finalize(span);
                }
            }
        }
        self.buf
    }
}

/// Runs `s` over channels between `p` threads.
fn over_channels<T: Element + Send + Sync>(
    s: &CollectiveSchedule,
    reduction: Reducer,
    inputs: &[Vec<T>],
) -> Vec<Vec<T>> {
    let p = s.size();
    let (tx, rx): (Vec<_>, Vec<_>) = (0..p).map(|_| channel()).unzip();
    std::thread::scope(|scope| {
        let handles: Vec<_> = rx
            .into_iter()
            .enumerate()
            .map(|(rank, rx)| {
                let tx = tx.clone();
                let buf = inputs[rank].clone();
                scope.spawn(move || {
                    let partial = buf.iter().map(|x| x.load()).collect();
                    let me = Rank {
                        s,
                        reduction,
                        rank,
                        tree: SumTree::new(p),
                        buf,
                        partial,
                        frontiers: HashMap::new(),
                        early: Vec::new(),
                    };
                    me.run(&tx, &rx)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Contributions whose sums depend on the order, with a NaN and signed
/// zeros in some.
fn inputs<T: Element>(p: usize, n: usize) -> Vec<Vec<T>> {
    (0..p)
        .map(|r| {
            (0..n)
                .map(|i| {
                    let h = (r * 7919 + i * 104_729 + 13) % 2003;
                    let x = match (r, i % 17) {
                        (_, 0) => -0.0,
                        (1, 5) => f32::NAN,
                        _ => (h as f32 - 1001.0) * 0.371 * if h % 3 == 0 { 64.0 } else { 1.0 },
                    };
                    T::store(x, Rounding::Nearest, 0)
                })
                .collect()
        })
        .collect()
}

fn bits<T: Element>(x: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(x).to_vec()
}

fn check<T: Element + Send + Sync>(s: &CollectiveSchedule, reduction: Reducer) {
    let (p, n) = (s.size(), s.len());
    let inputs = inputs::<T>(p, n);
    let mut want = inputs.clone();
    let mut bufs: Vec<&mut [T]> = want.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<T>(reduction.op)];
    collective::execute(s, &reduction, &mut bufs, &mut scratch, |_| {}).unwrap();
    let got = over_channels(s, reduction, &inputs);
    for r in 0..p {
        // Only what the collective defines: the rest is unspecified.
        let defined = match s.collective() {
            Collective::ReduceScatter => s.fragment(r),
            Collective::Reduce { root } if root != r => 0..0,
            _ => 0..n,
        };
        assert_eq!(
            bits(&got[r][defined.clone()]),
            bits(&want[r][defined]),
            "{s:?} {reduction:?} {}: rank {r}",
            T::NAME
        );
    }
}

#[test]
fn a_channel_transport_gets_the_executors_bits() {
    let sr = Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(5, 1), Overflow::Saturate),
        first_index: 77,
    };
    for p in [1, 2, 3, 4, 5, 6, 8] {
        let collectives = [
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::Reduce { root: p / 2 },
            Collective::AllGather,
            Collective::Broadcast { root: p - 1 },
        ];
        for n in [0, 1, 7, 37] {
            for algorithm in Algorithm::ALL {
                for order in [Order::Schedule, Order::Deterministic] {
                    for collective in collectives {
                        let s = CollectiveSchedule::new(algorithm, collective, p, n)
                            .unwrap()
                            .with_order(order);
                        for op in ReduceOp::ALL {
                            check::<f32>(&s, Reducer::new(op));
                            check::<f16>(&s, Reducer::new(op));
                            check::<bf16>(&s, Reducer::new(op).with_rounding(sr));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn deterministic_rings_and_trees_carry_frontiers() {
    let s = CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, 6, 12)
        .unwrap()
        .with_order(Order::Deterministic);
    let mut frontiers = 0;
    for step in 0..s.steps() {
        for rank in 0..6 {
            for o in &s.ops(rank, step) {
                if let Op::Send { kind, .. } = *o
                    && kind.carries(ReduceOp::Sum) == Carries::Frontier
                {
                    frontiers += 1;
                    assert!(matches!(kind, Kind::Reduce { frontier: true, .. }));
                    assert_eq!(kind.carries(ReduceOp::Max), Carries::Partial { f32: false });
                }
            }
        }
    }
    assert!(frontiers > 0);
    let s = s.with_order(Order::Schedule);
    for step in 0..s.steps() {
        for o in &s.ops(0, step) {
            if let Op::Send { kind, .. } = *o {
                assert_ne!(kind.carries(ReduceOp::Sum), Carries::Frontier);
            }
        }
    }
}
