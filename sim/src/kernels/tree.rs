//! A tree of exact partial sums over the exchange.
//!
//! Contributions are rows of `sums` [`ExactSum`]s, each stored as its
//! [`ExactSum::LIMBS`] `i64` limbs, one row per contributing vertex, on
//! the vertex's tile. With fan-in `f`, level `k` (stride `s = f^k`) has
//! every row `r` with `r % (s f) == 0` receive the rows `r + s, r + 2s,
//! ..., r + (f - 1) s` over the exchange into its inbox and merge them
//! into its own (one exchange phase and one compute phase per level):
//!
//! ```text
//! f = 2, 6 rows:   level 0: 0 <- 1   2 <- 3   4 <- 5
//!                  level 1: 0 <- 2
//!                  level 2: 0 <- 4          the total is in row 0
//! ```
//!
//! Merging exact sums is exact, so the total is bitwise the same for any
//! number of rows, any fan-in and any order. The total can then be
//! broadcast to any tiles in one exchange (the root's tile sends it once).
//! On hardware one would exchange f32 partials (12 bytes for LAMB's three
//! sums); exchanging the exact accumulators (104 bytes per sum) is what
//! makes the result independent of the split, and the exchange is charged
//! for every byte of them.

use std::sync::Arc;

use tessera_core::kernels::ExactSum;

use crate::ipu::{
    Access, Codelet, DType, FieldSpec, Graph, GraphError, Interval, IpuSpec, Kernel, Mapping,
    Program, TensorId, TensorSlice, Tile, VertexCycles, VertexIo,
};

/// Limbs per exact sum.
pub const LIMBS: u64 = ExactSum::LIMBS as u64;

/// Merges `children` rows of `sums` exact sums into a row.
#[derive(Debug)]
struct MergeRows {
    sums: usize,
    fields: [FieldSpec; 2],
}

impl Codelet for MergeRows {
    fn name(&self) -> &str {
        "tree.merge"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let merges = lens[1] / LIMBS;
        VertexCycles::Worker(spec.costs().get(Kernel::MergeExact).thread_cycles(merges))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let [row, inbox] = io.many([0, 1]);
        let row = row.into_slice::<i64>();
        let inbox = inbox.into_slice::<i64>();
        let width = self.sums * ExactSum::LIMBS;
        for j in 0..self.sums {
            let at = j * ExactSum::LIMBS..(j + 1) * ExactSum::LIMBS;
            let mut sum = ExactSum::from_limbs(row[at.clone()].try_into().expect("limbs"));
            for child in inbox.chunks_exact(width) {
                sum.merge(&ExactSum::from_limbs(
                    child[at.clone()].try_into().expect("limbs"),
                ));
            }
            row[at].copy_from_slice(&sum.limbs());
        }
    }
}

/// A tree built by [`build`].
#[derive(Clone, Debug)]
pub struct Tree {
    /// The rows: `rows * sums * LIMBS` i64, row `r` on `tiles[r]`.
    pub rows: TensorId,
    /// Its levels: for each, an exchange then a compute set.
    pub program: Program,
    /// The tile holding the total (row 0).
    pub root: Tile,
}

/// Adds the rows tensor (`tiles.len()` rows of `sums` exact sums, row `r`
/// on `tiles[r]`) and the tree that merges them into row 0 with fan-in
/// `fan_in` (at least 2).
///
/// # Errors
/// As [`Graph::add_tensor`], [`Graph::add_exchange`] and
/// [`Graph::add_vertex`].
///
/// # Panics
/// If `tiles` is empty or `fan_in < 2`.
///
/// ```
/// use tessera_core::kernels::ExactSum;
/// use tessera_sim::ipu::{Engine, EngineOptions, Graph, Program, Target};
/// use tessera_sim::kernels::tree::{self, LIMBS};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 3, ..IpuParams::default() }).unwrap();
/// let mut g = Graph::new(Target::single(spec));
/// // Three rows of one exact sum, on tiles 2, 0 and 1, fan-in 2.
/// let t = tree::build(&mut g, "sum", &[2, 0, 1], 1, 2).unwrap();
/// assert_eq!(t.root, 2);
/// assert_eq!(g.shape(t.rows), [3, LIMBS]);
/// let mut e = Engine::new(g, t.program.clone(), EngineOptions::default()).unwrap();
/// let rows: Vec<i64> = [1e30f32, 1.0, -1e30]
///     .iter()
///     .flat_map(|&x| {
///         let mut s = ExactSum::new();
///         s.add(x);
///         s.limbs()
///     })
///     .collect();
/// e.write_tensor(t.rows, &rows).unwrap();
/// e.run();
/// // Row 0 holds the exact total: f32 addition in any order would give 0.
/// let row0 = e.read_tensor::<i64>(t.rows).unwrap()[..LIMBS as usize].to_vec();
/// assert_eq!(ExactSum::from_limbs(row0.try_into().unwrap()).to_f32(), 1.0);
/// ```
pub fn build(
    graph: &mut Graph,
    name: &str,
    tiles: &[Tile],
    sums: usize,
    fan_in: usize,
) -> Result<Tree, GraphError> {
    assert!(!tiles.is_empty(), "a tree needs at least one row");
    assert!(fan_in >= 2, "a tree's fan-in is at least 2");
    let width = sums as u64 * LIMBS;
    let n = tiles.len();
    let row_map: Vec<Interval> = tiles
        .iter()
        .enumerate()
        .map(|(r, &t)| Interval::new(t, r as u64 * width..(r as u64 + 1) * width))
        .collect();
    let rows = graph.add_tensor(
        &format!("{name}.rows"),
        DType::I64,
        &[n as u64, width],
        Mapping::Explicit(row_map),
    )?;
    // Inbox slots: fan_in - 1 per row that is ever a parent, reused by
    // every level.
    let parents: Vec<usize> = (0..n).step_by(fan_in).filter(|&r| r + 1 < n).collect();
    let slots = (fan_in - 1) as u64 * width;
    let mut programs = Vec::new();
    if !parents.is_empty() {
        let inbox_map: Vec<Interval> = parents
            .iter()
            .enumerate()
            .map(|(k, &r)| Interval::new(tiles[r], k as u64 * slots..(k as u64 + 1) * slots))
            .collect();
        let inbox = graph.add_tensor(
            &format!("{name}.inbox"),
            DType::I64,
            &[parents.len() as u64, slots],
            Mapping::Explicit(inbox_map),
        )?;
        let merge: Arc<dyn Codelet> = Arc::new(MergeRows {
            sums,
            fields: [
                FieldSpec::new(DType::I64, Access::ReadWrite),
                FieldSpec::new(DType::I64, Access::Read),
            ],
        });
        let row = |r: usize| TensorSlice::new(rows, r as u64 * width..(r as u64 + 1) * width);
        let mut stride = 1;
        let mut level = 0;
        while stride < n {
            let mut copies = Vec::new();
            let mut merges = Vec::new();
            for r in (0..n).step_by(stride * fan_in) {
                let children: Vec<usize> = (1..fan_in)
                    .map(|c| r + c * stride)
                    .take_while(|&c| c < n)
                    .collect();
                if children.is_empty() {
                    continue;
                }
                let k = parents.binary_search(&r).expect("a parent row");
                let base = k as u64 * slots;
                for (slot, &c) in children.iter().enumerate() {
                    let at = base + slot as u64 * width;
                    copies.push((row(c), TensorSlice::new(inbox, at..at + width)));
                }
                let used = children.len() as u64 * width;
                merges.push((r, TensorSlice::new(inbox, base..base + used)));
            }
            let ex = graph.add_exchange(&format!("{name}.level{level}"), &copies)?;
            let cs = graph.add_compute_set(&format!("{name}.merge{level}"));
            for (r, slots) in merges {
                graph.add_vertex(cs, tiles[r], merge.clone(), &[row(r), slots])?;
            }
            programs.push(Program::Exchange(ex));
            programs.push(Program::Execute(cs));
            stride *= fan_in;
            level += 1;
        }
    }
    Ok(Tree {
        rows,
        program: Program::Sequence(programs),
        root: tiles[0],
    })
}

/// Adds a tensor with one copy of the tree's total (row 0, `sums` exact
/// sums) on each of `to` (distinct tiles), and the exchange that
/// broadcasts it. Returns the tensor and the exchange program.
///
/// # Errors
/// As [`Graph::add_tensor`] and [`Graph::add_exchange`].
///
/// ```
/// use tessera_core::kernels::ExactSum;
/// use tessera_sim::ipu::{Engine, EngineOptions, Graph, Program, Target};
/// use tessera_sim::kernels::tree::{self, LIMBS};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 3, ..IpuParams::default() }).unwrap();
/// let mut g = Graph::new(Target::single(spec));
/// // Three rows of one exact sum, on tiles 2, 0 and 1, fan-in 2.
/// let t = tree::build(&mut g, "sum", &[2, 0, 1], 1, 2).unwrap();
/// let (totals, send) = tree::broadcast(&mut g, "sum", &t, 1, &[0, 1]).unwrap();
/// assert_eq!(g.shape(totals), [2, LIMBS]);
/// let program = Program::sequence([t.program.clone(), send]);
/// let mut e = Engine::new(g, program, EngineOptions::default()).unwrap();
/// let mut rows = Vec::new();
/// for x in [0.5f32, 0.25, 0.125] {
///     let mut s = ExactSum::new();
///     s.add(x);
///     rows.extend(s.limbs());
/// }
/// e.write_tensor(t.rows, &rows).unwrap();
/// e.run();
/// // Tiles 0 and 1 each hold the total.
/// let limbs = e.read_tensor::<i64>(totals).unwrap();
/// for copy in limbs.chunks(LIMBS as usize) {
///     assert_eq!(ExactSum::from_limbs(copy.try_into().unwrap()).to_f32(), 0.875);
/// }
/// ```
pub fn broadcast(
    graph: &mut Graph,
    name: &str,
    tree: &Tree,
    sums: usize,
    to: &[Tile],
) -> Result<(TensorId, Program), GraphError> {
    let width = sums as u64 * LIMBS;
    let map: Vec<Interval> = to
        .iter()
        .enumerate()
        .map(|(k, &t)| Interval::new(t, k as u64 * width..(k as u64 + 1) * width))
        .collect();
    let totals = graph.add_tensor(
        &format!("{name}.totals"),
        DType::I64,
        &[to.len() as u64, width],
        Mapping::Explicit(map),
    )?;
    let root = TensorSlice::new(tree.rows, 0..width);
    let copies: Vec<(TensorSlice, TensorSlice)> = (0..to.len() as u64)
        .map(|k| {
            (
                root.clone(),
                TensorSlice::new(totals, k * width..(k + 1) * width),
            )
        })
        .collect();
    let ex = graph.add_exchange(&format!("{name}.broadcast"), &copies)?;
    Ok((totals, Program::Exchange(ex)))
}
