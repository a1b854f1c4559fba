//! The cycle cost of each kernel the simulator runs on tiles: the
//! [`Kernel`]s, a [`KernelCost`] in PopLibs' cycle-estimator form, and
//! the table of them an IPU has ([`KernelCosts`]; the values are the
//! presets' in `spec`).

/// The cycle cost of one kernel on one worker, in the shape of PopLibs'
/// cycle estimators: `call_cycles + ceil(n / vector_width) *
/// cycles_per_vector` worker-thread cycles for `n` elements (a worker
/// issues one instruction every `workers_per_tile` tile cycles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelCost {
    /// Fixed thread cycles per call (entry, pointer setup, exit).
    pub call_cycles: u32,
    /// Elements handled per loop iteration (at least 1).
    pub vector_width: u32,
    /// Thread cycles per loop iteration.
    pub cycles_per_vector: u32,
}

impl KernelCost {
    /// Thread cycles for `n` elements on one worker.
    ///
    /// ```
    /// use tessera_sim::ipu::KernelCost;
    ///
    /// let k = KernelCost { call_cycles: 10, vector_width: 4, cycles_per_vector: 3 };
    /// assert_eq!(k.thread_cycles(9), 10 + 3 * 3); // 3 vectors, the last partial
    /// assert_eq!(k.thread_cycles(0), 10);
    /// ```
    #[must_use]
    pub const fn thread_cycles(&self, n: u64) -> u64 {
        let width = if self.vector_width == 0 {
            1
        } else {
            self.vector_width as u64
        };
        self.call_cycles as u64 + n.div_ceil(width) * self.cycles_per_vector as u64
    }

    /// Thread cycles of the busiest worker when `n` elements are shared
    /// by `workers` workers in contiguous runs of whole vectors (the first
    /// `vectors % workers` workers take one vector more).
    ///
    /// ```
    /// use tessera_sim::ipu::KernelCost;
    ///
    /// let k = KernelCost { call_cycles: 10, vector_width: 4, cycles_per_vector: 3 };
    /// // 7 vectors over 6 workers: the busiest runs 2.
    /// assert_eq!(k.multi_thread_cycles(28, 6), 10 + 2 * 3);
    /// assert_eq!(k.multi_thread_cycles(28, 1), k.thread_cycles(28));
    /// ```
    #[must_use]
    pub const fn multi_thread_cycles(&self, n: u64, workers: u32) -> u64 {
        let width = if self.vector_width == 0 {
            1
        } else {
            self.vector_width as u64
        };
        let workers = if workers == 0 { 1 } else { workers as u64 };
        let vectors = n.div_ceil(width);
        self.call_cycles as u64 + vectors.div_ceil(workers) * self.cycles_per_vector as u64
    }
}

/// The kernels with a cost in [`KernelCosts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// f32 to f16/bf16 with stochastic rounding, per element.
    ConvertSr,
    /// LAMB phase 1 (the three partial sums of squares), per element.
    LambPartials,
    /// LAMB phase 2 (the update), per element.
    LambApply,
    /// A reduction's partial (sum of squares, dot), per element.
    ReducePartial,
    /// Merging exact sums, per sum merged.
    MergeExact,
    /// An all-reduce's element-wise combination, per element.
    Combine,
    /// A scalar bookkeeping vertex (a step counter), per element.
    Scalar,
    /// A matrix product with f16 inputs and f32 accumulation (AMP), per flop.
    MatmulF16,
    /// A matrix product in f32, per flop.
    MatmulF32,
    /// A matrix product with FP8 inputs on the FP8 units, per flop (only
    /// where [`fp8_flops_per_tile_cycle`] is not 0).
    ///
    /// [`fp8_flops_per_tile_cycle`]: super::IpuParams::fp8_flops_per_tile_cycle
    MatmulF8,
    /// Conversion between f16 (or f32) and an 8-bit float with a per-tensor
    /// scale, either way, per element.
    ConvertF8,
    /// Conversion between f16 (or f32) and OCP MX blocks, either way, per
    /// element (the block's absolute maximum and shared scale included).
    ConvertMx,
    /// Bias, f16 rounding and activation (ReLU or GELU) of a layer, per element.
    Activation,
    /// The activation's derivative times the incoming gradient, per element.
    ActivationGrad,
    /// Batch-norm statistics, normalisation or its backward pass, per element.
    BatchNorm,
    /// Softmax cross-entropy and its gradient, per logit.
    CrossEntropy,
}

impl Kernel {
    /// Every kernel, in declaration order.
    pub const ALL: [Self; 16] = [
        Self::ConvertSr,
        Self::LambPartials,
        Self::LambApply,
        Self::ReducePartial,
        Self::MergeExact,
        Self::Combine,
        Self::Scalar,
        Self::MatmulF16,
        Self::MatmulF32,
        Self::MatmulF8,
        Self::ConvertF8,
        Self::ConvertMx,
        Self::Activation,
        Self::ActivationGrad,
        Self::BatchNorm,
        Self::CrossEntropy,
    ];

    /// The field's name in [`KernelCosts`].
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    ///
    /// assert_eq!(Kernel::MatmulF16.name(), "matmul_f16");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::ConvertSr => "convert_sr",
            Self::LambPartials => "lamb_partials",
            Self::LambApply => "lamb_apply",
            Self::ReducePartial => "reduce_partial",
            Self::MergeExact => "merge_exact",
            Self::Combine => "combine",
            Self::Scalar => "scalar",
            Self::MatmulF16 => "matmul_f16",
            Self::MatmulF32 => "matmul_f32",
            Self::MatmulF8 => "matmul_f8",
            Self::ConvertF8 => "convert_f8",
            Self::ConvertMx => "convert_mx",
            Self::Activation => "activation",
            Self::ActivationGrad => "activation_grad",
            Self::BatchNorm => "batch_norm",
            Self::CrossEntropy => "cross_entropy",
        }
    }
}

/// The per-kernel cycle costs (see the [`ipu`](super) module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelCosts {
    /// [`Kernel::ConvertSr`].
    pub convert_sr: KernelCost,
    /// [`Kernel::LambPartials`].
    pub lamb_partials: KernelCost,
    /// [`Kernel::LambApply`].
    pub lamb_apply: KernelCost,
    /// [`Kernel::ReducePartial`].
    pub reduce_partial: KernelCost,
    /// [`Kernel::MergeExact`].
    pub merge_exact: KernelCost,
    /// [`Kernel::Combine`].
    pub combine: KernelCost,
    /// [`Kernel::Scalar`].
    pub scalar: KernelCost,
    /// [`Kernel::MatmulF16`].
    pub matmul_f16: KernelCost,
    /// [`Kernel::MatmulF32`].
    pub matmul_f32: KernelCost,
    /// [`Kernel::MatmulF8`].
    pub matmul_f8: KernelCost,
    /// [`Kernel::ConvertF8`].
    pub convert_f8: KernelCost,
    /// [`Kernel::ConvertMx`].
    pub convert_mx: KernelCost,
    /// [`Kernel::Activation`].
    pub activation: KernelCost,
    /// [`Kernel::ActivationGrad`].
    pub activation_grad: KernelCost,
    /// [`Kernel::BatchNorm`].
    pub batch_norm: KernelCost,
    /// [`Kernel::CrossEntropy`].
    pub cross_entropy: KernelCost,
}

impl KernelCosts {
    /// The cost of `kernel`, to change it.
    ///
    /// ```
    /// use tessera_sim::IpuParams;
    /// use tessera_sim::ipu::Kernel;
    ///
    /// let mut params = IpuParams::default();
    /// params.costs.get_mut(Kernel::ConvertF8).cycles_per_vector = 1;
    /// assert_eq!(params.costs.get(Kernel::ConvertF8).cycles_per_vector, 1);
    /// ```
    pub fn get_mut(&mut self, kernel: Kernel) -> &mut KernelCost {
        match kernel {
            Kernel::ConvertSr => &mut self.convert_sr,
            Kernel::LambPartials => &mut self.lamb_partials,
            Kernel::LambApply => &mut self.lamb_apply,
            Kernel::ReducePartial => &mut self.reduce_partial,
            Kernel::MergeExact => &mut self.merge_exact,
            Kernel::Combine => &mut self.combine,
            Kernel::Scalar => &mut self.scalar,
            Kernel::MatmulF16 => &mut self.matmul_f16,
            Kernel::MatmulF32 => &mut self.matmul_f32,
            Kernel::MatmulF8 => &mut self.matmul_f8,
            Kernel::ConvertF8 => &mut self.convert_f8,
            Kernel::ConvertMx => &mut self.convert_mx,
            Kernel::Activation => &mut self.activation,
            Kernel::ActivationGrad => &mut self.activation_grad,
            Kernel::BatchNorm => &mut self.batch_norm,
            Kernel::CrossEntropy => &mut self.cross_entropy,
        }
    }

    /// The cost of `kernel`.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Kernel;
    ///
    /// let costs = IpuSpec::MK2_GC200.costs();
    /// assert_eq!(costs.get(Kernel::MatmulF32).vector_width, 32);
    /// let mut mine = *costs;
    /// mine.get_mut(Kernel::Scalar).call_cycles = 1;
    /// assert_eq!(mine.get(Kernel::Scalar).call_cycles, 1);
    /// ```
    #[must_use]
    pub const fn get(&self, kernel: Kernel) -> KernelCost {
        match kernel {
            Kernel::ConvertSr => self.convert_sr,
            Kernel::LambPartials => self.lamb_partials,
            Kernel::LambApply => self.lamb_apply,
            Kernel::ReducePartial => self.reduce_partial,
            Kernel::MergeExact => self.merge_exact,
            Kernel::Combine => self.combine,
            Kernel::Scalar => self.scalar,
            Kernel::MatmulF16 => self.matmul_f16,
            Kernel::MatmulF32 => self.matmul_f32,
            Kernel::MatmulF8 => self.matmul_f8,
            Kernel::ConvertF8 => self.convert_f8,
            Kernel::ConvertMx => self.convert_mx,
            Kernel::Activation => self.activation,
            Kernel::ActivationGrad => self.activation_grad,
            Kernel::BatchNorm => self.batch_norm,
            Kernel::CrossEntropy => self.cross_entropy,
        }
    }
}

pub(super) const fn cost(
    call_cycles: u32,
    vector_width: u32,
    cycles_per_vector: u32,
) -> KernelCost {
    KernelCost {
        call_cycles,
        vector_width,
        cycles_per_vector,
    }
}
