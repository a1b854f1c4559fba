//! One interface over the four optimizers: [`OptimizerConfig`] (data) and
//! [`Optimizer`] (validated), both closed enums.
//!
//! Why enums and not a trait: the step functions are generic over the
//! weights', gradients' and state's element types, so a trait of them
//! could not be a `dyn` object, and a program that picks its optimizer at
//! run time (a command line, a config file) would rebuild this enum
//! itself. The four kernels live in this crate, so the set is closed; the
//! number of state tensors (1, 2 or 3) is checked when a step runs.

use core::fmt;

use crate::fp::Element;

use super::error::StepError;
use super::{
    AdamW, AdamWConfig, ConfigError, Lamb, LambConfig, Lars, LarsConfig, Param, Partials,
    Precision, Sgd, SgdConfig, Step,
};

/// Any optimizer's hyperparameters.
///
/// ```
/// use tessera_core::optim::{LambConfig, OptimizerConfig};
///
/// let config = OptimizerConfig::from(LambConfig::default());
/// assert_eq!((config.name(), config.weight_decay()), ("lamb", 0.01));
/// assert_eq!(config.excluded().weight_decay(), 0.0);
/// assert_eq!(config.to_string(), "lamb");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum OptimizerConfig {
    /// SGD with momentum (PyTorch).
    Sgd(SgdConfig),
    /// AdamW (PyTorch).
    AdamW(AdamWConfig),
    /// LAMB (timm's options).
    Lamb(LambConfig),
    /// LARS (timm's options).
    Lars(LarsConfig),
}

macro_rules! each {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            OptimizerConfig::Sgd($c) => $e,
            OptimizerConfig::AdamW($c) => $e,
            OptimizerConfig::Lamb($c) => $e,
            OptimizerConfig::Lars($c) => $e,
        }
    };
}

macro_rules! rebuild {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            OptimizerConfig::Sgd($c) => OptimizerConfig::Sgd($e),
            OptimizerConfig::AdamW($c) => OptimizerConfig::AdamW($e),
            OptimizerConfig::Lamb($c) => OptimizerConfig::Lamb($e),
            OptimizerConfig::Lars($c) => OptimizerConfig::Lars($e),
        }
    };
}

impl OptimizerConfig {
    /// Its name: `sgd`, `adamw`, `lamb` or `lars`.
    ///
    /// ```
    /// use tessera_core::optim::{AdamWConfig, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::from(AdamWConfig::default()).name(), "adamw");
    /// ```
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Sgd(_) => "sgd",
            Self::AdamW(_) => "adamw",
            Self::Lamb(_) => "lamb",
            Self::Lars(_) => "lars",
        }
    }

    /// The configured (base) learning rate.
    ///
    /// ```
    /// use tessera_core::optim::{OptimizerConfig, SgdConfig};
    ///
    /// assert_eq!(OptimizerConfig::from(SgdConfig::default()).lr(), 1e-3);
    /// ```
    #[must_use]
    pub const fn lr(&self) -> f32 {
        each!(self, c => c.lr)
    }

    /// The same settings with base learning rate `lr`.
    ///
    /// ```
    /// use tessera_core::optim::{LambConfig, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::from(LambConfig::default()).with_lr(0.5).lr(), 0.5);
    /// ```
    #[must_use]
    pub const fn with_lr(self, lr: f32) -> Self {
        rebuild!(self, c => { let mut c = c; c.lr = lr; c })
    }

    /// The weight decay.
    ///
    /// ```
    /// use tessera_core::optim::{AdamWConfig, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::from(AdamWConfig::default()).weight_decay(), 0.01);
    /// ```
    #[must_use]
    pub const fn weight_decay(&self) -> f32 {
        each!(self, c => c.weight_decay)
    }

    /// The same settings with weight decay `weight_decay`.
    ///
    /// ```
    /// use tessera_core::optim::{LarsConfig, OptimizerConfig};
    ///
    /// let c = OptimizerConfig::from(LarsConfig::default()).with_weight_decay(1e-4);
    /// assert_eq!(c.weight_decay(), 1e-4);
    /// ```
    #[must_use]
    pub const fn with_weight_decay(self, weight_decay: f32) -> Self {
        rebuild!(self, c => { let mut c = c; c.weight_decay = weight_decay; c })
    }

    /// The settings for parameters excluded from weight decay and
    /// adaptation (biases and normalisation parameters).
    ///
    /// ```
    /// use tessera_core::optim::{LambConfig, OptimizerConfig};
    ///
    /// assert_eq!(OptimizerConfig::from(LambConfig::default()).excluded().weight_decay(), 0.0);
    /// ```
    #[must_use]
    pub const fn excluded(self) -> Self {
        rebuild!(self, c => c.excluded())
    }

    /// State tensors per parameter: 1 for SGD and LARS (the momentum
    /// buffer, untouched without momentum), 2 for AdamW (3 with
    /// `amsgrad`) and LAMB.
    ///
    /// ```
    /// use tessera_core::optim::{AdamWConfig, OptimizerConfig, SgdConfig};
    ///
    /// assert_eq!(OptimizerConfig::from(SgdConfig::default()).state_tensors(), 1);
    /// assert_eq!(OptimizerConfig::from(AdamWConfig { amsgrad: true, ..AdamWConfig::default() }).state_tensors(), 3);
    /// ```
    #[must_use]
    pub const fn state_tensors(&self) -> usize {
        match self {
            Self::Sgd(_) | Self::Lars(_) => 1,
            Self::AdamW(c) if c.amsgrad => 3,
            Self::AdamW(_) | Self::Lamb(_) => 2,
        }
    }

    /// Whether a step needs per-tensor statistics (the two phases of LAMB
    /// and LARS).
    ///
    /// ```
    /// use tessera_core::optim::{LambConfig, OptimizerConfig, SgdConfig};
    ///
    /// assert!(OptimizerConfig::from(LambConfig::default()).needs_statistics());
    /// assert!(!OptimizerConfig::from(SgdConfig::default()).needs_statistics());
    /// ```
    #[must_use]
    pub const fn needs_statistics(&self) -> bool {
        matches!(self, Self::Lamb(_) | Self::Lars(_))
    }
}

impl fmt::Display for OptimizerConfig {
    /// The name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<SgdConfig> for OptimizerConfig {
    fn from(c: SgdConfig) -> Self {
        Self::Sgd(c)
    }
}

impl From<AdamWConfig> for OptimizerConfig {
    fn from(c: AdamWConfig) -> Self {
        Self::AdamW(c)
    }
}

impl From<LambConfig> for OptimizerConfig {
    fn from(c: LambConfig) -> Self {
        Self::Lamb(c)
    }
}

impl From<LarsConfig> for OptimizerConfig {
    fn from(c: LarsConfig) -> Self {
        Self::Lars(c)
    }
}

/// Any validated optimizer, stepping parameters whose number of state
/// tensors is known only at run time.
///
/// ```
/// use tessera_core::optim::{AdamWConfig, Optimizer, Param, Precision, Step};
///
/// let adamw = Optimizer::new(AdamWConfig::default().into())?;
/// let (mut w, g) = (vec![1.0f32; 8], vec![0.5f32; 8]);
/// let (mut m, mut v) = (vec![0.0f32; 8], vec![0.0f32; 8]);
/// let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
/// adamw.step(Step::first(), &Precision::default(), &mut p)?;
/// assert!(w[0] < 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// SGD.
    Sgd(Sgd),
    /// AdamW.
    AdamW(AdamW),
    /// LAMB.
    Lamb(Lamb),
    /// LARS.
    Lars(Lars),
}

impl Optimizer {
    /// Validates `config`.
    ///
    /// ```
    /// use tessera_core::optim::{Optimizer, SgdConfig};
    ///
    /// assert!(Optimizer::new(SgdConfig { lr: -1.0, ..SgdConfig::default() }.into()).is_err());
    /// ```
    ///
    /// # Errors
    /// The optimizer's [`ConfigError`].
    pub fn new(config: OptimizerConfig) -> Result<Self, ConfigError> {
        Ok(match config {
            OptimizerConfig::Sgd(c) => Self::Sgd(Sgd::new(c)?),
            OptimizerConfig::AdamW(c) => Self::AdamW(AdamW::new(c)?),
            OptimizerConfig::Lamb(c) => Self::Lamb(Lamb::new(c)?),
            OptimizerConfig::Lars(c) => Self::Lars(Lars::new(c)?),
        })
    }

    /// The validated settings.
    ///
    /// ```
    /// use tessera_core::optim::{LambConfig, Optimizer, OptimizerConfig};
    ///
    /// let config = OptimizerConfig::from(LambConfig::default());
    /// assert_eq!(Optimizer::new(config)?.config(), config);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> OptimizerConfig {
        match self {
            Self::Sgd(o) => OptimizerConfig::Sgd(*o.config()),
            Self::AdamW(o) => OptimizerConfig::AdamW(*o.config()),
            Self::Lamb(o) => OptimizerConfig::Lamb(*o.config()),
            Self::Lars(o) => OptimizerConfig::Lars(*o.config()),
        }
    }

    /// See [`OptimizerConfig::state_tensors`].
    ///
    /// ```
    /// use tessera_core::optim::{LambConfig, Optimizer};
    ///
    /// assert_eq!(Optimizer::new(LambConfig::default().into())?.state_tensors(), 2);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn state_tensors(&self) -> usize {
        self.config().state_tensors()
    }

    /// See [`OptimizerConfig::needs_statistics`].
    ///
    /// ```
    /// use tessera_core::optim::{AdamWConfig, Optimizer};
    ///
    /// assert!(!Optimizer::new(AdamWConfig::default().into())?.needs_statistics());
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn needs_statistics(&self) -> bool {
        self.config().needs_statistics()
    }

    /// Phase 1 over a block-aligned piece: its partial sums (zero for SGD
    /// and AdamW, which need none).
    ///
    /// ```
    /// use tessera_core::optim::{LarsConfig, Optimizer, Param, Step};
    ///
    /// let lars = Optimizer::new(LarsConfig { weight_decay: 1e-4, ..LarsConfig::default() }.into())?;
    /// let (mut w, g, mut buf) = ([3.0f32; 4], [4.0f32; 4], [0.0f32; 4]);
    /// let partials = lars.partials(Step::first(), &mut Param::new(0, &mut w, &g, [&mut buf]))?;
    /// assert_eq!(partials.norms().g, 8.0);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// [`StepError::StateTensors`] if `N` is not
    /// [`Optimizer::state_tensors`].
    ///
    /// # Panics
    /// As the optimizer's own `partials`.
    pub fn partials<W: Element, G: Element, S: Element, const N: usize>(
        &self,
        step: Step,
        p: &mut Param<'_, W, G, S, N>,
    ) -> Result<Partials, StepError> {
        self.check::<N>(p.id)?;
        Ok(match self {
            Self::Lamb(o) => o.partials(step, &p.pick([0, 1])),
            Self::Lars(o) => o.partials(step, &p.pick([0])),
            Self::Sgd(_) | Self::AdamW(_) => Partials::default(),
        })
    }

    /// Phase 2 (the whole step for SGD and AdamW): updates a piece given
    /// the whole tensor's merged partials.
    ///
    /// ```
    /// use tessera_core::optim::{LambConfig, Optimizer, Param, Precision, Step};
    ///
    /// let lamb = Optimizer::new(LambConfig::default().into())?;
    /// let (mut w, g, mut m, mut v) = ([1.0f32; 4], [0.5f32; 4], [0.0f32; 4], [0.0f32; 4]);
    /// let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
    /// let totals = lamb.partials(Step::first(), &mut p)?;
    /// lamb.apply(Step::first(), &totals, &Precision::default(), &mut p)?;
    /// assert!(w[0] < 1.0);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// As [`Optimizer::partials`].
    ///
    /// # Panics
    /// As the optimizer's own `apply` or `step`.
    pub fn apply<W: Element, G: Element, S: Element, const N: usize>(
        &self,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, N>,
    ) -> Result<(), StepError> {
        self.check::<N>(p.id)?;
        match self {
            Self::Sgd(o) => o.step(step, precision, &mut p.pick([0])),
            Self::AdamW(o) => o.step(step, precision, p)?,
            Self::Lamb(o) => o.apply(step, totals, precision, &mut p.pick([0, 1])),
            Self::Lars(o) => o.apply(step, totals, precision, &mut p.pick([0])),
        }
        Ok(())
    }

    /// Both phases over one whole tensor.
    ///
    /// ```
    /// use tessera_core::optim::{Optimizer, OptimizerConfig, Param, Precision, SgdConfig, Step, StepError};
    ///
    /// // Chosen at run time, e.g. from a config file.
    /// let sgd = Optimizer::new(OptimizerConfig::from(SgdConfig { lr: 0.5, ..SgdConfig::default() }))?;
    /// let (mut w, g, mut buf) = ([1.0f32; 2], [0.5f32; 2], [0.0f32; 2]);
    /// sgd.step(Step::first(), &Precision::default(), &mut Param::new(0, &mut w, &g, [&mut buf]))?;
    /// assert_eq!(w, [0.75; 2]);
    /// // The wrong number of state tensors is an error, not a panic.
    /// let e = sgd.step(Step::first(), &Precision::default(), &mut Param::<_, _, f32, 0>::new(0, &mut w, &g, []));
    /// assert_eq!(e, Err(StepError::StateTensors { id: 0, expected: 1, got: 0 }));
    /// # Ok::<(), StepError>(())
    /// ```
    ///
    /// # Errors
    /// As [`Optimizer::partials`].
    ///
    /// # Panics
    /// As the optimizer's own `step`.
    pub fn step<W: Element, G: Element, S: Element, const N: usize>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, N>,
    ) -> Result<(), StepError> {
        let totals = self.partials(step, p)?;
        self.apply(step, &totals, precision, p)
    }

    fn check<const N: usize>(&self, id: u64) -> Result<(), StepError> {
        let expected = self.state_tensors();
        if N == expected {
            Ok(())
        } else {
            Err(StepError::StateTensors {
                id,
                expected,
                got: N,
            })
        }
    }
}
