//! Concurrent checks on the memory store never over- or under-admit, and limiters share state
//! exactly when they should.
//!
//! The clock never moves in the hammering tests, so the bucket only fills: across all threads,
//! exactly `burst` worth of cost passes, and the `remaining` figures of the allowed decisions
//! tile `0..burst` without a gap or an overlap (each decision saw the state it changed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use tollgate::algorithm::Gcra;
use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
use tollgate::{Key, Quota, RateLimiter};

type Limiter = RateLimiter<Gcra, MemoryStore, ManualClock>;

const THREADS: usize = 2;
const CHECKS: usize = 10_000;

fn limiter(burst: u64) -> (Limiter, ManualClock) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1000));
    let quota = Quota::per_second(10).with_burst(burst);
    (RateLimiter::gcra(quota).with_clock(clock.clone()), clock)
}

/// Runs `THREADS` threads over clones of `limiter`, thread `i` making the requests
/// `plan(i)` (key index, cost) in order, and returns per key the allowed `(remaining, cost)`.
fn hammer(
    limiter: &Limiter,
    keys: &[Key],
    plan: impl Fn(usize) -> Vec<(usize, u64)> + Sync,
) -> Vec<Vec<(u64, u64)>> {
    let barrier = Barrier::new(THREADS);
    let per_thread: Vec<Vec<(usize, u64, u64)>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let limiter = limiter.clone();
                let (barrier, plan) = (&barrier, &plan);
                scope.spawn(move || {
                    let requests = plan(i);
                    let mut allowed = Vec::new();
                    barrier.wait();
                    for (k, cost) in requests {
                        let d = limiter.check_n_now(&keys[k], cost);
                        assert_eq!(d.limit, limiter.quota().burst());
                        if d.allowed {
                            assert_eq!(d.retry_after, None);
                            allowed.push((k, d.remaining, cost));
                        } else {
                            // A denied request can pass later unless its cost is above the burst.
                            assert_eq!(d.retry_after.is_some(), cost <= d.limit, "cost {cost}");
                        }
                    }
                    allowed
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut per_key = vec![Vec::new(); keys.len()];
    for (k, remaining, cost) in per_thread.into_iter().flatten() {
        per_key[k].push((remaining, cost));
    }
    per_key
}

/// The allowed decisions of one key consumed the capacity `[remaining, remaining + cost)` each;
/// together these must tile `[0, burst)` exactly.
fn assert_tiles(allowed: &[(u64, u64)], burst: u64, what: &str) {
    let total: u64 = allowed.iter().map(|&(_, cost)| cost).sum();
    assert_eq!(total, burst, "{what}: total allowed cost");
    let mut spans: Vec<(u64, u64)> = allowed
        .iter()
        .map(|&(remaining, cost)| (remaining, remaining + cost))
        .collect();
    spans.sort_unstable();
    let mut next = 0;
    for (lo, hi) in spans {
        assert_eq!(lo, next, "{what}: remaining figures overlap or leave a gap");
        next = hi;
    }
    assert_eq!(next, burst, "{what}");
}

#[test]
fn one_key_admits_exactly_the_burst() {
    for burst in [1, 7, 1000] {
        let (limiter, _clock) = limiter(burst);
        let keys = [Key::from("hot")];
        let allowed = hammer(&limiter, &keys, |_| vec![(0, 1); CHECKS]);
        assert_eq!(allowed[0].len() as u64, burst, "burst {burst}");
        assert_tiles(&allowed[0], burst, &format!("burst {burst}"));
        // And the key is now full.
        let d = limiter.check_n_now("hot", 0);
        assert_eq!(
            (d.remaining, d.reset_after),
            (0, Duration::from_millis(100) * burst as u32)
        );
    }
}

#[test]
fn interleaved_keys_each_admit_exactly_the_burst() {
    for burst in [1, 7, 1000] {
        let (limiter, _clock) = limiter(burst);
        let keys = [
            Key::from("alice"),
            Key::from(42u64),
            Key::from(std::net::IpAddr::from([192, 0, 2, 1])),
            Key::from("a-rather-long-api-key-that-is-not-inline"),
        ];
        // Both threads walk the keys in the same order, so they race on each key at once.
        let n = keys.len();
        let allowed = hammer(&limiter, &keys, |_| {
            (0..CHECKS).map(|j| (j % n, 1)).collect()
        });
        for (key, allowed) in keys.iter().zip(&allowed) {
            assert_tiles(allowed, burst, &format!("burst {burst}, key {key:?}"));
        }
        assert_eq!(limiter.table().len(), n);
    }
}

/// Many fills of fresh keys, each a race: in every round both threads leave a spinning barrier
/// together, with a varying head start, and check the round's key `burst + 1` times. Every key ends with exactly `burst`
/// admitted, and the allowed decisions' `remaining` figures tile `0..burst`.
#[test]
fn many_contended_fills_admit_exactly_the_burst() {
    const ROUNDS: u64 = 2_000;
    for burst in [1, 2, 5] {
        let (limiter, clock) = limiter(burst);
        // Even rounds race on a key the store already holds (back to fresh by now), odd rounds
        // on a key it has never seen.
        for round in (0..ROUNDS).step_by(2) {
            assert!(limiter.check_n_now(round, 1).allowed);
        }
        clock.advance(Duration::from_secs(3600));
        let arrived = AtomicU64::new(0);
        let per_thread: Vec<Vec<(u64, u64)>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let limiter = limiter.clone();
                    let arrived = &arrived;
                    scope.spawn(move || {
                        let mut allowed = Vec::new();
                        let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ i as u64;
                        for round in 0..ROUNDS {
                            spin_barrier(arrived, (round + 1) * THREADS as u64);
                            // Vary the head start, so the threads' checks overlap in every way.
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            for _ in 0..rng % 64 {
                                std::hint::spin_loop();
                            }
                            for _ in 0..=burst {
                                let d = limiter.check_n_now(round, 1);
                                if d.allowed {
                                    allowed.push((round, d.remaining));
                                }
                            }
                        }
                        allowed
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut per_key = vec![Vec::new(); ROUNDS as usize];
        for (round, remaining) in per_thread.into_iter().flatten() {
            per_key[round as usize].push((remaining, 1));
        }
        for (round, allowed) in per_key.iter().enumerate() {
            assert_tiles(allowed, burst, &format!("burst {burst}, round {round}"));
        }
    }
}

/// Arrives at a barrier counted by `arrived` and spins until it reaches `target`.
fn spin_barrier(arrived: &AtomicU64, target: u64) {
    arrived.fetch_add(1, Ordering::AcqRel);
    let mut spins = 0u32;
    while arrived.load(Ordering::Acquire) < target {
        spins += 1;
        if spins % 1024 == 0 {
            thread::yield_now(); // the other thread may not be running
        } else {
            std::hint::spin_loop();
        }
    }
}

#[test]
fn mixed_costs_admit_exactly_the_burst() {
    for burst in [1, 7, 1000] {
        let (limiter, _clock) = limiter(burst);
        let keys = [Key::from("mixed"), Key::from(7u64)];
        // Costs 0..=burst+1 in a thread-specific cycle, then `burst` requests of cost 1, which
        // fill whatever the larger costs left: the clock is still, so the bucket only fills.
        let allowed = hammer(&limiter, &keys, |i| {
            let cycle = [1, 3, 0, 2, 5, burst, burst + 1, 1, 4];
            let mut plan: Vec<(usize, u64)> = (0..CHECKS - 2 * burst as usize)
                .map(|j| (j % 2, cycle[(j / 2 + i * 4) % cycle.len()]))
                .collect();
            plan.extend((0..2 * burst as usize).map(|j| (j % 2, 1)));
            plan
        });
        for (key, allowed) in keys.iter().zip(&allowed) {
            // Cost 0 passes but consumes nothing.
            let allowed: Vec<_> = allowed.iter().copied().filter(|&(_, c)| c > 0).collect();
            assert_tiles(&allowed, burst, &format!("burst {burst}, key {key:?}"));
        }
    }
}

#[test]
fn clones_share_state() {
    let (limiter, clock) = limiter(2);
    let clone = limiter.clone();
    assert!(limiter.check_n_now("k", 1).allowed);
    assert!(clone.check_n_now("k", 1).allowed);
    let d = limiter.check_n_now("k", 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
    // The clone shares the clock too.
    clock.advance(Duration::from_millis(100));
    assert!(clone.check_n_now("k", 1).allowed);
    assert!(!limiter.check_n_now("k", 1).allowed);
    assert_eq!(limiter.table().len(), 1);
    assert_eq!(clone.table().len(), 1);
}

#[test]
fn one_store_separates_policies_by_name() {
    let clock = ManualClock::new();
    let store = MemoryStore::new();
    let quota = Quota::per_minute(2);
    let make = |name: &str| {
        RateLimiter::gcra(quota.clone().named(name))
            .with_store(store.clone())
            .with_clock(clock.clone())
    };
    let search = make("search");
    let upload = make("upload");
    let search_again = make("search");
    assert_eq!(search.policy(), "search");
    assert_eq!(upload.policy(), "upload");

    // Different names: two independent bursts for the same key.
    for limiter in [&search, &upload] {
        assert!(limiter.check_n_now("alice", 1).allowed);
        assert!(limiter.check_n_now("alice", 1).allowed);
        assert!(!limiter.check_n_now("alice", 1).allowed);
    }
    // Same name in the same store: the burst is already spent.
    let d = search_again.check_n_now("alice", 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_secs(30)));
    assert_eq!(search_again.table().len(), 1);
    // A key used on one policy only is fresh on the other.
    assert!(upload.check_n_now("bob", 2).allowed);
    assert_eq!(search.check_n_now("bob", 0).remaining, 2);
    assert_eq!(search_again.check_n_now("bob", 0).remaining, 2);
    assert_eq!(upload.check_n_now("bob", 0).remaining, 0);

    // A different store with the same name shares nothing.
    let elsewhere = RateLimiter::gcra(quota.named("search"))
        .with_store(MemoryStore::new())
        .with_clock(clock.clone());
    assert_eq!(elsewhere.check_n_now("alice", 0).remaining, 2);
}

#[test]
fn one_store_shares_state_across_threads_by_name() {
    let clock = ManualClock::new();
    let store = MemoryStore::new();
    let quota = Quota::per_second(10).with_burst(500).named("shared");
    let a: Limiter = RateLimiter::gcra(quota.clone())
        .with_store(store.clone())
        .with_clock(clock.clone());
    let b: Limiter = RateLimiter::gcra(quota)
        .with_store(store)
        .with_clock(clock.clone());
    let barrier = Barrier::new(2);
    let counts: Vec<u64> = thread::scope(|scope| {
        let handles: Vec<_> = [&a, &b]
            .into_iter()
            .map(|limiter| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    (0..CHECKS)
                        .filter(|_| limiter.check_n_now("k", 1).allowed)
                        .count() as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(counts.iter().sum::<u64>(), 500, "{counts:?}");
}
