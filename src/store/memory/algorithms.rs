//! What the memory store needs of each algorithm: the cell that holds a key's state, and the
//! fast paths that update it. One impl per algorithm: the store's registry of algorithms.

use super::{AtomicCell, LockedCell, StateCell};
use crate::algorithm::{
    Algorithm, FixedWindow, FixedWindowState, Gcra, Hybrid, HybridState, LeakyBucket, SlidingLog,
    SlidingLogState, SlidingWindow, SlidingWindowState, Tiered, TieredState, TokenBucket,
    TokenBucketState,
};
use crate::Decision;

/// An algorithm the [`MemoryStore`](super::MemoryStore) can run: how a key's state is held
/// ([`Cell`](Self::Cell)), and how it is updated while held.
///
/// Every algorithm of this crate, and tiers of them, implement it. For an algorithm of your
/// own, one line is enough: its state under a lock per key, updated by
/// [`Algorithm::check`].
///
/// ```
/// use tollgate::algorithm::{Algorithm, Outcome};
/// use tollgate::store::{LockedCell, MemoryAlgorithm};
/// use tollgate::{Decision, Quota, RateLimiter};
/// use std::time::Duration;
///
/// /// At most `limit` requests, ever.
/// #[derive(Debug, Clone)]
/// struct Lifetime {
///     limit: u64,
/// }
///
/// impl Algorithm for Lifetime {
///     type State = u64; // requests so far
///
///     fn check(&self, used: &u64, _now: u64, cost: u64) -> Outcome<u64> {
///         let left = self.limit - used;
///         if cost > left {
///             return Outcome::new(Decision::deny(self.limit, left, Duration::MAX, None), None);
///         }
///         let decision = Decision::allow(self.limit, left - cost, Duration::MAX);
///         Outcome::new(decision, (cost > 0).then_some(used + cost))
///     }
///
///     fn is_fresh(&self, used: &u64, _now: u64) -> bool {
///         *used == 0
///     }
/// }
///
/// impl MemoryAlgorithm for Lifetime {
///     type Cell = LockedCell<u64>;
/// }
///
/// let limiter = RateLimiter::from_parts(Quota::per_day(2), Lifetime { limit: 2 });
/// assert!(limiter.check_now("k").allowed);
/// assert!(limiter.check_now("k").allowed);
/// assert!(!limiter.check_now("k").allowed);
/// ```
pub trait MemoryAlgorithm: Algorithm {
    /// The cell that holds one key's state: [`LockedCell<Self::State>`](LockedCell) for any
    /// algorithm, or [`AtomicCell`] for a state that is one `u64` (updated by
    /// compare-and-swap, with [`transition`](Self::transition) and [`decide`](Self::decide)).
    type Cell: StateCell<Self>;

    /// The next state alone: `check(state, now, cost).state`. An [`AtomicCell`] runs this in
    /// its compare-and-swap loop and decides afterwards, so an algorithm whose transition is
    /// cheaper than its decision overrides it.
    #[inline]
    fn transition(&self, state: &Self::State, now: u64, cost: u64) -> Option<Self::State> {
        self.check(state, now, cost).state
    }

    /// The decision for a request of `cost` at `now` that found `state`, where `next` is what
    /// [`transition`](Self::transition) returned for it: always
    /// `check(state, now, cost).decision`. An [`AtomicCell`] calls this after its
    /// compare-and-swap, so an algorithm that decides faster from the next state overrides it.
    #[inline]
    fn decide(
        &self,
        state: &Self::State,
        next: Option<&Self::State>,
        now: u64,
        cost: u64,
    ) -> Decision {
        let _ = next;
        self.check(state, now, cost).decision
    }

    /// [`check`](Algorithm::check) in place: decides the request and, when the state changes,
    /// writes the next state into `state`. A [`LockedCell`] calls this under its lock, so an
    /// algorithm whose state is large (a log of timestamps) overrides it to update the state
    /// without building a new one. Must agree with `check` exactly.
    #[inline]
    fn check_mut(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        let outcome = self.check(state, now, cost);
        if let Some(next) = outcome.state {
            *state = next;
        }
        outcome.decision
    }
}

impl MemoryAlgorithm for Gcra {
    type Cell = AtomicCell;

    #[inline]
    fn transition(&self, &tat: &u64, now: u64, cost: u64) -> Option<u64> {
        self.next_tat(tat, now, cost)
    }

    #[inline]
    fn decide(&self, &tat: &u64, next: Option<&u64>, now: u64, cost: u64) -> Decision {
        self.decision_after(tat, next.copied(), now, cost)
    }
}

impl MemoryAlgorithm for LeakyBucket {
    type Cell = AtomicCell;

    #[inline]
    fn transition(&self, state: &u64, now: u64, cost: u64) -> Option<u64> {
        MemoryAlgorithm::transition(self.gcra(), state, now, cost)
    }

    #[inline]
    fn decide(&self, state: &u64, next: Option<&u64>, now: u64, cost: u64) -> Decision {
        MemoryAlgorithm::decide(self.gcra(), state, next, now, cost)
    }
}

impl MemoryAlgorithm for TokenBucket {
    type Cell = LockedCell<TokenBucketState>;
}

impl MemoryAlgorithm for FixedWindow {
    type Cell = LockedCell<FixedWindowState>;
}

impl MemoryAlgorithm for SlidingWindow {
    type Cell = LockedCell<SlidingWindowState>;

    /// Updates the counters in place, without allocating once the key has them.
    #[inline]
    fn check_mut(&self, state: &mut SlidingWindowState, now: u64, cost: u64) -> Decision {
        self.check_in_place(state, now, cost)
    }
}

impl MemoryAlgorithm for SlidingLog {
    type Cell = LockedCell<SlidingLogState>;

    /// Updates the log in place, without allocating once it has reached its working size.
    #[inline]
    fn check_mut(&self, state: &mut SlidingLogState, now: u64, cost: u64) -> Decision {
        self.check_in_place(state, now, cost)
    }
}

impl MemoryAlgorithm for Hybrid {
    type Cell = LockedCell<HybridState>;
}

impl<A: MemoryAlgorithm> MemoryAlgorithm for Tiered<A> {
    type Cell = LockedCell<TieredState<A::State>>;

    /// Updates each tier in place with the tier's own [`check_mut`](MemoryAlgorithm::check_mut).
    fn check_mut(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        self.check_tiers(state, now, cost, |tier, s| tier.check_mut(s, now, cost))
    }
}
