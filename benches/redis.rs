//! Decisions per second of GCRA on the Redis store, at a fixed number of concurrent callers.
//!
//! A plain `main` (no criterion), driven by `benches/redis.sh`, which starts a fresh
//! `redis-server` for every run, runs `redis-benchmark` on the same script with the same
//! arguments, and prints the table. By hand:
//!
//! ```text
//! cargo bench --features redis --bench redis -- script               # the Lua source
//! cargo bench --features redis --bench redis -- args <url>           # EVALSHA as sent
//! cargo bench --features redis --bench redis -- run <url> <mode> <callers> <stores> \
//!     <workers> <warmup s> <seconds>
//! ```
//!
//! `run` spawns `callers` tokio tasks on a multi-thread runtime of `workers` threads; each calls
//! `limiter.check(key).await` in a loop. With `stores` > 1 it opens that many `RedisStore`s
//! (one multiplexed connection each) and caller `i` uses store `i % stores`. Modes:
//! - `allowed`: `Quota::per_minute(60).with_burst(1000)` named `bench`; every check is on a new
//!   `u64` key of 12 digits (as `redis-benchmark -r` writes `__rand_int__`), so every check is
//!   one `EVALSHA` that allows and writes one key with a 1 s TTL;
//! - `denied`: `Quota::per_hour(1)` named `denied`, every caller on the same key: the first check
//!   allows, every later one is denied, answered from the deny cache;
//! - `denied-nocache`: the same with `.deny_cache(0)`, so every denial asks Redis.
//!
//! It measures for `seconds`, or until SIGTERM (how the runner ends it). The store fails closed
//! (`OnFailure::Closed`) with a 1 s timeout, so a failed or late call is an error, never a
//! decision made locally: errors are counted apart from decisions, and an unexpected decision
//! fails the run. It prints one line: `decisions <measured> seconds <window> rate <decisions/s>
//! total <all decisions, warm-up included> errors <n> slowest_ms <the longest check or failed
//! call, warm-up included>`.
//!
//! `leases <url> <fixed|gcra> <servers> <callers> <on|off> <seconds>`: one hot key under a
//! quota of 20 000 a second named `leases` (a fixed window, or GCRA of burst 20 000), sent at
//! 90 % of the quota, evenly: `callers` tasks in all
//! (on a current-thread runtime), task `i` on server `i % servers`, each server a `RedisStore`
//! of its own (with `local_leases(Leases::default())` when `on`), each task keeping to its
//! share of the rate by the millisecond. It prints one line: `leases servers <n> callers <n>
//! on|off decisions <n> admitted <n> scripts <EVALSHA calls in INFO commandstats>`, counted
//! over the whole run (the first call's NOSCRIPT included).
//!
//! `args` makes one allowed check with the slow log recording every command and prints the
//! `EVALSHA` as Redis received it, one argument per line (for `redis-benchmark`: the real
//! script with the real arguments).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::algorithm::Gcra;
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{Leases, OnFailure, RedisStore};
use tollgate::{Quota, RateLimiter};

type Limiter = RateLimiter<Gcra, RedisStore>;

/// Longer than the default 50 ms: on a shared 2-CPU machine redis-server is at times
/// descheduled for longer, and a late call would be an error, not a decision. A timer costs the
/// same whatever its length.
const TIMEOUT: Duration = Duration::from_secs(1);

/// The first allowed-mode key: 12 digits, as `__rand_int__`.
const FIRST_KEY: u64 = 100_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Allowed,
    Denied,
    DeniedNoCache,
}

impl Mode {
    fn parse(text: &str) -> Self {
        match text {
            "allowed" => Self::Allowed,
            "denied" => Self::Denied,
            "denied-nocache" => Self::DeniedNoCache,
            _ => usage(),
        }
    }

    fn quota(self) -> Quota {
        match self {
            Self::Allowed => Quota::per_minute(60).with_burst(1000).named("bench"),
            Self::Denied | Self::DeniedNoCache => Quota::per_hour(1).named("denied"),
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: redis script | args <url> | \
         run <url> <allowed|denied|denied-nocache> <callers> <stores> <workers> <warmup s> <seconds> | \
         leases <url> <fixed|gcra> <servers> <callers> <on|off> <seconds>"
    );
    std::process::exit(2)
}

async fn limiter(url: &str, mode: Mode) -> Limiter {
    let mut store = RedisStore::connect(url)
        .await
        .expect("connect to redis-server")
        .on_failure(OnFailure::Closed)
        .timeout(TIMEOUT);
    if mode == Mode::DeniedNoCache {
        store = store.deny_cache(0);
    }
    RateLimiter::gcra(mode.quota()).with_store(store)
}

/// One allowed check with every command in the slow log; prints the `EVALSHA` it sent.
async fn print_evalsha(url: &str) {
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis-server");
    let set = |value: &'static str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg("slowlog-log-slower-than").arg(value);
        cmd
    };
    let () = set("0").query_async(&mut admin).await.expect("CONFIG SET");
    let limiter = limiter(url, Mode::Allowed).await;
    let decision = limiter.check(FIRST_KEY).await.expect("a decision");
    assert!(decision.allowed);
    let () = set("10000")
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET");
    // Entries: [id, time, duration, [args...], client, name].
    let log: Vec<(i64, i64, i64, Vec<Vec<u8>>)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async::<Vec<redis::Value>>(&mut admin)
        .await
        .expect("SLOWLOG GET")
        .into_iter()
        .map(|entry| {
            let redis::Value::Array(fields) = entry else {
                panic!("a slow log entry");
            };
            let mut fields = fields.into_iter();
            let mut next = || fields.next().expect("a slow log field");
            let id = redis::from_redis_value(next()).expect("an id");
            let time = redis::from_redis_value(next()).expect("a time");
            let duration = redis::from_redis_value(next()).expect("a duration");
            let args = redis::from_redis_value(next()).expect("arguments");
            (id, time, duration, args)
        })
        .collect();
    let evalsha = log
        .iter()
        .map(|entry| &entry.3)
        .find(|args| {
            args.first()
                .is_some_and(|a| a.eq_ignore_ascii_case(b"EVALSHA"))
        })
        .expect("an EVALSHA in the slow log");
    for arg in evalsha {
        println!(
            "{}",
            String::from_utf8(arg.clone()).expect("a text argument")
        );
    }
}

/// SIGTERM, by which `benches/redis.sh` ends a run when it has read the server's counts.
struct Terminated {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Terminated {
    /// Listens from now on; call within the runtime.
    fn new() -> Self {
        Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler"),
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    }
}

struct Run {
    mode: Mode,
    callers: u64,
    stores: usize,
    workers: usize,
    warmup: Duration,
    measure: Duration,
}

fn run(url: &str, run: &Run) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(run.workers)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut limiters = Vec::new();
    for _ in 0..run.stores {
        limiters.push(runtime.block_on(limiter(url, run.mode)));
    }
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let allowed = Arc::new(AtomicU64::new(0));
    let slowest = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mode = run.mode;
    let callers = run.callers;
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let limiter = limiters[caller as usize % limiters.len()].clone();
            let (done, errors, allowed, slowest, stop) = (
                Arc::clone(&done),
                Arc::clone(&errors),
                Arc::clone(&allowed),
                Arc::clone(&slowest),
                Arc::clone(&stop),
            );
            runtime.spawn(async move {
                let mut i = 0u64;
                let mut longest = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    let key = match mode {
                        Mode::Allowed => FIRST_KEY + 1 + i * callers + caller,
                        Mode::Denied | Mode::DeniedNoCache => FIRST_KEY,
                    };
                    i += 1;
                    let start = Instant::now();
                    let result = limiter.check(key).await;
                    longest = longest.max(start.elapsed());
                    match result {
                        Ok(decision) => {
                            if decision.allowed {
                                allowed.fetch_add(1, Ordering::Relaxed);
                            }
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("first error: {error}");
                            }
                        }
                    }
                    // A denial from the deny cache is ready at once and never yields: let the
                    // other callers run when this one has used its share.
                    tokio::task::coop::consume_budget().await;
                }
                slowest.fetch_max(longest.as_micros() as u64, Ordering::Relaxed);
            })
        })
        .collect();
    let mut terminated = runtime.block_on(async { Terminated::new() });
    std::thread::sleep(run.warmup);
    let (d0, t0) = (done.load(Ordering::Relaxed), Instant::now());
    runtime.block_on(async {
        tokio::select! {
            () = tokio::time::sleep(run.measure) => {}
            () = terminated.recv() => {}
        }
    });
    let (d1, t1) = (done.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for task in tasks {
            task.await.expect("a caller finishes");
        }
    });
    let seconds = (t1 - t0).as_secs_f64();
    let measured = d1 - d0;
    let total = done.load(Ordering::Relaxed);
    let errors = errors.load(Ordering::Relaxed);
    let allowed = allowed.load(Ordering::Relaxed);
    let slowest = slowest.load(Ordering::Relaxed) as f64 / 1000.0;
    println!(
        "decisions {measured} seconds {seconds:.3} rate {:.0} total {total} errors {errors} \
         slowest_ms {slowest:.1}",
        measured as f64 / seconds
    );
    if mode == Mode::Allowed {
        assert_eq!(allowed, total, "allowed-mode checks were denied");
    } else {
        assert_eq!(
            allowed, 1,
            "only the first check on the hammered key is allowed"
        );
    }
}

/// One hot key at 90 % of a quota of 20 000 a second (`fixed`: a fixed window; `gcra`: GCRA,
/// burst 20 000), from `servers` stores and `callers` tasks, with or without leases; see the
/// module docs.
fn leases(url: &str, algorithm: &str, servers: usize, callers: usize, on: bool, seconds: f64) {
    let quota = Quota::per_second(20_000).named("leases");
    match algorithm {
        "fixed" => leases_of(
            RateLimiter::fixed_window(quota),
            url,
            servers,
            callers,
            on,
            seconds,
        ),
        "gcra" => leases_of(RateLimiter::gcra(quota), url, servers, callers, on, seconds),
        _ => usage(),
    }
}

fn leases_of<A: RedisAlgorithm>(
    template: RateLimiter<A>,
    url: &str,
    servers: usize,
    callers: usize,
    on: bool,
    seconds: f64,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let mut fleet = Vec::new();
        for _ in 0..servers {
            let mut store = RedisStore::connect(url)
                .await
                .expect("connects")
                .on_failure(OnFailure::Closed)
                .timeout(Duration::from_secs(1));
            if on {
                store = store.local_leases(Leases::default());
            }
            fleet.push(template.clone().with_store(store));
        }
        let mut info = redis::Client::open(url)
            .expect("a client")
            .get_multiplexed_async_connection()
            .await
            .expect("connects");
        let scripts = |text: String| -> u64 {
            text.lines()
                .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let stats = || redis::cmd("INFO").arg("commandstats").to_owned();
        let before = scripts(stats().query_async(&mut info).await.expect("INFO"));
        let rate = 20_000.0 * 0.9 / callers as f64;
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(seconds);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..callers {
            let limiter = fleet[i % servers].clone();
            tasks.spawn(async move {
                let (mut decisions, mut admitted, mut sent) = (0u64, 0u64, 0u64);
                while Instant::now() < end {
                    // Catch up with this caller's share of the rate, then wait a millisecond.
                    let due = (start.elapsed().as_secs_f64() * rate) as u64;
                    while sent < due {
                        sent += 1;
                        decisions += 1;
                        if limiter.check("hot").await.expect("a decision").allowed {
                            admitted += 1;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                (decisions, admitted)
            });
        }
        let (mut decisions, mut admitted) = (0, 0);
        while let Some(done) = tasks.join_next().await {
            let (d, a) = done.expect("a caller");
            decisions += d;
            admitted += a;
        }
        let after = scripts(stats().query_async(&mut info).await.expect("INFO"));
        println!(
            "leases servers {servers} callers {callers} {} decisions {decisions} admitted \
             {admitted} scripts {}",
            if on { "on" } else { "off" },
            after - before
        );
    });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; ignore it.
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--bench")
        .collect();
    let number = |text: &str| -> u64 { text.parse().unwrap_or_else(|_| usage()) };
    match args.as_slice() {
        ["script"] => print!("{}", RedisStore::script::<Gcra>()),
        ["args", url] => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(print_evalsha(url));
        }
        ["run", url, mode, callers, stores, workers, warmup, seconds] => run(
            url,
            &Run {
                mode: Mode::parse(mode),
                callers: number(callers),
                stores: number(stores) as usize,
                workers: number(workers) as usize,
                warmup: Duration::from_secs_f64(warmup.parse().unwrap_or_else(|_| usage())),
                measure: Duration::from_secs_f64(seconds.parse().unwrap_or_else(|_| usage())),
            },
        ),
        ["leases", url, algorithm, servers, callers, on, seconds] => leases(
            url,
            algorithm,
            number(servers) as usize,
            number(callers) as usize,
            match *on {
                "on" => true,
                "off" => false,
                _ => usage(),
            },
            seconds.parse().unwrap_or_else(|_| usage()),
        ),
        // `cargo bench` with no arguments (as `cargo bench --all-features` runs every bench):
        // say how to run it, do not fail.
        [] => eprintln!("benches/redis.rs is driven by benches/redis.sh"),
        _ => usage(),
    }
}
