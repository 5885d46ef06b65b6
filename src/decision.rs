//! [`Decision`]: what a limiter answered for one request.

use std::sync::Arc;
use std::time::Duration;

/// The outcome of one check: whether the request may pass, and what to tell the client.
///
/// Every algorithm fills the fields with the same meaning, so the response headers are right
/// whichever algorithm decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The capacity reported to clients: the burst for GCRA and the buckets, the per-window limit
    /// for window algorithms.
    pub limit: u64,
    /// How many requests of cost 1 would pass right now, after this decision.
    pub remaining: u64,
    /// Time until the key's state is back to fresh (full capacity).
    pub reset_after: Duration,
    /// For a denied request, the time until the same request could pass; `None` when allowed, or
    /// when the request can never pass (its cost is above the capacity).
    pub retry_after: Option<Duration>,
    /// For an allowed request that must wait before it proceeds (shaping), how long; zero
    /// otherwise.
    pub delay: Duration,
    /// With tiered quotas, the decision of each quota in order (see [`tiers`](Self::tiers)).
    tiers: Option<Arc<[Decision]>>,
}

impl Decision {
    /// A decision that allows the request, for stores and algorithms outside this crate.
    pub fn allow(limit: u64, remaining: u64, reset_after: Duration) -> Self {
        Self {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: None,
            delay: Duration::ZERO,
            tiers: None,
        }
    }

    /// A decision that denies the request, for stores and algorithms outside this crate.
    /// `retry_after` is `None` when the request can never pass.
    pub fn deny(
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            allowed: false,
            limit,
            remaining,
            reset_after,
            retry_after,
            delay: Duration::ZERO,
            tiers: None,
        }
    }

    /// The same decision, but allowed only after waiting `delay` (shaping).
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The decision of each quota, in the order the quotas were given, for a limiter with
    /// tiered quotas (`RateLimiter::gcra([per_second, per_hour])`); for one quota, the
    /// decision itself. Response headers describe every tier from these.
    ///
    /// The decision's own fields are those of the most restrictive tier. When a request is
    /// denied, no tier consumed anything, and the tiers that would have allowed it report their
    /// standing as it is.
    pub fn tiers(&self) -> &[Decision] {
        match &self.tiers {
            Some(tiers) => tiers,
            None => std::slice::from_ref(self),
        }
    }

    /// This decision, reporting `tiers` as the decisions of each quota.
    #[must_use]
    pub fn with_tiers(mut self, tiers: impl Into<Arc<[Decision]>>) -> Self {
        self.tiers = Some(tiers.into());
        self
    }

    /// Whether the request was denied.
    pub fn is_denied(&self) -> bool {
        !self.allowed
    }
}
