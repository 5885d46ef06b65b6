//! [`RateLimiter`]: an algorithm, its quota, a store and a clock, usable without HTTP.

use std::fmt;
use std::sync::Arc;

use std::time::Duration;

use crate::algorithm::{Algorithm, Aligned, Gcra, Shaping, SubWindows};
use crate::clock::{Clock, SystemClock};
use crate::store::{MemoryAlgorithm, MemoryStore, Store, Update};
use crate::{Decision, Key, Quota};

/// Decides whether a key may make a request: an algorithm with its quota, over a store, on a
/// clock.
///
/// Cheap to clone; clones share state. The layer uses one, and it works on its own for queues,
/// jobs or any code that is not an HTTP service.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::ManualClock;
/// use tollgate::{Quota, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tollgate::Error> {
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::gcra(Quota::per_second(2)).with_clock(clock.clone());
///
/// assert!(limiter.check("user-1").await?.allowed);
/// assert!(limiter.check("user-1").await?.allowed);
/// let denied = limiter.check("user-1").await?;
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after, Some(Duration::from_millis(500)));
///
/// clock.advance(Duration::from_millis(500));
/// assert!(limiter.check("user-1").await?.allowed);
/// assert_eq!(limiter.check_n("user-1", 0).await?.remaining, 0); // cost 0 peeks
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimiter<A = Gcra, St = MemoryStore, C = SystemClock>
where
    A: Algorithm,
    St: Store<A>,
{
    quotas: Arc<[Quota]>,
    policy: Arc<str>,
    algorithm: A,
    store: St,
    table: St::Table,
    clock: C,
    /// The algorithm reads the wall clock ([`Algorithm::wall_clock`]).
    wall: bool,
}

impl<A, St, C> RateLimiter<A, St, C>
where
    A: Algorithm,
    St: Store<A>,
    C: Clock,
{
    /// A limiter for `quotas` decided by `algorithm`, with its state in `store`.
    ///
    /// The policy is the quota's name, or for tiers the names joined by `+`. State is shared
    /// under that name only when every quota was named ([`Quota::named`]).
    ///
    /// # Panics
    ///
    /// When `store` cannot keep these quotas, with the store's message
    /// (the figure and how to fix it).
    #[track_caller]
    pub(crate) fn bind(quotas: Arc<[Quota]>, algorithm: A, store: St, clock: C) -> Self {
        let shared = named(&quotas);
        match Self::try_bind(quotas, algorithm, store, clock, shared) {
            Ok(limiter) => limiter,
            Err(error) => panic!("{error}"),
        }
    }

    /// A limiter for `quotas` decided by `algorithm`, with its state in `store`, or the
    /// store's error when it cannot keep these quotas: for limiters made
    /// while serving requests or from configuration, which must never panic.
    ///
    /// With `shared`, the state is shared under the policy name whether or not the quotas
    /// were named (a layer's per-key quotas, whose limiters are dropped and made again, and
    /// must find the state they left); without it, as [`bind`](Self::bind) decides.
    pub(crate) fn try_bind(
        quotas: Arc<[Quota]>,
        algorithm: A,
        store: St,
        clock: C,
        shared: bool,
    ) -> Result<Self, crate::Error> {
        let policy = policy_of(&quotas);
        ignored_clock(&store, &clock, &policy)?;
        let table = store.table(&policy, shared, &algorithm)?;
        let wall = algorithm.wall_clock();
        first_reading(&clock);
        Ok(Self {
            quotas,
            policy,
            algorithm,
            store,
            table,
            clock,
            wall,
        })
    }

    /// Keeps state in `store` (a shared [`MemoryStore`], or a store shared between servers).
    ///
    /// # Panics
    ///
    /// When `store` cannot keep this limiter's quotas: the Redis store
    /// refuses figures its scripts cannot decide exactly, naming the figure and the fix.
    #[must_use]
    #[track_caller]
    pub fn with_store<St2: Store<A>>(self, store: St2) -> RateLimiter<A, St2, C> {
        RateLimiter::bind(self.quotas, self.algorithm, store, self.clock)
    }

    /// [`with_store`](Self::with_store), returning the store's refusal instead of panicking:
    /// for code that picks its store at run time (from configuration).
    ///
    /// # Errors
    ///
    /// When `store` cannot keep this limiter's quotas: an error of kind
    /// [`Misconfigured`](crate::ErrorKind::Misconfigured) that names the figure and the fix.
    ///
    /// ```
    /// use tollgate::store::MemoryStore;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// let limiter = RateLimiter::gcra(Quota::per_second(5)).try_with_store(MemoryStore::new())?;
    /// assert!(limiter.check_now("k").allowed);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn try_with_store<St2: Store<A>>(
        self,
        store: St2,
    ) -> Result<RateLimiter<A, St2, C>, crate::Error> {
        let shared = named(&self.quotas);
        RateLimiter::try_bind(self.quotas, self.algorithm, store, self.clock, shared)
    }

    /// Reads time from `clock`, such as a [`ManualClock`](crate::clock::ManualClock) in tests.
    ///
    /// # Panics
    ///
    /// When the store decides on its own clock and would ignore this one (a `RedisStore`
    /// not built with `with_caller_clock`, and a
    /// clock other than the system's); [`try_with_store`](Self::try_with_store) returns the
    /// same refusal as an error when the clock is set first.
    #[must_use]
    #[track_caller]
    pub fn with_clock<C2: Clock>(self, clock: C2) -> RateLimiter<A, St, C2> {
        if let Err(error) = ignored_clock(&self.store, &clock, &self.policy) {
            panic!("RateLimiter::with_clock: {error}");
        }
        first_reading(&clock);
        let (quotas, policy, algorithm) = (self.quotas, self.policy, self.algorithm);
        let (store, table, wall) = (self.store, self.table, self.wall);
        RateLimiter {
            quotas,
            policy,
            algorithm,
            store,
            table,
            clock,
            wall,
        }
    }

    /// The same limiter over another table of its store.
    pub(crate) fn with_table(&self, table: St::Table) -> Self
    where
        C: Clone,
    {
        Self {
            table,
            ..self.clone()
        }
    }

    /// The time decisions are made at, in nanoseconds: the clock's monotonic time, or its wall
    /// clock for an algorithm that reads it ([`Algorithm::wall_clock`]: calendar windows).
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        if self.wall {
            self.clock.wall_nanos()
        } else {
            self.clock.now_nanos()
        }
    }

    /// Decides one request for `key`.
    #[inline]
    pub fn check(&self, key: impl Into<Key>) -> St::Future {
        self.check_n(key, 1)
    }

    /// Decides a request of `cost` for `key`: it passes only if `cost` requests' worth of
    /// capacity is available, and then consumes all of it. Cost 0 peeks at the key's standing
    /// and consumes nothing.
    #[inline]
    pub fn check_n(&self, key: impl Into<Key>, cost: u64) -> St::Future {
        St::check_reading(&self.table, key.into(), &|| self.now_nanos(), cost)
    }

    /// [`check_n`](Self::check_n) at `now`, a time the caller read from this limiter's clock.
    #[inline]
    pub(crate) fn check_n_at(&self, key: impl Into<Key>, now: u64, cost: u64) -> St::Future {
        St::check(&self.table, key.into(), now, cost)
    }

    /// Gives back what an allowed request took, for a request that turned out not to count
    /// (such as a successful login when only failures are limited), and answers with the key's
    /// standing afterwards. `admission` is the decision [`check_n`](Self::check_n) returned for
    /// it and `cost` its cost.
    ///
    /// A refund gives back only what that admission took, and only while it still counts:
    /// capacity that has come back with time is not given back twice, a request counted in a
    /// window that has closed gives nothing to the next one, and for GCRA, the token bucket and
    /// the leaky bucket a place that a later admission stands behind is kept. So the requests
    /// that count never exceed the quota in any window or burst, whatever the order in which
    /// refunds arrive. Algorithms that cannot give capacity back (the hybrid) leave the key as
    /// it is ([`Algorithm::refunds`]).
    ///
    /// ```
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// let limiter = RateLimiter::gcra(Quota::per_minute(1));
    /// let admission = limiter.check("alice").await?;
    /// assert!(admission.allowed);
    /// assert_eq!(limiter.refund("alice", &admission, 1).await?.remaining, 1);
    /// assert!(limiter.check("alice").await?.allowed); // the refunded request did not count
    /// # Ok(())
    /// # }
    /// ```
    pub fn refund(&self, key: impl Into<Key>, admission: &Decision, cost: u64) -> St::Future {
        St::expect_refunds(&self.table);
        St::refund(&self.table, key.into(), admission, self.now_nanos(), cost)
    }

    /// Settles the allowed request `admission`, which reserved `reserved`, once its true cost
    /// `actual` is known (an LLM's tokens, a download's bytes), and answers with the key's
    /// standing afterwards. Below the reservation, the difference is given back as a
    /// [`refund`](Self::refund) gives it: only while it still counts, which for GCRA and the
    /// buckets means while no later request of the key was admitted, so a key whose requests
    /// overlap keeps most of a high estimate (reserve low: the true cost is charged in full
    /// either way). Above the reservation, the key is
    /// charged the difference whatever it has left: a key charged past its quota is in debt,
    /// denied until the debt is paid back at the quota's rate (`retry_after` says when). At
    /// the reservation, nothing changes and the answer is a [`peek`](Self::peek).
    ///
    /// GCRA, the token bucket and the leaky bucket settle, and tiers of them (each tier is
    /// charged). The windows and the hybrid cannot carry a debt past the window that counted
    /// it ([`Algorithm::settles`] is false): for them a cost above the reservation is not
    /// charged, and a layer's `settle` refuses them where it is built.
    ///
    /// ```
    /// use tollgate::clock::ManualClock;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// // 600 tokens a minute: 10 a second.
    /// let limiter = RateLimiter::gcra(Quota::per_minute(600)).with_clock(ManualClock::new());
    /// let admission = limiter.check_n("key", 100).await?; // an estimate
    /// let standing = limiter.settle("key", &admission, 100, 700).await?; // the true cost
    /// assert!(!standing.allowed); // 100 tokens of debt: 10 s at 10 a second
    /// assert_eq!(standing.retry_after, Some(std::time::Duration::from_secs(10)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn settle(
        &self,
        key: impl Into<Key>,
        admission: &Decision,
        reserved: u64,
        actual: u64,
    ) -> St::Future {
        match actual.cmp(&reserved) {
            std::cmp::Ordering::Less => self.refund(key, admission, reserved - actual),
            std::cmp::Ordering::Greater => self.charge(key, actual - reserved),
            std::cmp::Ordering::Equal => self.peek(key),
        }
    }

    /// Charges `key` `cost` more, whatever it has left: the part of a settlement above the
    /// reservation.
    pub(crate) fn charge(&self, key: impl Into<Key>, cost: u64) -> St::Future {
        St::charge(&self.table, key.into(), self.now_nanos(), cost)
    }

    /// `key`'s standing, consuming nothing: the decision a request of cost 0 would get. A
    /// blocked key's standing is its denial ([`block`](Self::block)). Peeking at a key the
    /// memory store does not hold does not make it keep the key.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// let limiter = RateLimiter::gcra(Quota::per_minute(3));
    /// limiter.check("alice").await?;
    /// assert_eq!(limiter.peek("alice").await?.remaining, 2);
    /// assert_eq!(limiter.peek("alice").await?.remaining, 2); // a peek takes nothing
    /// # Ok(())
    /// # }
    /// ```
    pub fn peek(&self, key: impl Into<Key>) -> St::Future {
        St::peek(&self.table, key.into(), self.now_nanos())
    }

    /// Makes `key` fresh again, in every tier: its state is forgotten and its block, if any,
    /// lifted ([`block`](Self::block)). In a shared store the key is fresh for every server.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// let limiter = RateLimiter::gcra(Quota::per_minute(1));
    /// assert!(limiter.check("alice").await?.allowed);
    /// assert!(!limiter.check("alice").await?.allowed);
    /// limiter.reset("alice").await?;
    /// assert!(limiter.check("alice").await?.allowed);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// When the store fails (a Redis store that cannot be reached or times out: the key is
    /// then reset in the store's local fallback only).
    pub fn reset(&self, key: impl Into<Key>) -> Update {
        St::reset(&self.table, key.into(), self.now_nanos())
    }

    /// Denies every request of `key` for `duration` from now, whatever its quota: each denial's
    /// `retry_after` (hence `Retry-After` and the headers' reset) is what is left of the block,
    /// and [`Decision::is_blocked`] is true. The key's state is left as it is, so once the
    /// block ends the key stands as it would have without it (its usage having come back with
    /// time as usual). In a shared store (Redis) the block holds on every server.
    ///
    /// - A block never shortens another: a key already blocked past `now + duration` stays
    ///   blocked until then, and a longer block extends a shorter one. [`reset`](Self::reset)
    ///   lifts a block (and forgets the key's state).
    /// - A zero `duration` blocks nothing. A duration that reaches past the end of the clock
    ///   (`u64` nanoseconds from its origin, some 584 years) blocks until then: for good.
    /// - The memory store holds at most [`max_keys`](MemoryStore::max_keys) blocks per policy:
    ///   past that, the blocks that have ended go first, then those that end soonest. A
    ///   policy's blocks belong to its name (a named quota's), not to its figures; a calendar
    ///   window ([`aligned`](crate::RateLimiter::aligned)) of the same name, which decides on the wall
    ///   clock, keeps its own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::ManualClock;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// let clock = ManualClock::new();
    /// let limiter = RateLimiter::gcra(Quota::per_second(10)).with_clock(clock.clone());
    /// limiter.block("mallory", Duration::from_secs(60)).await?;
    /// clock.advance(Duration::from_secs(15));
    /// let denied = limiter.check("mallory").await?;
    /// assert!(denied.is_blocked());
    /// assert_eq!(denied.retry_after, Some(Duration::from_secs(45)));
    /// clock.advance(Duration::from_secs(45));
    /// assert!(limiter.check("mallory").await?.allowed);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// When the store fails (a Redis store that cannot be reached or times out: the key is
    /// then blocked in the store's local fallback only).
    pub fn block(&self, key: impl Into<Key>, duration: Duration) -> Update {
        if duration.is_zero() {
            return Box::pin(std::future::ready(Ok(())));
        }
        St::block(&self.table, key.into(), self.now_nanos(), duration)
    }
}

impl<A: Shaping, St: Store<A>, C: Clock> RateLimiter<A, St, C> {
    /// Shapes instead of rejecting: a request that could pass within `max_delay` is allowed
    /// with a [`Decision::delay`] and reserves its place; only requests that would wait longer
    /// are denied. The layer holds delayed requests back before calling the service. For GCRA
    /// and the token bucket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::ManualClock;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// // 2 at once, then up to 1 s of queueing at 10 per second.
    /// let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(2))
    ///     .max_delay(Duration::from_secs(1))
    ///     .with_clock(ManualClock::new());
    /// assert_eq!(limiter.check_now("k").delay, Duration::ZERO);
    /// assert_eq!(limiter.check_now("k").delay, Duration::ZERO);
    /// assert_eq!(limiter.check_now("k").delay, Duration::from_millis(100));
    /// ```
    ///
    /// # Panics
    ///
    /// When the store cannot keep the shaped quotas: the Redis store
    /// refuses a wait its scripts cannot decide exactly, naming the figure and the fix.
    #[must_use]
    #[track_caller]
    pub fn max_delay(self, max_delay: Duration) -> Self {
        let algorithm = self.algorithm.with_max_delay(max_delay);
        RateLimiter::bind(self.quotas, algorithm, self.store, self.clock)
    }
}

impl<A: Aligned, St: Store<A>, C: Clock> RateLimiter<A, St, C> {
    /// Calendar windows: every tier's windows start at whole multiples of its period since the
    /// UNIX epoch in UTC, the same instant for every key, so a day's quota resets at midnight
    /// UTC. Time is then the clock's wall-clock time (the server's `TIME` in Redis). See
    /// [`FixedWindow::aligned`](crate::algorithm::FixedWindow::aligned).
    ///
    /// # Panics
    ///
    /// When a period is shorter than a millisecond, or when the store cannot keep the aligned
    /// windows, with the store's message.
    #[must_use]
    #[track_caller]
    pub fn aligned(self) -> Self {
        let algorithm = self.algorithm.with_aligned_windows();
        RateLimiter::bind(self.quotas, algorithm, self.store, self.clock)
    }
}

impl<A: SubWindows, St: Store<A>, C: Clock> RateLimiter<A, St, C> {
    /// Keeps `k` counters per period instead of one (1 to 64): the estimate of a sliding
    /// window gets closer to the exact count as `k` grows, for `8 × k` more bytes per key.
    ///
    /// # Panics
    ///
    /// When `k` is 0 or above 64, or when the store cannot keep the window with `k`
    /// sub-windows, with the store's message.
    #[must_use]
    #[track_caller]
    pub fn sub_windows(self, k: usize) -> Self {
        let algorithm = self.algorithm.with_sub_windows(k);
        RateLimiter::bind(self.quotas, algorithm, self.store, self.clock)
    }
}

impl<A, C> RateLimiter<A, MemoryStore, C>
where
    A: MemoryAlgorithm,
    C: Clock,
{
    /// Decides one request for `key` at once, without a future: the memory store never waits
    /// and never fails. For code that is not async.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// let limiter = RateLimiter::gcra(Quota::per_second(1));
    /// assert!(limiter.check_now("job").allowed);
    /// assert!(!limiter.check_now("job").allowed);
    /// ```
    #[inline]
    pub fn check_now(&self, key: impl Into<Key>) -> Decision {
        self.check_n_now(key, 1)
    }

    /// [`check_n`](Self::check_n) at once, without a future.
    #[inline]
    pub fn check_n_now(&self, key: impl Into<Key>, cost: u64) -> Decision {
        self.table
            .decide_reading(key.into(), &|| self.now_nanos(), cost)
    }
}

/// Reads `clock` once, where a limiter is built: its first reading may take long (the
/// [`SystemClock`](crate::clock::SystemClock) calibrates), and checks read it under a lock of
/// the store ([`Clock`]).
fn first_reading(clock: &impl Clock) {
    std::hint::black_box((clock.now_nanos(), clock.wall_nanos()));
}

/// Refuses a clock the store would ignore: a store that decides on its own clock (Redis
/// `TIME`) with a clock that does not read the system's time, such as a `ManualClock`, whose
/// moves would change nothing.
fn ignored_clock<A: Algorithm, St: Store<A>>(
    store: &St,
    clock: &impl Clock,
    policy: &str,
) -> Result<(), crate::Error> {
    if store.own_clock() && !clock.follows_system_time() {
        return Err(crate::Error::misconfigured(format!(
            "the limiter of policy {policy:?} has a clock of its own (such as a ManualClock), \
             but its store decides on the store server's clock (Redis TIME) and would ignore \
             it: build the store with RedisStore::with_caller_clock() to decide on this clock \
             (tests, simulations), or leave the clock out"
        )));
    }
    Ok(())
}

impl<A: Algorithm, St: Store<A>, C> RateLimiter<A, St, C> {
    /// The quota; with tiered quotas, the first.
    pub fn quota(&self) -> &Quota {
        &self.quotas[0]
    }

    /// The quotas: one, or each tier in order.
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The policy name shown to clients and used to separate state in the store.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The algorithm.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }

    /// The store's table for this limiter's policy.
    pub fn table(&self) -> &St::Table {
        &self.table
    }
}

impl<A, St, C> fmt::Debug for RateLimiter<A, St, C>
where
    A: Algorithm + fmt::Debug,
    St: Store<A>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("policy", &self.policy)
            .field("quotas", &self.quotas)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// The policy name of `quotas`: the quota's name, or the tiers' names joined by `+`.
pub(crate) fn policy_of(quotas: &[Quota]) -> Arc<str> {
    quotas
        .iter()
        .map(Quota::name)
        .collect::<Vec<_>>()
        .join("+")
        .into()
}

/// Whether every quota was named ([`Quota::named`]): the policy's state is then shared under
/// its name.
pub(crate) fn named(quotas: &[Quota]) -> bool {
    quotas.iter().all(|q| q.explicit_name().is_some())
}
