//! Tile-parallel stochastic rounding of a large f32 tensor to f16 or
//! bf16, bitwise equal to one call of
//! [`f32_to_half_sr_slice`](tessera_core::fp::f32_to_half_sr_slice).

use core::marker::PhantomData;
use std::sync::Arc;

use tessera_core::fp::{self, HalfFloat, Stochastic, bf16, f16};

use crate::ipu::{
    Access, Codelet, DType, FieldSpec, Graph, GraphError, IpuSpec, Kernel, Mapping, Program,
    Scalar, TensorId, TensorSlice, VertexCycles, VertexIo,
};

/// Converts a piece with `first_index` = its position in the tensor.
#[derive(Debug)]
struct ConvertSr<H> {
    sr: Stochastic,
    fields: [FieldSpec; 2],
    _h: PhantomData<fn() -> H>,
}

impl<H: HalfFloat + Scalar> Codelet for ConvertSr<H> {
    fn name(&self) -> &str {
        "convert_sr"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::ConvertSr);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let first_index = io.start(1);
        let [src, dst] = io.many([0, 1]);
        fp::f32_to_half_sr_slice(
            src.into_slice::<f32>(),
            dst.into_slice::<H>(),
            self.sr,
            first_index,
        );
    }
}

/// Adds the conversion of f32 tensor `src` into `dst` (f16 or bf16, of
/// the same length) with stochastic rounding `sr`: one vertex per
/// interval of `dst`, on its tile, over all six workers. If `src` is
/// mapped differently, an exchange first brings its elements to `dst`'s
/// tiles (into a staging tensor mapped like `dst`). The result is bitwise
/// `f32_to_half_sr_slice(src, dst, sr, 0)` for any mappings.
///
/// # Errors
/// [`GraphError::FieldType`] if `src` is not f32 or `dst` not f16/bf16,
/// [`GraphError::CopyMismatch`] for different lengths, and the graph's
/// errors.
///
/// ```
/// use core::num::NonZeroU64;
/// use tessera_core::fp::{self, Overflow, Stochastic, f16};
/// use tessera_core::rng::RandomStream;
/// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, GraphError, Mapping, Target};
/// use tessera_sim::kernels::convert_sr;
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() }).unwrap();
/// let mut g = Graph::new(Target::single(spec));
/// let src = g.add_tensor("x", DType::F32, &[300], Mapping::linear(NonZeroU64::new(64).unwrap())).unwrap();
/// // Mapped differently: the program exchanges first.
/// let dst = g.add_tensor("h", DType::F16, &[300], Mapping::linear(NonZeroU64::new(7).unwrap())).unwrap();
/// let sr = Stochastic::new(RandomStream::new(11, 3), Overflow::Saturate);
/// let short = g.add_tensor("s", DType::F16, &[299], Mapping::one_tile(0, 299)).unwrap();
/// assert_eq!(convert_sr(&mut g, "bad", src, short, sr), Err(GraphError::CopyMismatch { copy: 0 }));
/// let program = convert_sr(&mut g, "convert", src, dst, sr).unwrap();
///
/// let mut e = Engine::new(g, program, EngineOptions::default()).unwrap();
/// let x: Vec<f32> = (0..300).map(|i| 1.0 + i as f32 * 1e-4).collect();
/// e.write_tensor(src, &x).unwrap();
/// e.run();
/// // Bitwise one call of the core kernel.
/// let mut want = vec![f16::ZERO; 300];
/// fp::f32_to_half_sr_slice(&x, &mut want, sr, 0);
/// assert_eq!(e.read_tensor::<f16>(dst).unwrap(), want);
/// ```
pub fn convert_sr(
    graph: &mut Graph,
    name: &str,
    src: TensorId,
    dst: TensorId,
    sr: Stochastic,
) -> Result<Program, GraphError> {
    if graph.dtype(src) != DType::F32 {
        return Err(GraphError::FieldType {
            field: 0,
            expected: DType::F32,
            got: graph.dtype(src),
        });
    }
    if graph.len(src) != graph.len(dst) {
        return Err(GraphError::CopyMismatch { copy: 0 });
    }
    let codelet: Arc<dyn Codelet> = match graph.dtype(dst) {
        DType::F16 => codelet::<f16>(sr),
        DType::Bf16 => codelet::<bf16>(sr),
        other => {
            return Err(GraphError::FieldType {
                field: 1,
                expected: DType::F16,
                got: other,
            });
        }
    };
    let mut programs = Vec::new();
    let input = if graph.mapping(src) == graph.mapping(dst) {
        src
    } else {
        let len = graph.len(src);
        let staging = graph.add_tensor(
            &format!("{name}.staging"),
            DType::F32,
            &[len],
            Mapping::Like(dst),
        )?;
        let ex = graph.add_exchange(
            &format!("{name}.gather"),
            &[(graph.all(src), graph.all(staging))],
        )?;
        programs.push(Program::Exchange(ex));
        staging
    };
    let cs = graph.add_compute_set(name);
    for i in graph.mapping(dst) {
        graph.add_vertex(
            cs,
            i.tile,
            codelet.clone(),
            &[
                TensorSlice::new(input, i.range.clone()),
                TensorSlice::new(dst, i.range),
            ],
        )?;
    }
    programs.push(Program::Execute(cs));
    Ok(Program::Sequence(programs))
}

fn codelet<H: HalfFloat + Scalar>(sr: Stochastic) -> Arc<dyn Codelet> {
    Arc::new(ConvertSr::<H> {
        sr,
        fields: [
            FieldSpec::new(DType::F32, Access::Read),
            FieldSpec::new(H::DTYPE, Access::Write),
        ],
        _h: PhantomData,
    })
}
