//! [`Decision`]: what a limiter answered for one request.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// `d` in whole seconds, rounded up, as `Retry-After` states a wait: a nanosecond is 1 s;
/// at most `u64::MAX`, never wrapped round to 0.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `d` in whole milliseconds, rounded up (`grpc-retry-pushback-ms`, logs); at most `u64::MAX`.
pub(crate) fn ceil_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The outcome of one check: whether the request may pass, and what to tell the client.
///
/// Every algorithm fills the fields with the same meaning, so the response headers are right
/// whichever algorithm decided.
///
/// Two decisions are equal when their public fields and tiers are; the [`receipt`](Self::receipt)
/// an admission carries for its refund and the layer's [`policy`](Self::policy) are not
/// compared.
#[derive(Debug, Clone)]
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
    /// What the admission took, in the algorithm's terms, so that a refund gives back only
    /// that (see [`receipt`](Self::receipt)).
    receipt: u64,
    /// The policy of the layer that made this decision, once a layer has handed it on.
    policy: Option<Arc<str>>,
    /// Whether the key was blocked ([`RateLimiter::block`](crate::RateLimiter::block)).
    blocked: bool,
}

impl Decision {
    /// What `==` and `Hash` look at: the public fields and the tiers.
    fn compared(&self) -> impl PartialEq + std::hash::Hash + '_ {
        let d = self;
        (
            (d.allowed, d.limit, d.remaining),
            (d.reset_after, d.retry_after, d.delay),
            &d.tiers,
        )
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.compared() == other.compared()
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.compared().hash(state);
    }
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
            receipt: 0,
            policy: None,
            blocked: false,
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
            retry_after,
            ..Self::allow(limit, remaining, reset_after)
        }
    }

    /// The same decision, carrying `receipt`: what an algorithm needs to give this admission
    /// back ([`Algorithm::refund`](crate::algorithm::Algorithm::refund)), in its own terms.
    /// For algorithms outside this crate; stores carry it from the check to the refund.
    #[must_use]
    pub fn with_receipt(mut self, receipt: u64) -> Self {
        self.receipt = receipt;
        self
    }

    /// What an allowed request's admission took, in its algorithm's terms (GCRA: the
    /// theoretical arrival time it set; a window: the window it was counted in; 0 when the
    /// decision admitted nothing). Opaque to callers: hand the decision back to
    /// [`RateLimiter::refund`](crate::RateLimiter::refund), which gives back only what this
    /// admission took and only while it still counts.
    pub fn receipt(&self) -> u64 {
        self.receipt
    }

    /// The policy (a quota's name, or tiers' names joined by `+`) of the rate limit layer that
    /// made this decision, for the decision a layer puts in the request's extensions; `None`
    /// for a decision straight from a [`RateLimiter`](crate::RateLimiter).
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// Takes the receipt off the decision, in every tier: an admission nothing can be given
    /// back to (one a store's fallback made, whose receipt the store cannot read). In place,
    /// so that a decision just made is not copied (its tiers only when they are shared).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn forget_receipts(&mut self) {
        self.receipt = 0;
        if let Some(tiers) = &mut self.tiers {
            Arc::make_mut(tiers)
                .iter_mut()
                .for_each(|tier| tier.receipt = 0);
        }
    }

    pub(crate) fn with_policy(mut self, policy: Arc<str>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The same decision, but allowed only after waiting `delay` (shaping).
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Whether the decision lists its tiers' own (tiered quotas).
    #[cfg(feature = "redis")]
    pub(crate) fn is_tiered(&self) -> bool {
        self.tiers.is_some()
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

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up exactly as the layer's
    /// `Retry-After` header says it (never 0 for a positive wait): for answers of your own,
    /// such as a JSON body made by [`on_limited`](crate::RateLimitLayer::on_limited). `None`
    /// when the request is allowed, or can never pass.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Decision;
    ///
    /// let denied = Decision::deny(10, 0, Duration::from_secs(60), Some(Duration::from_millis(5001)));
    /// assert_eq!(denied.retry_after_secs(), Some(6));
    /// let soon = Decision::deny(10, 0, Duration::from_secs(60), Some(Duration::from_nanos(1)));
    /// assert_eq!(soon.retry_after_secs(), Some(1));
    /// assert_eq!(Decision::allow(10, 9, Duration::from_secs(6)).retry_after_secs(), None);
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(ceil_secs)
    }

    /// Whether the request was denied.
    pub fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// Whether the request was denied because its key is blocked
    /// ([`RateLimiter::block`](crate::RateLimiter::block), or a layer's
    /// [`ban`](crate::RateLimitLayer::ban)) rather than by its quota. Not compared by `==`.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// The standing `self` (a peek at the key's state) as a denial of a key blocked for `left`
    /// more: nothing passes and nothing is consumed until then, in every tier, and the state
    /// is fresh no sooner than the block's end.
    pub(crate) fn blocked_for(mut self, left: Duration) -> Decision {
        let block = |d: &mut Decision| {
            d.allowed = false;
            d.remaining = 0;
            d.reset_after = d.reset_after.max(left);
            d.retry_after = Some(left);
            d.delay = Duration::ZERO;
            d.receipt = 0;
            d.blocked = true;
        };
        block(&mut self);
        if let Some(tiers) = &self.tiers {
            let mut tiers: Vec<Decision> = tiers.to_vec();
            tiers.iter_mut().for_each(block);
            // Every tier now waits for the block: the one reported is the last to be fresh
            // again, as when the tiers are decided blocked one by one (the Redis script).
            return Decision::from_tiers(tiers.into());
        }
        self
    }

    /// A list of `len` tier decisions, filled in place by `fill`: this thread's previous list
    /// when no decision holds it any more (so a tiered check allocates nothing in the steady
    /// state), a new one otherwise.
    pub(crate) fn tier_list(len: usize, fill: impl FnOnce(&mut [Decision])) -> Arc<[Decision]> {
        thread_local! {
            static SPARE: Cell<Option<Arc<[Decision]>>> = const { Cell::new(None) };
        }
        let spare = SPARE.try_with(Cell::take).ok().flatten();
        let mut list = match spare {
            Some(list) if list.len() == len && Arc::strong_count(&list) == 1 => list,
            // None yet, another length, or still held by a decision (left to it).
            _ => vec![Decision::allow(0, 0, Duration::ZERO); len].into(),
        };
        // The list is not shared here: `make_mut` never copies it.
        fill(Arc::make_mut(&mut list));
        let _ = SPARE.try_with(|spare| spare.set(Some(Arc::clone(&list))));
        list
    }

    /// The decision reported for a request decided by several tiers (quotas on one key, in
    /// memory or in a shared store): the most restrictive tier's
    /// ([`most_restrictive`](Self::most_restrictive)), waiting as long as any tier asks, with
    /// every tier's own decision in [`tiers`](Self::tiers).
    ///
    /// `decisions` must not be empty.
    pub(crate) fn from_tiers(decisions: Arc<[Decision]>) -> Decision {
        let delay = decisions.iter().map(|d| d.delay).max().unwrap_or_default();
        let mut decision = decisions[Self::most_restrictive(&decisions)].clone();
        if decision.allowed {
            decision = decision.delayed(delay);
        }
        decision.with_tiers(decisions)
    }

    /// The index of the decision that is reported among several (tiers, or stacked layers):
    /// when any is denied, the one that makes the client wait longest (one that can never
    /// pass wins); when all are allowed, the one with the fewest requests remaining; on a tie,
    /// either way, the longest `reset_after` (a blocked key's tiers all wait for the block: the
    /// one reported is the last to be fresh again). 0 for an empty list.
    pub(crate) fn most_restrictive(decisions: &[Decision]) -> usize {
        if decisions.len() < 2 {
            // One layer of one tier: the common case, at no cost.
            return 0;
        }
        let denied = decisions.iter().any(|d| !d.allowed);
        // Greater is more restrictive: a denial's wait (never is longest), else the fewest
        // remaining; then the longest reset. The first of the greatest wins.
        let rank = |d: &Decision| {
            let wait = (!d.allowed, d.retry_after.is_none(), d.retry_after);
            if denied {
                (wait, 0, d.reset_after)
            } else {
                ((false, false, None), u64::MAX - d.remaining, d.reset_after)
            }
        };
        // `max_by_key` keeps the last of equals: from the end, that is the first.
        let ranked = decisions.iter().enumerate().rev();
        ranked.max_by_key(|(_, d)| rank(d)).map_or(0, |(i, _)| i)
    }
}

/// The decisions of every rate limit layer a request passed, outermost first: put in the
/// request's extensions, beside the most restrictive one as [`Decision`], when two or more
/// layers decided (a global limit around a per-route one around a per-plan one). With a single
/// layer only the `Decision` is there.
///
/// ```
/// use axum::{routing::get, Extension, Router};
/// use tollgate::{Decision, Decisions, Quota, RateLimitLayer};
///
/// async fn handler(
///     Extension(strictest): Extension<Decision>,
///     all: Option<Extension<Decisions>>,
/// ) -> String {
///     let layers = all.map_or(1, |Extension(all)| all.len());
///     format!("{} left of {:?}, {layers} layers", strictest.remaining, strictest.policy())
/// }
///
/// let app: Router = Router::new()
///     .route("/", get(handler))
///     .layer(RateLimitLayer::gcra(Quota::per_minute(10).named("plan")))
///     .layer(RateLimitLayer::gcra(Quota::per_minute(100).named("global")));
/// # let _ = app;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions(Vec<Decision>);

impl Decisions {
    /// Each layer's decision, outermost first; [`Decision::policy`] names its layer.
    pub fn iter(&self) -> std::slice::Iter<'_, Decision> {
        self.0.iter()
    }

    /// How many layers decided.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no layer decided (never, for the value a layer puts in the extensions).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The decision of the layer whose policy is `policy`.
    pub fn get(&self, policy: &str) -> Option<&Decision> {
        self.0.iter().find(|d| d.policy() == Some(policy))
    }

    pub(crate) fn push(&mut self, decision: Decision) {
        self.0.push(decision);
    }
}

impl<'a> IntoIterator for &'a Decisions {
    type Item = &'a Decision;
    type IntoIter = std::slice::Iter<'a, Decision>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
