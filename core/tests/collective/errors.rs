//! Errors and panics.

use super::*;

#[test]
fn errors() {
    let ar = Collective::AllReduce;
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, ar, 0, 10),
        Err(Error::NoRanks)
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, ar, CollectiveSchedule::MAX_RANKS + 1, 10),
        Err(Error::TooManyRanks {
            size: CollectiveSchedule::MAX_RANKS + 1,
            max: CollectiveSchedule::MAX_RANKS
        })
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, Collective::Reduce { root: 4 }, 4, 10),
        Err(Error::RankOutOfRange { rank: 4, size: 4 })
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, Collective::Broadcast { root: 9 }, 4, 10),
        Err(Error::RankOutOfRange { rank: 9, size: 4 })
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, ar, 3, usize::MAX / 2),
        Err(Error::TooLong {
            len: usize::MAX / 2,
            size: 3
        })
    );

    let s = CollectiveSchedule::new(Algorithm::Ring, ar, 3, 4).unwrap();
    let red = Reducer::new(ReduceOp::Sum);
    let mut a = [1.0f32; 4];
    let mut b = [2.0f32; 4];
    let mut c = [3.0f32; 5];
    let mut bufs = [&mut a[..], &mut b[..]];
    assert_eq!(
        collective::execute(&s, &red, &mut bufs, &mut [], |_| {}),
        Err(Error::BufferCount {
            expected: 3,
            found: 2
        })
    );
    let mut d = [4.0f32; 4];
    let mut bufs = [&mut a[..], &mut c[..], &mut d[..]];
    assert_eq!(
        collective::execute(&s, &red, &mut bufs, &mut [], |_| {}),
        Err(Error::BufferLength {
            rank: 1,
            expected: 4,
            found: 5
        })
    );
    let mut h: Vec<Vec<f16>> = vec![vec![f16::ONE; 4]; 3];
    let mut hb: Vec<&mut [f16]> = h.iter_mut().map(|x| &mut x[..]).collect();
    let mut small = [0.0f32; 11];
    assert_eq!(
        collective::execute(&s, &red, &mut hb, &mut small, |_| {}),
        Err(Error::ScratchTooSmall {
            needed: 12,
            available: 11
        })
    );
    // Nothing was written.
    assert!(h.iter().all(|x| x.iter().all(|&v| v == f16::ONE)));
    assert_eq!(a, [1.0; 4]);
    let ins: [&[f32]; 3] = [&[1.0; 4], &[1.0; 4], &[1.0; 3]];
    let mut o: Vec<Vec<f32>> = vec![vec![0.0; 4]; 3];
    let mut ob: Vec<&mut [f32]> = o.iter_mut().map(|x| &mut x[..]).collect();
    assert_eq!(
        collective::execute_into(&s, &red, &ins, &mut ob, &mut [], |_| {}),
        Err(Error::BufferLength {
            rank: 2,
            expected: 4,
            found: 3
        })
    );
    for e in [
        Error::NoRanks,
        Error::TooManyRanks { size: 1, max: 0 },
        Error::RankOutOfRange { rank: 5, size: 4 },
        Error::TooLong { len: 1, size: 2 },
        Error::BufferCount {
            expected: 1,
            found: 2,
        },
        Error::BufferLength {
            rank: 1,
            expected: 2,
            found: 3,
        },
        Error::ScratchTooSmall {
            needed: 1,
            available: 0,
        },
    ] {
        let msg = e.to_string();
        assert!(!msg.is_empty() && !msg.ends_with('.'), "{msg}");
        let _: &dyn std::error::Error = &e;
    }
}

#[test]
#[should_panic(expected = "rank 4 of a group of 4")]
fn ops_panics_on_a_rank_outside_the_group() {
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    let _ = s.ops(4, 0);
}

#[test]
#[should_panic(expected = "step 6 of a 6-step schedule")]
fn ops_panics_on_a_step_past_the_end() {
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    let _ = s.ops(0, 6);
}

#[test]
#[should_panic(expected = "tree_sum: contribution 1 has 2 elements, out 3")]
fn tree_sum_panics_on_a_length_mismatch() {
    let mut out = [0.0f32; 3];
    tree_sum::<f32>(&[&[1.0; 3], &[1.0; 2]], &mut out);
}

#[test]
fn fragments_and_padding() {
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10).unwrap();
    assert_eq!((s.fragment_len(), s.padded_len()), (3, 12));
    assert_eq!(s.fragment(3), 9..10);
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 8, 3).unwrap();
    assert_eq!(s.fragment(2), 2..3);
    assert_eq!(s.fragment(5), 3..3);
    // Wire counts include padding, payload does not.
    let mut e = (0, 0);
    s.transfers::<f32>(ReduceOp::Sum, |t| {
        e.0 += t.elements;
        e.1 += t.payload;
    });
    assert_eq!(e, (2 * 7 * 8, 2 * 7 * 3));
    let empty =
        CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, 5, 0).unwrap();
    for step in 0..empty.steps() {
        for r in 0..5 {
            assert!(empty.ops(r, step).is_empty());
        }
    }
}
