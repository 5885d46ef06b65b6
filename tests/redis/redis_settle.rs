//! Costs settled after the response on a fleet: two `RedisStore`s (two servers) on one real
//! `redis-server`, time moved by one `ManualClock` they share.
//!
//! - A charge through one server puts the key in debt on the other, with the same figures.
//! - A charge forgets the denial its server remembers (the debt's wait is Redis's, not the
//!   remembered one), and ends its server's own slice of the key.
//! - With local leases on both servers, the fleet never admits more than the quota plus what
//!   the request in flight overspent.
//! - A reset forgets a debt; a charge on a state that expired charges from now; a charge of
//!   `u64::MAX` saturates, with no error, and the key stays denied.
//! - A settlement costs at most one script call.
//! - While Redis is down or frozen, a charge follows the failure policy: the local fallback
//!   is charged under `Local`, the others answer the error.

use crate::support::parity::EPOCH;
use crate::support::redis as server;
use crate::support::rng::Rng;

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{Leases, MemoryStore, OnFailure, RedisStore};
use tollgate::{ErrorKind, Key, Quota, RateLimiter};

use server::needs_redis_async;

type OnRedis<A> = RateLimiter<A, RedisStore, ManualClock>;

fn clock_at(nanos: u64) -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(nanos));
    clock
}

/// One server's store on `url`: the caller's clock, failing closed, the default deny cache.
async fn server_store(url: &str) -> RedisStore {
    server::closed_on_caller_clock(url)
        .await
        .timeout(Duration::from_secs(5))
}

/// [`server_store`] with local leases.
async fn leased_store(url: &str) -> RedisStore {
    server_store(url).await.local_leases(Leases::default())
}

/// `command` of the key `name`, on a plain connection to the Redis at `url`: its integer reply.
async fn ask(url: &str, command: &str, name: &[u8]) -> i64 {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd(command)
        .arg(name)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// `template` on two servers of the Redis at `url`, on `clock`.
async fn pair<A: RedisAlgorithm>(
    url: &str,
    clock: &ManualClock,
    template: &RateLimiter<A>,
) -> (OnRedis<A>, OnRedis<A>) {
    let on = |store| template.clone().with_clock(clock.clone()).with_store(store);
    (on(server_store(url).await), on(server_store(url).await))
}

/// A charge through `a` (a request that reserved 10 and cost 100) puts the key in debt: `b`
/// sees the same standing and the same denial, until the debt is paid back at the quota's
/// rate.
async fn in_debt_on_both<A: RedisAlgorithm>(a: &OnRedis<A>, b: &OnRedis<A>, clock: &ManualClock) {
    let key = "client";
    let admission = a.check_n(key, 10).await.unwrap();
    assert!(admission.allowed);
    let standing = a.settle(key, &admission, 10, 100).await.unwrap();
    assert!(!standing.allowed, "{standing:?}");
    assert_eq!(b.peek(key).await.unwrap(), standing);
    let on_a = a.check(key).await.unwrap();
    assert!(!on_a.allowed);
    assert_eq!(b.check(key).await.unwrap(), on_a);
    let retry = on_a.retry_after.expect("a debt is paid back in time");
    clock.advance(retry - Duration::from_nanos(1));
    assert!(!b.check(key).await.unwrap().allowed, "a nanosecond early");
    clock.advance(Duration::from_nanos(1));
    assert!(b.check(key).await.unwrap().allowed, "paid back");
}

async fn a_charge_through_one_server_puts_the_key_in_debt_on_the_other() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let url = redis.url();
    // 10 a second, 20 at once: a reservation of 10 that cost 100 owes 80 past the burst.
    let quota = || Quota::per_second(10).with_burst(20).named("settled");
    let clock = clock_at(EPOCH);
    let (a, b) = pair(&url, &clock, &RateLimiter::gcra(quota())).await;
    in_debt_on_both(&a, &b, &clock).await;
    let (a, b) = pair(&url, &clock, &RateLimiter::token_bucket(quota())).await;
    in_debt_on_both(&a, &b, &clock).await;
    let (a, b) = pair(&url, &clock, &RateLimiter::leaky_bucket(quota())).await;
    in_debt_on_both(&a, &b, &clock).await;
    let tiers = RateLimiter::gcra([quota(), Quota::per_minute(1000).named("settled-long")]);
    let (a, b) = pair(&url, &clock, &tiers).await;
    in_debt_on_both(&a, &b, &clock).await;
}

/// A server that remembers a denial of the key forgets it on a charge: its next check is
/// Redis's answer, the debt's wait, as the other server's. A refund that gives nothing back
/// (the charge moved the key's schedule past the admission) leaves the key in debt.
async fn a_charge_forgets_the_denial_its_server_remembers() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = clock_at(EPOCH);
    let template = RateLimiter::gcra(Quota::per_second(10).with_burst(2).named("remembered"));
    let (a, b) = pair(&redis.url(), &clock, &template).await;
    let key = "client";
    let first = a.check(key).await.unwrap();
    let second = a.check(key).await.unwrap();
    assert!(first.allowed && second.allowed);
    let denied = a.check(key).await.unwrap();
    assert_eq!(denied.retry_after, Some(Duration::from_millis(100)));
    assert_eq!(a.table().cached_denials(), 1, "remembered on a");
    let standing = a.settle(key, &first, 1, 50).await.unwrap();
    assert!(!standing.allowed);
    let on_a = a.check(key).await.unwrap();
    assert_eq!(on_a.retry_after, Some(Duration::from_secs(5)), "{on_a:?}");
    assert_eq!(b.check(key).await.unwrap(), on_a);
    // The second admission is no longer the key's last: its refund gives nothing back.
    let after_refund = a.settle(key, &second, 1, 0).await.unwrap();
    assert_eq!(after_refund, standing);
    assert_eq!(a.check(key).await.unwrap(), on_a);
    assert_eq!(b.check(key).await.unwrap(), on_a);
}

/// A server holding a slice of a hot key's budget stops spending it on a charge of the key
/// through it: its next request is decided in Redis, in debt.
async fn a_charge_ends_its_servers_slice_of_the_key() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = clock_at(EPOCH);
    let store = leased_store(&redis.url()).await;
    // 100 a second, 100 at once: a lease margin of 60 ms (6 units).
    let a = RateLimiter::gcra(Quota::per_second(100).named("hot"))
        .with_clock(clock.clone())
        .with_store(store);
    let key = "hot";
    let mut last = a.check(key).await.unwrap();
    // Until a check is admitted from a slice, with no call to Redis.
    let mut sliced = false;
    for _ in 0..50 {
        clock.advance(Duration::from_millis(1));
        let calls = redis.calls("evalsha");
        last = a.check(key).await.unwrap();
        assert!(last.allowed);
        if redis.calls("evalsha") == calls {
            sliced = true;
            break;
        }
    }
    assert!(sliced, "the key is leased");
    let standing = a.settle(key, &last, 1, 1_000).await.unwrap();
    assert!(!standing.allowed);
    for _ in 0..3 {
        let next = a.check(key).await.unwrap();
        assert!(
            !next.allowed,
            "admitted from a slice after the charge: {next:?}"
        );
    }
}

/// Two servers with local leases share a hot key under a load well past its quota, each
/// request settled at once (through the first server) at a true cost around its reservation.
/// Over every window between two admissions, the true costs admitted never exceed the burst
/// plus the window's intervals plus what the last request overspent (in flight at its own
/// admission): slices the second server took before a charge were counted before it.
async fn a_leased_fleet_admits_no_more_than_its_quota_and_what_was_overspent() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    for seed in [1u64, 7, 42] {
        let clock = clock_at(EPOCH);
        let quota = Quota::per_second(100).named(format!("leased-{seed}"));
        let (interval, burst) = (10_000_000u64, 100u64);
        let mut fleet = Vec::new();
        for _ in 0..2 {
            let store = leased_store(&redis.url()).await;
            let limiter = RateLimiter::gcra(quota.clone()).with_clock(clock.clone());
            fleet.push(limiter.with_store(store));
        }
        let mut rng = Rng(seed);
        // Each admission: when, what it cost in the end, and what it overspent.
        let mut admitted: Vec<(u64, u64, u64)> = Vec::new();
        let (mut ops, calls) = (0u64, redis.calls("evalsha"));
        let mut now = EPOCH;
        for _ in 0..2_000 {
            let step = rng.below(4) * 500_000;
            clock.advance(Duration::from_nanos(step));
            now += step;
            let server = usize::from(rng.below(3) == 0);
            let reserved = 1 + rng.below(3);
            let decision = fleet[server].check_n("hot", reserved).await.unwrap();
            ops += 1;
            if !decision.allowed {
                continue;
            }
            let actual = match rng.below(3) {
                0 => reserved,
                1 => reserved + rng.below(6),
                _ => rng.below(reserved + 1),
            };
            if actual != reserved {
                fleet[0]
                    .settle("hot", &decision, reserved, actual)
                    .await
                    .unwrap();
                ops += 1;
            }
            admitted.push((now, actual, actual.saturating_sub(reserved)));
        }
        assert!(
            admitted.len() > 100,
            "seed {seed}: {} admitted",
            admitted.len()
        );
        assert!(
            redis.calls("evalsha") - calls < ops,
            "seed {seed}: some requests were admitted from slices"
        );
        for (i, &(start, _, _)) in admitted.iter().enumerate() {
            let mut cost = 0u64;
            for &(at, actual, over) in &admitted[i..] {
                cost += actual;
                let allowed = burst * interval + (at - start);
                assert!(
                    (cost - over) * interval <= allowed,
                    "seed {seed}: {cost} admitted ({over} of it in flight) from {start} to {at}"
                );
            }
        }
    }
}

/// A reset through either server forgets a debt: the key is fresh on both.
async fn a_reset_forgets_a_debt() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = clock_at(EPOCH);
    let template = RateLimiter::gcra(Quota::per_minute(60).named("reset"));
    let (a, b) = pair(&redis.url(), &clock, &template).await;
    let key = "client";
    let fresh = b.peek(key).await.unwrap();
    for (charger, resetter) in [(&a, &b), (&a, &a)] {
        let admission = charger.check(key).await.unwrap();
        // A day's worth of debt.
        let standing = charger.settle(key, &admission, 1, 86_400).await.unwrap();
        assert!(!standing.allowed);
        assert!(!a.check(key).await.unwrap().allowed);
        assert!(!b.check(key).await.unwrap().allowed);
        resetter.reset(key).await.unwrap();
        assert_eq!(resetter.peek(key).await.unwrap(), fresh);
        // The other server remembers its denial at most `DENY_CACHE_HOLD`; the debt would
        // have lasted a day.
        clock.advance(RedisStore::DENY_CACHE_HOLD);
        assert!(a.check(key).await.unwrap().allowed);
        assert!(b.check(key).await.unwrap().allowed);
        a.reset(key).await.unwrap();
    }
}

/// A key whose state is fresh again (its time passed, or its Redis key expired) is charged
/// from now, as in memory.
async fn a_charge_on_an_expired_state_charges_from_now() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = clock_at(EPOCH);
    // One a second, 10 at once.
    let memory = RateLimiter::gcra(Quota::per_second(1).with_burst(10).named("expired"))
        .with_clock(clock.clone());
    let on_redis = memory.clone().with_store(server_store(&redis.url()).await);
    let key = "client";
    let admission = on_redis.check_n(key, 5).await.unwrap();
    assert_eq!(memory.check_n(key, 5).await.unwrap(), admission);
    clock.advance(Duration::from_secs(3_600));
    let standing = on_redis.settle(key, &admission, 5, 35).await.unwrap();
    assert_eq!(
        memory.settle(key, &admission, 5, 35).await.unwrap(),
        standing
    );
    assert_eq!(standing.reset_after, Duration::from_secs(30));
    assert_eq!(standing.retry_after, Some(Duration::from_secs(20)));
    // Its Redis key gone, as when it expires: charged from now again.
    let name = on_redis.table().redis_keys(&Key::from(key)).remove(0);
    assert_eq!(ask(&redis.url(), "DEL", &name).await, 1);
    let again = on_redis.settle(key, &admission, 5, 35).await.unwrap();
    assert_eq!(again, standing);
}

/// A charge of `u64::MAX` (a true cost no reservation can follow) saturates at the end of the
/// clock: no error, the same standing on both servers, denied years later, kept in Redis.
async fn charged_to_the_end<A: RedisAlgorithm>(
    a: &OnRedis<A>,
    b: &OnRedis<A>,
    clock: &ManualClock,
    url: &str,
) {
    let key = "client";
    let admission = a.check(key).await.unwrap();
    let standing = a.settle(key, &admission, 1, u64::MAX).await.unwrap();
    assert!(!standing.allowed);
    let years = Duration::from_secs(400 * 365 * 86_400);
    assert!(standing.reset_after > years, "{standing:?}");
    assert_eq!(b.peek(key).await.unwrap(), standing);
    // Again: the schedule already ends with the clock.
    let again = a.settle(key, &admission, 0, u64::MAX).await.unwrap();
    assert_eq!(again, standing);
    clock.advance(Duration::from_secs(10 * 365 * 86_400));
    for limiter in [a, b] {
        let denied = limiter.check(key).await.unwrap();
        assert!(!denied.allowed && denied.reset_after > years, "{denied:?}");
    }
    for name in a.table().redis_keys(&Key::from(key)) {
        let ttl = ask(url, "PTTL", &name).await;
        assert!(ttl > 10_000_000_000_000, "kept for centuries: {ttl} ms");
    }
}

async fn a_huge_charge_saturates_and_the_key_stays_denied() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let url = redis.url();
    let quota = || Quota::per_minute(60).named("huge");
    let clock = clock_at(EPOCH);
    let (a, b) = pair(&url, &clock, &RateLimiter::gcra(quota())).await;
    charged_to_the_end(&a, &b, &clock, &url).await;
    let (a, b) = pair(&url, &clock, &RateLimiter::token_bucket(quota())).await;
    charged_to_the_end(&a, &b, &clock, &url).await;
    let (a, b) = pair(&url, &clock, &RateLimiter::leaky_bucket(quota())).await;
    charged_to_the_end(&a, &b, &clock, &url).await;
    let tiers = RateLimiter::token_bucket([quota(), Quota::per_hour(100).named("huge-long")]);
    let (a, b) = pair(&url, &clock, &tiers).await;
    charged_to_the_end(&a, &b, &clock, &url).await;
}

/// A key in debt is kept until its state is fresh again, plus what the scripts add for a key
/// at its limit (the used share of a span, and a whole span): under `volatile-ttl` it outlives
/// the keys that are not limited. Each tier's key by its own standing.
async fn a_key_in_debt_lives_until_it_is_fresh() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = clock_at(EPOCH);
    let store = server_store(&redis.url()).await;
    // 10 a second, 20 at once: a span (the bound) of 2 s; 100 a minute, the same burst.
    let quotas = [
        Quota::per_second(10).with_burst(20).named("kept"),
        Quota::per_minute(100).with_burst(20).named("kept-long"),
    ];
    let spans = [2_000_000_000u64, 12_000_000_000];
    let limiter = RateLimiter::token_bucket(quotas)
        .with_clock(clock)
        .with_store(store);
    let key = "client";
    let admission = limiter.check_n(key, 10).await.unwrap();
    let since = std::time::Instant::now();
    let standing = limiter.settle(key, &admission, 10, 100).await.unwrap();
    assert!(!standing.allowed);
    let names = limiter.table().redis_keys(&Key::from(key));
    for ((name, tier), span) in names.iter().zip(standing.tiers()).zip(spans) {
        let want = server::kept_ms(tier.reset_after, tier.remaining, 20, span);
        let ttl = u64::try_from(ask(&redis.url(), "PTTL", name).await).unwrap();
        let waited = u64::try_from(since.elapsed().as_millis()).unwrap() + 2;
        assert!(
            ttl <= want && ttl + waited >= want,
            "PTTL {ttl}, want {want} ms"
        );
    }
}

/// A settlement is one script call: a refund below the reservation, a charge above it, a peek
/// at it; an algorithm that carries no debt answers a charge with a peek. Measured with Redis
/// `INFO commandstats`, with local leases on (a charge gives nothing back in a second call).
async fn a_settlement_costs_at_most_one_script_call() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = clock_at(EPOCH);
    let store = leased_store(&redis.url()).await;
    let gcra = RateLimiter::gcra(Quota::per_second(10).with_burst(20).named("calls"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let window = RateLimiter::fixed_window(Quota::per_second(10).named("calls"))
        .with_clock(clock.clone())
        .with_store(store);
    let key = "client";
    // The scripts loaded, and the key hot.
    for _ in 0..3 {
        gcra.check_n(key, 2).await.unwrap();
        window.check_n(key, 2).await.unwrap();
    }
    let settle_calls = |reserved: u64, actual: u64| {
        let gcra = gcra.clone();
        let redis = &redis;
        async move {
            let admission = gcra.check_n(key, reserved).await.unwrap();
            let before = redis.calls("evalsha");
            gcra.settle(key, &admission, reserved, actual)
                .await
                .unwrap();
            redis.calls("evalsha") - before
        }
    };
    assert_eq!(settle_calls(2, 5).await, 1, "a charge");
    assert_eq!(settle_calls(3, 1).await, 1, "a refund");
    assert_eq!(settle_calls(2, 2).await, 1, "at the reservation");
    let admission = window.check_n(key, 2).await.unwrap();
    let before = redis.calls("evalsha");
    window.settle(key, &admission, 2, 9).await.unwrap();
    assert_eq!(redis.calls("evalsha") - before, 1, "a window's charge");
}

/// While Redis is down (killed: unreachable; frozen: every call times out), a charge follows
/// the failure policy. `Local` charges the local fallback, whose next checks are denied while
/// the debt lasts (as a memory store charged the same); `Closed` and `Open` answer the error:
/// a charge Redis could not record is not reported as made. Never a panic.
async fn a_charge_while_redis_is_down_follows_the_failure_policy() {
    let policies = [
        ("open", OnFailure::Open),
        ("closed", OnFailure::Closed),
        ("local", OnFailure::Local(MemoryStore::new())),
    ];
    for (name, on_failure) in policies {
        let Some(mut redis) = server::RedisServer::start() else {
            return;
        };
        let clock = clock_at(EPOCH);
        let store = RedisStore::connect(&redis.url())
            .await
            .unwrap()
            .with_caller_clock()
            .timeout(Duration::from_millis(200))
            .on_failure(on_failure);
        // 10 a minute: a request that reserved 1 and cost 30 owes 20 past the burst.
        let quota = Quota::per_minute(10).named(format!("down-{name}"));
        let limiter = RateLimiter::gcra(quota.clone())
            .with_clock(clock.clone())
            .with_store(store);
        let memory = RateLimiter::gcra(quota).with_clock(clock.clone());
        let key = "client";
        let admission = limiter.check(key).await.unwrap();
        assert!(admission.allowed);
        redis.kill();
        // The first call finds Redis unreachable; the second is answered at once.
        for attempt in 0..2 {
            let settled = limiter.settle(key, &admission, 1, 30).await;
            match name {
                "local" => {
                    let standing = settled.unwrap();
                    let expected = memory.settle(key, &admission, 1, 30).await.unwrap();
                    assert_eq!(standing, expected, "{name} {attempt}");
                    assert!(!standing.allowed);
                    let next = limiter.check(key).await.unwrap();
                    assert_eq!(next, memory.check(key).await.unwrap());
                    assert!(!next.allowed, "the local fallback is in debt");
                }
                _ => {
                    let error = settled.unwrap_err();
                    assert_eq!(error.kind(), ErrorKind::Unreachable, "{name}: {error}");
                }
            }
        }
        // Frozen: the charge times out. First, Redis back (its probe, every 200 ms): its
        // first script call is the sign.
        redis.restart();
        let mut up = false;
        for _ in 0..100 {
            let _ = limiter.peek(key).await;
            if redis.calls("evalsha") > 0 {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(up, "{name}: Redis answers again");
        let admission = limiter.check("frozen").await.unwrap();
        redis.pause();
        let settled = limiter.settle("frozen", &admission, 1, 30).await;
        redis.resume();
        match name {
            "local" => assert!(!settled.unwrap().allowed),
            _ => assert_eq!(settled.unwrap_err().kind(), ErrorKind::Timeout, "{name}"),
        }
    }
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        needs_redis_async(
            "a_charge_through_one_server_puts_the_key_in_debt_on_the_other",
            a_charge_through_one_server_puts_the_key_in_debt_on_the_other,
        ),
        needs_redis_async(
            "a_charge_forgets_the_denial_its_server_remembers",
            a_charge_forgets_the_denial_its_server_remembers,
        ),
        needs_redis_async(
            "a_charge_ends_its_servers_slice_of_the_key",
            a_charge_ends_its_servers_slice_of_the_key,
        ),
        needs_redis_async(
            "a_leased_fleet_admits_no_more_than_its_quota_and_what_was_overspent",
            a_leased_fleet_admits_no_more_than_its_quota_and_what_was_overspent,
        ),
        needs_redis_async("a_reset_forgets_a_debt", a_reset_forgets_a_debt),
        needs_redis_async(
            "a_charge_on_an_expired_state_charges_from_now",
            a_charge_on_an_expired_state_charges_from_now,
        ),
        needs_redis_async(
            "a_huge_charge_saturates_and_the_key_stays_denied",
            a_huge_charge_saturates_and_the_key_stays_denied,
        ),
        needs_redis_async(
            "a_key_in_debt_lives_until_it_is_fresh",
            a_key_in_debt_lives_until_it_is_fresh,
        ),
        needs_redis_async(
            "a_settlement_costs_at_most_one_script_call",
            a_settlement_costs_at_most_one_script_call,
        ),
        needs_redis_async(
            "a_charge_while_redis_is_down_follows_the_failure_policy",
            a_charge_while_redis_is_down_follows_the_failure_policy,
        ),
    ]
}
