//! The longest single `check` while the memory store forgets keys, on a GCRA table of
//! 1 000 000 IPv6 keys.
//!
//! Run with `cargo bench --bench sweep`. A plain `main` (no criterion): every check is timed on
//! its own, in wall time with `Instant` (two readings of the OS clock, some 60 ns, are in each
//! figure) and, on Linux, in the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which does not
//! count the time the thread was preempted: on a shared machine a check that was descheduled
//! takes milliseconds of wall time but not of CPU time. The table shows the 50th and 99.9th
//! percentiles and the maximum of wall time, the maximum of CPU time, and how many checks took
//! more than 100 µs and 1 ms, per phase:
//! - `fill`: 1 000 000 new keys go into an empty table (its shards grow and sweep, finding
//!   nothing fresh; a bounded table also evicts in the shards that fill first);
//! - `fresh sweep`: the clock moves an hour on, so every key is back to fresh, and 500 000 new
//!   keys come in: each shard sweeps its fresh keys out once it has doubled since its last
//!   sweep (unbounded) or is full (bounded);
//! - `eviction`: the clock stands still, so no key is fresh, and 500 000 new keys come into a
//!   full bounded table: each full shard evicts the least limited eighth of its keys.
//!
//! The quota is 10 a second, so a key with one request is neither fresh nor limited. Each
//! scenario runs `ROUNDS` times on a new table.

mod common;

use std::time::{Duration, Instant};

use tollgate::algorithm::Gcra;
use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
use tollgate::{Quota, RateLimiter};

const FILL: u64 = 1_000_000;
const NEW: u64 = 500_000;
const ROUNDS: usize = 3;

type Limiter = RateLimiter<Gcra, MemoryStore, ManualClock>;

/// The CPU time this thread has used.
#[cfg(target_os = "linux")]
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Not measured off Linux: the CPU-time columns read zero.
#[cfg(not(target_os = "linux"))]
fn cpu_time() -> Duration {
    Duration::ZERO
}

/// Each check's wall time and CPU time.
struct Times {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

/// Checks each key of `range` once, timing every check on its own.
fn timed(limiter: &Limiter, range: std::ops::Range<u64>) -> Times {
    let n = (range.end - range.start) as usize;
    let mut times = Times {
        wall: Vec::with_capacity(n),
        cpu: Vec::with_capacity(n),
    };
    for i in range {
        let ip = common::ip(i);
        let cpu = cpu_time();
        let start = Instant::now();
        let decision = limiter.check_now(ip);
        times.wall.push(start.elapsed());
        times.cpu.push(cpu_time() - cpu);
        assert!(decision.allowed, "key {i} was denied");
    }
    times
}

fn report(scenario: &str, phase: &str, round: usize, mut times: Times) {
    times.wall.sort_unstable();
    times.cpu.sort_unstable();
    let wall = &times.wall;
    let at = |q: f64| wall[((wall.len() - 1) as f64 * q).round() as usize];
    let over = |times: &[Duration], limit: Duration| times.iter().filter(|&&t| t > limit).count();
    let (us100, ms1) = (Duration::from_micros(100), Duration::from_millis(1));
    println!(
        "| {scenario} | {phase} | {round} | {} | {:.0?} | {:.1?} | {:.1?} | {:.1?} | {} / {} | {} / {} |",
        wall.len(),
        at(0.5),
        at(0.999),
        wall[wall.len() - 1],
        times.cpu[times.cpu.len() - 1],
        over(wall, us100),
        over(&times.cpu, us100),
        over(wall, ms1),
        over(&times.cpu, ms1),
    );
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_else(|_| "unknown".into())
}

fn main() {
    println!("load average at start: {}", load().trim());
    println!();
    println!(
        "| store | phase | round | checks | p50 | p99.9 | max | max CPU | > 100 µs (wall / CPU) | > 1 ms (wall / CPU) |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let quota = Quota::per_second(10);
    for round in 1..=ROUNDS {
        // Unbounded: fresh keys go when a shard has doubled since its last sweep.
        let clock = ManualClock::new();
        let limiter = RateLimiter::gcra(quota.clone())
            .with_store(MemoryStore::new().with_max_keys(usize::MAX))
            .with_clock(clock.clone());
        report("unbounded", "fill", round, timed(&limiter, 0..FILL));
        assert_eq!(limiter.table().len(), FILL as usize);
        clock.advance(Duration::from_secs(3600));
        report(
            "unbounded",
            "fresh sweep",
            round,
            timed(&limiter, FILL..FILL + NEW),
        );
        drop(limiter);

        // Bounded, all fresh: a full shard sweeps its fresh keys out.
        let bounded = || {
            RateLimiter::gcra(quota.clone())
                .with_store(MemoryStore::new().with_max_keys(FILL as usize))
                .with_clock(clock.clone())
        };
        let limiter = bounded();
        report("max_keys 1M", "fill", round, timed(&limiter, 0..FILL));
        clock.advance(Duration::from_secs(3600));
        report(
            "max_keys 1M",
            "fresh sweep",
            round,
            timed(&limiter, FILL..FILL + NEW),
        );
        drop(limiter);

        // Bounded, none fresh: a full shard evicts an eighth of its keys by weight.
        let limiter = bounded();
        timed(&limiter, 0..FILL);
        report(
            "max_keys 1M",
            "eviction",
            round,
            timed(&limiter, FILL..FILL + NEW),
        );
        assert!(limiter.table().len() <= FILL as usize);
    }
    println!();
    println!("load average at end: {}", load().trim());
}
