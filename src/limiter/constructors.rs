//! How a [`RateLimiter`] is made: one constructor per algorithm, and [`from_parts`] for an
//! algorithm already made.
//!
//! [`from_parts`]: RateLimiter::from_parts

use super::typed::RateLimiter;
use crate::algorithm::{
    Algorithm, FixedWindow, Gcra, Hybrid, LeakyBucket, Quotas, SlidingLog, SlidingWindow,
    TokenBucket,
};
use crate::clock::SystemClock;
use crate::store::{MemoryAlgorithm, MemoryStore};
use crate::Quota;

/// RateLimiter's constructor for each algorithm: `$name(quotas)` decides each quota by
/// `$algorithm::new`, in memory, on the system clock.
macro_rules! constructors {
    ($($(#[$doc:meta])* $name:ident => $algorithm:ident;)*) => {
        impl RateLimiter<Gcra> {$(
            $(#[$doc])*
            pub fn $name<Q: Quotas>(quotas: Q) -> RateLimiter<Q::Algorithm<$algorithm>>
            where
                Q::Algorithm<$algorithm>: MemoryAlgorithm,
            {
                RateLimiter::build(quotas, $algorithm::new)
            }
        )*}
    };
}

constructors! {
    /// GCRA over `quotas` (one [`Quota`], or several that must all allow a request), in memory,
    /// on the system clock.
    ///
    /// A smooth rate with bursts: a fresh key may make `burst` requests at once, then one
    /// every `period / limit`. See [`Gcra`].
    ///
    /// ```
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// // At most 5 a second, and at most 100 an hour.
    /// let limiter = RateLimiter::gcra([Quota::per_second(5), Quota::per_hour(100)]);
    /// let decision = limiter.check_now("user-1");
    /// assert_eq!(decision.tiers().len(), 2);
    /// assert_eq!(decision.remaining, 4);
    /// ```
    gcra => Gcra;
    /// A leaky bucket over `quotas`, as a queue, in memory, on the system clock.
    ///
    /// Requests leave one every `period / limit`, never in a burst: a request that finds others
    /// queued is allowed with a [`Decision::delay`](crate::Decision::delay) (the layer waits it
    /// out before calling the service), and one that finds the queue of `burst` places full is
    /// denied. See [`LeakyBucket`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::ManualClock;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// let limiter = RateLimiter::leaky_bucket(Quota::per_second(10).with_burst(3))
    ///     .with_clock(ManualClock::new());
    /// let delays: Vec<_> = (0..4).map(|_| limiter.check_now("k")).collect();
    /// assert_eq!(delays[1].delay, Duration::from_millis(100));
    /// assert_eq!(delays[2].delay, Duration::from_millis(200));
    /// assert!(!delays[3].allowed); // the queue holds 3
    /// ```
    leaky_bucket => LeakyBucket;
    /// A token bucket over `quotas`: `burst` tokens, refilled continuously at `limit` per
    /// `period`, starting full; a request takes `cost` tokens. It decides exactly as
    /// [`gcra`](Self::gcra) for the same quota, for those who think in tokens. See
    /// [`TokenBucket`].
    token_bucket => TokenBucket;
    /// A fixed window over `quotas`: `limit` per `period`, the window starting at the key's
    /// first request (keys do not all reset at once). A hard quota per window, but a client may
    /// pass `2 × limit` across a window's edge. See [`FixedWindow`].
    fixed_window => FixedWindow;
    /// A sliding window over `quotas`: the previous window's count, weighted by how much of it
    /// the last `period` still covers, plus the current window's. Close to a true sliding
    /// window in a few words per key; [`sub_windows`](RateLimiter::sub_windows) makes it
    /// closer. See [`SlidingWindow`].
    sliding_window => SlidingWindow;
    /// A sliding log over `quotas`: exact, at most `limit` in any `period`, from the times of
    /// the admitted requests (memory per key grows with `limit`). See [`SlidingLog`].
    sliding_log => SlidingLog;
    /// The hybrid quota-linear limiter over `quotas`: a whole quota per fixed window for
    /// clients that stay under it, a smooth rate (with a penalty for the rest of the window)
    /// for clients that use it all, until they slow down. See [`Hybrid`].
    hybrid => Hybrid;
}

impl<A: MemoryAlgorithm> RateLimiter<A> {
    /// A limiter for `quota` decided by `algorithm`, in a new [`MemoryStore`], on the
    /// [`SystemClock`], for an algorithm of this crate already made.
    pub fn from_parts(quota: Quota, algorithm: A) -> Self {
        Self::build(quota, |_| algorithm.clone())
    }

    /// A limiter for `quotas`, each decided by the algorithm `make` builds for it.
    fn build<Q, B>(quotas: Q, make: impl Fn(&Quota) -> B) -> Self
    where
        Q: Quotas<Algorithm<B> = A>,
        B: Algorithm,
    {
        let (quotas, algorithm) = quotas.build(make);
        Self::bind(quotas.into(), algorithm, MemoryStore::new(), SystemClock)
    }
}
