//! What every service a layer makes shares: its limiter, key extractor, answers, plans and
//! prices, built once by [`Layer::layer`](tower_layer::Layer::layer).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::ban::Ban;
use super::limit::Limit;
use super::per_key::PerKey;
use super::response::{Responder, Settings};
use crate::key::{KeyExtractor, RequestHead};
use crate::Key;

/// Prices a request: how much of the quota it takes (`RateLimitLayer::cost`).
pub(crate) type Cost = dyn Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync;

/// A layer's bans ([`RateLimitLayer::ban`](super::RateLimitLayer::ban)): the figures, the
/// limiter that counts denials, and whether the layer is a dry run.
pub(crate) type Bans = (Ban, Arc<dyn Limit>, bool);

/// Everything a [`RateLimit`](super::RateLimit) service needs besides its inner service.
pub(crate) struct Shared {
    /// The limiter of now and its answers, replaced whole when the quotas change
    /// ([`Handle::set_quotas`](super::Handle::set_quotas)).
    pub(crate) active: ArcSwap<Active>,
    /// The settings the answers are made with.
    settings: Settings,
    pub(crate) key: Arc<dyn KeyExtractor>,
    /// Per-key quotas, when the layer has a `quota_for` selector.
    pub(crate) per_key: Option<PerKey>,
    /// The cost of each request; `None`: 1.
    pub(crate) cost: Option<Arc<Cost>>,
    /// Bans of repeat offenders, put around every limiter the services are handed.
    bans: Option<Bans>,
}

/// A limiter and the answers made for its quotas and policy.
pub(crate) struct Active {
    pub(crate) limiter: Arc<dyn Limit>,
    pub(crate) responder: Arc<Responder>,
}

impl Active {
    fn new(limiter: Arc<dyn Limit>, settings: &Settings) -> Self {
        let responder = Arc::new(Responder::for_limit(&limiter, settings.clone()));
        Self { limiter, responder }
    }
}

impl Shared {
    pub(crate) fn new(
        limiter: Arc<dyn Limit>,
        settings: Settings,
        key: Arc<dyn KeyExtractor>,
        per_key: Option<PerKey>,
        cost: Option<Arc<Cost>>,
        bans: Option<Bans>,
    ) -> Self {
        let limiter = banning(&bans, limiter);
        Self {
            active: ArcSwap::from_pointee(Active::new(limiter, &settings)),
            settings,
            key,
            per_key,
            cost,
            bans,
        }
    }

    /// Puts `limiter` in force for the requests that come next (with the bans).
    pub(crate) fn put(&self, limiter: Arc<dyn Limit>) {
        let limiter = banning(&self.bans, limiter);
        self.active
            .store(Arc::new(Active::new(limiter, &self.settings)));
    }

    /// The cost of a request for `key` with `head`.
    #[inline]
    pub(crate) fn cost(&self, key: &Key, head: RequestHead<'_>) -> u64 {
        self.cost.as_ref().map_or(1, |cost| cost(key, head))
    }
}

/// `limiter` with `bans` around it, if any.
fn banning(bans: &Option<Bans>, limiter: Arc<dyn Limit>) -> Arc<dyn Limit> {
    match bans {
        Some((ban, counter, dry_run)) => ban.wrap(limiter, counter.clone(), *dry_run),
        None => limiter,
    }
}
