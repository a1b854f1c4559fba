//! Layers over pipeline stages: contiguous, balanced.

use core::ops::Range;

/// Cuts items `0..n` (`n = times.len() = memory.len()`) into `parts`
/// contiguous non-empty ranges minimising the largest range's cost, a
/// range's cost being the larger of its share of the total time and its
/// share of the total memory. Ties go to the earliest cut. `parts` must be
/// between 1 and `n`.
pub(crate) fn split(times: &[f64], memory: &[f64], parts: usize) -> Vec<Range<usize>> {
    let n = times.len();
    debug_assert!(memory.len() == n && (1..=n).contains(&parts));
    let prefix = |v: &[f64]| {
        let mut p = vec![0.0; v.len() + 1];
        for (i, x) in v.iter().enumerate() {
            p[i + 1] = p[i] + x;
        }
        p
    };
    let (pt, pm) = (prefix(times), prefix(memory));
    let share = |p: &[f64], i: usize, j: usize| {
        let total = p[n];
        if total > 0.0 {
            (p[j] - p[i]) / total
        } else {
            0.0
        }
    };
    let cost = |i: usize, j: usize| share(&pt, i, j).max(share(&pm, i, j));
    // best[k][j]: the cheapest split of 0..j into k + 1 ranges; from[k][j]
    // where its last range starts.
    let mut best = vec![vec![f64::INFINITY; n + 1]; parts];
    let mut from = vec![vec![0usize; n + 1]; parts];
    for (j, b) in best[0].iter_mut().enumerate().skip(1) {
        *b = cost(0, j);
    }
    for k in 1..parts {
        for j in k + 1..=n {
            for i in k..j {
                let c = best[k - 1][i].max(cost(i, j));
                if c < best[k][j] {
                    best[k][j] = c;
                    from[k][j] = i;
                }
            }
        }
    }
    let mut ranges = Vec::with_capacity(parts);
    let mut end = n;
    for k in (0..parts).rev() {
        let start = if k == 0 { 0 } else { from[k][end] };
        ranges.push(start..end);
        end = start;
    }
    ranges.reverse();
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_layers_split_evenly() {
        let t = vec![1.0; 8];
        assert_eq!(split(&t, &t, 4), [0..2, 2..4, 4..6, 6..8]);
        assert_eq!(split(&t, &t, 1), vec![0..8; 1]);
        assert_eq!(split(&t, &t, 8).len(), 8);
    }

    #[test]
    fn a_heavy_layer_gets_a_stage_of_its_own() {
        let t = [1.0, 1.0, 6.0, 1.0, 1.0];
        let r = split(&t, &[0.0; 5], 3);
        assert_eq!(r, [0..2, 2..3, 3..5]);
        // Memory counts as much as time: with 8 of 12 memory units in the
        // first layer, [0..2, 2..5] costs max(0.75, 0.6) and [0..1, 1..5]
        // max(0.67, 0.8).
        let m = [8.0, 1.0, 1.0, 1.0, 1.0];
        let r = split(&[1.0; 5], &m, 2);
        assert_eq!(r, [0..2, 2..5]);
        let r = split(&[0.0; 5], &m, 2);
        assert_eq!(r, [0..1, 1..5]);
    }
}
