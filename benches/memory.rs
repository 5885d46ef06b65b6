//! `check` throughput on the in-memory store, against governor's keyed limiter in the same run.
//!
//! Run with `cargo bench --bench memory`. Groups:
//! - `check/<clock>/<keys>/<threads>t`: one `check` per iteration over 1, 10 000 or 1 000 000
//!   distinct client IPs, on 1 or 2 threads, for tollgate and governor.
//!   `system` uses each crate's default clock (tollgate: the OS monotonic clock; governor: a
//!   TSC-based `quanta` clock); `manual` uses each crate's hand-moved test clock, which isolates
//!   the cost of the store and algorithm.
//!
//! Every key is checked once before measuring, so the maps hold all keys and no measured check
//! inserts. The quota (one request per 10 s, in bursts of up to 10⁹) allows every check and
//! keeps every key from being fresh for the whole run: each check moves the key's state 10 s
//! on. (With a quota such as 10⁹ a second, a key is fresh again a nanosecond after its check,
//! and on the system clock tollgate's store sweeps such keys out as others come in: the map
//! would hold a few thousand keys and most measured checks would insert.) After each
//! benchmark, each map is checked to still hold every key.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::{Clock as _, DefaultClock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use tollgate::clock::{Clock, ManualClock, SystemClock};
use tollgate::store::{MemoryStore, Store};
use tollgate::{Decision, Quota, RateLimiter};

const KEY_COUNTS: [usize; 3] = [1, 10_000, 1_000_000];
const THREADS: [usize; 2] = [1, 2];
/// The quota: `BURST` requests at once, then one per `PERIOD`.
const PERIOD: Duration = Duration::from_secs(10);
const BURST: u32 = 1_000_000_000;

fn keys(n: usize) -> Arc<Vec<IpAddr>> {
    Arc::new(
        (0..n as u128)
            .map(|i| {
                IpAddr::V6(Ipv6Addr::from(
                    0x2001_0db8_u128 << 96 | i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ))
            })
            .collect(),
    )
}

/// Visits every key in a scattered order (a stride coprime to the count), so consecutive checks
/// do not touch neighbouring memory. Steps by subtraction, not `%`, so that the benchmark loop
/// costs a few cycles, not a division.
fn scattered(n: usize, start: usize) -> impl Iterator<Item = usize> {
    let stride = if n > 1 { (7_919 % n) | 1 } else { 0 };
    std::iter::successors(Some(start % n), move |&i| {
        let next = i + stride;
        Some(if next >= n { next - n } else { next })
    })
}

/// Runs `iters` checks split across `threads` threads and returns the wall time.
fn run_threads(iters: u64, threads: usize, check: impl Fn(usize, u64) + Sync) -> Duration {
    let per = iters / threads as u64;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let check = &check;
            s.spawn(move || check(t, per));
        }
    });
    start.elapsed()
}

fn tollgate_limiter<C: Clock + Clone>(
    clock: C,
    keys: &[IpAddr],
) -> RateLimiter<tollgate::algorithm::Gcra, MemoryStore, C>
where
    MemoryStore: Store<tollgate::algorithm::Gcra>,
{
    let quota = Quota::new(1, PERIOD).with_burst(u64::from(BURST));
    // Every key is held, as in governor's map: above the store's default bound of half a
    // million keys per policy it would forget some.
    let store = MemoryStore::new().with_max_keys(keys.len().max(MemoryStore::DEFAULT_MAX_KEYS));
    let limiter = RateLimiter::gcra(quota).with_store(store).with_clock(clock);
    for &ip in keys {
        let _: Decision = limiter.check_now(ip);
    }
    limiter
}

fn bench_tollgate<C: Clock + Clone>(c: &mut Criterion, clock_name: &str, clock: C) {
    let mut group = c.benchmark_group(format!("check/{clock_name}"));
    group.throughput(Throughput::Elements(1));
    for n in KEY_COUNTS {
        let keys = keys(n);
        let limiter = tollgate_limiter(clock.clone(), &keys);
        for threads in THREADS {
            group.bench_function(
                BenchmarkId::new(format!("tollgate/{n}"), format!("{threads}t")),
                |b| {
                    b.iter_custom(|iters| {
                        run_threads(iters, threads, |t, per| {
                            for i in scattered(n, t * n / threads).take(per as usize) {
                                black_box(limiter.check_now(keys[i]));
                            }
                        })
                    })
                },
            );
        }
        // No key was forgotten (so no measured check inserted), and checks still pass.
        assert_eq!(limiter.table().len(), n, "tollgate forgot keys");
        assert!(keys.iter().all(|&ip| limiter.check_now(ip).allowed));
    }
    group.finish();
}

fn bench_governor<C>(c: &mut Criterion, clock_name: &str, clock: C)
where
    C: governor::clock::Clock + Clone + Send + Sync,
    C::Instant: governor::clock::Reference + Send + Sync,
{
    let mut group = c.benchmark_group(format!("check/{clock_name}"));
    group.throughput(Throughput::Elements(1));
    for n in KEY_COUNTS {
        let keys = keys(n);
        let quota = governor::Quota::with_period(PERIOD)
            .expect("non-zero")
            .allow_burst(NonZeroU32::new(BURST).expect("non-zero"));
        let limiter: governor::RateLimiter<
            IpAddr,
            DefaultKeyedStateStore<IpAddr>,
            C,
            NoOpMiddleware<C::Instant>,
        > = governor::RateLimiter::new(
            quota,
            DefaultKeyedStateStore::<IpAddr>::default(),
            clock.clone(),
        );
        for ip in keys.iter() {
            let _ = limiter.check_key(ip);
        }
        for threads in THREADS {
            group.bench_function(
                BenchmarkId::new(format!("governor/{n}"), format!("{threads}t")),
                |b| {
                    b.iter_custom(|iters| {
                        run_threads(iters, threads, |t, per| {
                            for i in scattered(n, t * n / threads).take(per as usize) {
                                let _ = black_box(limiter.check_key(&keys[i]));
                            }
                        })
                    })
                },
            );
        }
        assert_eq!(limiter.len(), n, "governor forgot keys");
        assert!(keys.iter().all(|ip| limiter.check_key(ip).is_ok()));
    }
    group.finish();
}

fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    group.bench_function("tollgate-system", |b| {
        b.iter(|| black_box(SystemClock.now_nanos()))
    });
    let quanta = DefaultClock::default();
    group.bench_function("governor-default", |b| b.iter(|| black_box(quanta.now())));
    group.finish();
}

fn checks(c: &mut Criterion) {
    bench_tollgate(c, "system", SystemClock);
    bench_governor(c, "system", DefaultClock::default());
    bench_tollgate(c, "manual", ManualClock::new());
    bench_governor(c, "manual", FakeRelativeClock::default());
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(30);
    targets = clocks, checks
}
criterion_main!(benches);
