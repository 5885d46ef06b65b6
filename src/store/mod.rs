//! Stores: where per-key state lives, and how an algorithm is applied to it atomically.
//!
//! [`MemoryStore`] keeps state in process memory (the default); `RedisStore` (feature
//! `redis`) keeps it in Redis, so that one limit holds across servers. Policies with different
//! names never share state, even in one store.
//!
//! [`Store`] is sealed: it is named in bounds (`RateLimiter<A, St>` takes any `St: Store<A>`),
//! and implemented by these two stores only. Each keeps its own side of every algorithm: the
//! memory store one name per algorithm in `store/memory/algorithms.rs`, the Redis store one
//! module per algorithm in `store/redis/algorithms/` and its Lua in `store/redis/lua/`, checked
//! against the Rust reference decision by decision by the Redis parity tests.
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
pub use self::memory::MemoryStore;
#[cfg(feature = "redis")]
pub(crate) use self::memory::{KeyHasher, MemorySlots};
pub use self::memory::{MemoryAlgorithm, MemoryTable};
#[cfg(feature = "redis")]
pub use self::redis::{Leases, OnFailure, RedisStore};
#[cfg(feature = "redis")]
pub(crate) use self::redis::{LiveRecord, POLL_EVERY};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::{Decision, Error, Key};

/// The future of a change a store makes to one key ([`Store::reset`], [`Store::block`]).
pub(crate) type Update = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'static>>;

/// A store's answer still on its way (a remote store), boxed once it has to wait.
pub(crate) type BoxedDecision = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send>>;

/// The answer of a check, a refund or a request for slots: at once (the memory store: nothing
/// boxed), or later.
pub(crate) enum DecisionFuture {
    /// Decided at once; `None` once taken.
    Ready(Option<Result<Decision, Error>>),
    /// Waiting for the store.
    Waiting(BoxedDecision),
}

impl Future for DecisionFuture {
    type Output = Result<Decision, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            DecisionFuture::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => unreachable!("DecisionFuture polled after completion"),
            },
            DecisionFuture::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

impl DecisionFuture {
    /// `future`'s answer if it has one at once (a local store), else `future` boxed. A future
    /// polled here with a waker that does nothing is polled again, with the task's waker,
    /// before anyone waits on it.
    #[inline]
    pub(crate) fn of<F>(mut future: F) -> Self
    where
        F: Future<Output = Result<Decision, Error>> + Send + Unpin + 'static,
    {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut future).poll(&mut cx) {
            Poll::Ready(result) => DecisionFuture::Ready(Some(result)),
            Poll::Pending => DecisionFuture::Waiting(Box::pin(future)),
        }
    }
}

/// What seals [`Store`]: implemented by the stores of this crate, and by the stand-ins for a
/// remote store that the crate's own tests write. Not part of the API.
#[doc(hidden)]
pub trait Sealed {}

impl Sealed for MemoryStore {}
#[cfg(feature = "redis")]
impl Sealed for RedisStore {}

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

/// A store of this crate ([`MemoryStore`], `RedisStore`): what a
/// [`RateLimiter`](crate::RateLimiter) names in its type and bounds. Sealed; its items are the
/// crate's own.
///
/// Internally it keeps per-key state and applies an [`Algorithm`] to it atomically. When a
/// limiter is built it asks the store for a *table*, the store's view of one policy (a name
/// and an algorithm); each check hands the table a key, the time and a cost.
pub trait Store<A: Algorithm>: Sealed + Clone + Send + Sync + 'static {
    /// The store's view of one policy, made once when a limiter is built.
    #[doc(hidden)]
    type Table: Clone + Send + Sync + 'static;

    /// The future of one check: ready in memory, a round trip for Redis.
    #[doc(hidden)]
    type Future: Future<Output = Result<Decision, Error>> + Send + Unpin + 'static;

    /// The table for the policy named `policy` decided by `algorithm`.
    ///
    /// `shared` is true when the name was given by the user ([`Quota::named`](crate::Quota::named)):
    /// then every limiter with that name and the same algorithm (its `Debug` form) shares state,
    /// across the process (and across servers, for a shared store). When it is false the name
    /// is only the quota's text form, and a local store gives this limiter state of its own.
    /// Different names never share state. Fails (kind `Misconfigured`, naming the figure)
    /// when the store cannot keep this policy, so that it fails where it is built.
    #[doc(hidden)]
    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> Result<Self::Table, Error>;

    /// Decides one request of `cost` for `key` at `now` (nanoseconds), applying the new state
    /// atomically.
    #[doc(hidden)]
    fn check(table: &Self::Table, key: Key, now: u64, cost: u64) -> Self::Future;

    /// [`check`](Self::check) at the time `now` reads, read exactly once, when the store needs
    /// it (the memory store reads it under the read lock of the key's shard, once it has found
    /// the key). The default reads it first.
    #[doc(hidden)]
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
    /// ([`Algorithm::refund`]), and answers with the key's standing afterwards.
    #[doc(hidden)]
    fn refund(
        table: &Self::Table,
        key: Key,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Self::Future;

    /// Charges `key` `cost` more at `now`, whatever it has left ([`Algorithm::charge`]: a
    /// debt), and answers with the key's standing afterwards.
    #[doc(hidden)]
    fn charge(table: &Self::Table, key: Key, now: u64, cost: u64) -> Self::Future;

    /// A table for `algorithm` (new quotas of the same shape, named `policy`) that takes over
    /// from `previous` at `now`: each key keeps what it used there ([`Algorithm::carried`]).
    /// What [`Handle::set_quotas`](crate::layer::Handle::set_quotas) asks of its store.
    #[doc(hidden)]
    fn succeed(
        &self,
        policy: &str,
        previous: &Self::Table,
        algorithm: &A,
        now: u64,
    ) -> Result<Self::Table, Error>;

    /// `table` (made by [`succeed`](Self::succeed)) once it has carried over what every key
    /// used in the table it took over from, which it no longer needs.
    #[doc(hidden)]
    fn settle(&self, table: &Self::Table, now: u64) -> Self::Table;

    /// `key`'s standing at `now`: the decision a request of cost 0 would get (a blocked key's
    /// denial included), consuming nothing and never making the store keep a new key.
    #[doc(hidden)]
    fn peek(table: &Self::Table, key: Key, now: u64) -> Self::Future;

    /// Forgets `key`'s state in every tier and lifts its block: its next request finds it
    /// fresh. `now` is the limiter's time, for the store's own bookkeeping.
    #[doc(hidden)]
    fn reset(table: &Self::Table, key: Key, now: u64) -> Update;

    /// Denies every request of `key` from `now` until `now + duration` (a block never
    /// shortens a longer one), leaving its state as it is: every check, `peek` included,
    /// denies it with `retry_after` what is left of the block, and consumes nothing.
    #[doc(hidden)]
    fn block(table: &Self::Table, key: Key, now: u64, duration: Duration) -> Update;

    /// Tells the table that its admissions will be refunded (`count_if`, `RateLimiter::refund`):
    /// the Redis store's leases stop for windows that a refund may start again.
    #[doc(hidden)]
    fn expect_refunds(table: &Self::Table) {
        let _ = table;
    }

    /// Asks the table to decide every request through the store, with no local shortcut that
    /// changes who is denied (the Redis store's leases stop): for a ban's counters.
    #[doc(hidden)]
    fn decide_exactly(table: &Self::Table) {
        let _ = table;
    }

    /// Whether the store decides on a clock of its own instead of the `now` it is given (a
    /// `RedisStore` reads Redis `TIME` unless built `with_caller_clock`): a limiter then
    /// refuses a clock that does not follow the system's time.
    #[doc(hidden)]
    fn own_clock(&self) -> bool {
        false
    }
}

/// The plumbing between limiters, algorithms and stores is the crate's own:
///
/// ```compile_fail
/// use tollgate::store::StateCell;
/// ```
///
/// ```compile_fail
/// use tollgate::store::AtomicCell;
/// ```
///
/// ```compile_fail
/// use tollgate::store::LockedCell;
/// ```
///
/// ```compile_fail
/// use tollgate::store::Update;
/// ```
///
/// and an algorithm of one's own does not compile (`Algorithm` is sealed):
///
/// ```compile_fail
/// use tollgate::algorithm::{Algorithm, Outcome};
///
/// #[derive(Debug, Clone)]
/// struct Never;
///
/// impl Algorithm for Never {
///     type State = u64;
///     fn check(&self, _: &u64, _: u64, _: u64) -> Outcome<u64> {
///         unimplemented!()
///     }
///     fn is_fresh(&self, _: &u64, _: u64) -> bool {
///         true
///     }
/// }
/// ```
#[cfg(doctest)]
struct Plumbing;
