//! What every service a layer makes shares: its limiter, key extractor, answers, plans and
//! prices, built once by [`Layer::layer`](tower_layer::Layer::layer).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::handle::Live;
use super::response::{Responder, Settings};
use crate::key::{KeyExtractor, RequestHead};
use crate::limiter::Limiter;
use crate::limiter::{guarded, Bans};
use crate::limiter::{LivePlans, PerKey, Serve};
use crate::Key;

/// Prices a request: how much of the quota it takes (`RateLimitLayer::cost`).
pub(crate) type Cost = dyn Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync;

/// A layer's per-key plans, each answered with the header writer made for its quotas.
pub(crate) type Plans = PerKey<Arc<Responder>>;

/// Everything a [`RateLimit`](super::RateLimit) service needs besides its inner service.
pub(crate) struct Shared {
    /// The limiter of now, as its answers hold it, replaced whole when the quotas change
    /// ([`Handle::set_quotas`](super::Handle::set_quotas)).
    pub(crate) active: ArcSwap<Responder>,
    pub(crate) key: Arc<dyn KeyExtractor>,
    /// Per-key quotas, when the layer has a `quota_for` selector.
    pub(crate) per_key: Option<Arc<Plans>>,
    /// The cost of each request; `None`: 1.
    pub(crate) cost: Option<Arc<Cost>>,
    /// Bans of repeat offenders, put around every limiter the services are handed.
    pub(crate) bans: Option<Bans>,
    /// The layer's live part, kept while a service is: it hears of quotas changed through
    /// other servers, and holds the keys blocked through the layer's handle, which every
    /// limiter the services are handed denies first.
    pub(crate) live: Arc<Live>,
}

impl Shared {
    /// `limiter` under the bans and the handle's blocks, answered with `settings`.
    pub(crate) fn responder(
        bans: &Option<Bans>,
        live: &Live,
        limiter: Arc<dyn Limiter>,
        settings: Settings,
    ) -> Responder {
        Responder::for_limit(&guarded(bans, &live.held, limiter), settings)
    }

    /// How many resets the layer's handle has made: a settlement's refund across one is
    /// dropped (its admission may have been forgotten, and its receipt match a later one's).
    pub(crate) fn resets(&self) -> u64 {
        self.live.held.lifts()
    }

    /// The cost of a request for `key` with `head`.
    #[inline]
    pub(crate) fn cost(&self, key: &Key, head: RequestHead<'_>) -> u64 {
        self.cost.as_ref().map_or(1, |cost| cost(key, head))
    }
}

impl Serve for Shared {
    /// Puts `limiter` in force for the requests that come next (with the bans and the
    /// handle's blocks).
    fn put(&self, limiter: Arc<dyn Limiter>) {
        let settings = self.active.load().settings.clone();
        let responder = Self::responder(&self.bans, &self.live, limiter, settings);
        self.active.store(Arc::new(responder));
    }

    fn in_force(&self) -> Arc<dyn Limiter> {
        self.active.load().limiter.clone()
    }

    fn plans(&self) -> Option<Arc<dyn LivePlans>> {
        let plans = self.per_key.clone()?;
        Some(plans)
    }
}
