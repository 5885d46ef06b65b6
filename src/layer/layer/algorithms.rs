//! The constructors of [`RateLimitLayer`]: one per algorithm, in memory, and one over a
//! limiter built by hand.

use std::any::TypeId;
use std::sync::Arc;

use super::{bound, RateLimitLayer};
use crate::algorithm::{Algorithm, Gcra, Quotas, Tiered};
use crate::clock::Clock;
use crate::limiter::{AlgorithmKind, Binder, LayerClock, Recipe, Spec};
use crate::store::{MemoryStore, Store};
#[cfg(feature = "serde")]
use crate::Error;
use crate::RateLimiter;

/// The layer's constructor for each algorithm: `$name(quotas)` limits each client IP with
/// `AlgorithmKind::$kind` over `quotas`, in memory.
macro_rules! constructors {
    ($($(#[$doc:meta])* $name:ident => $kind:ident;)*) => {
        impl RateLimitLayer {$(
            $(#[$doc])*
            pub fn $name<Q: Quotas>(quotas: Q) -> Self {
                Self::of(AlgorithmKind::$kind, quotas)
            }
        )*}
    };
}

constructors! {
    /// Limits each client IP with GCRA over `quotas` (one [`Quota`](crate::Quota), or several that must all
    /// allow a request), in memory.
    ///
    /// A smooth rate with bursts: a fresh client may make `burst` requests at once, then one
    /// every `period / limit`. See [`Gcra`].
    gcra => Gcra;
    /// Limits each client IP with a leaky bucket over `quotas`, in memory: requests reach the
    /// service one every `period / limit`, never in a burst. A request that finds others
    /// queued waits its turn in the layer before the service is called; one that finds the
    /// queue of `burst` places full is refused. If the client goes away while waiting, its
    /// request never reaches the service. A waiting request holds nothing of the inner
    /// service's readiness (see [the module docs](crate::layer#the-inner-services-readiness)). See
    /// [`LeakyBucket`](crate::algorithm::LeakyBucket).
    leaky_bucket => LeakyBucket;
    /// Limits each client IP with a token bucket over `quotas`, in memory; the same decisions
    /// as [`gcra`](Self::gcra). See [`RateLimiter::token_bucket`].
    token_bucket => TokenBucket;
    /// Limits each client IP to `limit` per window, the window starting at the client's first
    /// request, in memory. See [`RateLimiter::fixed_window`].
    fixed_window => FixedWindow;
    /// Limits each client IP with a sliding window estimate, in memory. See
    /// [`RateLimiter::sliding_window`].
    sliding_window => SlidingWindow;
    /// Limits each client IP to exactly `limit` in any `period`, in memory. See
    /// [`RateLimiter::sliding_log`].
    sliding_log => SlidingLog;
    /// Limits each client IP with the hybrid quota-linear limiter, in memory. See
    /// [`RateLimiter::hybrid`].
    hybrid => Hybrid;
}

impl RateLimitLayer {
    #[track_caller]
    fn of<Q: Quotas>(kind: AlgorithmKind, quotas: Q) -> Self {
        let tiered = TypeId::of::<Q::Algorithm<Gcra>>() == TypeId::of::<Tiered<Gcra>>();
        let spec = Spec::new(kind, quotas.into_quotas(), tiered);
        let store = Arc::new(Binder(MemoryStore::new()));
        let recipe = Recipe {
            spec,
            store,
            clock: LayerClock::System,
        };
        Self::new(bound(&recipe), Some(recipe))
    }

    /// A layer over `recipe`'s limiter, or the store's refusal.
    #[cfg(feature = "serde")]
    pub(crate) fn from_recipe(recipe: Recipe) -> Result<Self, Error> {
        Ok(Self::new(recipe.bind()?, Some(recipe)))
    }

    /// Limits each client IP with a limiter built by hand. The layer uses the limiter's store,
    /// clock and algorithm options as they are.
    ///
    /// The options that keep the limiter work as on any layer (the key, costs, `count_if`,
    /// answers, headers, a handle's block, reset and peek). Those that make the limiter again
    /// ([`store`](Self::store), `on_failure`, [`clock`](Self::clock),
    /// the algorithm's options, [`ban`](Self::ban), [`quota_for`](Self::quota_for)) panic, and a
    /// handle cannot change its quotas: the layer does not remake a limiter it was given. Set them on the limiter, or build the layer with a constructor such as
    /// [`RateLimitLayer::gcra`].
    pub fn from_limiter<A, St, C>(limiter: RateLimiter<A, St, C>) -> Self
    where
        A: Algorithm,
        St: Store<A>,
        C: Clock + Clone,
    {
        Self::new(Arc::new(limiter), None)
    }
}
