//! The memory store forgets keys by itself: fresh keys are swept out as new keys come in, and
//! `with_max_keys` bounds a table under key spraying without ever freeing a limited client
//! while other keys could go.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
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
