use std::sync::Arc;

use super::per_key::PerKey;
use super::response::Responder;
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::key::RequestHead;
use crate::store::Store;
use crate::{Key, RateLimiter};

/// Prices a request: how much of the quota it takes (`RateLimitLayer::cost`).
pub(crate) type Cost = dyn Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync;

/// Everything a [`RateLimit`](super::RateLimit) service needs besides its inner service.
pub(crate) struct Config<A: Algorithm, K, St: Store<A>, C> {
    pub(crate) limiter: RateLimiter<A, St, C>,
    pub(crate) key: K,
    pub(crate) responder: Arc<Responder>,
    /// Per-key quotas, when the layer has a `quota_for` selector.
    pub(crate) per_key: Option<Arc<PerKey<A, St, C>>>,
    /// The cost of each request; `None`: 1.
    pub(crate) cost: Option<Arc<Cost>>,
}

impl<A: Algorithm, K: Clone, St: Store<A>, C: Clone> Clone for Config<A, K, St, C> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            responder: self.responder.clone(),
            per_key: self.per_key.clone(),
            cost: self.cost.clone(),
        }
    }
}

impl<A: Algorithm, K, St: Store<A>, C> Config<A, K, St, C> {
    /// The same configuration with another key extractor.
    pub(crate) fn map_key<K2>(self, f: impl FnOnce(K) -> K2) -> Config<A, K2, St, C> {
        let Self {
            limiter,
            key,
            responder,
            per_key,
            cost,
        } = self;
        Config {
            limiter,
            key: f(key),
            responder,
            per_key,
            cost,
        }
    }

    /// The same configuration with another limiter (another store or clock, or other
    /// algorithm options). Limiters made for per-key quotas start over, since they belonged to
    /// the old limiter.
    pub(crate) fn map_limiter<St2: Store<A>, C2: Clock + Clone>(
        self,
        f: impl FnOnce(RateLimiter<A, St, C>) -> RateLimiter<A, St2, C2>,
    ) -> Config<A, K, St2, C2> {
        let Self {
            limiter,
            key,
            responder,
            per_key,
            cost,
        } = self;
        let per_key = per_key.map(|p| Arc::new(p.fresh()));
        let limiter = f(limiter);
        // The headers read the new limiter's clock (and describe its quotas).
        let responder = Arc::new(Responder::for_limiter(
            &limiter,
            responder.settings().clone(),
        ));
        Config {
            limiter,
            key,
            responder,
            per_key,
            cost,
        }
    }

    /// The cost of a request for `key` with `head`.
    #[inline]
    pub(crate) fn cost(&self, key: &Key, head: RequestHead<'_>) -> u64 {
        self.cost.as_ref().map_or(1, |cost| cost(key, head))
    }
}
