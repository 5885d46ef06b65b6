//! Audit: `count_if` refunds combined with per-request costs (`cost(f)`), tiers, shaping and
//! the leaky bucket. Requests of random costs (1 to 3) arrive for one key; each allowed one
//! finishes after a random time and, when it does not count, gives back its cost then (in any
//! order). The admissions that count, with their costs, must keep to the quota, checked by
//! oracles that know nothing of refunds.

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

#[derive(Debug, Clone, Copy)]
struct Req {
    gap: u64,
    cost: u64,
    counts: bool,
    takes: u64,
}

fn requests(max_gap: u64, max_takes: u64, max_cost: u64) -> impl Strategy<Value = Vec<Req>> {
    let req = (
        0..=max_gap,
        1..=max_cost,
        prop::bool::weighted(0.4),
        0..=max_takes,
    )
        .prop_map(|(gap, cost, counts, takes)| Req {
            gap,
            cost,
            counts,
            takes,
        });
    prop::collection::vec(req, 1..80)
}

/// The counted admissions: (time the request runs, its cost, its decision).
type Counted = Vec<(u64, u64, Decision)>;

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
                let decision = limiter
                    .check_n("k", reqs[i].cost)
                    .await
                    .expect("the store answers");
                if decision.allowed {
                    let done = ms + decision.delay.as_millis() as u64 + reqs[i].takes;
                    events.insert((done, u8::from(!finish_first), i), Some(i));
                    if reqs[i].counts {
                        counted.push((
                            now + decision.delay.as_nanos() as u64,
                            reqs[i].cost,
                            decision.clone(),
                        ));
                    }
                    admitted[i] = Some(decision);
                }
            }
            Some(i) => {
                let decision = admitted[i].take().expect("finished once");
                if !reqs[i].counts {
                    limiter
                        .refund("k", &decision, reqs[i].cost)
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

/// The counted requests, at the times given, with their costs, pass a fresh GCRA of `quota`.
fn conform_to_gcra(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let gcra = Gcra::new(quota);
    let mut tat = 0;
    for (i, (at, cost, _)) in counted.iter().enumerate() {
        let out = gcra.check(&tat, *at, *cost);
        prop_assert!(
            out.decision.allowed,
            "counted request {} at {} ns (cost {}) exceeds {:?}: {:?}",
            i,
            at,
            cost,
            quota,
            counted.iter().map(|(t, c, _)| (*t, *c)).collect::<Vec<_>>()
        );
        tat = out.state.unwrap_or(tat);
    }
    Ok(())
}

fn fit_fixed_windows(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
    for (at, cost, d) in counted {
        let start = d.receipt();
        prop_assert!(
            start <= *at && *at < start + period,
            "{} not in {}",
            at,
            start
        );
        *windows.entry(start).or_default() += cost;
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

fn fit_every_window(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    for (i, (end, _, _)) in counted.iter().enumerate() {
        let inside: u64 = counted[..=i]
            .iter()
            .filter(|(t, _, _)| end - t < period)
            .map(|(_, c, _)| c)
            .sum();
        prop_assert!(
            inside <= quota.limit(),
            "{} counted in the period up to {}: {:?}",
            inside,
            end,
            counted.iter().map(|(t, c, _)| (*t, *c)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

fn quota() -> impl Strategy<Value = Quota> {
    (3u64..=6, 1u64..=4).prop_map(|(limit, secs)| Quota::new(limit, Duration::from_secs(secs)))
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
    fn gcra_with_costs(q in quota(), burst in 3u64..=6, reqs in requests(700, 3000, 3), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::gcra(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn token_bucket_with_costs(q in quota(), burst in 3u64..=6, reqs in requests(700, 3000, 3), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::token_bucket(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn shaped_gcra_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        let limiter = RateLimiter::gcra(q.clone()).max_delay(Duration::from_secs(2));
        conform_to_gcra(&q, &on_memory(limiter, &reqs, ff))?;
    }

    #[test]
    fn shaped_tiered_gcra_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        let per_minute = Quota::per_minute(q.limit() * 3);
        let limiter = RateLimiter::gcra([q.clone(), per_minute.clone()])
            .max_delay(Duration::from_secs(1));
        let counted = on_memory(limiter, &reqs, ff);
        conform_to_gcra(&q, &counted)?;
        conform_to_gcra(&per_minute, &counted)?;
    }

    #[test]
    fn tiered_gcra_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        let per_minute = Quota::per_minute(q.limit() * 3);
        let counted = on_memory(RateLimiter::gcra([q.clone(), per_minute.clone()]), &reqs, ff);
        conform_to_gcra(&q, &counted)?;
        conform_to_gcra(&per_minute, &counted)?;
    }

    /// The leaky bucket: the counted requests, at the time they were admitted, keep to the
    /// queue's bound (a GCRA of the quota with its burst).
    #[test]
    fn leaky_bucket_with_costs(q in quota(), burst in 3u64..=6, reqs in requests(700, 3000, 3), ff: bool) {
        let q = q.with_burst(burst);
        let counted = on_memory(RateLimiter::leaky_bucket(q.clone()), &reqs, ff);
        // At admission time: the run time less the delay.
        let admitted: Counted = counted
            .into_iter()
            .map(|(t, c, d)| (t - d.delay.as_nanos() as u64, c, d))
            .collect();
        conform_to_gcra(&q, &admitted)?;
    }

    #[test]
    fn fixed_window_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        fit_fixed_windows(&q, &on_memory(RateLimiter::fixed_window(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn sliding_log_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        fit_every_window(&q, &on_memory(RateLimiter::sliding_log(q.clone()), &reqs, ff))?;
    }
}

/// The same streams on the Redis scripts, costs included.
#[test]
fn redis_with_costs() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let rt = parity::runtime();
    let store: RedisStore = rt.block_on(parity::store(&redis.url()));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        quota(),
        3u64..=6,
        requests(700, 3000, 3),
        any::<bool>(),
        0u8..6,
    );
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&strategy, |(q, burst, reqs, ff, which)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
            let q = q.named(format!("attack-costs-{n}"));
            match which {
                0 => {
                    let q = q.with_burst(burst);
                    if let Some(c) = attack!(RateLimiter::gcra(q.clone())) {
                        conform_to_gcra(&q, &c)?;
                    }
                }
                1 => {
                    let q = q.with_burst(burst);
                    if let Some(c) = attack!(RateLimiter::token_bucket(q.clone())) {
                        conform_to_gcra(&q, &c)?;
                    }
                }
                2 => {
                    if let Some(c) = attack!(RateLimiter::fixed_window(q.clone())) {
                        fit_fixed_windows(&q, &c)?;
                    }
                }
                3 => {
                    if let Some(c) = attack!(RateLimiter::sliding_log(q.clone())) {
                        fit_every_window(&q, &c)?;
                    }
                }
                4 => {
                    let q = q.with_burst(burst);
                    if let Some(c) = attack!(RateLimiter::leaky_bucket(q.clone())) {
                        let admitted: Counted = c
                            .into_iter()
                            .map(|(t, cost, d)| (t - d.delay.as_nanos() as u64, cost, d))
                            .collect();
                        conform_to_gcra(&q, &admitted)?;
                    }
                }
                _ => {
                    let per_minute =
                        Quota::per_minute(q.limit() * 3).named(format!("attack-costs-m-{n}"));
                    let limiter = RateLimiter::gcra([q.clone(), per_minute.clone()])
                        .max_delay(Duration::from_secs(1));
                    if let Some(c) = attack!(limiter) {
                        conform_to_gcra(&q, &c)?;
                        conform_to_gcra(&per_minute, &c)?;
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}
