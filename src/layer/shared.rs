//! What every service a layer makes shares: its limiter, key extractor, answers, plans and
//! prices, built once by [`Layer::layer`](tower_layer::Layer::layer).

use std::sync::Arc;

use super::limit::Limit;
use super::per_key::PerKey;
use super::response::Responder;
use crate::key::{KeyExtractor, RequestHead};
use crate::Key;

/// Prices a request: how much of the quota it takes (`RateLimitLayer::cost`).
pub(crate) type Cost = dyn Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync;

/// Everything a [`RateLimit`](super::RateLimit) service needs besides its inner service.
pub(crate) struct Shared {
    pub(crate) limiter: Arc<dyn Limit>,
    /// Whether allowed requests hold what they took until their response ends (an in-flight
    /// limit).
    pub(crate) holds: bool,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) responder: Arc<Responder>,
    /// Per-key quotas, when the layer has a `quota_for` selector.
    pub(crate) per_key: Option<PerKey>,
    /// The cost of each request; `None`: 1.
    pub(crate) cost: Option<Arc<Cost>>,
}

impl Shared {
    /// The cost of a request for `key` with `head`.
    #[inline]
    pub(crate) fn cost(&self, key: &Key, head: RequestHead<'_>) -> u64 {
        self.cost.as_ref().map_or(1, |cost| cost(key, head))
    }
}
