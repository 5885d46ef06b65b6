//! What a layer's limiter is made of, kept as plain values so that the layer can make it again
//! over another store or clock, or for another plan's quotas: the algorithm by name, its
//! options and quotas ([`Spec`]), the store ([`LayerStore`]) and the clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::FixedWindow;
use crate::clock::{Clock, Sleep, SystemClock};
use crate::store::{Role, Tie};
use crate::Quota;

/// The crate's algorithms, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlgorithmKind {
    Gcra,
    TokenBucket,
    LeakyBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Hybrid,
}

impl AlgorithmKind {
    /// Every algorithm, with the name configuration files give it.
    pub(crate) const ALL: [(&'static str, AlgorithmKind); 7] = [
        ("gcra", AlgorithmKind::Gcra),
        ("token_bucket", AlgorithmKind::TokenBucket),
        ("leaky_bucket", AlgorithmKind::LeakyBucket),
        ("fixed_window", AlgorithmKind::FixedWindow),
        ("sliding_window", AlgorithmKind::SlidingWindow),
        ("sliding_log", AlgorithmKind::SlidingLog),
        ("hybrid", AlgorithmKind::Hybrid),
    ];

    /// The name configuration files give it.
    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("", |(n, _)| n)
    }
}

/// A limiter's algorithm, options and quotas, as values.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) kind: AlgorithmKind,
    /// Decided as tiers ([`Tiered`]): given several quotas, or a list of one.
    pub(crate) tiered: bool,
    pub(crate) quotas: Arc<[Quota]>,
    /// Shaping (GCRA, the token bucket).
    pub(crate) max_delay: Option<Duration>,
    /// Counters per period (the sliding window).
    pub(crate) sub_windows: Option<usize>,
    /// Calendar windows (the fixed window).
    pub(crate) aligned: bool,
    /// Which of a layer's limiters this is, for a store shared by servers.
    pub(crate) tie: Tie,
}

impl Spec {
    /// The spec of a layer's own limiter: the layer is named by its quotas' policy.
    pub(crate) fn new(kind: AlgorithmKind, quotas: Vec<Quota>, tiered: bool) -> Self {
        let layer = super::typed::policy_of(&quotas);
        Self {
            kind,
            tiered,
            quotas: quotas.into(),
            max_delay: None,
            sub_windows: None,
            aligned: false,
            tie: Tie {
                layer,
                role: Role::Own,
            },
        }
    }

    /// The same algorithm and options for a plan's `quotas` (tiers when the layer has tiers or
    /// the plan has several quotas).
    pub(crate) fn for_plan(&self, quotas: &[Quota]) -> Self {
        Self {
            tiered: self.tiered || quotas.len() > 1,
            quotas: quotas.into(),
            ..self.clone()
        }
    }

    /// The same spec in `role` for the same layer.
    pub(crate) fn in_role(mut self, role: Role) -> Self {
        self.tie.role = role;
        self
    }

    /// The policy is shared under its name when every quota was named.
    pub(crate) fn named(&self) -> bool {
        super::typed::named(&self.quotas)
    }

    /// This spec shaping up to `max_delay`, or why its algorithm cannot shape.
    pub(crate) fn shaping(self, max_delay: Duration) -> Result<Self, String> {
        let shapes = matches!(self.kind, AlgorithmKind::Gcra | AlgorithmKind::TokenBucket);
        self.only(
            shapes,
            "only gcra and token_bucket shape",
            " (the leaky bucket always queues: its burst is the queue)",
        )?;
        let max_delay = Some(max_delay);
        Ok(Self { max_delay, ..self })
    }

    /// This spec keeping `k` counters per period, or why it cannot.
    pub(crate) fn with_sub_windows(self, k: usize) -> Result<Self, String> {
        let sliding = self.kind == AlgorithmKind::SlidingWindow;
        self.only(sliding, "sub-windows are the sliding window's", "")?;
        if !(1..=64).contains(&k) {
            return Err("the sliding window keeps 1 to 64 counters per period".into());
        }
        let sub_windows = Some(k);
        Ok(Self {
            sub_windows,
            ..self
        })
    }

    /// This spec with calendar windows, or why it cannot have them.
    pub(crate) fn with_aligned(self) -> Result<Self, String> {
        let fixed = self.kind == AlgorithmKind::FixedWindow;
        self.only(fixed, "calendar windows are the fixed window's", "")?;
        calendar_periods(&self.quotas)?;
        Ok(Self {
            aligned: true,
            ..self
        })
    }

    /// `Ok` when an option `applies` to this algorithm, else the `rule` it breaks.
    fn only(&self, applies: bool, rule: &str, note: &str) -> Result<(), String> {
        match applies {
            true => Ok(()),
            false => Err(format!(
                "{rule}; this layer's algorithm is {}{note}",
                self.kind.name()
            )),
        }
    }
}

/// A layer's clock: the system clock without a virtual call, or any other.
#[derive(Clone)]
pub(crate) enum LayerClock {
    System,
    Other(Arc<dyn Clock>),
}

impl fmt::Debug for LayerClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerClock::System => f.write_str("SystemClock"),
            LayerClock::Other(_) => f.write_str("Clock"),
        }
    }
}

/// `$body` with `$clock` the layer's clock, the system clock without a virtual call.
macro_rules! on_clock {
    ($layer:expr, $clock:ident => $body:expr) => {
        match $layer {
            LayerClock::System => {
                let $clock = &SystemClock;
                $body
            }
            LayerClock::Other($clock) => $body,
        }
    };
}

impl Clock for LayerClock {
    #[inline]
    fn now(&self) -> Duration {
        on_clock!(self, clock => clock.now())
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        on_clock!(self, clock => clock.now_nanos())
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        on_clock!(self, clock => clock.sleep(duration))
    }

    #[inline]
    fn wall_nanos(&self) -> u64 {
        on_clock!(self, clock => clock.wall_nanos())
    }

    fn follows_system_time(&self) -> bool {
        on_clock!(self, clock => clock.follows_system_time())
    }
}

/// `Ok` when every quota's period is long enough for calendar windows, else why not.
pub(crate) fn calendar_periods(quotas: &[Quota]) -> Result<(), String> {
    let short = |q: &&Quota| q.period() < FixedWindow::MIN_ALIGNED_PERIOD;
    match quotas.iter().find(short) {
        Some(short) => Err(format!(
            "the quota \"{short}\" has a period shorter than 1 ms, too short for calendar \
             windows; use a longer period or leave aligned unset"
        )),
        None => Ok(()),
    }
}
