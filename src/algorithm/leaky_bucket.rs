use std::time::Duration;

use super::{Algorithm, Gcra, Outcome};
use crate::{Decision, Quota};

/// The leaky bucket as a queue: requests leave at a constant rate, one every
/// `T = period / limit`, and the output is smooth, never bursty.
///
/// A request that arrives while `k` requests are ahead of it in the queue is allowed with
/// [`Decision::delay`] `= k·T`: the layer holds it back that long before calling the service.
/// The queue holds `burst` requests (the one leaving now included), so a fresh key's first
/// request passes at once and the next `burst − 1` wait `T`, `2T`, ...; when the queue is full
/// the request is denied, with `retry_after` until a place frees up. A request of cost `n`
/// takes `n` places.
///
/// `limit` is the queue's size (`burst`) and `remaining` the free places in it. A denied
/// request changes nothing. If the client goes away while its request waits, the request never
/// reaches the service, and its place stays taken: giving it back would let a later request
/// leave in the same slot as one already waiting, a burst the queue exists to prevent.
///
/// This is [`Gcra`] with a tolerance of one interval that shapes up to `(burst − 1)·T`: the
/// state is the same one `u64` per key (8 bytes, updated by compare-and-swap in memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    gcra: Gcra,
}

impl LeakyBucket {
    /// The algorithm for `quota`: a queue of `quota.burst()` places drained at
    /// `quota.limit()` per `quota.period()`.
    pub fn new(quota: &Quota) -> Self {
        Self {
            gcra: Gcra::queue(quota),
        }
    }

    /// The GCRA that is this queue: a tolerance of one interval, shaping up to
    /// `(burst − 1)·T`.
    pub fn gcra(&self) -> &Gcra {
        &self.gcra
    }

    /// The longest a request may wait in the queue.
    pub fn max_delay(&self) -> Duration {
        Duration::from_nanos(self.gcra.max_delay_nanos())
    }
}

/// The queue is its GCRA's schedule. A refund gives back the admission's place in the queue
/// while it is the last one and has not left yet; the requests queued behind keep the times
/// they were given.
impl Algorithm for LeakyBucket {
    /// When the queue will be empty, in nanoseconds; 0 is fresh.
    type State = u64;
    const REFUNDS: bool = true;
    const SETTLES: bool = true;

    to_gcra! {
        check(state: &u64, now: u64, cost: u64) -> Outcome<u64>;
        transition(state: &u64, now: u64, cost: u64) -> Option<u64>;
        decide(state: &u64, next: Option<&u64>, now: u64, cost: u64) -> Decision;
        refund(state: &u64, admission: &Decision, now: u64, cost: u64) -> Option<u64>;
        charge(state: &u64, now: u64, cost: u64) -> Option<u64>;
        debt(state: &u64, now: u64) -> u64;
        is_fresh(state: &u64, now: u64) -> bool;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_delays_each_request_one_interval_more() {
        // 10 per second, a queue of 4: T = 100 ms.
        let bucket = LeakyBucket::new(&Quota::per_second(10).with_burst(4));
        let ms = 1_000_000;
        let mut state = 0;
        for k in 0..4 {
            let out = bucket.check(&state, 1000 * ms, 1);
            let d = out.decision;
            assert!(d.allowed, "request {k}");
            assert_eq!(d.delay, Duration::from_millis(100 * k), "request {k}");
            assert_eq!((d.limit, d.remaining), (4, 3 - k), "request {k}");
            assert_eq!(d.reset_after, Duration::from_millis(100 * (k + 1)));
            state = out.state.unwrap();
        }
        // Full: the next place frees up when the first request's interval is over.
        let full = bucket.check(&state, 1000 * ms, 1);
        assert!(!full.decision.allowed);
        assert_eq!(full.decision.retry_after, Some(Duration::from_millis(100)));
        assert_eq!(full.state, None);
        // 150 ms later one request has left and the queue has room for one, waiting 250 ms.
        let later = bucket.check(&state, 1150 * ms, 1);
        assert!(later.decision.allowed);
        assert_eq!(later.decision.delay, Duration::from_millis(250));
        assert_eq!(later.decision.remaining, 0);
        // A cost larger than the queue never fits.
        let huge = bucket.check(&0, 0, 5);
        assert_eq!(huge.decision.retry_after, None);
        // A peek reports the free places.
        assert_eq!(bucket.check(&state, 1150 * ms, 0).decision.remaining, 1);
    }

    #[test]
    fn a_debt_keeps_the_queue_closed_until_paid() {
        // 10 per second, a queue of 4: T = 100 ms, the queue holds 400 ms.
        let bucket = LeakyBucket::new(&Quota::per_second(10).with_burst(4));
        let ms = 1_000_000;
        // A fresh key charged 6: 2 past its queue.
        let state = bucket.charge(&0, 1000 * ms, 6).unwrap();
        assert_eq!(state, 1600 * ms);
        let peek = bucket.check(&state, 1000 * ms, 0).decision;
        assert!(!peek.allowed);
        assert_eq!(peek.remaining, 0);
        assert_eq!(peek.retry_after, Some(Duration::from_millis(200)));
        // One request waits for the debt and its own place: it may queue 300 ms later, and
        // then leaves the queue when the 6 charged have left it, at 1600 ms.
        let denied = bucket.check(&state, 1000 * ms, 1).decision;
        assert_eq!(denied.retry_after, Some(Duration::from_millis(300)));
        assert!(!bucket.check(&state, 1300 * ms - 1, 1).decision.allowed);
        let queued = bucket.check(&state, 1300 * ms, 1).decision;
        assert!(queued.allowed);
        assert_eq!(queued.delay, Duration::from_millis(300));
        // A charge of nothing changes nothing; an expired queue is charged from now.
        assert_eq!(bucket.charge(&state, 1000 * ms, 0), None);
        assert_eq!(bucket.charge(&(500 * ms), 1000 * ms, 2), Some(1200 * ms));
        assert_eq!(bucket.charge(&u64::MAX, 0, u64::MAX), Some(u64::MAX));
        assert!(bucket.settles());
    }

    #[test]
    fn a_queue_of_one_never_delays() {
        let bucket = LeakyBucket::new(&Quota::per_second(2).with_burst(1));
        let first = bucket.check(&0, 0, 1);
        assert!(first.decision.allowed);
        assert_eq!(first.decision.delay, Duration::ZERO);
        let second = bucket.check(&first.state.unwrap(), 0, 1);
        assert!(!second.decision.allowed);
        assert_eq!(
            second.decision.retry_after,
            Some(Duration::from_millis(500))
        );
    }
}
