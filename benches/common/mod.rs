//! Helpers shared by the benchmarks that drive the memory store with IPv6 client keys (the
//! same keys and visiting order as `benches/memory.rs`).
#![allow(dead_code)]

use std::net::{IpAddr, Ipv6Addr};

/// The `i`-th benchmark client: IPv6 addresses in `2001:db8::/32`, spread over the low 96 bits.
pub fn ip(i: u64) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(
        0x2001_0db8_u128 << 96 | u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    ))
}

/// Clients `0..n`.
pub fn keys(n: usize) -> Vec<IpAddr> {
    (0..n as u64).map(ip).collect()
}

/// Visits every key in a scattered order (a stride coprime to the count), so consecutive checks
/// do not touch neighbouring memory. Steps by subtraction, not `%`, so that the benchmark loop
/// costs a few cycles, not a division.
pub fn scattered(n: usize, start: usize) -> impl Iterator<Item = usize> {
    let stride = if n > 1 { (7_919 % n) | 1 } else { 0 };
    std::iter::successors(Some(start % n), move |&i| {
        let next = i + stride;
        Some(if next >= n { next - n } else { next })
    })
}

/// A stopwatch that reads wall time, or with `TOLLGATE_BENCH_TIME=cpu` (Linux) the thread's
/// CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the thread was preempted:
/// on a machine shared with other work, what one check costs.
pub struct Stopwatch {
    wall: std::time::Instant,
    cpu: Option<std::time::Duration>,
}

impl Stopwatch {
    pub fn start() -> Self {
        let cpu = std::env::var("TOLLGATE_BENCH_TIME").is_ok_and(|t| t == "cpu");
        Self {
            wall: std::time::Instant::now(),
            cpu: cpu.then(cpu_time).flatten(),
        }
    }

    pub fn elapsed(&self) -> std::time::Duration {
        match (self.cpu, cpu_time()) {
            (Some(before), Some(now)) => now.saturating_sub(before),
            _ => self.wall.elapsed(),
        }
    }
}

#[cfg(target_os = "linux")]
fn cpu_time() -> Option<std::time::Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

#[cfg(not(target_os = "linux"))]
fn cpu_time() -> Option<std::time::Duration> {
    None
}

/// Whether a benchmark hands each decision on by value (`TOLLGATE_BENCH_DECISION=moved`)
/// rather than where it was made (the default).
pub fn moved() -> bool {
    std::env::var("TOLLGATE_BENCH_DECISION").is_ok_and(|d| d == "moved")
}

/// Keeps the optimizer from dropping a check: by default the result is read where it was made
/// (`black_box(&result)`), as a caller reads `decision.allowed`; with `moved` it is copied out
/// by value first (`black_box(result)`). A copy of a `Decision` (112 bytes, written field by
/// field) reads it back in 16-byte loads that the processor cannot forward from the narrower
/// stores: BENCHMARKS.md measures what that costs.
#[inline(always)]
pub fn keep<T>(result: T, moved: bool) {
    if moved {
        std::hint::black_box(result);
    } else {
        std::hint::black_box(&result);
    }
}
