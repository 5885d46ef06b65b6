//! The algorithms' math, as pure functions of `(state, now, cost)`.
//!
//! An algorithm never reads a clock and never owns storage: a store hands it a key's state and
//! the time, and applies the new state it returns atomically. This keeps every algorithm exact
//! under test (time is just a number) and lets every store share one
//! reference implementation.
//!
//! Times are integer nanoseconds since the clock's origin.
//!
//! ```
//! use tollgate::algorithm::{Algorithm, Gcra};
//! use tollgate::Quota;
//!
//! let gcra = Gcra::new(&Quota::per_minute(3)); // one request every 20 s, 3 at once
//! let mut tat = 0; // the fresh state
//! for _ in 0..3 {
//!     let outcome = gcra.check(&tat, 0, 1);
//!     assert!(outcome.decision.allowed);
//!     tat = outcome.state.unwrap();
//! }
//! let denied = gcra.check(&tat, 1_000_000_000, 1); // one second later
//! assert!(!denied.decision.allowed);
//! assert_eq!(denied.decision.retry_after, Some(std::time::Duration::from_secs(19)));
//! ```
//!
//! # Adding an algorithm
//!
//! This module knows nothing of stores; each store keeps its own side of every algorithm.
//! Adding one takes:
//!
//! 1. **One file here**, `algorithm/<name>.rs`: the algorithm's type (its figures, from a
//!    [`Quota`]), its state (`Default` is fresh), and `impl Algorithm` with `check` as a pure
//!    function of `(state, now, cost)` in integer nanoseconds, `is_fresh`, and
//!    `refund` / `refunds` when it can give capacity back. Its `Debug` form names every figure
//!    that gives its state a meaning. Public accessors expose the figures a store needs
//!    (`limit()`, `period_nanos()`, ...). Export it from this module, and add a constructor to
//!    `RateLimiter` (and the layer) beside the others.
//! 2. **Its script module in the shared store**: the algorithm's Lua script and the trait impl
//!    that hands it each tier's parameters and the bound within which it decides exactly, in
//!    that store's `algorithms` folder (the [`store`](crate::store) module docs name the
//!    files). Parity tests run the script and `check` on the same random sequences.
//! 3. **One registry line per store**: in `store/memory/algorithms.rs`,
//!    `impl MemoryAlgorithm for <Name> { type Cell = LockedCell<<Name>State>; }`
//!    ([`AtomicCell`](crate::store::AtomicCell) when the state is one `u64`), overriding
//!    `check_mut` only when an in-place update saves work.

mod divisor;
mod fixed_window;
mod gcra;
mod hybrid;
mod leaky_bucket;
mod sliding_log;
mod sliding_window;
mod tiered;
mod token_bucket;

pub use self::fixed_window::{FixedWindow, FixedWindowState};
pub use self::gcra::Gcra;
pub use self::hybrid::{Hybrid, HybridState};
pub use self::leaky_bucket::LeakyBucket;
pub use self::sliding_log::{SlidingLog, SlidingLogState};
pub use self::sliding_window::{SlidingWindow, SlidingWindowState};
pub use self::tiered::{Quotas, Tiered, TieredState};
pub use self::token_bucket::{TokenBucket, TokenBucketState};

use crate::Decision;
#[cfg(doc)]
use crate::Quota;

/// An algorithm: a pure function from a key's state, the time and the request's cost to a
/// decision and the key's next state.
///
/// Its `Debug` form names the algorithm and every option that gives its state a meaning (the
/// quota's figures, sub-windows, shaping): a store keeps the states of limiters that share a
/// name apart unless that form is the same, so that one never reads, or resets, another's.
pub trait Algorithm: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// A key's state. `Default` is the state of a key never seen (or back to fresh).
    type State: Clone + Default + Send + Sync + 'static;

    /// Decides one request of `cost` at `now` (nanoseconds) against `state`. Cost 0 peeks:
    /// it reports the key's standing and changes nothing.
    fn check(&self, state: &Self::State, now: u64, cost: u64) -> Outcome<Self::State>;

    /// Gives back what the allowed request `admission` took (it cost `cost`), for a request
    /// that turned out not to count (the layer's `count_if`), and only while that still
    /// counts: capacity that has come back with time is not given back twice, and capacity
    /// that a later admission stands on is not given back at all. `admission` is the decision
    /// the check returned; its [`receipt`](Decision::receipt) says, in the algorithm's terms,
    /// what it took (the window it was counted in, the slot it took in a schedule). Returns
    /// the next state, or `None` when there is nothing to give back or the algorithm cannot
    /// give capacity back (the default: see [`refunds`](Self::refunds)).
    ///
    /// The guarantee every refund keeps: the requests that count (those not refunded) never
    /// exceed the quota in any window or burst, whatever the order and timing of refunds.
    #[inline]
    fn refund(
        &self,
        state: &Self::State,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Option<Self::State> {
        let _ = (state, admission, now, cost);
        None
    }

    /// Whether [`refund`](Self::refund) can give capacity back. A layer's `count_if` refuses
    /// an algorithm that cannot, where the layer is built.
    #[inline]
    fn refunds(&self) -> bool {
        false
    }

    /// Whether `state` is back to fresh at `now`, so the store may forget the key.
    fn is_fresh(&self, state: &Self::State, now: u64) -> bool;

    /// Whether the algorithm reads the wall clock ([`Clock::wall_nanos`](crate::clock::Clock::wall_nanos):
    /// nanoseconds since the UNIX epoch) rather than the clock's monotonic time: calendar
    /// windows ([`FixedWindow::aligned`]) do. A limiter then hands every check and refund the
    /// wall-clock time; the Redis store decides on the server's `TIME`, which is wall-clock
    /// time already.
    #[inline]
    fn wall_clock(&self) -> bool {
        false
    }

    /// A key's state under `self` when its quotas change from `from`'s to `self`'s at `now`
    /// (a live layer's [`Handle::set_quotas`](crate::layer::Handle::set_quotas)): the key keeps
    /// what it used, counted in requests, not a fresh budget.
    ///
    /// The default reads what the key used under `from` (what a fresh key could take at once,
    /// less what this one can: [`Decision::remaining`]) and charges it again at `now` on a fresh
    /// state of `self`, up to what a fresh key may take at once. So a key that used 2 of 2 a
    /// minute and moves to 10 a minute has 8 left; one that used 1 of 10 and moves to 2 has 1
    /// left; one that used 8 of 10 and moves to 2 has none, and gets more as `self` gives them
    /// back. Usage is charged as of `now`, so it comes back on `self`'s schedule from then:
    /// never sooner than a key that had always been under `self` would get it back after using
    /// as much at `now`, and a key never gets more, over the change, than `from` allowed before
    /// it and `self` allows after it.
    fn carried(&self, from: &Self, state: &Self::State, now: u64) -> Self::State {
        charged(self, used(from, state, now), now)
    }
}

/// An algorithm that can shape instead of reject: a request that would pass within a wait
/// is allowed, reserves its place, and reports the wait in [`Decision::delay`], which the
/// layer honours before calling the service (nginx's `burst` without `nodelay`).
pub trait Shaping: Algorithm {
    /// The same algorithm, allowing requests that can pass within `max_delay` after a wait.
    #[must_use]
    fn with_max_delay(&self, max_delay: std::time::Duration) -> Self;
}

impl Shaping for Gcra {
    fn with_max_delay(&self, max_delay: std::time::Duration) -> Self {
        self.max_delay(max_delay)
    }
}

impl Shaping for TokenBucket {
    fn with_max_delay(&self, max_delay: std::time::Duration) -> Self {
        self.max_delay(max_delay)
    }
}

impl<A: Shaping> Shaping for Tiered<A> {
    fn with_max_delay(&self, max_delay: std::time::Duration) -> Self {
        Tiered::new(self.tiers().iter().map(|t| t.with_max_delay(max_delay)))
    }
}

/// An algorithm that estimates a sliding window from counters: how many per period.
pub trait SubWindows: Algorithm {
    /// The same algorithm with `k` counters per period.
    ///
    /// # Panics
    ///
    /// When `k` is out of the algorithm's range.
    #[must_use]
    #[track_caller]
    fn with_sub_windows(&self, k: usize) -> Self;
}

impl SubWindows for SlidingWindow {
    fn with_sub_windows(&self, k: usize) -> Self {
        (*self).sub_windows(k)
    }
}

impl<A: SubWindows> SubWindows for Tiered<A> {
    fn with_sub_windows(&self, k: usize) -> Self {
        Tiered::new(self.tiers().iter().map(|t| t.with_sub_windows(k)))
    }
}

/// What a key whose state under `algorithm` is `state` has used at `now`, in requests: what a
/// fresh key could take at once, less what this one can.
pub(crate) fn used<A: Algorithm>(algorithm: &A, state: &A::State, now: u64) -> u64 {
    let could = algorithm
        .check(&A::State::default(), now, 0)
        .decision
        .remaining;
    let can = algorithm.check(state, now, 0).decision.remaining;
    could.saturating_sub(can)
}

/// The state under `algorithm` of a key charged `used` requests at `now`, up to what a fresh key
/// may take at once.
pub(crate) fn charged<A: Algorithm>(algorithm: &A, used: u64, now: u64) -> A::State {
    let fresh = A::State::default();
    let room = algorithm.check(&fresh, now, 0).decision.remaining;
    match used.min(room) {
        0 => fresh,
        charge => algorithm
            .check(&fresh, now, charge)
            .state
            .unwrap_or_default(),
    }
}

/// An algorithm whose windows can follow the calendar ([`FixedWindow::aligned`]).
pub trait Aligned: Algorithm {
    /// The same algorithm with windows aligned on the UNIX epoch.
    ///
    /// # Panics
    ///
    /// When a period is too short to align ([`FixedWindow::aligned`]).
    #[must_use]
    #[track_caller]
    fn with_aligned_windows(&self) -> Self;
}

impl Aligned for FixedWindow {
    fn with_aligned_windows(&self) -> Self {
        (*self).aligned()
    }
}

impl<A: Aligned> Aligned for Tiered<A> {
    fn with_aligned_windows(&self) -> Self {
        Tiered::new(self.tiers().iter().map(Aligned::with_aligned_windows))
    }
}

/// What [`Algorithm::check`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outcome<S> {
    /// The decision for the request.
    pub decision: Decision,
    /// The key's next state; `None` when the state does not change (a denial or a peek).
    pub state: Option<S>,
}

impl<S> Outcome<S> {
    /// An outcome.
    pub fn new(decision: Decision, state: Option<S>) -> Self {
        Self { decision, state }
    }
}
