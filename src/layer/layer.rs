use std::sync::Arc;

use tower_layer::Layer;

use super::config::Config;
use super::response::Responder;
use super::RateLimit;
use crate::algorithm::{Algorithm, Gcra};
use crate::clock::{Clock, SystemClock};
use crate::key::{KeyExtractor, PeerIp, RequestHead, Skip};
use crate::store::{MemoryStore, Store};
use crate::{Quota, RateLimiter};

/// Applies a rate limit to every request of a service. See the [module docs](super).
///
/// Built with one constructor per algorithm, such as [`RateLimitLayer::gcra`], then adjusted with
/// builder methods: [`key`](Self::key) (default [`PeerIp`]), [`store`](Self::store) (default a
/// new [`MemoryStore`]) and [`clock`](Self::clock) (default [`SystemClock`]).
///
/// All services made by one layer share one limiter, so in axum `Router::layer`, which wraps
/// each route separately, a client's requests to every route count against the same limit.
pub struct RateLimitLayer<A = Gcra, K = PeerIp, St = MemoryStore, C = SystemClock>
where
    A: Algorithm,
    St: Store<A>,
{
    config: Config<A, K, St, C>,
}

impl RateLimitLayer<Gcra> {
    /// Limits each client IP with GCRA over `quota`, in memory.
    ///
    /// A smooth rate with bursts: a fresh client may make `burst` requests at once, then one
    /// every `period / limit`. See [`Gcra`].
    pub fn gcra(quota: Quota) -> Self {
        Self::from_limiter(RateLimiter::gcra(quota))
    }
}

impl<A: Algorithm, St: Store<A>, C: Clock> RateLimitLayer<A, PeerIp, St, C> {
    /// Limits each client IP with a limiter built by hand.
    pub fn from_limiter(limiter: RateLimiter<A, St, C>) -> Self {
        let responder = Arc::new(Responder::new(limiter.quota(), limiter.policy()));
        Self {
            config: Config {
                limiter,
                key: PeerIp,
                responder,
            },
        }
    }
}

impl<A, K, St, C> RateLimitLayer<A, K, St, C>
where
    A: Algorithm,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    /// Counts requests against the key `extractor` finds, instead of the peer IP.
    #[must_use]
    pub fn key<K2: KeyExtractor>(self, extractor: K2) -> RateLimitLayer<A, K2, St, C> {
        let Config {
            limiter, responder, ..
        } = self.config;
        RateLimitLayer {
            config: Config {
                limiter,
                key: extractor,
                responder,
            },
        }
    }

    /// Leaves the requests `predicate` picks unlimited (no check, no rate limit headers), such
    /// as health checks or internal callers.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).skip(|head| head.uri().path() == "/healthz");
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn skip<P>(self, predicate: P) -> RateLimitLayer<A, Skip<K, P>, St, C>
    where
        P: Fn(RequestHead<'_>) -> bool + Clone + Send + Sync + 'static,
    {
        let Config {
            limiter,
            key,
            responder,
        } = self.config;
        RateLimitLayer {
            config: Config {
                limiter,
                key: Skip::new(key, predicate),
                responder,
            },
        }
    }

    /// Keeps state in `store`: a [`MemoryStore`] shared with other layers, or a store shared
    /// between servers.
    #[must_use]
    pub fn store<St2: Store<A>>(self, store: St2) -> RateLimitLayer<A, K, St2, C> {
        let Config {
            limiter,
            key,
            responder,
        } = self.config;
        RateLimitLayer {
            config: Config {
                limiter: limiter.with_store(store),
                key,
                responder,
            },
        }
    }

    /// Reads time from `clock`, such as a [`ManualClock`](crate::clock::ManualClock) in tests.
    #[must_use]
    pub fn clock<C2: Clock + Clone>(self, clock: C2) -> RateLimitLayer<A, K, St, C2> {
        let Config {
            limiter,
            key,
            responder,
        } = self.config;
        RateLimitLayer {
            config: Config {
                limiter: limiter.with_clock(clock),
                key,
                responder,
            },
        }
    }

    /// The limiter this layer's services share.
    pub fn limiter(&self) -> &RateLimiter<A, St, C> {
        &self.config.limiter
    }
}

impl<A: Algorithm, K: Clone, St: Store<A>, C: Clone> Clone for RateLimitLayer<A, K, St, C> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<A: Algorithm, K, St: Store<A>, C> std::fmt::Debug for RateLimitLayer<A, K, St, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policy", &self.config.limiter.policy())
            .field("quota", self.config.limiter.quota())
            .finish_non_exhaustive()
    }
}

impl<S, A, K, St, C> Layer<S> for RateLimitLayer<A, K, St, C>
where
    A: Algorithm,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    type Service = RateLimit<S, A, K, St, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::new(self.config.clone()))
    }
}
