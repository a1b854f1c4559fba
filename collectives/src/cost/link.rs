//! One kind of link ([`Link`]) and how a rank's messages share it ([`Ports`]).

use crate::error::ConfigError;

use super::fitted::Fitted;

/// How a rank's messages of one step share its bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ports {
    /// One port: a rank's messages in a step go one after the other
    /// (shared memory copied by one thread, one network card).
    Single,
    /// A full-duplex link to each peer (IPU-Links, a switch with a port per
    /// rank): messages to different peers go at once.
    PerPeer,
}

/// One kind of link: latency, bandwidth and efficiency, and possibly the
/// costs of each algorithm measured over it ([`Fitted`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub(crate) latency: f64,
    pub(crate) bandwidth: f64,
    pub(crate) efficiency: f64,
    pub(crate) ports: Ports,
    pub(crate) fitted: Option<Fitted>,
}

impl Link {
    /// A link with `latency` seconds per message, `bandwidth` bytes per
    /// second, of which a fraction `efficiency` is reached.
    ///
    /// # Errors
    /// [`ConfigError`] unless `latency >= 0`, `bandwidth > 0` (both finite)
    /// and `0 < efficiency <= 1`.
    pub fn new(
        latency: f64,
        bandwidth: f64,
        efficiency: f64,
        ports: Ports,
    ) -> Result<Self, ConfigError> {
        if !(latency.is_finite() && latency >= 0.0) {
            return Err(ConfigError::Negative {
                field: "latency",
                value: latency,
            });
        }
        if !(bandwidth.is_finite() && bandwidth > 0.0) {
            return Err(ConfigError::NotPositive {
                field: "bandwidth",
                value: bandwidth,
            });
        }
        if !(efficiency > 0.0 && efficiency <= 1.0) {
            return Err(ConfigError::Efficiency { value: efficiency });
        }
        Ok(Self {
            latency,
            bandwidth,
            efficiency,
            ports,
            fitted: None,
        })
    }

    /// The same link with each algorithm's cost over it measured:
    /// estimates then use `fitted`, not this link's alpha, beta and the
    /// topology's gamma.
    #[must_use]
    pub const fn with_fitted(self, fitted: Fitted) -> Self {
        Self {
            fitted: Some(fitted),
            ..self
        }
    }

    /// The measured costs of the algorithms over this link, if any.
    #[must_use]
    pub const fn fitted(&self) -> Option<&Fitted> {
        self.fitted.as_ref()
    }

    /// A link from fitted `alpha` (seconds) and `beta` (seconds per byte),
    /// efficiency 1.
    ///
    /// # Errors
    /// As [`Link::new`], for `alpha >= 0` and `beta > 0`.
    pub fn from_alpha_beta(alpha: f64, beta: f64, ports: Ports) -> Result<Self, ConfigError> {
        if !(beta.is_finite() && beta > 0.0) {
            return Err(ConfigError::NotPositive {
                field: "beta",
                value: beta,
            });
        }
        Self::new(alpha, 1.0 / beta, 1.0, ports)
    }

    /// Seconds per message.
    #[must_use]
    pub const fn alpha(&self) -> f64 {
        self.latency
    }

    /// Seconds per byte: `1 / (bandwidth * efficiency)`.
    #[must_use]
    pub fn beta(&self) -> f64 {
        1.0 / (self.bandwidth * self.efficiency)
    }

    /// Bytes per second before efficiency.
    #[must_use]
    pub const fn bandwidth(&self) -> f64 {
        self.bandwidth
    }

    /// The fraction of the bandwidth reached.
    #[must_use]
    pub const fn efficiency(&self) -> f64 {
        self.efficiency
    }

    /// How messages of one step share the bandwidth.
    #[must_use]
    pub const fn ports(&self) -> Ports {
        self.ports
    }
}
