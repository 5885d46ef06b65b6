//! Calendar windows (`FixedWindow::aligned`): windows are `[n × period, (n + 1) × period)` on
//! the wall clock since the UNIX epoch, the same for every key.
//!
//! - Against a brute-force oracle that counts each calendar window by its index, on a wall
//!   clock that only moves forward: every decision and figure the same, tiers too.
//! - On a wall clock set back and forward at random: no calendar window ever holds more than
//!   the limit, every window starts at a multiple of the period, and nothing passes while the
//!   clock reads before the window the key is in.
//! - Through the layer: `RateLimit`'s `t` and `Retry-After` count down to midnight UTC.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::Router;
use proptest::prelude::*;
use tollgate::algorithm::FixedWindow;
use tollgate::clock::{Clock, ManualClock};
use tollgate::key::Global;
use tollgate::{Quota, RateLimitLayer, RateLimiter};
use tower::ServiceExt;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const DAY: u64 = 86_400 * S;

/// Periods users give calendar windows, and odd ones that divide nothing evenly.
fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(S),
        Just(60 * S),
        Just(3_600 * S),
        Just(DAY),
        Just(7 * DAY),
        MS..=10 * S,
    ]
}

/// A wall-clock time between 1970 and about 2500, in ns.
fn wall() -> impl Strategy<Value = u64> {
    0u64..16_000_000_000 * S
}

#[derive(Debug, Clone)]
enum Step {
    /// Moves the clock on by this many ns.
    Advance(u64),
    /// A request of this cost.
    Check(u64),
}

/// Steps of up to `max_step` ns and costs up to `limit + 1`.
fn steps(max_step: u64, limit: u64) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        (0..=max_step).prop_map(Step::Advance),
        (0..=limit + 1).prop_map(Step::Check),
    ];
    prop::collection::vec(step, 1..80)
}

/// The oracle of one calendar-window quota: the cost admitted in each window, by index.
struct Oracle {
    limit: u64,
    period: u64,
    counts: HashMap<u64, u64>,
}

impl Oracle {
    fn new(limit: u64, period: u64) -> Self {
        Self {
            limit,
            period,
            counts: HashMap::new(),
        }
    }

    /// (allowed, remaining, reset_after, retry_after) of a request of `cost` at `now`, without
    /// counting it.
    fn decide(&self, now: u64, cost: u64) -> (bool, u64, u64, Option<u64>) {
        let index = now / self.period;
        let count = self.counts.get(&index).copied().unwrap_or(0);
        let to_end = (index + 1) * self.period - now;
        let reset = if count > 0 { to_end } else { 0 };
        let remaining = self.limit - count;
        if cost > remaining {
            let retry = (count > 0 && cost <= self.limit).then_some(to_end);
            return (false, remaining, reset, retry);
        }
        if cost == 0 {
            return (true, remaining, reset, None);
        }
        (true, remaining - cost, to_end, None)
    }

    fn count(&mut self, now: u64, cost: u64) {
        *self.counts.entry(now / self.period).or_default() += cost;
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_decision_is_the_calendar_oracles(
        start in wall(),
        limit in 1u64..12,
        period in period(),
        steps in steps(3 * DAY / 2, 12),
    ) {
        let clock = ManualClock::new();
        clock.set_wall_time(UNIX_EPOCH + Duration::from_nanos(start));
        let quota = Quota::new(limit, Duration::from_nanos(period));
        let limiter = RateLimiter::fixed_window(quota).aligned().with_clock(clock.clone());
        let mut oracle = Oracle::new(limit, period);
        for step in steps {
            match step {
                Step::Advance(by) => clock.advance(Duration::from_nanos(by % (3 * period))),
                Step::Check(cost) => {
                    let now = clock.wall_nanos();
                    let want = oracle.decide(now, cost);
                    let got = limiter.check_n_now("k", cost);
                    let got_figures = (
                        got.allowed,
                        got.remaining,
                        nanos(got.reset_after),
                        got.retry_after.map(nanos),
                    );
                    prop_assert_eq!(got_figures, want, "at {} cost {}", now, cost);
                    if got.allowed && cost > 0 {
                        prop_assert_eq!(got.receipt() % period, 0);
                        oracle.count(now, cost);
                    }
                }
            }
        }
    }

    #[test]
    fn tiers_of_calendar_windows_are_all_or_nothing(
        start in wall(),
        (a, b) in (1u64..6, 6u64..30),
        (pa, pb) in (period(), period()),
        steps in steps(2 * DAY, 8),
    ) {
        let clock = ManualClock::new();
        clock.set_wall_time(UNIX_EPOCH + Duration::from_nanos(start));
        let tiers = [
            Quota::new(a, Duration::from_nanos(pa)),
            Quota::new(b, Duration::from_nanos(pb)),
        ];
        let limiter = RateLimiter::fixed_window(tiers).aligned().with_clock(clock.clone());
        let mut oracles = [Oracle::new(a, pa), Oracle::new(b, pb)];
        for step in steps {
            match step {
                Step::Advance(by) => clock.advance(Duration::from_nanos(by % (3 * pa.max(pb)))),
                Step::Check(cost) => {
                    let now = clock.wall_nanos();
                    let allowed = oracles.iter().all(|o| o.decide(now, cost).0);
                    let got = limiter.check_n_now("k", cost);
                    prop_assert_eq!(got.allowed, allowed);
                    prop_assert_eq!(got.tiers().len(), 2);
                    for (tier, oracle) in got.tiers().iter().zip(&oracles) {
                        // A denied request takes nothing: each tier reports its standing.
                        let figures = oracle.decide(now, if allowed { cost } else { 0 });
                        prop_assert_eq!(tier.remaining, figures.1);
                        prop_assert_eq!(nanos(tier.reset_after), figures.2);
                    }
                    if allowed && cost > 0 {
                        oracles.iter_mut().for_each(|o| o.count(now, cost));
                    }
                }
            }
        }
    }

    /// The wall clock set back and forward at random (an operator, NTP): each admission is
    /// counted in a calendar window (its receipt), no window holds more than the limit, and a
    /// key whose window starts after the clock's reading gets nothing more until the clock
    /// reaches it.
    #[test]
    fn a_wall_clock_that_jumps_never_fills_a_window_past_its_limit(
        start in (DAY..16_000_000_000 * S),
        limit in 1u64..8,
        period in period(),
        jumps in prop::collection::vec((any::<bool>(), 0u64..3 * DAY, 0u64..4), 1..60),
    ) {
        let clock = ManualClock::new();
        clock.set_wall_time(UNIX_EPOCH + Duration::from_nanos(start));
        let quota = Quota::new(limit, Duration::from_nanos(period));
        let limiter = RateLimiter::fixed_window(quota).aligned().with_clock(clock.clone());
        let mut windows: HashMap<u64, u64> = HashMap::new();
        // The newest window the key was counted in.
        let mut newest = 0;
        for (back, by, cost) in jumps {
            let by = by % (3 * period);
            let wall = clock.wall_nanos();
            let to = if back { wall.saturating_sub(by) } else { wall + by };
            clock.set_wall_time(UNIX_EPOCH + Duration::from_nanos(to));
            let d = limiter.check_n_now("k", cost);
            if d.allowed && cost > 0 {
                let window = d.receipt();
                prop_assert_eq!(window % period, 0);
                let held = windows.entry(window).or_default();
                *held += cost;
                prop_assert!(*held <= limit, "window {} holds {} > {}", window, held, limit);
                if to < newest {
                    // Counted in the newer window the key already had.
                    prop_assert_eq!(window, newest);
                }
                newest = newest.max(window);
            }
        }
    }
}

#[test]
fn a_daily_quota_resets_at_midnight_utc_whenever_the_key_started() {
    let clock = ManualClock::new();
    // 2026-11-24, 18:00 UTC.
    clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_795_543_200));
    let limiter = RateLimiter::fixed_window(Quota::per_day(2))
        .aligned()
        .with_clock(clock.clone());
    assert_eq!(
        limiter.check_now("a").reset_after,
        Duration::from_secs(6 * 3600)
    );
    clock.advance(Duration::from_secs(5 * 3600)); // 23:00
    let b = limiter.check_now("b");
    assert_eq!(b.reset_after, Duration::from_secs(3600));
    assert!(limiter.check_now("a").allowed);
    let denied = limiter.check_now("a");
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(3600)));
    clock.advance(Duration::from_secs(3600)); // midnight: both keys are fresh at once
    for key in ["a", "b"] {
        let d = limiter.check_now(key);
        assert!(d.allowed);
        assert_eq!(d.remaining, 1);
        assert_eq!(d.reset_after, Duration::from_secs(86_400));
    }
}

#[test]
fn per_key_windows_stay_the_default() {
    let clock = ManualClock::new();
    clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_795_543_200 + 7));
    let limiter = RateLimiter::fixed_window(Quota::per_minute(1)).with_clock(clock.clone());
    assert_eq!(limiter.check_now("k").reset_after, Duration::from_secs(60));
    let aligned = RateLimiter::fixed_window(Quota::per_minute(1))
        .aligned()
        .with_clock(clock);
    assert_eq!(aligned.check_now("k").reset_after, Duration::from_secs(53));
}

#[test]
fn the_layer_counts_down_to_midnight_utc() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = ManualClock::new();
        // 2026-11-24, 23:59:30 UTC.
        clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_795_564_770));
        let app = Router::new().route("/", get(|| async { "ok" })).layer(
            RateLimitLayer::fixed_window(Quota::per_day(2).named("daily"))
                .aligned()
                .key(Global)
                .clock(clock.clone()),
        );
        let get = || Request::get("/").body(Body::empty()).unwrap();
        let first = app.clone().oneshot(get()).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(first.headers()["ratelimit"], "\"daily\";r=1;t=30");
        app.clone().oneshot(get()).await.unwrap();
        let denied = app.clone().oneshot(get()).await.unwrap();
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(denied.headers()["retry-after"], "30");
        clock.advance(Duration::from_secs(30));
        let next_day = app.oneshot(get()).await.unwrap();
        assert_eq!(next_day.status(), StatusCode::OK);
        assert_eq!(next_day.headers()["ratelimit"], "\"daily\";r=1;t=86400");
    });
}

#[test]
#[should_panic(
    expected = "calendar windows are the fixed window's; this layer's algorithm is gcra"
)]
fn aligned_on_another_algorithm_fails_where_the_layer_is_built() {
    let _ = RateLimitLayer::gcra(Quota::per_day(10)).aligned();
}

#[test]
#[should_panic(expected = "a period of 100000 ns is too short for calendar windows")]
fn a_period_under_a_millisecond_fails_where_the_limiter_is_built() {
    let _ = RateLimiter::fixed_window(Quota::new(1, Duration::from_micros(100))).aligned();
}

#[test]
fn the_shortest_calendar_period_is_a_millisecond() {
    assert_eq!(FixedWindow::MIN_ALIGNED_PERIOD, Duration::from_millis(1));
    let w = FixedWindow::new(&Quota::new(1, Duration::from_millis(1))).aligned();
    assert!(w.is_aligned());
}
