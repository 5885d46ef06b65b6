//! `check` throughput on the in-memory store, against governor's keyed limiter in the same run.
//!
//! Run with `cargo bench --bench memory`. Keyed GCRA, one check per iteration, client IPv4
//! addresses visited at random (with repetition, each thread drawing its own sequence), on 1
//! or 2 threads, for tollgate and governor (`DefaultKeyedStateStore<IpAddr>`, a `DashMap`).
//! Groups, `<scenario>/<clock>` with benchmarks `<crate>/<keys>/<threads>t`:
//!
//! - `held/system`: 10 000 and 1 000 000 keys that are never fresh again (one request per 10 s
//!   in bursts of up to 10⁹: every check passes and moves its key's state 10 s on), each
//!   checked once before measuring, so the maps hold every key and no measured check inserts;
//!   each map is asserted to still hold every key afterwards.
//! - `churn/system`: the same keys, every key fresh again by its next visit, as for clients
//!   under their limit: one request per period in bursts of 1, the period some 40 ns (10 000
//!   keys) or 150 ns (1 000 000 keys) per key, so that on one thread a key comes back after one
//!   to a few periods. tollgate's store may forget keys that have been fresh a while and insert
//!   them again (the map's size at the end is printed); governor never forgets a key.
//! - `hot/system`: one key (a `Global` limit) on 1 and 2 threads: one contended cache line.
//! - `held/os`, `churn/os`: tollgate at 10 000 keys on [`OsClock`], the OS monotonic clock
//!   that `SystemClock` read before it read the TSC.
//! - `held/manual`: the held scenario on each crate's hand-moved test clock (`ManualClock`,
//!   governor's `FakeRelativeClock`), which leaves the cost of the store and the algorithm.
//! - `clock`: one reading of each crate's default clock.
//! - `host`: the machine alone, no limiter: `chain/<threads>t`, a chain of dependent multiplies
//!   on each thread (two threads share nothing, so on two cores of their own each runs at one
//!   thread's speed, and the time per step halves); `chase/<size>`, a chain of dependent loads
//!   at random through an array of that size (a cycle visiting every slot), one load per step:
//!   what one cache miss costs at that size; `pingpong/2t`, two threads handing one cache line
//!   back and forth (each waits for the other's write, then writes): what moving a line from
//!   one vCPU to the other costs, which every write to a line both threads use pays (a shard's
//!   lock word, a hot key's state). They show what the host gives the VM when the checks are
//!   measured.
//!
//! Each check's result is read where it was made (`black_box(&result)`, as a caller reads
//! `decision.allowed`), for both crates; `TOLLGATE_BENCH_DECISION=moved` copies it out by value
//! instead (`black_box(result)`), which costs tollgate's 112-byte `Decision` more than
//! governor's small `Result` (BENCHMARKS.md).
//!
//! With `TOLLGATE_BENCH_TIME=cpu` each measurement is the longest CPU time of the bench's
//! threads instead of wall time (see `run_threads`), for a machine shared with other work.
//!
//! `system` is each crate's default clock: tollgate's `SystemClock` (the TSC through one
//! calibrated `quanta` clock where the kernel keeps time with it), governor's `DefaultClock`
//! (`quanta`).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::{Clock as _, DefaultClock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use tollgate::clock::{Clock, ManualClock, OsClock, SystemClock};
use tollgate::store::MemoryStore;
use tollgate::{Decision, Quota, RateLimiter};

mod common;

const THREADS: [usize; 2] = [1, 2];

/// A scenario: its keys' quota, one request per `period` in bursts of `burst`.
#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    keys: &'static [usize],
    period: fn(usize) -> Duration,
    burst: u32,
    /// Whether every key stays held for the whole run.
    held: bool,
}

const HELD: Scenario = Scenario {
    name: "held",
    keys: &[10_000, 1_000_000],
    period: |_| Duration::from_secs(10),
    burst: 1_000_000_000,
    held: true,
};

const CHURN: Scenario = Scenario {
    name: "churn",
    keys: &[10_000, 1_000_000],
    period: |n| Duration::from_nanos(n as u64 * if n > 100_000 { 150 } else { 40 }),
    burst: 1,
    held: false,
};

const HOT: Scenario = Scenario {
    name: "hot",
    keys: &[1],
    ..HELD
};

/// `n` distinct IPv4 addresses, spread over the whole space (an odd multiplier is a bijection
/// of `u32`).
fn keys(n: usize) -> Arc<Vec<IpAddr>> {
    Arc::new(
        (0..n as u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995)))
            .collect(),
    )
}

/// Indices in `0..n` at random (xorshift, reduced by a multiply and a shift rather than a
/// division): a few cycles per draw.
fn random(n: usize, seed: u64) -> impl Iterator<Item = usize> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ((u128::from(x) * n as u128) >> 64) as usize
    })
}

/// Runs `iters` checks split across `threads` threads and returns the wall time, or with
/// `TOLLGATE_BENCH_TIME=cpu` (Linux) the longest CPU time of one thread
/// (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the threads were preempted: on a
/// loaded machine that time is the same for both crates and hides their difference.
fn run_threads(iters: u64, threads: usize, check: impl Fn(usize, u64) + Sync) -> Duration {
    let per = iters / threads as u64;
    let cpu = std::env::var("TOLLGATE_BENCH_TIME").is_ok_and(|t| t == "cpu");
    let start = Instant::now();
    let longest = std::thread::scope(|s| {
        let runs: Vec<_> = (0..threads)
            .map(|t| {
                let check = &check;
                s.spawn(move || {
                    let before = cpu_time();
                    check(t, per);
                    cpu_time().saturating_sub(before)
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().unwrap_or_default())
            .max()
            .unwrap_or_default()
    });
    if cpu && longest > Duration::ZERO {
        longest
    } else {
        start.elapsed()
    }
}

#[cfg(target_os = "linux")]
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Not measured off Linux: the bench reports wall time.
#[cfg(not(target_os = "linux"))]
fn cpu_time() -> Duration {
    Duration::ZERO
}

fn tollgate<C: Clock + Clone>(c: &mut Criterion, scenario: Scenario, clock_name: &str, clock: C) {
    let mut group = c.benchmark_group(format!("{}/{clock_name}", scenario.name));
    group.throughput(Throughput::Elements(1));
    for &n in scenario.keys {
        let keys = keys(n);
        let quota = Quota::new(1, (scenario.period)(n)).with_burst(u64::from(scenario.burst));
        // Every held key is held, as in governor's map: the bound is divided among the shards,
        // and at `n` the fullest shards would forget some.
        let store = MemoryStore::new().with_max_keys(2 * n.max(MemoryStore::DEFAULT_MAX_KEYS));
        let limiter = RateLimiter::gcra(quota)
            .with_store(store)
            .with_clock(clock.clone());
        for &ip in keys.iter() {
            let _: Decision = limiter.check_now(ip);
        }
        let moved = common::moved();
        for threads in THREADS {
            let id = BenchmarkId::new(format!("tollgate/{n}"), format!("{threads}t"));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    run_threads(iters, threads, |t, per| {
                        for i in random(n, t as u64 + 1).take(per as usize) {
                            common::keep(limiter.check_now(keys[i]), moved);
                        }
                    })
                })
            });
        }
        if scenario.held {
            // No key was forgotten (so no measured check inserted), and checks still pass.
            assert_eq!(limiter.table().len(), n, "tollgate forgot keys");
            assert!(keys.iter().all(|&ip| limiter.check_now(ip).allowed));
        } else {
            println!(
                "tollgate {n} keys, {}: {} held",
                scenario.name,
                limiter.table().len()
            );
        }
    }
    group.finish();
}

fn governor<C>(c: &mut Criterion, scenario: Scenario, clock_name: &str, clock: C)
where
    C: governor::clock::Clock + Clone + Send + Sync,
    C::Instant: governor::clock::Reference + Send + Sync,
{
    let mut group = c.benchmark_group(format!("{}/{clock_name}", scenario.name));
    group.throughput(Throughput::Elements(1));
    for &n in scenario.keys {
        let keys = keys(n);
        let quota = governor::Quota::with_period((scenario.period)(n))
            .expect("non-zero")
            .allow_burst(NonZeroU32::new(scenario.burst).expect("non-zero"));
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
        let moved = common::moved();
        for threads in THREADS {
            let id = BenchmarkId::new(format!("governor/{n}"), format!("{threads}t"));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    run_threads(iters, threads, |t, per| {
                        for i in random(n, t as u64 + 1).take(per as usize) {
                            common::keep(limiter.check_key(&keys[i]), moved);
                        }
                    })
                })
            });
        }
        assert_eq!(limiter.len(), n, "governor forgot keys");
        if scenario.held {
            assert!(keys.iter().all(|ip| limiter.check_key(ip).is_ok()));
        }
    }
    group.finish();
}

fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    SystemClock::calibrate();
    println!(
        "SystemClock reads the TSC: {}",
        SystemClock::reads_counter()
    );
    group.bench_function("tollgate-system", |b| {
        b.iter(|| black_box(SystemClock.now_nanos()))
    });
    group.bench_function("tollgate-os", |b| b.iter(|| black_box(OsClock.now_nanos())));
    let quanta = DefaultClock::default();
    group.bench_function("governor-default", |b| b.iter(|| black_box(quanta.now())));
    group.finish();
}

/// The machine alone (see the module's documentation): dependent multiplies on 1 and 2
/// threads, and dependent loads through arrays of 1 MiB (the L2), 16 MiB (the L3) and 64 MiB
/// (past the L3, as the 1 000 000-key tables are).
fn host(c: &mut Criterion) {
    let mut group = c.benchmark_group("host");
    group.throughput(Throughput::Elements(1));
    for threads in THREADS {
        group.bench_function(BenchmarkId::new("chain", format!("{threads}t")), |b| {
            b.iter_custom(|iters| {
                run_threads(iters, threads, |t, per| {
                    let mut x = t as u64 + 1;
                    for _ in 0..per {
                        x = black_box(x).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 1;
                    }
                    black_box(x);
                })
            })
        });
    }
    group.bench_function(BenchmarkId::new("pingpong", "2t"), |b| {
        b.iter_custom(|iters| {
            let line = std::sync::atomic::AtomicU64::new(0);
            run_threads(iters, 2, |t, per| {
                // Thread `t` writes when the count's parity is its own: the two take turns.
                for _ in 0..per {
                    loop {
                        let seen = line.load(std::sync::atomic::Ordering::Acquire);
                        if seen % 2 == t as u64 {
                            line.store(seen + 1, std::sync::atomic::Ordering::Release);
                            break;
                        }
                        std::hint::spin_loop();
                    }
                }
            })
        })
    });
    for mib in [1, 16, 64] {
        let next = cycle(mib << 20 >> 3);
        group.bench_function(BenchmarkId::new("chase", format!("{mib}MiB")), |b| {
            b.iter_custom(|iters| {
                let start = common::Stopwatch::start();
                let mut i = 0;
                for _ in 0..iters {
                    i = next[i] as usize;
                }
                black_box(i);
                start.elapsed()
            })
        });
    }
    group.finish();
}

/// One cycle through `0..n` in a random order (Sattolo's shuffle): `next[i]` is the slot after
/// `i`, so following it visits every slot before coming back.
fn cycle(n: usize) -> Vec<u64> {
    let mut next: Vec<u64> = (0..n as u64).collect();
    let mut draw = random(usize::MAX, 7);
    for i in (1..n).rev() {
        let j = draw.next().unwrap_or(0) % i;
        next.swap(i, j);
    }
    next
}

/// Each scenario for tollgate then governor, so that both crates run each one side by side.
fn checks(c: &mut Criterion) {
    for scenario in [HELD, CHURN, HOT] {
        tollgate(c, scenario, "system", SystemClock);
        governor(c, scenario, "system", DefaultClock::default());
    }
    // tollgate on the OS clock (its default before `SystemClock` read the TSC).
    for scenario in [HELD, CHURN] {
        let os = Scenario {
            keys: &[10_000],
            ..scenario
        };
        tollgate(c, os, "os", OsClock);
    }
    let manual = Scenario {
        keys: &[10_000],
        ..HELD
    };
    tollgate(c, manual, "manual", ManualClock::new());
    governor(c, manual, "manual", FakeRelativeClock::default());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = clocks, checks, host
}
criterion_main!(benches);
