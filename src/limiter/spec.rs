//! What a layer's limiter is made of, kept as plain values so that the layer can make it again
//! over another store or clock, or for another plan's quotas: the algorithm by name, its
//! options and quotas ([`Spec`]), the store ([`LayerStore`]) and the clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::object::Limiter;
use super::typed::RateLimiter;
use crate::algorithm::{
    FixedWindow, Gcra, Hybrid, LeakyBucket, SlidingLog, SlidingWindow, Tiered, TokenBucket,
};
use crate::clock::{Clock, Sleep, SystemClock};
use crate::store::{Role, Store, Tie};
use crate::{Error, Quota};

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

    /// The algorithm named `name` in configuration.
    #[cfg(feature = "serde")]
    pub(crate) fn from_name(name: &str) -> Option<AlgorithmKind> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// The name configuration files give it.
    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("", |(n, _)| n)
    }

    /// Whether `max_delay` applies: the algorithms that can shape.
    pub(crate) fn shapes(self) -> bool {
        matches!(self, AlgorithmKind::Gcra | AlgorithmKind::TokenBucket)
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
    /// Which of a layer's limiters this is, for a store shared by servers; `None` until the
    /// spec is a layer's own ([`own`](Self::own)).
    pub(crate) tie: Option<Tie>,
}

impl Spec {
    pub(crate) fn new(kind: AlgorithmKind, quotas: Vec<Quota>, tiered: bool) -> Self {
        Self {
            kind,
            tiered,
            quotas: quotas.into(),
            max_delay: None,
            sub_windows: None,
            aligned: false,
            tie: None,
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

    /// This spec as a layer's own limiter: the layer is named by its quotas' policy.
    pub(crate) fn own(self) -> Self {
        let layer = super::typed::policy_of(&self.quotas);
        Self {
            tie: Some(Tie {
                layer,
                role: Role::Own,
            }),
            ..self
        }
    }

    /// The same spec in `role` for the same layer.
    pub(crate) fn in_role(mut self, role: Role) -> Self {
        if let Some(tie) = &mut self.tie {
            tie.role = role;
        }
        self
    }

    /// The policy is shared under its name when every quota was named.
    pub(crate) fn named(&self) -> bool {
        self.quotas.iter().all(|q| q.explicit_name().is_some())
    }
}

/// A store that keeps every algorithm of the crate, alone and in tiers: what
/// [`RateLimitLayer::store`](crate::layer::RateLimitLayer::store) takes. `MemoryStore` and
/// `RedisStore` are (`Store` is sealed).
pub trait LayerStore:
    Store<Gcra>
    + Store<Tiered<Gcra>>
    + Store<TokenBucket>
    + Store<Tiered<TokenBucket>>
    + Store<LeakyBucket>
    + Store<Tiered<LeakyBucket>>
    + Store<FixedWindow>
    + Store<Tiered<FixedWindow>>
    + Store<SlidingWindow>
    + Store<Tiered<SlidingWindow>>
    + Store<SlidingLog>
    + Store<Tiered<SlidingLog>>
    + Store<Hybrid>
    + Store<Tiered<Hybrid>>
{
}

impl<T> LayerStore for T where
    T: Store<Gcra>
        + Store<Tiered<Gcra>>
        + Store<TokenBucket>
        + Store<Tiered<TokenBucket>>
        + Store<LeakyBucket>
        + Store<Tiered<LeakyBucket>>
        + Store<FixedWindow>
        + Store<Tiered<FixedWindow>>
        + Store<SlidingWindow>
        + Store<Tiered<SlidingWindow>>
        + Store<SlidingLog>
        + Store<Tiered<SlidingLog>>
        + Store<Hybrid>
        + Store<Tiered<Hybrid>>
{
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

impl Clock for LayerClock {
    #[inline]
    fn now(&self) -> Duration {
        match self {
            LayerClock::System => SystemClock.now(),
            LayerClock::Other(clock) => clock.now(),
        }
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        match self {
            LayerClock::System => SystemClock.now_nanos(),
            LayerClock::Other(clock) => clock.now_nanos(),
        }
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        match self {
            LayerClock::System => SystemClock.sleep(duration),
            LayerClock::Other(clock) => clock.sleep(duration),
        }
    }

    #[inline]
    fn wall_nanos(&self) -> u64 {
        match self {
            LayerClock::System => SystemClock.wall_nanos(),
            LayerClock::Other(clock) => clock.wall_nanos(),
        }
    }

    fn follows_system_time(&self) -> bool {
        match self {
            LayerClock::System => true,
            LayerClock::Other(clock) => clock.follows_system_time(),
        }
    }
}

/// Makes limiters from specs over one store.
pub(crate) trait Bind: Send + Sync + 'static {
    /// The limiter of `spec` on `clock`, its state shared under its policy name when
    /// `shared`; an error when the store cannot keep its quotas.
    fn bind(
        &self,
        spec: &Spec,
        clock: &LayerClock,
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, Error>;

    /// This store with `on_failure` as its failure policy; `None` for a store that has none
    /// (only a `RedisStore` fails over).
    #[cfg(feature = "redis")]
    fn failing(&self, on_failure: &crate::store::OnFailure) -> Option<Arc<dyn Bind>>;

    /// The record of the layer named `layer`'s quotas changed live, which every server
    /// sharing the store follows; `None` for a store of one server (only a `RedisStore` is
    /// shared).
    #[cfg(feature = "redis")]
    fn record(&self, layer: &str) -> Option<crate::store::LiveRecord>;
}

/// A copy of `store` whose tables serve `tie` (a `RedisStore`; other stores keep nothing of
/// it: a memory store is one server's, whose layer holds its blocks itself).
fn tied<St: Clone + 'static>(store: &St, tie: Option<&Tie>) -> St {
    #[allow(unused_mut)]
    let mut store = store.clone();
    #[cfg(feature = "redis")]
    if let (Some(tie), Some(redis)) = (
        tie,
        (&mut store as &mut dyn std::any::Any).downcast_mut::<crate::store::RedisStore>(),
    ) {
        redis.tie(tie.clone());
    }
    #[cfg(not(feature = "redis"))]
    let _ = tie;
    store
}

/// A store, as a maker of limiters.
pub(crate) struct Binder<St>(pub(crate) St);

/// The limiter of `$spec`, each quota decided by the algorithm `$make` builds for it.
macro_rules! limiter {
    ($spec:expr, $store:expr, $clock:expr, $shared:expr, $make:expr) => {{
        let (spec, make) = ($spec, $make);
        let quotas = spec.quotas.clone();
        let limit: Arc<dyn Limiter> = if spec.tiered {
            let algorithm = Tiered::new(quotas.iter().map(make));
            Arc::new(RateLimiter::try_bind(
                quotas, algorithm, $store, $clock, $shared,
            )?)
        } else {
            let algorithm = make(&quotas[0]);
            Arc::new(RateLimiter::try_bind(
                quotas, algorithm, $store, $clock, $shared,
            )?)
        };
        limit
    }};
}

impl<St: LayerStore> Bind for Binder<St> {
    #[cfg(feature = "redis")]
    fn failing(&self, on_failure: &crate::store::OnFailure) -> Option<Arc<dyn Bind>> {
        let redis = (&self.0 as &dyn std::any::Any).downcast_ref::<crate::store::RedisStore>()?;
        let store = redis.clone().on_failure(on_failure.clone());
        Some(Arc::new(Binder(store)))
    }

    #[cfg(feature = "redis")]
    fn record(&self, layer: &str) -> Option<crate::store::LiveRecord> {
        let redis = (&self.0 as &dyn std::any::Any).downcast_ref::<crate::store::RedisStore>()?;
        Some(crate::store::LiveRecord::of(redis, layer))
    }

    fn bind(
        &self,
        spec: &Spec,
        clock: &LayerClock,
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, Error> {
        let (store, clock) = (tied(&self.0, spec.tie.as_ref()), clock.clone());
        let max_delay = spec.max_delay;
        let sub_windows = spec.sub_windows;
        let aligned = spec.aligned;
        Ok(match spec.kind {
            AlgorithmKind::Gcra => limiter!(spec, store, clock, shared, |q: &Quota| {
                let gcra = Gcra::new(q);
                max_delay.map_or(gcra, |d| gcra.max_delay(d))
            }),
            AlgorithmKind::TokenBucket => limiter!(spec, store, clock, shared, |q: &Quota| {
                let bucket = TokenBucket::new(q);
                max_delay.map_or(bucket, |d| bucket.max_delay(d))
            }),
            AlgorithmKind::LeakyBucket => limiter!(spec, store, clock, shared, LeakyBucket::new),
            AlgorithmKind::FixedWindow => limiter!(spec, store, clock, shared, |q: &Quota| {
                let window = FixedWindow::new(q);
                if aligned {
                    window.aligned()
                } else {
                    window
                }
            }),
            AlgorithmKind::SlidingWindow => limiter!(spec, store, clock, shared, |q: &Quota| {
                let window = SlidingWindow::new(q);
                sub_windows.map_or(window, |k| window.sub_windows(k))
            }),
            AlgorithmKind::SlidingLog => limiter!(spec, store, clock, shared, SlidingLog::new),
            AlgorithmKind::Hybrid => limiter!(spec, store, clock, shared, Hybrid::new),
        })
    }
}
