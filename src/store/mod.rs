//! Stores: where per-key state lives, and how an algorithm is applied to it atomically.
//!
//! A [`Store`] owns state; an [`Algorithm`] owns the math. When a limiter is built it asks the
//! store for a *table*: the store's view of one policy (a name and an algorithm). Each check
//! then hands the table a key, the time and a cost, and the store applies the algorithm to the
//! key's state as one atomic step, so concurrent requests for one key never over-admit.
//!
//! [`MemoryStore`] keeps state in process memory. Policies with different names never share
//! state, even in one store.
//!
//! Each store keeps its own side of every algorithm, so that the algorithms know nothing of
//! stores (the steps to add an algorithm are in the [`algorithm`](crate::algorithm) module
//! docs):
//!
//! - the memory store: one line per algorithm in `store/memory/algorithms.rs`, an
//!   `impl MemoryAlgorithm` that names the cell holding a key's state;
//! - the Redis store: one module per algorithm in `store/redis/algorithms/` (an
//!   `impl RedisAlgorithm` with the parameters each tier hands the script, and the bound
//!   within which it decides exactly, plus a line in that folder's `mod.rs` sealing it) and its
//!   Lua in `store/redis/lua/`; `tests/redis_vectors_*.rs` compare the script with the Rust
//!   reference decision by decision.
//!
//! ```
//! use tollgate::store::MemoryStore;
//! use tollgate::{Quota, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tollgate::Error> {
//! let store = MemoryStore::new();
//! let search = RateLimiter::gcra(Quota::per_second(1).named("search")).with_store(store.clone());
//! let upload = RateLimiter::gcra(Quota::per_second(1).named("upload")).with_store(store);
//!
//! // One store, two policies: "alice" has one request of each.
//! assert!(search.check("alice").await?.allowed);
//! assert!(upload.check("alice").await?.allowed);
//! assert!(!search.check("alice").await?.allowed);
//! # Ok(())
//! # }
//! ```

pub(crate) mod in_flight;
mod memory;
#[cfg(feature = "redis")]
pub mod redis;

pub use self::in_flight::SlotStore;
pub(crate) use self::memory::Blocks;
#[cfg(feature = "redis")]
pub(crate) use self::memory::KeyHasher;
#[cfg(feature = "redis")]
pub(crate) use self::memory::MemorySlots;
pub use self::memory::{
    AtomicCell, LockedCell, MemoryAlgorithm, MemoryStore, MemoryTable, StateCell,
};
#[cfg(feature = "redis")]
pub use self::redis::{Leases, OnFailure, RedisStore};
#[cfg(feature = "redis")]
pub(crate) use self::redis::{LiveRecord, POLL_EVERY};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::{Decision, Error, Key};

/// The future of a change a store makes to one key ([`Store::reset`], [`Store::block`]).
pub type Update = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'static>>;

/// The answer of a store that does not implement `what`.
fn unsupported(what: &str) -> Update {
    let error = Error::misconfigured(format!(
        "this store cannot {what} a key: implement `Store::{what}` for it, or use a store of \
         this crate (MemoryStore, RedisStore)"
    ));
    Box::pin(std::future::ready(Err(error)))
}

/// Which of a layer's limiters a store's table serves: for a store shared by servers, which
/// keeps one block per client for the whole layer and a list of the layer's plans, so that a
/// handle's block and reset reach every plan on every server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tie {
    /// The layer's name: the policy of the quotas it was built with.
    pub(crate) layer: Arc<str>,
    pub(crate) role: Role,
}

/// What a table of a layer is for ([`Tie`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The layer's own quotas (those it was built with, or set live).
    Own,
    /// A per-key plan's.
    Plan,
    /// A ban's count of denials.
    Counter,
}

/// Keeps per-key state and applies an [`Algorithm`] to it atomically.
pub trait Store<A: Algorithm>: Clone + Send + Sync + 'static {
    /// The store's view of one policy, made once when a limiter is built.
    type Table: Clone + Send + Sync + 'static;

    /// The future of one check. A store that decides locally returns a ready future; one that
    /// must wait on the network boxes its future.
    type Future: Future<Output = Result<Decision, Error>> + Send + Unpin + 'static;

    /// The table for the policy named `policy` decided by `algorithm`.
    ///
    /// `shared` is true when the name was given by the user ([`Quota::named`](crate::Quota::named)):
    /// then every limiter with that name and the same algorithm (its options and quota, as its
    /// `Debug` form shows them) shares state, across the process (and across servers, for a
    /// shared store); a limiter whose algorithm differs never reads that state. When it is false the name is only the quota's
    /// text form, and a local store gives this limiter state of its own, so that two layers
    /// that happen to have equal unnamed quotas never share a budget. Different names never
    /// share state.
    ///
    /// # Errors
    ///
    /// When the store cannot keep this policy (a quota too large for it): an error of kind
    /// [`Misconfigured`](crate::ErrorKind::Misconfigured) whose message names the figure and
    /// how to fix it. Limiters are built with this at once, so a policy a store cannot hold
    /// fails where it is built, never per request.
    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> Result<Self::Table, Error>;

    /// Decides one request of `cost` for `key` at `now` (nanoseconds), applying the new state
    /// atomically.
    fn check(table: &Self::Table, key: Key, now: u64, cost: u64) -> Self::Future;

    /// [`check`](Self::check) at the time `now` reads, which the store may read when it needs
    /// it (the memory store reads it once it has found the key, under the read lock of the
    /// key's shard). A store calls `now` exactly once, and decides and updates the state at
    /// that one reading. The default reads it first.
    #[inline]
    fn check_reading(
        table: &Self::Table,
        key: Key,
        now: &impl Fn() -> u64,
        cost: u64,
    ) -> Self::Future {
        Self::check(table, key, now(), cost)
    }

    /// Gives back to `key` what the allowed request `admission` (of `cost`) took
    /// ([`Algorithm::refund`]), for a request that turned out not to count, and answers with
    /// the key's standing afterwards (a decision as for a request of cost 0).
    fn refund(
        table: &Self::Table,
        key: Key,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Self::Future;

    /// A table for the policy named `policy` decided by `algorithm` (the same algorithm with
    /// new quotas, whose name may differ from `previous`'s when the quotas are unnamed) that
    /// takes over from `previous` at `now`: each key keeps what it used there, counted in
    /// requests ([`Algorithm::carried`]). What a live layer's
    /// [`Handle::set_quotas`](crate::layer::Handle::set_quotas) asks of its store.
    ///
    /// # Errors
    ///
    /// The default: an error of kind [`Misconfigured`](crate::ErrorKind::Misconfigured), for a
    /// store that cannot carry usage over (its limits are changed by building new limiters,
    /// which start every key fresh).
    fn succeed(
        &self,
        policy: &str,
        previous: &Self::Table,
        algorithm: &A,
        now: u64,
    ) -> Result<Self::Table, Error> {
        let _ = (policy, previous, algorithm, now);
        Err(Error::misconfigured(
            "this store cannot change a limiter's quotas while keeping what each key used; \
             build a new limiter (or layer) with the new quotas instead",
        ))
    }

    /// `table` (made by [`succeed`](Self::succeed)) once it has carried over what every key
    /// used in the table it took over from, which it no longer needs. Called once the new
    /// table is in use; the default returns it as it is.
    fn settle(&self, table: &Self::Table, now: u64) -> Self::Table {
        let _ = now;
        table.clone()
    }

    /// `key`'s standing at `now`: the decision a request of cost 0 would get (a blocked key's
    /// denial included), consuming nothing, and never making the store keep a key it does not
    /// hold. By default a check of cost 0.
    fn peek(table: &Self::Table, key: Key, now: u64) -> Self::Future {
        Self::check(table, key, now, 0)
    }

    /// Forgets `key`'s state in every tier and lifts its block: its next request finds it
    /// fresh. `now` is the limiter's time, for the store's own bookkeeping (logs).
    ///
    /// Provided so that stores written before it keep compiling: the default answers an error
    /// of kind [`Misconfigured`](crate::ErrorKind::Misconfigured) saying the store cannot
    /// reset keys. The stores of this crate implement it.
    fn reset(table: &Self::Table, key: Key, now: u64) -> Update {
        let _ = (table, key, now);
        unsupported("reset")
    }

    /// Denies every request of `key` from `now` until `now + duration`, leaving its state as
    /// it is ([`RateLimiter::block`](crate::RateLimiter::block) tells the rules: a block never
    /// shortens a longer one; a zero duration blocks nothing).
    ///
    /// Every check of a blocked key, [`peek`](Self::peek) included, must deny it, with
    /// `retry_after` what is left of the block, and consume nothing. The default answers an error of kind
    /// [`Misconfigured`](crate::ErrorKind::Misconfigured) saying the store cannot block keys.
    fn block(table: &Self::Table, key: Key, now: u64, duration: Duration) -> Update {
        let _ = (table, key, now, duration);
        unsupported("block")
    }

    /// Tells the table that its admissions will be refunded
    /// ([`RateLimitLayer::count_if`](crate::RateLimitLayer::count_if) calls it where the layer
    /// is built, [`RateLimiter::refund`](crate::RateLimiter::refund) on its first call), for a
    /// store whose decisions depend on it: the Redis store's [leases](crate::store::Leases)
    /// stop for windows that a refund may start again. The default does nothing.
    fn expect_refunds(table: &Self::Table) {
        let _ = table;
    }

    /// Asks the table to decide every request through the store, with no local shortcut that
    /// changes who is denied: the Redis store's [leases](crate::store::Leases) stop. A layer's
    /// ban counters ask it, so that a ban comes after the stated number of denials. The default
    /// does nothing.
    fn decide_exactly(table: &Self::Table) {
        let _ = table;
    }

    /// Whether the store decides on a clock of its own instead of the `now` it is given (a
    /// `RedisStore` reads Redis `TIME` unless built `with_caller_clock`). A limiter refuses
    /// to be built on such a store with a clock that does not read the system's time
    /// ([`Clock::follows_system_time`](crate::clock::Clock::follows_system_time)): the store
    /// would ignore it. The default is `false`.
    fn own_clock(&self) -> bool {
        false
    }
}
