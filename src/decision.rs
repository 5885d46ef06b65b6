//! [`Decision`]: what a limiter answered for one request.

use std::time::Duration;

/// The outcome of one check: whether the request may pass, and what to tell the client.
///
/// Every algorithm fills the fields with the same meaning, so the response headers are right
/// whichever algorithm decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        }
    }

    /// Whether the request was denied.
    pub fn is_denied(&self) -> bool {
        !self.allowed
    }
}
