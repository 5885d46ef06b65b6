//! The cost of a check while Redis is down, against a check on the memory store, in one run.
//!
//! Run with `cargo bench --all-features --bench redis_outage` (needs `redis-server` on PATH).
//! The bench starts a `redis-server` on a free loopback port, connects a `RedisStore` to it for
//! each failure policy, kills the server and checks once, which finds it unreachable: from
//! then on the store answers every check by its failure policy without a round trip (its
//! probe, a `PING` every 200 ms, runs on the runtime's one worker meanwhile). Group `outage`:
//!
//! - `memory`: GCRA on a `MemoryStore`;
//! - `redis-down/local`, `redis-down/open`, `redis-down/closed`: the same limiter on the
//!   `RedisStore` failing to a local `MemoryStore` (the default), open, closed.
//!
//! Every check is on one of 10 000 IPv4 keys visited in order, each checked once before
//! measuring, under a quota no check exhausts (one request per ms in bursts of 10⁶, within what the
//! Redis scripts decide), so
//! the memory store and the local fallback make the same decisions on maps of the same size.
//! Each future is polled once: a check that would wait for Redis fails the bench.
//!
//! On Linux each sample is the benchmarking thread's CPU time, not the wall clock's: the
//! checks run on that thread alone, and a machine whose other work preempts it (a shared
//! 2-core VM) then adds nothing to the figures, so the ratios of one run hold across runs.

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion};
use futures_util::FutureExt;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Quota, RateLimiter};

const KEYS: u32 = 10_000;

fn quota() -> Quota {
    Quota::new(1, Duration::from_millis(1))
        .with_burst(1_000_000)
        .named("outage")
}

fn key(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

/// Whether the server on `port` answers `PING`.
fn pong(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let mut reply = [0; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// The CPU time the benchmarking thread used (Linux), or the wall clock's time elsewhere.
struct ThreadTime;

impl ThreadTime {
    #[cfg(target_os = "linux")]
    fn now() -> Duration {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec.unsigned_abs(), t.tv_nsec.unsigned_abs() as u32)
    }

    #[cfg(not(target_os = "linux"))]
    fn now() -> Duration {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed()
    }
}

impl Measurement for ThreadTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        Self::now()
    }

    fn end(&self, start: Duration) -> Duration {
        Self::now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

fn outage(c: &mut Criterion<ThreadTime>) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let mut server = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let started = Instant::now();
    while !pong(port) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let url = format!("redis://127.0.0.1:{port}/");
    let policies = [
        ("local", OnFailure::Local(MemoryStore::new())),
        ("open", OnFailure::Open),
        ("closed", OnFailure::Closed),
    ];
    let limiters: Vec<_> = policies
        .into_iter()
        .map(|(name, on_failure)| {
            let store = runtime
                .block_on(RedisStore::connect(&url))
                .expect("a store")
                .on_failure(on_failure);
            (name, RateLimiter::gcra(quota()).with_store(store))
        })
        .collect();
    let _ = server.kill();
    let _ = server.wait();
    let _entered = runtime.enter();
    for (name, limiter) in &limiters {
        // The first check finds the connection gone; the next ones are answered at once.
        let _ = runtime.block_on(limiter.check("find-out"));
        for i in 0..KEYS {
            let check = limiter.check(key(i)).now_or_never();
            assert!(check.is_some(), "{name}: a check waited for Redis");
        }
    }
    let memory = RateLimiter::gcra(quota()).with_store(MemoryStore::new());
    for i in 0..KEYS {
        assert!(memory.check_now(key(i)).allowed);
    }

    let mut group = c.benchmark_group("outage");
    let mut i = 0;
    group.bench_function("memory", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let result = memory.check(key(i)).now_or_never();
            black_box(&result);
        });
    });
    for (name, limiter) in &limiters {
        group.bench_function(format!("redis-down/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                let result = limiter.check(key(i)).now_or_never();
                black_box(&result);
            });
        });
        assert!(
            limiter.check("after").now_or_never().is_some(),
            "{name}: Redis was down throughout"
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadTime);
    targets = outage
}
criterion_main!(benches);
