//! The algorithms, as values: [`Gcra`], [`TokenBucket`], [`LeakyBucket`], [`FixedWindow`],
//! [`SlidingWindow`], [`SlidingLog`], [`Hybrid`], and [`Tiered`] quotas of any of them. A
//! [`RateLimiter`](crate::RateLimiter) names its algorithm in its type, as in
//! `RateLimiter<Gcra, MemoryStore>`; the constructors (`RateLimiter::gcra`, ...) build it from
//! the quotas.
//!
//! The math of each algorithm is a pure function of a key's state, the time (integer
//! nanoseconds since the clock's origin) and the request's cost: it never reads a clock and
//! never owns storage. A store applies it atomically, so every algorithm is exact under test
//! (time is just a number, moved by a [`ManualClock`](crate::clock::ManualClock)).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::algorithm::Gcra;
//! use tollgate::clock::ManualClock;
//! use tollgate::store::MemoryStore;
//! use tollgate::{Quota, RateLimiter};
//!
//! let clock = ManualClock::new();
//! // One request every 20 s, 3 at once.
//! let limiter: RateLimiter<Gcra, MemoryStore, ManualClock> =
//!     RateLimiter::gcra(Quota::per_minute(3)).with_clock(clock.clone());
//! for _ in 0..3 {
//!     assert!(limiter.check_now("k").allowed);
//! }
//! clock.advance(Duration::from_secs(1));
//! let denied = limiter.check_now("k");
//! assert!(!denied.allowed);
//! assert_eq!(denied.retry_after, Some(Duration::from_secs(19)));
//! ```
//!
//! The traits here ([`Algorithm`], [`Quotas`], [`Shaping`], [`SubWindows`], [`Aligned`]) are
//! sealed: they are named in bounds, and implemented by this crate's algorithms only. Adding an
//! algorithm takes one file here (its figures, its state, `impl Algorithm`), its Lua script in
//! the Redis store, its name in a list in `store/memory/algorithms.rs`, and a constructor beside the
//! others.

/// Forwards each listed method to the algorithm's `gcra` (the leaky and token buckets are
/// GCRA's schedule).
macro_rules! to_gcra {
    ($($(#[$attr:meta])* $vis:vis $name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {$(
        $(#[$attr])*
        #[inline]
        $vis fn $name(&self, $($arg: $ty),*) -> $out {
            self.gcra.$name($($arg),*)
        }
    )*};
}

mod divisor;
mod few;
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

/// Implemented by the algorithms of this crate only: what seals [`Algorithm`].
pub(crate) trait Sealed {}

impl Sealed for Gcra {}
impl Sealed for TokenBucket {}
impl Sealed for LeakyBucket {}
impl Sealed for FixedWindow {}
impl Sealed for SlidingWindow {}
impl Sealed for SlidingLog {}
impl Sealed for Hybrid {}
impl<A: Algorithm> Sealed for Tiered<A> {}

/// The limit and the period of each algorithm that counts requests in a window of a period.
macro_rules! window_figures {
    ($($algorithm:ident),*) => {$(
        impl $algorithm {
            /// The limit: how many requests a window holds.
            pub fn limit(&self) -> u64 {
                self.limit
            }

            /// The period (the window's length) in nanoseconds.
            pub fn period_nanos(&self) -> u64 {
                self.period
            }
        }
    )*};
}

window_figures!(FixedWindow, SlidingWindow, SlidingLog, Hybrid);

/// An algorithm of this crate: what a [`RateLimiter`](crate::RateLimiter) names in its type and
/// bounds. Sealed; its items are the crate's own.
///
/// Internally a pure function from a key's state, the time and the request's cost to a
/// decision and the key's next state. Its `Debug` form names the algorithm and every option
/// that gives its state a meaning (the quota's figures, sub-windows, shaping): a store keeps
/// the states of limiters that share a name apart unless that form is the same.
#[allow(private_bounds)]
pub trait Algorithm: Sealed + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// A key's state. `Default` is the state of a key never seen (or back to fresh).
    #[doc(hidden)]
    type State: Clone + Default + Send + Sync + 'static;

    /// Decides one request of `cost` at `now` (nanoseconds) against `state`. Cost 0 peeks:
    /// it reports the key's standing and changes nothing.
    #[doc(hidden)]
    fn check(&self, state: &Self::State, now: u64, cost: u64) -> Outcome<Self::State>;

    /// [`check`](Self::check) in place: decides the request and, when the state changes,
    /// writes the next state into `state`. Algorithms whose state is large (a log, counters)
    /// override it to update the state without building a new one. Must agree with `check`.
    #[doc(hidden)]
    #[inline]
    fn check_mut(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        let outcome = self.check(state, now, cost);
        if let Some(next) = outcome.state {
            *state = next;
        }
        outcome.decision
    }

    /// The next state alone: `check(state, now, cost).state`. The memory store runs this in
    /// its compare-and-swap loop for a state of one `u64`, and decides afterwards.
    #[doc(hidden)]
    #[inline]
    fn transition(&self, state: &Self::State, now: u64, cost: u64) -> Option<Self::State> {
        self.check(state, now, cost).state
    }

    /// The decision for a request that found `state`, where `next` is what
    /// [`transition`](Self::transition) returned for it: always `check(state, now,
    /// cost).decision`, made faster from `next` where it can be.
    #[doc(hidden)]
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

    /// Gives back what the allowed request `admission` took (it cost `cost`), for a request
    /// that turned out not to count (the layer's `count_if`), and only while that still
    /// counts: capacity that has come back with time is not given back twice, and capacity
    /// that a later admission stands on is not given back at all. `admission` is the decision
    /// the check returned; its [`receipt`](Decision::receipt) says, in the algorithm's terms,
    /// what it took (the window it was counted in, the slot it took in a schedule). Returns
    /// the next state, or `None` when there is nothing to give back or the algorithm cannot
    /// give capacity back (the default: see [`REFUNDS`](Self::REFUNDS)).
    ///
    /// The guarantee every refund keeps: the requests that count (those not refunded) never
    /// exceed the quota in any window or burst, whatever the order and timing of refunds.
    #[doc(hidden)]
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
    #[doc(hidden)]
    const REFUNDS: bool = false;

    /// [`REFUNDS`](Self::REFUNDS), for a value at hand.
    #[doc(hidden)]
    #[inline]
    fn refunds(&self) -> bool {
        Self::REFUNDS
    }

    /// Charges `cost` more at `now`, whatever the key has left: what a request's true cost
    /// above its reservation adds once it is known (the layer's `settle`). The state may go
    /// past the quota: the key is then in debt, denied until the debt is paid back at the
    /// quota's rate. `None` when the algorithm cannot carry a debt (the default: see
    /// [`SETTLES`](Self::SETTLES)) or `cost` is 0.
    #[doc(hidden)]
    #[inline]
    fn charge(&self, state: &Self::State, now: u64, cost: u64) -> Option<Self::State> {
        let _ = (state, now, cost);
        None
    }

    /// Whether [`charge`](Self::charge) can put a key in debt (and [`refund`](Self::refund)
    /// give part of an admission back). A layer's `settle` refuses an algorithm that cannot,
    /// where the layer is built.
    #[doc(hidden)]
    const SETTLES: bool = false;

    /// [`SETTLES`](Self::SETTLES), for a value at hand.
    #[doc(hidden)]
    #[inline]
    fn settles(&self) -> bool {
        Self::SETTLES
    }

    /// What a key whose state is `state` owes at `now` past the point where it is denied (the
    /// debt a [`charge`](Self::charge) left), in cost units, rounded up: 0 when it is not in
    /// debt, and always for an algorithm that cannot carry one.
    #[doc(hidden)]
    #[inline]
    fn debt(&self, state: &Self::State, now: u64) -> u64 {
        let _ = (state, now);
        0
    }

    /// Whether `state` is back to fresh at `now`, so the store may forget the key.
    #[doc(hidden)]
    fn is_fresh(&self, state: &Self::State, now: u64) -> bool;

    /// Whether the algorithm reads the wall clock ([`Clock::wall_nanos`](crate::clock::Clock::wall_nanos):
    /// nanoseconds since the UNIX epoch) rather than the clock's monotonic time: calendar
    /// windows ([`FixedWindow::aligned`]) do. A limiter then hands every check and refund the
    /// wall-clock time; the Redis store decides on the server's `TIME`, which is wall-clock
    /// time already.
    #[doc(hidden)]
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
    ///
    /// A debt ([`charge`](Self::charge)) is never forgiven: what the key owes under `from`
    /// ([`debt`](Self::debt)) is charged on top, whatever `self` allows at once. A key that owes
    /// 3 past a burst of 5 owes 3 past a burst of 2 (or of 5), paid back at `self`'s rate; one
    /// that moves to a burst of 20 has used 8 of it, as a key that used 8 under `self`.
    #[doc(hidden)]
    fn carried(&self, from: &Self, state: &Self::State, now: u64) -> Self::State {
        owing(self, used(from, state, now), from.debt(state, now), now)
    }
}

/// An algorithm that can shape instead of reject: a request that would pass within a wait
/// is allowed, reserves its place, and reports the wait in [`Decision::delay`], which the
/// layer honours before calling the service (nginx's `burst` without `nodelay`).
pub trait Shaping: Algorithm {
    /// The same algorithm, allowing requests that can pass within `max_delay` after a wait.
    #[must_use]
    #[doc(hidden)]
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
    #[doc(hidden)]
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

/// The state under `algorithm` of a key charged `used` requests at `now`, up to what a fresh
/// key may take at once, then `debt` more whatever the key may take at once
/// ([`Algorithm::charge`]): the state of a key that used `used` and owes `debt` past it.
pub(crate) fn owing<A: Algorithm>(algorithm: &A, used: u64, debt: u64, now: u64) -> A::State {
    let fresh = A::State::default();
    let room = algorithm.check(&fresh, now, 0).decision.remaining;
    let state = match used.min(room) {
        0 => fresh,
        charge => algorithm
            .check(&fresh, now, charge)
            .state
            .unwrap_or_default(),
    };
    match debt {
        0 => state,
        debt => algorithm.charge(&state, now, debt).unwrap_or(state),
    }
}

/// An algorithm whose windows can follow the calendar ([`FixedWindow::aligned`]).
pub trait Aligned: Algorithm {
    /// The same algorithm with windows aligned on the UNIX epoch.
    ///
    /// # Panics
    ///
    /// When a period is too short to align ([`FixedWindow::aligned`]).
    #[doc(hidden)]
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

/// The time from `now` until `at` (nanoseconds, wide enough for a sum past `u64::MAX`): zero
/// once it has passed, and as long as a `Duration` of `u64::MAX` nanoseconds at most.
pub(crate) fn until(at: u128, now: u64) -> std::time::Duration {
    let wait = at.saturating_sub(u128::from(now));
    std::time::Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// [`Algorithm::check`] for an algorithm that decides first (`evaluated`: the decision, and
/// where an admission goes) and then writes an admission into a copy of the state: `admit`
/// writes it and returns the admission's receipt. The state is copied only for an admission.
pub(crate) fn admitted<S: Clone, P>(
    state: &S,
    (decision, place): (Decision, Option<P>),
    admit: impl FnOnce(&mut S, P) -> u64,
) -> Outcome<S> {
    let Some(place) = place else {
        return Outcome::new(decision, None);
    };
    let mut next = state.clone();
    let receipt = admit(&mut next, place);
    Outcome::new(decision.with_receipt(receipt), Some(next))
}

/// What [`Algorithm::check`] returns.
#[doc(hidden)]
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
