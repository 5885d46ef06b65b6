//! What every service a layer makes shares: its limiter, key extractor, answers, plans and
//! prices, built once by [`Layer::layer`](tower_layer::Layer::layer).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::response::Responder;
use super::settings::Settings;
use crate::key::{KeyExtractor, RequestHead};
use crate::limiter::Limiter;
use crate::limiter::{guarded, Bans};
use crate::limiter::{LivePlans, PerKey, Serve};
use crate::store::Blocks;
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
    /// The settings the answers are made with.
    settings: Settings,
    pub(crate) key: Arc<dyn KeyExtractor>,
    /// Per-key quotas, when the layer has a `quota_for` selector.
    pub(crate) per_key: Option<Arc<Plans>>,
    /// The cost of each request; `None`: 1.
    pub(crate) cost: Option<Arc<Cost>>,
    /// Bans of repeat offenders, put around every limiter the services are handed.
    bans: Option<Bans>,
    /// The keys blocked through the layer's handle, which every limiter the services are
    /// handed denies first.
    held: Arc<Blocks>,
    /// The layer's live part, kept while a service is: it hears of quotas changed through
    /// other servers.
    kept: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Shared {
    pub(crate) fn new(
        limiter: Arc<dyn Limiter>,
        settings: Settings,
        key: Arc<dyn KeyExtractor>,
        per_key: Option<Arc<Plans>>,
        cost: Option<Arc<Cost>>,
        bans: Option<Bans>,
        held: Arc<Blocks>,
    ) -> Self {
        let limiter = guarded(&bans, &held, limiter);
        Self {
            active: ArcSwap::from_pointee(Responder::for_limit(&limiter, settings.clone())),
            settings,
            key,
            per_key,
            cost,
            bans,
            held,
            kept: None,
        }
    }

    /// The same, keeping `live` (the layer's live part) for as long as it is kept.
    pub(crate) fn keeping(mut self, live: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.kept = Some(live);
        self
    }

    /// How many resets the layer's handle has made: a settlement's refund across one is
    /// dropped (its admission may have been forgotten, and its receipt match a later one's).
    pub(crate) fn resets(&self) -> u64 {
        self.held.lifts()
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
        let limiter = guarded(&self.bans, &self.held, limiter);
        let responder = Responder::for_limit(&limiter, self.settings.clone());
        self.active.store(Arc::new(responder));
    }

    fn in_force(&self) -> Arc<dyn Limiter> {
        self.active.load().limiter().clone()
    }

    fn plans(&self) -> Option<Arc<dyn LivePlans>> {
        let plans = self.per_key.clone()?;
        Some(plans)
    }
}
