//! A systems engineer's own transport driving the all-reduce schedules:
//! ranks on threads, messages over `std::sync::mpsc` channels, each body
//! packed as `Kind::carries` says (finished values, a partial sum, or a
//! frontier of partial sums in the deterministic order). Every algorithm,
//! in both orders, gets bitwise `collective::execute`'s result.
//!
//! Run with `cargo run -p tessera-collectives --example own_transport`.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};

use tessera_collectives::{Algorithm, Collective, CollectiveSchedule, Order, ReduceOp, Reducer};
use tessera_core::collective::{self, Carries, Frontier, Kind, Op, Span, SumTree, combine};

type Message = (usize, usize, Span, Vec<u8>); // step, from, span, body

/// One rank's part of an f32 Sum all-reduce of `s`, its contribution `x`.
fn rank(
    s: &CollectiveSchedule,
    me: usize,
    mut x: Vec<f32>,
    tx: &[Sender<Message>],
    rx: Receiver<Message>,
) -> Vec<f32> {
    let (n, tree, sum) = (s.len(), SumTree::new(s.size()), ReduceOp::Sum);
    let own = |x: &[f32], span: Span| {
        span.runs_below(n)
            .flat_map(|r| x[r].to_vec())
            .collect::<Vec<f32>>()
    };
    let (mut frontiers, mut early) = (HashMap::new(), Vec::new());
    for step in 0..s.steps() {
        let ops = s.ops(me, step);
        for &op in &ops {
            if let Op::Send { to, span, kind } = op {
                let body = if kind.carries(sum) == Carries::Frontier {
                    let f = frontiers
                        .remove(&span)
                        .unwrap_or_else(|| Frontier::own(&tree, me, &own(&x, span)));
                    let mut body = Vec::new();
                    f.pack::<f32>(&tree, &mut body);
                    frontiers.insert(span, f);
                    body
                } else {
                    bytemuck::cast_slice(&own(&x, span)).to_vec() // values or an f32 partial
                };
                tx[to].send((step, me, span, body)).unwrap();
            }
        }
        for &op in &ops {
            if let Op::Recv { from, span, kind } = op {
                let is = |m: &Message| (m.0, m.1, m.2) == (step, from, span);
                let body = match early.iter().position(is) {
                    Some(i) => early.swap_remove(i).3,
                    None => loop {
                        let m = rx.recv().unwrap();
                        if is(&m) {
                            break m.3;
                        }
                        early.push(m);
                    },
                };
                match (kind.carries(sum), kind) {
                    (Carries::Frontier, Kind::Reduce { covers, .. }) => {
                        let theirs =
                            Frontier::unpack::<f32>(&tree, covers, span.elements_below(n), &body)
                                .unwrap();
                        let mut f = frontiers
                            .remove(&span)
                            .unwrap_or_else(|| Frontier::own(&tree, me, &own(&x, span)));
                        f.merge(&tree, sum, theirs);
                        frontiers.insert(span, f);
                    }
                    (carries, _) => {
                        let values: Vec<f32> = body
                            .chunks_exact(4)
                            .map(bytemuck::pod_read_unaligned)
                            .collect();
                        let mut k = 0;
                        for run in span.runs_below(n) {
                            let (dst, src) = (&mut x[run.clone()], &values[k..k + run.len()]);
                            if carries == Carries::Values {
                                dst.copy_from_slice(src)
                            } else {
                                combine(sum, dst, src)
                            }
                            k += run.len();
                        }
                    }
                }
            }
        }
        for &op in &ops {
            if let Op::Finalize { span } = op
                && let Some(f) = frontiers.remove(&span)
            {
                let total = f.total(&tree).unwrap().to_vec();
                span.runs_below(n)
                    .flatten()
                    .zip(total)
                    .for_each(|(i, v)| x[i] = v);
            }
        }
    }
    x
}

fn main() {
    for (p, algorithm, order) in [3, 4, 5].into_iter().flat_map(|p| {
        Algorithm::ALL
            .into_iter()
            .flat_map(move |a| [Order::Schedule, Order::Deterministic].map(|o| (p, a, o)))
    }) {
        let n = 37;
        let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n)
            .unwrap()
            .with_order(order);
        let inputs: Vec<Vec<f32>> = (0..p)
            .map(|r| {
                (0..n)
                    .map(|i| ((r * 7919 + i * 104_729) % 2003) as f32 * 0.371 - 371.0)
                    .collect()
            })
            .collect();
        let (tx, rx): (Vec<_>, Vec<_>) = (0..p).map(|_| channel()).unzip();
        let got: Vec<Vec<f32>> = std::thread::scope(|scope| {
            let ranks: Vec<_> = rx
                .into_iter()
                .enumerate()
                .map(|(r, rx)| {
                    let (s, tx, x) = (&s, tx.clone(), inputs[r].clone());
                    scope.spawn(move || rank(s, r, x, &tx, rx))
                })
                .collect();
            ranks.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut want = inputs.clone();
        let mut bufs: Vec<&mut [f32]> = want.iter_mut().map(|b| &mut b[..]).collect();
        let mut scratch = vec![0.0f32; s.scratch_len::<f32>(ReduceOp::Sum)];
        collective::execute(
            &s,
            &Reducer::new(ReduceOp::Sum),
            &mut bufs,
            &mut scratch,
            |_| {},
        )
        .unwrap();
        let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "{algorithm:?} {order:?} over {p} ranks"
        );
    }
    println!("own transport: bitwise collective::execute, every algorithm, both orders");
}
