//! The cells that hold one key's state in memory, and update it atomically.
//!
//! Two cells cover every algorithm: [`AtomicCell`] for a state that is one `u64` (GCRA's, the
//! leaky bucket's), updated by compare-and-swap, and [`LockedCell`] for any other state, under
//! a small lock of its own per key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::Held;
use crate::Decision;

/// The memory cell that holds one key's state for the algorithm `A`, and applies `A` to it
/// atomically.
///
/// A check runs in two steps so that as little as possible happens while the key's state is
/// held: [`apply`](Self::apply) updates the state and returns what the decision needs
/// ([`Seen`](Self::Seen)), and [`decide`](Self::decide) builds the [`Decision`] from it
/// afterwards.
pub(crate) trait StateCell<A: Held>: Default + Send + Sync + 'static {
    /// What [`apply`](Self::apply) hands to [`decide`](Self::decide).
    type Seen;

    /// Applies a request of `cost` at `now` to the state in the cell, atomically.
    fn apply(&self, algorithm: &A, now: u64, cost: u64) -> Self::Seen;

    /// The decision for the request that `apply` saw as `seen`.
    fn decide(seen: Self::Seen, algorithm: &A, now: u64, cost: u64) -> Decision;

    /// Replaces the state in the cell by what `f` makes of it (`None`: it stays), atomically,
    /// and returns the state afterwards: a refund ([`Algorithm::refund`](crate::algorithm::Algorithm::refund))
    /// or a charge ([`Algorithm::charge`](crate::algorithm::Algorithm::charge)). `f` may run
    /// more than once.
    fn modify(&self, f: impl Fn(&A::State) -> Option<A::State>) -> A::State;

    /// `f` of the state in the cell.
    fn read<R>(&self, f: impl FnOnce(&A::State) -> R) -> R;

    /// Whether the state in the cell is back to fresh at `now`, so the key may be forgotten.
    fn is_fresh(&self, algorithm: &A, now: u64) -> bool {
        self.read(|state| algorithm.is_fresh(state, now))
    }

    /// The key's standing at `now`: the decision for a request of cost 0.
    fn peek(&self, algorithm: &A, now: u64) -> Decision {
        self.read(|state| algorithm.check(state, now, 0).decision)
    }

    /// A copy of the state in the cell.
    fn state(&self) -> A::State {
        self.read(A::State::clone)
    }

    /// Replaces the state in the cell.
    fn set_state(&self, state: A::State);
}

/// A `u64` state updated by compare-and-swap: requests for one key never block each other and
/// never lose an update. For algorithms whose state is one `u64` (GCRA, the leaky bucket).
#[derive(Debug, Default)]
pub(crate) struct AtomicCell(AtomicU64);

impl AtomicCell {
    /// Applies `f` to the state by compare-and-swap and returns the state `f` was applied to.
    /// `f` returns the next state (`None`: unchanged) and may run more than once when another
    /// thread got there first.
    #[inline]
    fn update(&self, f: impl FnMut(u64) -> Option<u64>) -> u64 {
        let seen = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, f);
        seen.unwrap_or_else(|unchanged| unchanged)
    }
}

impl<A: Held<State = u64>> StateCell<A> for AtomicCell {
    /// The state the request was applied to: the decision is a pure function of it.
    type Seen = u64;

    #[inline]
    fn apply(&self, algorithm: &A, now: u64, cost: u64) -> u64 {
        self.update(|state| algorithm.transition(&state, now, cost))
    }

    #[inline]
    fn decide(seen: u64, algorithm: &A, now: u64, cost: u64) -> Decision {
        // The transition is a pure function of the state it saw, so the state it wrote is
        // computed again here rather than carried out of the compare-and-swap loop.
        let next = algorithm.transition(&seen, now, cost);
        algorithm.decide(&seen, next.as_ref(), now, cost)
    }

    fn modify(&self, f: impl Fn(&u64) -> Option<u64>) -> u64 {
        let seen = self.update(|state| f(&state));
        f(&seen).unwrap_or(seen)
    }

    fn read<R>(&self, f: impl FnOnce(&u64) -> R) -> R {
        f(&self.0.load(Ordering::Acquire))
    }

    fn set_state(&self, state: u64) {
        self.0.store(state, Ordering::Release);
    }
}

/// A state of any type under a small lock of its own per key. The lock is held only while the
/// algorithm runs ([`Algorithm::check_mut`](crate::algorithm::Algorithm::check_mut)); requests for other keys never wait for it.
#[derive(Debug, Default)]
pub(crate) struct LockedCell<S>(Mutex<S>);

impl<S> LockedCell<S> {
    fn lock(&self) -> MutexGuard<'_, S> {
        // An algorithm that panicked mid-update left a state it had been given whole: keep it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<A: Held> StateCell<A> for LockedCell<A::State> {
    /// The decision itself, made while the state was held.
    type Seen = Decision;

    #[inline]
    fn apply(&self, algorithm: &A, now: u64, cost: u64) -> Decision {
        algorithm.check_mut(&mut self.lock(), now, cost)
    }

    #[inline]
    fn decide(seen: Decision, _: &A, _: u64, _: u64) -> Decision {
        seen
    }

    fn modify(&self, f: impl Fn(&A::State) -> Option<A::State>) -> A::State {
        let mut state = self.lock();
        if let Some(next) = f(&state) {
            *state = next;
        }
        state.clone()
    }

    fn read<R>(&self, f: impl FnOnce(&A::State) -> R) -> R {
        f(&self.lock())
    }

    fn set_state(&self, state: A::State) {
        *self.lock() = state;
    }
}
