//! What a layer's limiter is made of, kept as plain values so that the layer can make it again
//! over another store or clock, or for another plan's quotas: the algorithm by name, its
//! options and quotas ([`Recipe`]), the store ([`LayerStore`]) and the clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::limit::Limit;
use crate::algorithm::{
    FixedWindow, Gcra, Hybrid, LeakyBucket, SlidingLog, SlidingWindow, Tiered, TokenBucket,
};
use crate::clock::{Clock, Sleep, SystemClock};
use crate::store::{Role, Store, Tie};
use crate::{Error, Quota, RateLimiter};

/// The crate's algorithms, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gcra,
    TokenBucket,
    LeakyBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Hybrid,
}

impl Kind {
    /// Every algorithm, with the name configuration files give it.
    pub(crate) const ALL: [(&'static str, Kind); 7] = [
        ("gcra", Kind::Gcra),
        ("token_bucket", Kind::TokenBucket),
        ("leaky_bucket", Kind::LeakyBucket),
        ("fixed_window", Kind::FixedWindow),
        ("sliding_window", Kind::SlidingWindow),
        ("sliding_log", Kind::SlidingLog),
        ("hybrid", Kind::Hybrid),
    ];

    /// The algorithm named `name` in configuration.
    #[cfg(feature = "serde")]
    pub(crate) fn from_name(name: &str) -> Option<Kind> {
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
        matches!(self, Kind::Gcra | Kind::TokenBucket)
    }
}

/// A limiter's algorithm, options and quotas, as values.
#[derive(Debug, Clone)]
pub(crate) struct Recipe {
    pub(crate) kind: Kind,
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
    /// recipe is a layer's own ([`own`](Self::own)).
    pub(crate) tie: Option<Tie>,
}

impl Recipe {
    pub(crate) fn new(kind: Kind, quotas: Vec<Quota>, tiered: bool) -> Self {
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

    /// This recipe as a layer's own limiter: the layer is named by its quotas' policy.
    pub(crate) fn own(self) -> Self {
        let layer = crate::limiter::policy_of(&self.quotas);
        Self {
            tie: Some(Tie {
                layer,
                role: Role::Own,
            }),
            ..self
        }
    }

    /// The same recipe in `role` for the same layer.
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
/// [`RateLimitLayer::store`](super::RateLimitLayer::store) takes. `MemoryStore` and
/// `RedisStore` are; so is any store of your own that implements [`Store`] for each.
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

/// Makes limiters from recipes over one store.
pub(crate) trait Bind: Send + Sync + 'static {
    /// The limiter of `recipe` on `clock`, its state shared under its policy name when
    /// `shared`; an error when the store cannot keep its quotas.
    fn bind(
        &self,
        recipe: &Recipe,
        clock: &LayerClock,
        shared: bool,
    ) -> Result<Arc<dyn Limit>, Error>;

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

/// The limiter of `$recipe`, each quota decided by the algorithm `$make` builds for it.
macro_rules! limiter {
    ($recipe:expr, $store:expr, $clock:expr, $shared:expr, $make:expr) => {{
        let (recipe, make) = ($recipe, $make);
        let quotas = recipe.quotas.clone();
        let limit: Arc<dyn Limit> = if recipe.tiered {
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
        recipe: &Recipe,
        clock: &LayerClock,
        shared: bool,
    ) -> Result<Arc<dyn Limit>, Error> {
        let (store, clock) = (tied(&self.0, recipe.tie.as_ref()), clock.clone());
        let max_delay = recipe.max_delay;
        let sub_windows = recipe.sub_windows;
        let aligned = recipe.aligned;
        Ok(match recipe.kind {
            Kind::Gcra => limiter!(recipe, store, clock, shared, |q: &Quota| {
                let gcra = Gcra::new(q);
                max_delay.map_or(gcra, |d| gcra.max_delay(d))
            }),
            Kind::TokenBucket => limiter!(recipe, store, clock, shared, |q: &Quota| {
                let bucket = TokenBucket::new(q);
                max_delay.map_or(bucket, |d| bucket.max_delay(d))
            }),
            Kind::LeakyBucket => limiter!(recipe, store, clock, shared, LeakyBucket::new),
            Kind::FixedWindow => limiter!(recipe, store, clock, shared, |q: &Quota| {
                let window = FixedWindow::new(q);
                if aligned {
                    window.aligned()
                } else {
                    window
                }
            }),
            Kind::SlidingWindow => limiter!(recipe, store, clock, shared, |q: &Quota| {
                let window = SlidingWindow::new(q);
                sub_windows.map_or(window, |k| window.sub_windows(k))
            }),
            Kind::SlidingLog => limiter!(recipe, store, clock, shared, SlidingLog::new),
            Kind::Hybrid => limiter!(recipe, store, clock, shared, Hybrid::new),
        })
    }
}
