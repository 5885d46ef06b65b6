//! Checks on a key the memory store already holds allocate nothing, allowed or denied, for IP,
//! integer and short string keys.
//!
//! The counting allocator (`support/counting_alloc.rs`) counts per thread, only while a test
//! has switched it on, so the test harness's own threads add no noise.

use crate::support::counting_alloc;

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Key, Quota, RateLimiter};

use counting_alloc::{allocations, allocations_in};

const N: u64 = 10_000;

/// `N` allowed checks, then `N` denied ones, on a key that exists; returns the allocations of
/// each phase. Keys are made inside the counted region, as a server would per request.
fn run<K: Into<Key>>(make_key: impl Fn() -> K) -> (u64, u64) {
    let clock = ManualClock::new();
    // T = 1 µs, burst 10: a key that moves on by T per check is always allowed.
    let limiter = RateLimiter::gcra(Quota::new(1_000_000, Duration::from_secs(1)).with_burst(10))
        .with_clock(clock.clone());
    // The first check makes the key (and may allocate).
    assert!(limiter.check_n_now(make_key(), 1).allowed);
    assert_eq!(limiter.table().len(), 1);

    let (allowed_allocs, allowed) = allocations_in(|| {
        let mut allowed = 0;
        for _ in 0..N {
            clock.advance(Duration::from_micros(1));
            allowed += u64::from(black_box(limiter.check_n_now(make_key(), 1)).allowed);
        }
        allowed
    });
    assert_eq!(allowed, N, "the allowed phase was not all allowed");

    // Fill the bucket, then knock N times.
    assert!(limiter.check_n_now(make_key(), 9).allowed);
    let (denied_allocs, allowed) = allocations_in(|| {
        let mut allowed = 0;
        for _ in 0..N {
            allowed += u64::from(black_box(limiter.check_n_now(make_key(), 1)).allowed);
        }
        allowed
    });
    assert_eq!(allowed, 0, "the denied phase was not all denied");
    assert_eq!(limiter.table().len(), 1);
    (allowed_allocs, denied_allocs)
}

#[test]
fn checks_on_an_existing_key_do_not_allocate() {
    // The counter works: an allocation inside the counted region is seen, one outside is not.
    let (n, boxed) = allocations_in(|| black_box(Box::new(1u64)));
    assert_eq!(n, 1, "the counting allocator does not count");
    drop(boxed);
    let before = allocations();
    drop(black_box(vec![0u8; 64]));
    assert_eq!(allocations(), before, "counted outside the region");
    // A key too long to be stored inline allocates: the test can tell.
    let long = "an-api-key-longer-than-twenty-two-bytes";
    assert!(allocations_in(|| black_box(Key::from(long))).0 > 0);

    let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let short = "user-0123456789abcdefg"; // 22 bytes: the longest inline key
    assert_eq!(short.len(), 22);
    let cases: [(&str, (u64, u64)); 5] = [
        ("IPv4", run(|| v4)),
        ("IPv6", run(|| v6)),
        ("u64", run(|| 0xdead_beef_u64)),
        ("&str", run(|| short)),
        ("short &str", run(|| "k")),
    ];
    for (kind, (allowed, denied)) in cases {
        assert_eq!(
            (allowed, denied),
            (0, 0),
            "{kind} key: allocations in {N} allowed and {N} denied checks"
        );
    }
}

/// A check with two GCRA tiers on a key the store holds allocates nothing either, allowed or
/// denied, once the thread has made one list of tier decisions (reused when the caller has
/// dropped the previous decision); a decision still held when the next check runs costs that
/// check a new list.
#[test]
fn tiered_checks_on_an_existing_key_do_not_allocate() {
    let clock = ManualClock::new();
    let tiers = [
        Quota::new(1_000_000, Duration::from_secs(1)).with_burst(10),
        Quota::new(10_000_000, Duration::from_secs(10)).with_burst(100),
    ];
    let limiter = RateLimiter::gcra(tiers).with_clock(clock.clone());
    assert!(limiter.check_now("k").allowed);
    let (allocs, allowed) = allocations_in(|| {
        let mut allowed = 0;
        for _ in 0..N {
            clock.advance(Duration::from_micros(1));
            let decision = black_box(limiter.check_now("k"));
            assert_eq!(decision.tiers().len(), 2);
            allowed += u64::from(decision.allowed);
        }
        allowed
    });
    assert_eq!((allocs, allowed), (0, N), "allowed tiered checks");
    assert!(limiter.check_n_now("k", 9).allowed);
    let (allocs, allowed) = allocations_in(|| {
        (0..N)
            .map(|_| u64::from(black_box(limiter.check_now("k")).allowed))
            .sum::<u64>()
    });
    assert_eq!((allocs, allowed), (0, 0), "denied tiered checks");
    // The test can tell: holding each decision across the next check allocates a list each.
    let (allocs, _) = allocations_in(|| {
        let held: Vec<_> = (0..10).map(|_| limiter.check_now("k")).collect();
        black_box(held)
    });
    assert!(allocs >= 10, "{allocs} allocations for 10 held decisions");
}
