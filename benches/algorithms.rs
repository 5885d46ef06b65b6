//! `check` throughput of every algorithm on the in-memory store, allowed and denied.
//!
//! Run with `cargo bench --bench algorithms`. One group, `algorithm`, with a benchmark
//! `<algorithm>/<path>` per algorithm and path:
//! - `allowed`: a quota large enough that every check passes (10⁹ a second);
//! - `denied`: a quota spent before measuring (1 a day, and the key's one request made), so
//!   every check is denied.
//!
//! 10 000 distinct IPv6 client keys, visited in a scattered order on one thread, each checked
//! once before measuring, so no measured check inserts. The clock is the [`ManualClock`]: the
//! OS clock would add the same reading (some 32 ns on the reference machine, `clock/*` in
//! `benches/memory.rs`) to every algorithm, hiding the differences this bench is for, and a
//! hand-moved clock keeps each run's virtual time the same. Time moves by 100 ms each time
//! the keys have all been checked once, so the windows roll, the logs drop old entries and
//! buckets refill as they would for clients that come back ten times a second; the advance is
//! one atomic add per 10 000 checks.
//!
//! After each benchmark every key is checked once more, to make sure it was on its path.
//! With `TOLLGATE_BENCH_TIME=cpu` the bench measures the thread's CPU time instead of wall
//! time, for a machine shared with other work. Each decision is read where it was made;
//! `TOLLGATE_BENCH_DECISION=moved` copies it out by value instead (`common::keep`).

mod common;

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use criterion::{measurement::WallTime, Throughput};
use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::store::MemoryAlgorithm;
use tollgate::{Quota, RateLimiter};

const KEYS: usize = 10_000;
/// How far the clock moves each time every key has been checked.
const STEP: Duration = Duration::from_millis(100);

/// The quota of the path: `allowed`, so large that nothing is denied; or one request a day,
/// spent by each key's first check.
fn quota(allowed: bool) -> Quota {
    if allowed {
        Quota::per_second(1_000_000_000)
    } else {
        Quota::per_day(1)
    }
}

/// The second of two tiers: ten times the first's limit over ten times its period.
fn outer_tier(allowed: bool) -> Quota {
    let first = quota(allowed);
    Quota::new(first.limit() * 10, first.period() * 10)
}

/// Benchmarks `make(true)` on the allowed path and `make(false)` on the denied path.
fn bench_algorithm<A>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    keys: &[IpAddr],
    name: &str,
    make: impl Fn(bool) -> RateLimiter<A>,
) where
    A: Algorithm,
    A: MemoryAlgorithm,
{
    for allowed in [true, false] {
        let clock = ManualClock::new();
        let limiter = make(allowed).with_clock(clock.clone());
        for &ip in keys {
            assert!(limiter.check_now(ip).allowed, "{name}: a first check");
        }
        let path = if allowed { "allowed" } else { "denied" };
        let moved = common::moved();
        group.bench_function(BenchmarkId::new(name, path), |b| {
            b.iter_custom(|iters| {
                let start = common::Stopwatch::start();
                for i in common::scattered(keys.len(), 0).take(iters as usize) {
                    if i == 0 {
                        clock.advance(STEP);
                    }
                    common::keep(limiter.check_now(keys[i]), moved);
                }
                start.elapsed()
            })
        });
        for &ip in keys {
            assert_eq!(
                limiter.check_now(ip).allowed,
                allowed,
                "{name}: a key left the {path} path"
            );
        }
        assert_eq!(limiter.table().len(), keys.len());
    }
}

fn algorithms(c: &mut Criterion) {
    let keys = common::keys(KEYS);
    let mut group = c.benchmark_group("algorithm");
    group.throughput(Throughput::Elements(1));
    let g = &mut group;
    bench_algorithm(g, &keys, "gcra", |a| RateLimiter::gcra(quota(a)));
    bench_algorithm(g, &keys, "gcra-2-tiers", |a| {
        RateLimiter::gcra([quota(a), outer_tier(a)])
    });
    bench_algorithm(g, &keys, "token-bucket", |a| {
        RateLimiter::token_bucket(quota(a))
    });
    bench_algorithm(g, &keys, "leaky-bucket", |a| {
        RateLimiter::leaky_bucket(quota(a))
    });
    bench_algorithm(g, &keys, "fixed-window", |a| {
        RateLimiter::fixed_window(quota(a))
    });
    bench_algorithm(g, &keys, "sliding-window", |a| {
        RateLimiter::sliding_window(quota(a))
    });
    bench_algorithm(g, &keys, "sliding-window-8-sub", |a| {
        RateLimiter::sliding_window(quota(a)).sub_windows(8)
    });
    bench_algorithm(g, &keys, "sliding-log", |a| {
        RateLimiter::sliding_log(quota(a))
    });
    bench_algorithm(g, &keys, "hybrid", |a| RateLimiter::hybrid(quota(a)));
    group.finish();
}

/// A denied check on a key whose log holds `n` live entries (one request a microsecond, a
/// period of an hour, the limit spent): the work must not grow with the log.
fn sliding_log_depth(c: &mut Criterion) {
    use tollgate::algorithm::{SlidingLog, SlidingLogState};
    let mut group = c.benchmark_group("sliding-log-denied");
    group.throughput(Throughput::Elements(1));
    for n in [10u64, 1_000, 100_000] {
        let log = SlidingLog::new(&Quota::new(n, Duration::from_secs(3600)));
        let mut state = SlidingLogState::default();
        for i in 0..n {
            assert!(log.check_mut(&mut state, i * 1_000, 1).allowed);
        }
        assert_eq!(state.len() as u64, n);
        let now = n * 1_000;
        assert!(!log.check_mut(&mut state, now, 1).allowed);
        group.bench_function(BenchmarkId::new("entries", n), |b| {
            b.iter(|| black_box(log.check_mut(black_box(&mut state), black_box(now), 1)))
        });
        assert_eq!(state.len() as u64, n, "a denied check changed the log");
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = algorithms, sliding_log_depth
}
criterion_main!(benches);
