//! What the memory store needs of each algorithm: the cell that holds a key's state, and the
//! fast path that updates a state of one `u64`. One impl per algorithm.

use super::{AtomicCell, LockedCell, StateCell};
use crate::algorithm::{
    Algorithm, FixedWindow, Gcra, Hybrid, LeakyBucket, SlidingLog, SlidingWindow, Tiered,
    TokenBucket,
};

/// An algorithm the [`MemoryStore`](super::MemoryStore) runs: every algorithm of this crate,
/// and tiers of them. Named in the bounds of the memory store's own methods
/// ([`RateLimiter::check_now`](crate::RateLimiter::check_now)); sealed.
#[doc(hidden)]
#[allow(private_bounds)]
pub trait MemoryAlgorithm: Held {}

impl<A: Held> MemoryAlgorithm for A {}

/// How the memory store holds an algorithm's state: in a [`LockedCell`] for any algorithm, or
/// an [`AtomicCell`] for a state that is one `u64` (updated by compare-and-swap with
/// `Algorithm::transition`, decided afterwards with `Algorithm::decide`).
pub(crate) trait Held: Algorithm {
    /// The cell that holds one key's state.
    type Cell: StateCell<Self>;
}

/// Each algorithm's cell: a `u64` state by compare-and-swap, any other under a lock.
macro_rules! held {
    ($cell:ty: $($algorithm:ty),*) => {$(
        impl Held for $algorithm {
            type Cell = $cell;
        }
    )*};
}

held!(AtomicCell: Gcra, LeakyBucket);
held!(LockedCell<Self::State>: TokenBucket, FixedWindow, SlidingWindow, SlidingLog, Hybrid);

impl<A: MemoryAlgorithm> Held for Tiered<A> {
    type Cell = LockedCell<Self::State>;
}
