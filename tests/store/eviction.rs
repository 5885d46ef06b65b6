//! The memory store forgets keys by itself: fresh keys are swept out as new keys come in, and
//! `with_max_keys` bounds a table under key spraying without ever freeing a limited client
//! while other keys could go.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Key, Quota, RateLimiter};

fn v6(i: u64) -> Key {
    // Spread over the whole address space, as a botnet's addresses would be.
    let bits = u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) << 64 | u128::from(i);
    Key::from(IpAddr::V6(Ipv6Addr::from(bits)))
}

#[test]
fn fresh_keys_are_swept_out_as_new_keys_come_in() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(1)).with_clock(clock.clone());
    let n = 50_000;
    for i in 0..n {
        assert!(limiter.check_now(v6(i)).allowed);
    }
    assert_eq!(limiter.table().len(), n as usize);
    // A second later every key is fresh again; as many new keys replace them.
    clock.advance(Duration::from_secs(1));
    for i in n..2 * n {
        assert!(limiter.check_now(v6(i)).allowed);
    }
    // Each shard swept when it doubled: none holds the old keys and more than a sweep's worth of
    // the new ones... and the new keys are all still limited.
    let len = limiter.table().len();
    assert!(len < (n + n / 2) as usize, "{len} keys held");
    for i in n..2 * n {
        assert!(!limiter.check_now(v6(i)).allowed, "key {i} was forgotten");
    }
}

#[test]
fn key_spraying_never_grows_the_table_past_its_bound_nor_frees_a_limited_client() {
    const MAX: usize = 100_000;
    let sprayed: u64 = std::env::var("TOLLGATE_SPRAY_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000_000);
    let clock = ManualClock::new();
    let store = MemoryStore::new().with_max_keys(MAX);
    // 10 an hour: the abuser is limited for the whole run, each sprayed key is not.
    let limiter = RateLimiter::gcra(Quota::per_hour(10))
        .with_store(store)
        .with_clock(clock.clone());
    let abuser = Key::from("abuser");
    for _ in 0..10 {
        assert!(limiter.check_now(abuser.clone()).allowed);
    }
    for i in 0..sprayed {
        clock.advance(Duration::from_micros(1));
        assert!(limiter.check_now(v6(i)).allowed);
        if i % 10_000 == 0 {
            assert!(
                !limiter.check_now(abuser.clone()).allowed,
                "freed at key {i}"
            );
            assert!(
                limiter.table().len() <= MAX,
                "{} keys",
                limiter.table().len()
            );
        }
    }
    assert!(limiter.table().len() <= MAX);
    assert!(limiter.table().len() >= MAX * 3 / 4, "the bound is used");
    assert!(!limiter.check_now(abuser).allowed);
}

#[test]
fn the_default_store_is_bounded() {
    // A client inventing a key per request (an API key or header value of its choosing) on a
    // layer with the default store, on a long window where no key goes fresh.
    let limiter = RateLimiter::fixed_window(Quota::per_day(100)).with_clock(ManualClock::new());
    assert_eq!(limiter.store().max_keys(), MemoryStore::DEFAULT_MAX_KEYS);
    let sprayed = MemoryStore::DEFAULT_MAX_KEYS as u64 * 3 / 2;
    for i in 0..sprayed {
        assert!(limiter.check_now(Key::from(format!("key-{i}"))).allowed);
    }
    let len = limiter.table().len();
    assert!(len <= MemoryStore::DEFAULT_MAX_KEYS, "{len} keys held");
    assert!(len >= MemoryStore::DEFAULT_MAX_KEYS / 2, "{len} keys held");
}

/// A key that used `used` of its quota at 0, then, `elapsed` ns later, a flood of `flood` new
/// keys that each used `flood_cost`: the key must not get more than it had left before the
/// flood (when the flood's keys had more left than it), whatever forgetting made room for them.
fn flood_never_frees<A: MemoryAlgorithm>(
    name: &str,
    limiter: RateLimiter<A, MemoryStore, ManualClock>,
    clock: &ManualClock,
    (used, elapsed, flood, flood_cost): (u64, u64, u64, u64),
) -> Result<(), TestCaseError> {
    let victim = Key::from("account:alice");
    for _ in 0..used {
        limiter.check_now(victim.clone());
    }
    clock.advance(Duration::from_nanos(elapsed));
    let left = ready(limiter.peek(victim.clone())).remaining;
    for i in 0..flood {
        let key = Key::from(format!("minted-{i}"));
        for _ in 0..flood_cost {
            limiter.check_now(key.clone());
        }
    }
    let flood_left = ready(limiter.peek(Key::from(format!("minted-{}", flood - 1)))).remaining;
    if flood_left <= left {
        // The flood's keys cost their senders as much as the victim's use: not this property.
        return Ok(());
    }
    let passed = (0..=left + 10)
        .filter(|_| limiter.check_now(victim.clone()).allowed)
        .count() as u64;
    prop_assert!(
        passed <= left,
        "{name}: the key had {left} left before a flood of {flood} keys with {flood_left} left \
         each, and {passed} passed after it"
    );
    Ok(())
}

/// The decision of a memory store's future, which is always ready.
fn ready(
    future: std::future::Ready<Result<tollgate::Decision, tollgate::Error>>,
) -> tollgate::Decision {
    future.into_inner().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Eviction by what forgetting gives back: after any flood of keys with more left, a key
    /// never gets more than it had left, under every algorithm and tiers.
    #[test]
    fn a_flood_of_keys_with_more_left_never_frees_a_key(
        limit in 3..8u64,
        used_share in 2..8u64,
        elapsed_percent in 0..95u64,
        flood_cost in 1..3u64,
    ) {
        const MAX_KEYS: usize = 256;
        let used = used_share.min(limit - 1).max(flood_cost + 1);
        let period = Duration::from_secs(3600);
        let elapsed = period.as_nanos() as u64 / 100 * elapsed_percent;
        let q = Quota::new(limit, period);
        let day = Quota::new(limit * 4, period * 24);
        let flood = MAX_KEYS as u64 * 8;
        let case = (used, elapsed, flood, flood_cost);
        macro_rules! run {
            ($name:literal, $make:expr) => {{
                let clock = ManualClock::new();
                let limiter = $make
                    .with_store(MemoryStore::new().with_max_keys(MAX_KEYS))
                    .with_clock(clock.clone());
                flood_never_frees($name, limiter, &clock, case)?;
            }};
        }
        run!("gcra", RateLimiter::gcra(q.clone()));
        run!("token bucket", RateLimiter::token_bucket(q.clone()));
        run!("leaky bucket", RateLimiter::leaky_bucket(q.clone()));
        run!("fixed window", RateLimiter::fixed_window(q.clone()));
        run!("sliding window", RateLimiter::sliding_window(q.clone()));
        run!("sliding window, 4 sub-windows", RateLimiter::sliding_window(q.clone()).sub_windows(4));
        run!("sliding log", RateLimiter::sliding_log(q.clone()));
        run!("hybrid", RateLimiter::hybrid(q.clone()));
        run!("gcra tiers", RateLimiter::gcra([q.clone(), day.clone()]));
        run!("fixed window tiers", RateLimiter::fixed_window([q.clone(), day.clone()]));
        run!("sliding log tiers", RateLimiter::sliding_log([q.clone(), day.clone()]));
        run!("sliding window tiers", RateLimiter::sliding_window([q.clone(), day.clone()]));
        run!("hybrid tiers", RateLimiter::hybrid([q.clone(), day.clone()]));
    }
}

/// A store that would keep no key is refused where it is made, naming the fix.
#[test]
fn a_store_of_no_keys_is_refused_where_it_is_made() {
    let made = std::panic::catch_unwind(|| MemoryStore::new().with_max_keys(0));
    let panic = made.expect_err("with_max_keys(0) was accepted");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("with_max_keys(0)") && message.contains("at least one key"),
        "{message}"
    );
    assert_eq!(MemoryStore::new().with_max_keys(1).max_keys(), 1);
}
