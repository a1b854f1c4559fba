//! NaN and signed zero.

use super::*;

fn special_case<T: Element>(algorithm: Algorithm, p: usize, order: Order) {
    let n = 6;
    let nan_in = T::store(f32::from_bits(0x7f80_0001), Rounding::Nearest, 0); // signalling
    let neg_nan = T::store(f32::from_bits(0xffc0_1234), Rounding::Nearest, 0);
    let inf = T::store(f32::INFINITY, Rounding::Nearest, 0);
    let ninf = T::store(f32::NEG_INFINITY, Rounding::Nearest, 0);
    let z = T::store(0.0, Rounding::Nearest, 0);
    let nz = T::store(-0.0, Rounding::Nearest, 0);
    let one = T::store(1.0, Rounding::Nearest, 0);
    // Columns: 0 a NaN on the last rank; 1 a negative NaN on rank 0;
    // 2 +inf and -inf; 3 all -0.0; 4 -0.0 and +0.0; 5 +inf and ones.
    let inputs: Vec<Vec<T>> = (0..p)
        .map(|r| {
            vec![
                if r == p - 1 { nan_in } else { one },
                if r == 0 { neg_nan } else { one },
                if r == 0 {
                    inf
                } else if r == p - 1 {
                    ninf
                } else {
                    one
                },
                nz,
                if r % 2 == 0 { nz } else { z },
                if r == p / 2 { inf } else { one },
            ]
        })
        .collect();
    let canon = T::store(f32::NAN, Rounding::Nearest, 0);
    for op in ReduceOp::ALL {
        let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n)
            .unwrap()
            .with_order(order);
        let red = Reducer::new(op);
        let mut out = inputs.clone();
        exec(&s, &red, &mut out);
        let b = &out[p / 2];
        let what = format!("{algorithm:?} {} p={p} {op:?}", T::NAME);
        assert_eq!(bits(b[0]), bits(canon), "{what}: NaN");
        assert_eq!(bits(b[1]), bits(canon), "{what}: negative NaN");
        if p > 1 && op.depends_on_order() {
            assert_eq!(bits(b[2]), bits(canon), "{what}: inf - inf");
        }
        // All -0.0: -0.0 for every op (a sum of -0.0s, -0.0 / p, max, min).
        assert_eq!(bits(b[3]), bits(nz), "{what}: -0");
        // -0.0 and +0.0 mixed: +0.0 except for Min (or a single rank's -0.0).
        let mixed = if p == 1 || op == ReduceOp::Min { nz } else { z };
        assert_eq!(bits(b[4]), bits(mixed), "{what}: mixed zeros");
        if op != ReduceOp::Min {
            assert_eq!(bits(b[5]), bits(inf), "{what}: +inf");
        }
        for (r, o) in out.iter().enumerate() {
            assert_bits_eq(o, b, &format!("{what}: rank {r} differs"));
        }
    }
}

#[test]
fn nan_and_signed_zero() {
    for p in [1, 2, 3, 4, 7, 16] {
        for algorithm in Algorithm::ALL {
            for order in [Order::Schedule, Order::Deterministic] {
                special_case::<f32>(algorithm, p, order);
                special_case::<f16>(algorithm, p, order);
                special_case::<bf16>(algorithm, p, order);
            }
        }
    }
}
