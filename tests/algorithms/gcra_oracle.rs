//! GCRA through the public `RateLimiter` API, compared with two brute-force oracles written
//! without looking at `src/algorithm/gcra.rs`:
//!
//! - [`Debt`]: the continuous token bucket in exact integer arithmetic, with the bucket measured
//!   in nanoseconds of debt (one request = `T` ns). At each request the debt first drains by the
//!   time elapsed (never below zero), then a request of cost `n` is admitted iff
//!   `debt + n·T <= T·burst`, and then adds `n·T`. It predicts every field of a `Decision`.
//! - [`Windows`]: the admitted history, and the conformance condition stated over windows: a
//!   request of cost `n` at `t` conforms iff for every `s <= t` (an admission time, or `t`
//!   itself), `cost admitted in [s, t] + n <= burst + floor((t - s) / T)`.
//!
//! Time moves only by `ManualClock::advance`; the memory store's future is ready at once and is
//! polled once with a no-op waker.

use crate::support::oracle;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::{Key, Quota, RateLimiter};

use oracle::{cases, nanos, Expected};

/// The emission interval in ns, as the crate rounds it (up), checked against the quota's own
/// limit and period so that a change in rounding shows up here.
fn interval_of(quota: &Quota) -> u64 {
    let t = nanos(quota.emission_interval());
    assert_eq!(
        t,
        nanos(quota.period()).div_ceil(quota.limit()),
        "{quota:?}"
    );
    t
}

/// Oracle 1: a token bucket kept as debt in nanoseconds, drained then charged.
#[derive(Debug, Clone)]
struct Debt {
    /// `T`, ns per unit of cost.
    t: u64,
    burst: u64,
    /// Debt in ns at `at`.
    debt: u64,
    at: u64,
}

impl Debt {
    fn new(t: u64, burst: u64) -> Self {
        Self {
            t,
            burst,
            debt: 0,
            at: 0,
        }
    }

    fn capacity(&self) -> u64 {
        self.t * self.burst
    }

    fn drain_to(&mut self, now: u64) {
        assert!(now >= self.at, "time went backwards");
        self.debt = self.debt.saturating_sub(now - self.at);
        self.at = now;
    }

    fn request(&mut self, now: u64, n: u64) -> Expected {
        self.drain_to(now);
        let cap = self.capacity();
        let charge = u128::from(n) * u128::from(self.t);
        let fits = u128::from(self.debt) + charge <= u128::from(cap);
        // None when allowed, or when the request can never pass (`n·T > T·burst`).
        let retry_after = if fits || charge > u128::from(cap) {
            None
        } else {
            let wait = u128::from(self.debt) + charge - u128::from(cap);
            Some(Duration::from_nanos(u64::try_from(wait).unwrap()))
        };
        if fits {
            self.debt += u64::try_from(charge).unwrap();
        }
        Expected {
            allowed: fits,
            limit: self.burst,
            remaining: (cap - self.debt) / self.t,
            reset_after: Duration::from_nanos(self.debt),
            retry_after,
            delay: Duration::ZERO,
        }
    }
}

/// Oracle 2: the admitted history and the windowed conformance condition.
#[derive(Debug, Clone, Default)]
struct Windows {
    t: u64,
    burst: u64,
    /// `(time, cost)` of admitted requests, in time order; cost 0 is not recorded.
    admitted: Vec<(u64, u64)>,
}

impl Windows {
    fn new(t: u64, burst: u64) -> Self {
        Self {
            t,
            burst,
            admitted: Vec::new(),
        }
    }

    /// Whether a request of cost `n` at `now` (not before the last admission) conforms.
    fn admissible(&self, now: u64, n: u64) -> bool {
        // s = now with nothing admitted at `now` yet (the whole bound is the burst).
        if n > self.burst {
            return false;
        }
        // Walk back over admissions. A partial sum never exceeds the full window [s, now] of
        // its element's time s, so checking after each element is sound, and the earliest
        // element at each time s sees the whole window.
        let mut in_window: u64 = 0;
        for &(s, cost) in self.admitted.iter().rev() {
            assert!(s <= now);
            in_window += cost;
            let allowance = self.burst + (now - s) / self.t;
            if in_window + n > allowance {
                return false;
            }
        }
        true
    }

    fn admit(&mut self, now: u64, n: u64) {
        if let Some(&(last, _)) = self.admitted.last() {
            assert!(last <= now);
        }
        if n > 0 {
            self.admitted.push((now, n));
        }
    }

    /// The largest `k <= burst` such that cost `k` conforms at `now`.
    fn max_cost(&self, now: u64) -> u64 {
        (0..=self.burst)
            .rev()
            .find(|&k| self.admissible(now, k))
            .expect("cost 0 always conforms")
    }
}

/// Every window `[s, t]` between admission times holds at most `burst + floor((t - s) / T)`.
fn check_windows(admitted: &[(u64, u64)], t: u64, burst: u64) -> Result<(), TestCaseError> {
    for i in 0..admitted.len() {
        let s = admitted[i].0;
        // Include every admission at time s, even those recorded before index i.
        let start = admitted.iter().position(|&(at, _)| at == s).unwrap();
        let mut sum = 0;
        for (j, &(at, cost)) in admitted.iter().enumerate().skip(start) {
            sum += cost;
            // Only close the window after the last admission at time `at`.
            if admitted.get(j + 1).is_some_and(|&(next, _)| next == at) {
                continue;
            }
            let allowance = burst + (at - s) / t;
            prop_assert!(
                sum <= allowance,
                "window [{s}, {at}] admitted cost {sum} > burst {burst} + floor(({at} - {s}) / {t}) = {allowance}"
            );
        }
    }
    Ok(())
}

/// A random quota and a random arrival sequence of `(gap ns, cost)`.
fn scenario() -> impl Strategy<Value = (Quota, Vec<(u64, u64)>)> {
    (
        1u64..=50,
        1_000_000u64..=10_000_000_000,
        1u64..=60,
        any::<bool>(),
    )
        .prop_flat_map(|(limit, period, burst, named)| {
            let mut quota = Quota::new(limit, Duration::from_nanos(period)).with_burst(burst);
            if named {
                quota = quota.named("oracle");
            }
            let t = period.div_ceil(limit);
            // Gaps: often none (a burst), often about one interval (the steady state, where
            // denials and boundary cases live), sometimes up to two periods.
            let gap = prop_oneof![
                2 => Just(0u64),
                4 => 0..=2 * t,
                1 => (0u64..=3).prop_map(move |k| k * t),
                2 => 0..=2 * period,
            ];
            let cost = prop_oneof![4 => Just(1u64), 3 => 0..=burst + 2];
            (Just(quota), prop::collection::vec((gap, cost), 0..=200))
        })
}

proptest! {
    #![proptest_config(cases(256))]

    /// Every field of every decision equals the debt oracle's, and what the windows oracle
    /// derives independently: `remaining` is the largest cost that would conform now,
    /// `retry_after` is the first instant the same request conforms, `reset_after` the first
    /// instant a whole burst conforms.
    #[test]
    fn decisions_match_the_oracles((quota, arrivals) in scenario()) {
        let t = interval_of(&quota);
        let burst = quota.burst();
        let clock = ManualClock::new();
        let limiter = RateLimiter::gcra(quota.clone()).with_clock(clock.clone());
        let mut debt = Debt::new(t, burst);
        let mut windows = Windows::new(t, burst);
        let mut now = 0u64;
        for (step, &(gap, cost)) in arrivals.iter().enumerate() {
            clock.advance(Duration::from_nanos(gap));
            now += gap;
            let got = Expected::from(limiter.check_n_now("k", cost));
            let want = debt.request(now, cost);
            prop_assert_eq!(got, want, "step {} at {} ns, cost {}, quota {:?}", step, now, cost, &quota);

            // The windows oracle agrees on the decision...
            prop_assert_eq!(windows.admissible(now, cost), got.allowed, "step {}", step);
            if got.allowed {
                windows.admit(now, cost);
            }
            // ...on `remaining` (requests of cost 1 in a row are one request of their total)...
            prop_assert_eq!(got.remaining, windows.max_cost(now), "step {}", step);
            // ...on `reset_after`: a full burst conforms then, and not 1 ns earlier.
            let reset = nanos(got.reset_after);
            prop_assert!(windows.admissible(now + reset, burst), "step {}", step);
            if reset > 0 {
                prop_assert!(!windows.admissible(now + reset - 1, burst), "step {}", step);
            }
            // ...and on `retry_after`: the same request conforms then, and not 1 ns earlier.
            match got.retry_after {
                Some(retry) => {
                    let retry = nanos(retry);
                    prop_assert!(retry > 0, "step {}", step);
                    prop_assert!(windows.admissible(now + retry, cost), "step {}", step);
                    prop_assert!(!windows.admissible(now + retry - 1, cost), "step {}", step);
                }
                None if !got.allowed => prop_assert!(cost > burst, "step {}", step),
                None => {}
            }

            // Cost 0 is allowed and changes nothing: peeking again reports the same.
            if cost == 0 {
                prop_assert!(got.allowed);
                let again = Expected::from(limiter.check_n_now("k", 0));
                prop_assert_eq!(again, got, "step {}", step);
            }
        }
    }

    /// The limiter's admissions never put more than `burst + floor((t - s) / T)` in any window
    /// `[s, t]`, and every request it denies (of cost at most `burst`) would have broken that
    /// bound, given what it had admitted: GCRA is exactly the windowed condition.
    #[test]
    fn admissions_fill_windows_exactly((quota, arrivals) in scenario()) {
        let t = interval_of(&quota);
        let burst = quota.burst();
        let clock = ManualClock::new();
        let limiter = RateLimiter::gcra(quota.clone()).with_clock(clock.clone());
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut now = 0u64;
        for (step, &(gap, cost)) in arrivals.iter().enumerate() {
            clock.advance(Duration::from_nanos(gap));
            now += gap;
            let d = limiter.check_n_now(7u64, cost);
            if d.allowed {
                if cost > 0 {
                    admitted.push((now, cost));
                }
                check_windows(&admitted, t, burst)?;
            } else if cost <= burst {
                // Some window [s, now] (s an admission time or now) would overflow.
                let mut in_window = 0;
                let mut broken = false;
                for &(s, c) in admitted.iter().rev() {
                    in_window += c;
                    if in_window + cost > burst + (now - s) / t {
                        broken = true;
                        break;
                    }
                }
                prop_assert!(broken, "step {} at {} ns: cost {} denied but conforms; quota {:?}", step, now, cost, &quota);
            } else {
                prop_assert_eq!(d.retry_after, None, "step {}", step);
            }
        }
        check_windows(&admitted, t, burst)?;
    }

    /// Keys are independent: requests for several keys, interleaved, each match their own oracle.
    #[test]
    fn keys_are_independent(
        (quota, arrivals) in scenario(),
        picks in prop::collection::vec(0usize..5, 200),
    ) {
        let t = interval_of(&quota);
        let burst = quota.burst();
        let clock = ManualClock::new();
        let limiter = RateLimiter::gcra(quota.clone()).with_clock(clock.clone());
        let keys = [
            Key::from("alice"),
            Key::from("bob"),
            Key::from(1u64),
            Key::from(std::net::IpAddr::from([192, 0, 2, 1])),
            // Same text as an IP, but a different key.
            Key::from("192.0.2.1"),
        ];
        let mut oracles = vec![Debt::new(t, burst); keys.len()];
        let mut now = 0u64;
        for (step, (&(gap, cost), &pick)) in arrivals.iter().zip(&picks).enumerate() {
            clock.advance(Duration::from_nanos(gap));
            now += gap;
            let got = Expected::from(limiter.check_n_now(&keys[pick], cost));
            let want = oracles[pick].request(now, cost);
            prop_assert_eq!(got, want, "step {} key {:?} at {} ns, cost {}", step, &keys[pick], now, cost);
        }
        // Every key still stands where its own oracle says (peeks change nothing).
        for (key, oracle) in keys.iter().zip(&mut oracles) {
            let got = Expected::from(limiter.check_n_now(key, 0));
            prop_assert_eq!(got, oracle.request(now, 0), "key {:?}", key);
        }
    }
}

/// Seed 003's worked session (3 per 60 s) through the public API: the printed figure is
/// `reset_after`.
#[tokio::test(flavor = "current_thread")]
async fn seed_003_worked_session() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_minute(3)).with_clock(clock.clone());
    let session: [(u64, bool, u64); 9] = [
        (0, true, 20),
        (0, true, 40),
        (0, true, 60),
        (1, false, 59),
        (5, false, 55),
        (10, false, 50),
        (15, false, 45),
        (21, true, 59),
        (22, false, 58),
    ];
    let mut at = 0;
    for (t, allowed, figure) in session {
        clock.advance(Duration::from_secs(t - at));
        at = t;
        let d = limiter.check("hit").await.unwrap();
        assert_eq!(d.allowed, allowed, "at {t} s");
        assert_eq!(d.reset_after, Duration::from_secs(figure), "at {t} s");
        assert_eq!(d.limit, 3, "at {t} s");
        assert_eq!(d.delay, Duration::ZERO, "at {t} s");
    }
}

/// Hand-computed figures of the same session (3 per 60 s, T = 20 s, capacity 60 s of debt).
#[tokio::test(flavor = "current_thread")]
async fn seed_003_retry_and_remaining() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_minute(3)).with_clock(clock.clone());
    let s = Duration::from_secs;
    // (time s, allowed, remaining, retry_after)
    let session: [(u64, bool, u64, Option<u64>); 9] = [
        (0, true, 2, None),
        (0, true, 1, None),
        (0, true, 0, None),
        (1, false, 0, Some(19)),
        (5, false, 0, Some(15)),
        (10, false, 0, Some(10)),
        (15, false, 0, Some(5)),
        (21, true, 0, None),
        (22, false, 0, Some(18)),
    ];
    let mut at = 0;
    for (t, allowed, remaining, retry) in session {
        clock.advance(s(t - at));
        at = t;
        let d = limiter.check("hit").await.unwrap();
        assert_eq!(d.allowed, allowed, "at {t} s");
        assert_eq!(d.remaining, remaining, "at {t} s");
        assert_eq!(d.retry_after, retry.map(s), "at {t} s");
    }
    // At 60 s the debt (58 s at 22 s) is down to 20 s: two requests fit.
    clock.advance(s(38));
    let d = limiter.check_n("hit", 0).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 2, s(20)));
    // A cost above the burst never passes.
    let d = limiter.check_n("hit", 4).await.unwrap();
    assert_eq!((d.allowed, d.retry_after), (false, None));
    assert_eq!((d.remaining, d.reset_after), (2, s(20)));
}

/// A peek or a hopeless request on a key never seen leaves no state behind; an allowed one does.
#[tokio::test(flavor = "current_thread")]
async fn unknown_keys_leave_no_state() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(5)).with_clock(clock.clone());
    assert_eq!(limiter.table().len(), 0);

    let d = limiter.check_n("ghost", 0).await.unwrap();
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (5, Duration::ZERO));
    assert_eq!(limiter.table().len(), 0, "a peek created state");

    let d = limiter.check_n("ghost", 6).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, None);
    assert_eq!((d.remaining, d.reset_after), (5, Duration::ZERO));
    assert_eq!(limiter.table().len(), 0, "a denial created state");

    for key in [
        Key::from(1u64),
        Key::from(std::net::IpAddr::from([10, 0, 0, 1])),
    ] {
        limiter.check_n(&key, 0).await.unwrap();
        limiter.check_n(&key, u64::MAX).await.unwrap();
    }
    assert!(limiter.table().is_empty());

    clock.advance(Duration::from_secs(3));
    let d = limiter.check("ghost").await.unwrap();
    assert!(d.allowed);
    assert_eq!(limiter.table().len(), 1);
    // The peek after it sees the request.
    let d = limiter.check_n("ghost", 0).await.unwrap();
    assert_eq!(
        (d.remaining, d.reset_after),
        (4, Duration::from_millis(100))
    );
    assert_eq!(limiter.table().len(), 1);
}
