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
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// let nvlink = Link::new(2e-6, 25e9, 0.5, Ports::PerPeer).unwrap();
    /// assert_eq!(nvlink.beta(), 1.0 / 12.5e9);
    /// assert!(Link::new(2e-6, 25e9, 1.5, Ports::PerPeer).is_err());
    /// ```
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
    ///
    /// ```
    /// use tessera_collectives::cost::Fitted;
    /// use tessera_collectives::{Link, Ports};
    ///
    /// let link = Link::new(10e-6, 3e9, 1.0, Ports::Single).unwrap().with_fitted(Fitted::THREADS);
    /// assert_eq!(link.fitted(), Some(&Fitted::THREADS));
    /// ```
    #[must_use]
    pub const fn with_fitted(self, fitted: Fitted) -> Self {
        Self {
            fitted: Some(fitted),
            ..self
        }
    }

    /// The measured costs of the algorithms over this link, if any.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// assert_eq!(Link::new(1e-6, 1e9, 1.0, Ports::Single).unwrap().fitted(), None);
    /// ```
    #[must_use]
    pub const fn fitted(&self) -> Option<&Fitted> {
        self.fitted.as_ref()
    }

    /// A link from fitted `alpha` (seconds) and `beta` (seconds per byte),
    /// efficiency 1.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// let l = Link::from_alpha_beta(5e-6, 0.5e-9, Ports::Single).unwrap();
    /// assert_eq!((l.alpha(), l.efficiency()), (5e-6, 1.0));
    /// assert!((l.bandwidth() - 2e9).abs() < 1.0);
    /// ```
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
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// assert_eq!(Link::new(3e-6, 1e9, 0.5, Ports::Single).unwrap().alpha(), 3e-6);
    /// ```
    #[must_use]
    pub const fn alpha(&self) -> f64 {
        self.latency
    }

    /// Seconds per byte: `1 / (bandwidth * efficiency)`.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// // Half of 4 GB/s reached: 2 GB/s, 0.5 ns per byte.
    /// assert_eq!(Link::new(3e-6, 4e9, 0.5, Ports::Single).unwrap().beta(), 0.5e-9);
    /// ```
    #[must_use]
    pub fn beta(&self) -> f64 {
        1.0 / (self.bandwidth * self.efficiency)
    }

    /// Bytes per second before efficiency.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// assert_eq!(Link::new(3e-6, 4e9, 0.5, Ports::Single).unwrap().bandwidth(), 4e9);
    /// ```
    #[must_use]
    pub const fn bandwidth(&self) -> f64 {
        self.bandwidth
    }

    /// The fraction of the bandwidth reached.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// assert_eq!(Link::new(3e-6, 4e9, 0.5, Ports::Single).unwrap().efficiency(), 0.5);
    /// ```
    #[must_use]
    pub const fn efficiency(&self) -> f64 {
        self.efficiency
    }

    /// How messages of one step share the bandwidth.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    ///
    /// assert_eq!(Link::new(3e-6, 4e9, 0.5, Ports::PerPeer).unwrap().ports(), Ports::PerPeer);
    /// ```
    #[must_use]
    pub const fn ports(&self) -> Ports {
        self.ports
    }
}
