//! Residual add: `out = x + y` of two matrices of the same shape in any
//! layouts, in `x`'s layout (`y`'s blocks gathered to `x`'s tiles where
//! they differ), one vertex per block, rounded to f16 in
//! [`Compute::F16`](crate::model::Compute::F16). The same vertex adds the
//! two branches' gradients where a residual block's input forks; the add's
//! own gradient is its output's, passed to both branches.

use std::sync::Arc;

use super::{Act, Builder, Copies, ModelError};
use crate::ipu::{
    Access, Codelet, DType, FieldSpec, IpuSpec, Kernel, Program, TensorSlice, VertexCycles,
    VertexIo,
};
use crate::kernels::matmul::{BlockLayout, operand_field};
use crate::model::codelets::round;

/// `out = round(x + y)`: fields `x`, `y` (read), `out` (written).
#[derive(Debug)]
struct Add {
    f16: bool,
}

const ADD_FIELDS: [FieldSpec; 3] = [
    FieldSpec::new(DType::F32, Access::Read),
    FieldSpec::new(DType::F32, Access::Read),
    FieldSpec::new(DType::F32, Access::Write),
];

impl Codelet for Add {
    fn name(&self) -> &str {
        "add"
    }

    fn fields(&self) -> &[FieldSpec] {
        &ADD_FIELDS
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::Combine);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let [x, y, out] = io.many([0, 1, 2]);
        let (x, y) = (x.into_slice::<f32>(), y.into_slice::<f32>());
        for ((o, a), b) in out.into_slice::<f32>().iter_mut().zip(x).zip(y) {
            *o = round(*a + *b, self.f16);
        }
    }
}

/// Adds `name = x + y` (`y` gathered into `x`'s layout where its blocks
/// are elsewhere or cut differently).
pub(in crate::model) fn add(
    b: &mut Builder<'_>,
    name: &str,
    x: &Act,
    y: &Act,
) -> Result<Act, ModelError> {
    let out = b.matrix(name, &x.layout)?;
    let codelet: Arc<dyn Codelet> = Arc::new(Add { f16: b.f16 });
    let cs = b.g.add_compute_set(name);
    let mut copies = Copies::new();
    for (k, blk) in x.layout.blocks().iter().enumerate() {
        if blk.elements.is_empty() {
            continue;
        }
        let (rows, cols, tile) = (blk.rows.clone(), blk.cols.clone(), blk.tile);
        let staged = format!("{name}.y{k}");
        let y_op = y.operand(false);
        let y_field = operand_field(&mut b.g, &mut copies, &staged, &y_op, rows, cols, tile)?;
        let fields = [
            TensorSlice::new(x.tensor, blk.elements.clone()),
            y_field,
            TensorSlice::new(out.tensor, blk.elements.clone()),
        ];
        b.vertex(cs, blk.tile, &codelet, &fields)?;
    }
    if !copies.is_empty() {
        b.exchange(&format!("{name}.gather"), &copies)?;
    }
    b.programs.push(Program::Execute(cs));
    Ok(out)
}

/// Runs `x + y` (row-major `[rows, cols]`) on `target`'s tiles with `x`
/// in `x_layout` and `y` in `y_layout`, `f16` rounding the sum: the sum
/// row-major.
///
/// # Errors
/// [`ModelError::InputLength`] for a slice or layout of the wrong size,
/// and the engine's errors.
///
/// ```
/// use tessera_sim::ipu::Target;
/// use tessera_sim::kernels::BlockLayout;
/// use tessera_sim::model::residual_add_on_tiles;
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// let (by_rows, one_tile) = (BlockLayout::grid(2, 2, 2, 1, 2), BlockLayout::dense(2, 2, 1));
/// let layouts = (&by_rows, &one_tile);
/// let sum = residual_add_on_tiles(Target::single(ipu), layouts, (&[1.0, 2.0, 3.0, 4.0], &[0.5; 4]), false)?;
/// assert_eq!(sum, [1.5, 2.5, 3.5, 4.5]);
/// # Ok::<(), tessera_sim::model::ModelError>(())
/// ```
pub fn residual_add_on_tiles(
    target: crate::ipu::Target,
    (x_layout, y_layout): (&BlockLayout, &BlockLayout),
    (x, y): (&[f32], &[f32]),
    f16: bool,
) -> Result<Vec<f32>, ModelError> {
    let len = x_layout.len();
    for got in [x.len(), y.len(), y_layout.len()] {
        super::check_len(got, len)?;
    }
    if (x_layout.rows(), x_layout.cols()) != (y_layout.rows(), y_layout.cols()) {
        return Err(ModelError::InputLength {
            expected: x_layout.rows(),
            got: y_layout.rows(),
        });
    }
    let (placement, link) = (super::Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, x_layout.rows());
    b.f16 = f16;
    let xa = b.matrix("x", x_layout)?;
    let ya = b.matrix("y", y_layout)?;
    let sum = add(&mut b, "sum", &xa, &ya)?;
    let mut e = b.engine()?;
    super::write_rows(&mut e, &xa, x);
    super::write_rows(&mut e, &ya, y);
    e.run();
    Ok(super::read_rows(&e, &sum))
}
