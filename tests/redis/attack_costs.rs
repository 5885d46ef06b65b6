//! Audit: `count_if` refunds combined with per-request costs (`cost(f)`), tiers, shaping and
//! the leaky bucket. Requests of random costs (1 to 3) arrive for one key; each allowed one
//! finishes after a random time and, when it does not count, gives back its cost then (in any
//! order). The admissions that count, with their costs, must keep to the quota, checked by
//! oracles that know nothing of refunds.

use crate::support::count_if;
use crate::support::parity;
use crate::support::redis as server;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::store::RedisStore;
use tollgate::{Quota, RateLimiter};

use count_if::{
    at_admission, conform_to_gcra, fit_every_window, fit_fixed_windows, fit_the_sliding_estimate,
    on_memory, requests, run,
};

fn quota() -> impl Strategy<Value = Quota> {
    (3u64..=6, 1u64..=4).prop_map(|(limit, secs)| Quota::new(limit, Duration::from_secs(secs)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    fn gcra_with_costs(q in quota(), burst in 3u64..=6, reqs in requests(700, 3000, 3), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::gcra(q.clone()), &reqs, ff))?;
    }

    fn token_bucket_with_costs(q in quota(), burst in 3u64..=6, reqs in requests(700, 3000, 3), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::token_bucket(q.clone()), &reqs, ff))?;
    }

    fn shaped_gcra_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        let limiter = RateLimiter::gcra(q.clone()).max_delay(Duration::from_secs(2));
        conform_to_gcra(&q, &on_memory(limiter, &reqs, ff))?;
    }

    fn shaped_tiered_gcra_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        let per_minute = Quota::per_minute(q.limit() * 3);
        let limiter = RateLimiter::gcra([q.clone(), per_minute.clone()])
            .max_delay(Duration::from_secs(1));
        let counted = on_memory(limiter, &reqs, ff);
        conform_to_gcra(&q, &counted)?;
        conform_to_gcra(&per_minute, &counted)?;
    }

    fn tiered_gcra_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        let per_minute = Quota::per_minute(q.limit() * 3);
        let counted = on_memory(RateLimiter::gcra([q.clone(), per_minute.clone()]), &reqs, ff);
        conform_to_gcra(&q, &counted)?;
        conform_to_gcra(&per_minute, &counted)?;
    }

    /// The leaky bucket: the counted requests, at the time they were admitted, keep to the
    /// queue's bound (a GCRA of the quota with its burst).
    fn leaky_bucket_with_costs(q in quota(), burst in 3u64..=6, reqs in requests(700, 3000, 3), ff: bool) {
        let q = q.with_burst(burst);
        let counted = on_memory(RateLimiter::leaky_bucket(q.clone()), &reqs, ff);
        conform_to_gcra(&q, &at_admission(counted))?;
    }

    fn fixed_window_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        fit_fixed_windows(&q, &on_memory(RateLimiter::fixed_window(q.clone()), &reqs, ff))?;
    }

    fn sliding_window_with_costs(
        q in quota(),
        k in prop::sample::select(vec![1u64, 2, 4]),
        reqs in requests(700, 3000, 3),
        ff: bool,
    ) {
        let limiter = RateLimiter::sliding_window(q.clone()).sub_windows(k as usize);
        fit_the_sliding_estimate(&q, k, &on_memory(limiter, &reqs, ff))?;
    }

    fn sliding_log_with_costs(q in quota(), reqs in requests(700, 3000, 3), ff: bool) {
        fit_every_window(&q, &on_memory(RateLimiter::sliding_log(q.clone()), &reqs, ff))?;
    }
}

/// The same streams on the Redis scripts, costs included (of 1 to 3: the streams of cost 1 in
/// `count_if_props` are among them), for every algorithm that refunds.
fn redis_with_costs() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let rt = server::runtime();
    let store: RedisStore = rt.block_on(parity::store(&redis.url()));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        quota(),
        3u64..=6,
        requests(700, 3000, 3),
        any::<bool>(),
        0u8..7,
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
                        conform_to_gcra(&q, &at_admission(c))?;
                    }
                }
                5 => {
                    let limiter = RateLimiter::sliding_window(q.clone()).sub_windows(2);
                    if let Some(c) = attack!(limiter) {
                        fit_the_sliding_estimate(&q, 2, &c)?;
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

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::plain("gcra_with_costs", gcra_with_costs),
        server::plain("token_bucket_with_costs", token_bucket_with_costs),
        server::plain("shaped_gcra_with_costs", shaped_gcra_with_costs),
        server::plain(
            "shaped_tiered_gcra_with_costs",
            shaped_tiered_gcra_with_costs,
        ),
        server::plain("tiered_gcra_with_costs", tiered_gcra_with_costs),
        server::plain("leaky_bucket_with_costs", leaky_bucket_with_costs),
        server::plain("fixed_window_with_costs", fixed_window_with_costs),
        server::plain("sliding_window_with_costs", sliding_window_with_costs),
        server::plain("sliding_log_with_costs", sliding_log_with_costs),
        server::needs_redis("redis_with_costs", redis_with_costs),
    ]
}
