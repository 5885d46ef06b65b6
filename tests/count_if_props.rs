//! `count_if` under attack: requests that do not count give their capacity back when their
//! responses finish, in any order and at any time. Whatever that order, the requests that count
//! never exceed the quota in any window or burst, for every algorithm that can refund, in
//! memory and in Redis.
//!
//! Each case is a random stream of requests for one key; each allowed request finishes after a
//! random time, and those that do not count are refunded then (so refunds arrive after new
//! windows opened, after later admissions, out of order). The requests that were admitted and
//! kept are then checked against the quota by an oracle that knows nothing of refunds.

#[path = "support/parity.rs"]
mod parity;
#[path = "support/redis.rs"]
mod server;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{Algorithm, Gcra};
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::{MemoryState, RedisStore, Store};
use tollgate::{Decision, Quota, RateLimiter};

const MS: u64 = 1_000_000;

/// One request: the time since the previous one and whether its response counts (both in ms),
/// and how long its response takes.
#[derive(Debug, Clone, Copy)]
struct Req {
    gap: u64,
    counts: bool,
    takes: u64,
}

fn requests(max_gap: u64, max_takes: u64) -> impl Strategy<Value = Vec<Req>> {
    let req = (0..=max_gap, prop::bool::weighted(0.4), 0..=max_takes)
        .prop_map(|(gap, counts, takes)| Req { gap, counts, takes });
    prop::collection::vec(req, 1..80)
}

/// What happened to one request that was allowed and counted: when it was admitted (ns on the
/// limiter's clock) and the decision.
type Counted = Vec<(u64, Decision)>;

/// Runs `reqs` for one key: each arrival is checked; an allowed request finishes `takes` ms
/// later and is refunded then if it does not count. Events at one instant run finishes first
/// when `finish_first`. Returns the admissions that count, or `None` when the store lost state
/// on its own (Redis expiring a key on its clock: see `parity::keep`).
async fn run<A, St>(
    limiter: &RateLimiter<A, St, ManualClock>,
    clock: &ManualClock,
    reqs: &[Req],
    finish_first: bool,
    keep: &dyn Fn() -> bool,
) -> Option<Counted>
where
    A: Algorithm,
    St: Store<A>,
{
    // (time in ms, order) -> event: Some(request index) for a finish, None for an arrival.
    let mut events: BTreeMap<(u64, u8, usize), Option<usize>> = BTreeMap::new();
    let mut at = 0;
    for (i, r) in reqs.iter().enumerate() {
        at += r.gap;
        events.insert((at, u8::from(finish_first), i), None);
    }
    let start = clock.now_nanos();
    let mut admitted: Vec<Option<Decision>> = vec![None; reqs.len()];
    let mut counted = Counted::new();
    while let Some(((ms, _, i), finish)) = events.pop_first() {
        let now = start + ms * MS;
        clock.advance(Duration::from_nanos(now - clock.now_nanos()));
        match finish {
            None => {
                let decision = limiter.check("k").await.expect("the store answers");
                if decision.allowed {
                    let done = ms + decision.delay.as_millis() as u64 + reqs[i].takes;
                    events.insert((done, u8::from(!finish_first), i), Some(i));
                    if reqs[i].counts {
                        counted.push((now + decision.delay.as_nanos() as u64, decision.clone()));
                    }
                    admitted[i] = Some(decision);
                }
            }
            Some(i) => {
                let decision = admitted[i].take().expect("finished once");
                if !reqs[i].counts {
                    limiter
                        .refund("k", &decision, 1)
                        .await
                        .expect("the store answers");
                }
            }
        }
        if !keep() {
            return None;
        }
    }
    Some(counted)
}

/// GCRA and the token bucket: the counted requests alone pass a fresh GCRA of the same quota,
/// every one of them (no burst beyond the quota's, no rate above it).
fn conform_to_gcra(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let gcra = Gcra::new(quota);
    let mut tat = 0;
    for (i, (at, _)) in counted.iter().enumerate() {
        let out = gcra.check(&tat, *at, 1);
        prop_assert!(
            out.decision.allowed,
            "counted request {} at {} ns exceeds {:?}: {:?}",
            i,
            at,
            quota,
            counted
        );
        tat = out.state.unwrap_or(tat);
    }
    Ok(())
}

/// The fixed window: each counted request was counted in the window its receipt names, which
/// it falls in; windows never overlap; no window holds more than the limit.
fn fit_fixed_windows(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
    for (at, d) in counted {
        let start = d.receipt();
        prop_assert!(
            start <= *at && *at < start + period,
            "{} not in {}",
            at,
            start
        );
        *windows.entry(start).or_default() += 1;
    }
    let mut last_end = 0;
    for (&start, &n) in &windows {
        prop_assert!(start >= last_end, "windows overlap: {:?}", windows);
        prop_assert!(
            n <= quota.limit(),
            "{} counted in the window at {}",
            n,
            start
        );
        last_end = start + period;
    }
    Ok(())
}

/// The sliding log: no `period` holds more than the limit of counted requests.
fn fit_every_window(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    for (i, (end, _)) in counted.iter().enumerate() {
        let inside = counted[..=i]
            .iter()
            .filter(|(t, _)| end - t < period)
            .count() as u64;
        prop_assert!(
            inside <= quota.limit(),
            "{} counted in the period up to {}",
            inside,
            end
        );
    }
    Ok(())
}

/// The sliding window: at each counted request, the window's estimate over the counted
/// requests alone (on the grid of sub-windows they were counted in) is within the limit: each
/// sub-window inside the last `period` counts whole, the one straddling its start by the part
/// inside. An allowed decision says where its sub-window ends: it leaves the estimate
/// (`reset_after`) a period after that.
fn fit_the_sliding_estimate(quota: &Quota, k: u64, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    let sub = period / k;
    prop_assume!(sub * k == period);
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, (t, d)) in counted.iter().enumerate() {
        let end = t + d.reset_after.as_nanos() as u64 - period;
        prop_assert!(
            end > *t && end - t <= sub,
            "sub-window end {} for {}",
            end,
            t
        );
        *ends.entry(end).or_default() += 1;
        let start = t.saturating_sub(period);
        let weighed: u64 = ends
            .iter()
            .map(|(&e, &n)| {
                let inside = if e <= start {
                    0
                } else if e - sub <= start {
                    e - start
                } else {
                    sub
                };
                n * inside
            })
            .sum();
        prop_assert!(
            weighed <= quota.limit() * sub,
            "counted request {} at {} ns: the estimate is {}/{} over the limit {}: {:?}",
            i,
            t,
            weighed,
            sub,
            quota.limit(),
            counted
        );
    }
    Ok(())
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=5, 1u64..=4).prop_map(|(limit, secs)| Quota::new(limit, Duration::from_secs(secs)))
}

fn on_memory<A>(limiter: RateLimiter<A>, reqs: &[Req], finish_first: bool) -> Counted
where
    A: Algorithm,
    A::State: MemoryState,
{
    let clock = ManualClock::new();
    let limiter = limiter.with_clock(clock.clone());
    let rt = parity::runtime();
    rt.block_on(run(&limiter, &clock, reqs, finish_first, &|| true))
        .expect("memory never loses state")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gcra_counts_never_exceed_the_burst(q in quota(), burst in 1u64..=4, reqs in requests(700, 3000), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::gcra(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn token_bucket_counts_never_exceed_the_burst(q in quota(), burst in 1u64..=4, reqs in requests(700, 3000), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::token_bucket(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn shaped_gcra_counts_never_exceed_the_burst_when_they_run(q in quota(), reqs in requests(700, 3000), ff: bool) {
        // Shaped requests run after their delay: what runs and counts keeps to the quota.
        let limiter = RateLimiter::gcra(q.clone()).max_delay(Duration::from_secs(2));
        conform_to_gcra(&q, &on_memory(limiter, &reqs, ff))?;
    }

    #[test]
    fn tiered_gcra_counts_never_exceed_any_tier(q in quota(), reqs in requests(700, 3000), ff: bool) {
        let per_minute = Quota::per_minute(q.limit() * 3);
        let counted = on_memory(RateLimiter::gcra([q.clone(), per_minute.clone()]), &reqs, ff);
        conform_to_gcra(&q, &counted)?;
        conform_to_gcra(&per_minute, &counted)?;
    }

    #[test]
    fn fixed_window_counts_never_exceed_the_limit(q in quota(), reqs in requests(700, 3000), ff: bool) {
        fit_fixed_windows(&q, &on_memory(RateLimiter::fixed_window(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn sliding_log_counts_never_exceed_the_limit(q in quota(), reqs in requests(700, 3000), ff: bool) {
        fit_every_window(&q, &on_memory(RateLimiter::sliding_log(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn sliding_window_counts_never_exceed_the_estimate(
        q in quota(),
        k in prop::sample::select(vec![1u64, 2, 4]),
        reqs in requests(700, 3000),
        ff: bool,
    ) {
        let limiter = RateLimiter::sliding_window(q.clone()).sub_windows(k as usize);
        fit_the_sliding_estimate(&q, k, &on_memory(limiter, &reqs, ff))?;
    }
}

/// The same attacks on the Redis store: the scripts keep the same guarantee.
#[test]
fn redis_counts_never_exceed_the_quota() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let rt = parity::runtime();
    let store: RedisStore = rt.block_on(parity::store(&redis.url()));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        quota(),
        1u64..=3,
        requests(700, 3000),
        any::<bool>(),
        0u8..5,
    );
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&strategy, |(q, burst, reqs, ff, which)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("count-if-{n}");
            let clock = ManualClock::new();
            clock.advance(Duration::from_nanos(parity::EPOCH));
            macro_rules! attack {
                ($limiter:expr) => {{
                    let limiter = $limiter.with_clock(clock.clone()).with_store(store.clone());
                    let keys = parity::redis_keys(&limiter, &tollgate::Key::from("k"));
                    let keep = || parity::keep(&keys);
                    rt.block_on(run(&limiter, &clock, &reqs, ff, &keep))
                }};
            }
            let q = q.named(name);
            match which {
                0 => {
                    let q = q.with_burst(burst);
                    if let Some(counted) = attack!(RateLimiter::gcra(q.clone())) {
                        conform_to_gcra(&q, &counted)?;
                    }
                }
                1 => {
                    let q = q.with_burst(burst);
                    if let Some(counted) = attack!(RateLimiter::token_bucket(q.clone())) {
                        conform_to_gcra(&q, &counted)?;
                    }
                }
                2 => {
                    if let Some(counted) = attack!(RateLimiter::fixed_window(q.clone())) {
                        fit_fixed_windows(&q, &counted)?;
                    }
                }
                3 => {
                    if let Some(counted) = attack!(RateLimiter::sliding_log(q.clone())) {
                        fit_every_window(&q, &counted)?;
                    }
                }
                _ => {
                    let limiter = RateLimiter::sliding_window(q.clone()).sub_windows(2);
                    if let Some(counted) = attack!(limiter) {
                        fit_the_sliding_estimate(&q, 2, &counted)?;
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A layer refuses `count_if` for an algorithm that cannot give capacity back, where it is
/// built, instead of counting every request silently.
#[test]
#[should_panic(
    expected = "count_if: this layer's algorithm (the hybrid) cannot give capacity back"
)]
fn count_if_is_refused_for_the_hybrid() {
    let _ = tollgate::RateLimitLayer::hybrid(Quota::per_minute(5)).count_if(|_| true);
}

#[test]
fn count_if_is_refused_for_hybrid_tiers_too() {
    let refused = std::panic::catch_unwind(|| {
        tollgate::RateLimitLayer::hybrid([Quota::per_second(1), Quota::per_minute(5)])
            .count_if(|_| true)
    });
    assert!(refused.is_err());
    // Every other algorithm takes it.
    let _ = tollgate::RateLimitLayer::gcra(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::sliding_log(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::leaky_bucket(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::sliding_window(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::fixed_window(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::token_bucket(Quota::per_minute(5)).count_if(|_| true);
}
