//! The Redis store behind Redis Sentinel, against real processes: a primary, its replicas and
//! three `redis-sentinel` (tests/support/redis.rs). Decisions are exact and shared with a
//! plain connection to the primary; a primary killed or frozen under load fails over, the
//! failure policy answering in between, and decisions resume on the promoted replica without
//! rebuilding the store; the old primary restarted comes back as a replica and breaks
//! nothing; a stale sentinel that names another primary chooses nothing; a bad master name or
//! no sentinel fails at construction, naming what was wrong.
//!
//! Time here is real (the sentinels' failover): each wait polls with a deadline.

use crate::support::hammer;
use crate::support::redis as server;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use server::{RedisSentinels, StaleSentinel, MASTER};
use tollgate::algorithm::Gcra;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{ErrorKind, InFlightLayer, Quota, RateLimiter};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A store through the sentinels that answers an error when Redis does not.
async fn sentinel_closed(set: &RedisSentinels, timeout: Duration) -> RedisStore {
    RedisStore::sentinel(set.urls(), MASTER)
        .await
        .unwrap()
        .on_failure(OnFailure::Closed)
        .timeout(timeout)
}

/// A small deterministic generator (xorshift) for the interleavings.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn decisions_through_the_sentinels_are_exact_and_shared_with_the_primary() {
    let Some(set) = RedisSentinels::start(0) else {
        return;
    };
    let primary = set.primary_port().expect("the sentinels name the primary");
    assert_eq!(primary, set.servers[0].port);
    runtime().block_on(async {
        let timeout = Duration::from_secs(2);
        let through_sentinels = sentinel_closed(&set, timeout).await;
        let direct = RedisStore::connect(&set.servers[0].url())
            .await
            .unwrap()
            .on_failure(OnFailure::Closed)
            .timeout(timeout);
        assert!(format!("{through_sentinels:?}").contains("sentinel"));

        // Any interleaving of the two stores and of costs admits exactly the quota, then
        // denies on both.
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..24u64 {
            let limit = 1 + rng.next() % 12;
            let quota = Quota::per_hour(limit).named(format!("exact-{case}"));
            let limiters = [
                RateLimiter::gcra(quota.clone()).with_store(through_sentinels.clone()),
                RateLimiter::gcra(quota).with_store(direct.clone()),
            ];
            let key = format!("user-{case}");
            let mut used = 0;
            while used < limit {
                let cost = 1 + rng.next() % (limit - used);
                let which = (rng.next() % 2) as usize;
                let d = limiters[which].check_n(key.as_str(), cost).await.unwrap();
                assert!(
                    d.allowed,
                    "case {case}: {used} of {limit} used, cost {cost}"
                );
                used += cost;
                assert_eq!(d.remaining, limit - used, "case {case}");
            }
            for limiter in &limiters {
                let d = limiter.check(key.as_str()).await.unwrap();
                assert!(!d.allowed, "case {case}: the quota of {limit} is spent");
            }
            // The state lives on the primary the sentinels named.
            let name = limiters[0]
                .table()
                .redis_keys(&key.as_str().into())
                .remove(0);
            let name = String::from_utf8(name).unwrap();
            let exists = server::cli(primary, &["EXISTS", &name]);
            assert_eq!(exists.trim(), "1", "case {case}: {name} on the primary");
        }

        // Tiers: one script updates both on the primary, whichever store asks.
        let tiers = [
            Quota::per_second(1).with_burst(3).named("short"),
            Quota::per_hour(5).named("long"),
        ];
        let tiered = [
            RateLimiter::gcra(tiers.clone()).with_store(through_sentinels.clone()),
            RateLimiter::gcra(tiers).with_store(direct.clone()),
        ];
        let mut allowed = Vec::new();
        for n in 0..5 {
            allowed.push(tiered[n % 2].check("tiered").await.unwrap().allowed);
        }
        assert_eq!(allowed, [true, true, true, false, false]);

        // Sentinel and plain connections hammering one key together: exactly the quota.
        let quota = Quota::per_hour(60).named("hammer");
        let mut limiters: Vec<RateLimiter<Gcra, RedisStore>> = Vec::new();
        for n in 0..6 {
            let store = if n % 2 == 0 {
                sentinel_closed(&set, timeout).await
            } else {
                direct.clone()
            };
            limiters.push(RateLimiter::gcra(quota.clone()).with_store(store));
        }
        assert_eq!(hammer::admitted_together(limiters, "one-key", 20).await, 60);

        // A block through one store holds on the other; a reset through the other lifts it.
        let quota = Quota::per_hour(100).named("blocks");
        let blocking = RateLimiter::gcra(quota.clone()).with_store(through_sentinels.clone());
        let plain = RateLimiter::gcra(quota).with_store(direct.clone());
        blocking.block("b", Duration::from_secs(600)).await.unwrap();
        let d = plain.check("b").await.unwrap();
        assert!(!d.allowed && d.retry_after.unwrap() > Duration::from_secs(590));
        plain.reset("b").await.unwrap();
        assert!(blocking.check("b").await.unwrap().allowed);

        in_flight_slots_are_shared(through_sentinels, direct).await;
    });
}

/// An in-flight layer of 2 per key through the sentinels and one on a plain connection share
/// the key's slots: a third request on either is refused while two are held.
async fn in_flight_slots_are_shared(through_sentinels: RedisStore, direct: RedisStore) {
    use std::sync::atomic::AtomicUsize;

    use http::{Request, Response, StatusCode};
    use tollgate::key::Header;
    use tower::{Layer, ServiceExt};

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let service = |store: RedisStore| {
        let (gate, inside) = (gate.clone(), inside.clone());
        InFlightLayer::new(2)
            .policy_name("jobs")
            .key(Header::new("x-key"))
            .store(store)
            .layer(tower::service_fn(move |_req: Request<()>| {
                let (gate, inside) = (gate.clone(), inside.clone());
                async move {
                    inside.fetch_add(1, Ordering::SeqCst);
                    gate.acquire().await.unwrap().forget();
                    Ok::<_, std::convert::Infallible>(Response::new(String::new()))
                }
            }))
    };
    let services = [service(through_sentinels), service(direct)];
    let send = |n: usize| {
        let svc = services[n % 2].clone();
        let req = Request::builder().header("x-key", "k").body(()).unwrap();
        tokio::spawn(async move { svc.oneshot(req).await.unwrap().status() })
    };
    let held = [send(0), send(1)];
    let deadline = Instant::now() + Duration::from_secs(5);
    while inside.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "two requests take the two slots");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for n in 0..2 {
        assert_eq!(send(n).await.unwrap(), StatusCode::TOO_MANY_REQUESTS);
    }
    gate.add_permits(2);
    for request in held {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    // The slots come back (each is given back by a task of its own).
    gate.add_permits(1000);
    let deadline = Instant::now() + Duration::from_secs(5);
    while send(0).await.unwrap() != StatusCode::OK {
        assert!(Instant::now() < deadline, "the slots come back");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What one check under load got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Decided by Redis (allowed: the quota is far from spent).
    Redis,
    /// Decided by the local fallback (denied: the probe key is blocked there).
    Local,
    /// An error of the closed failure policy.
    Failed(ErrorKind),
}

/// Checks under load, each with when it was answered (after `start`); and the longest one
/// waited.
#[derive(Default)]
struct Log(Mutex<Vec<(Duration, Answer)>>, Mutex<Duration>);

impl Log {
    fn push(&self, at: Duration, answer: Answer, took: Duration) {
        self.0.lock().unwrap().push((at, answer));
        let mut slowest = self.1.lock().unwrap();
        *slowest = took.max(*slowest);
    }

    fn slowest(&self) -> Duration {
        *self.1.lock().unwrap()
    }

    /// The answers in the order they came.
    fn answers(&self) -> Vec<(Duration, Answer)> {
        let mut answers = self.0.lock().unwrap().clone();
        answers.sort_by_key(|&(at, _)| at);
        answers
    }

    /// When the first answer after `after` that `is` gives was answered.
    fn first(&self, after: Duration, is: impl Fn(Answer) -> bool) -> Option<Duration> {
        self.answers()
            .into_iter()
            .find(|&(at, a)| at > after && is(a))
            .map(|(at, _)| at)
    }
}

/// Stores through the sentinels under continuous load, one per failure policy: `Closed`
/// (errors) and `Local` over a memory store where the probe key is blocked (so a local answer
/// is a denial, and Redis's, on a quota far from spent, an admission).
/// Each store waits `timeout` for Redis: long enough, but where a test needs it short, that
/// the stalls of a busy machine do not read as failures.
struct Load {
    start: Instant,
    stop: Arc<AtomicBool>,
    closed: Arc<Log>,
    local: Arc<Log>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

const PROBE: &str = "probe";

impl Load {
    async fn start(set: &RedisSentinels, timeout: Duration) -> Self {
        let quota = Quota::per_hour(1_000_000_000).named("failover");
        let memory = MemoryStore::new();
        RateLimiter::gcra(quota.clone())
            .with_store(memory.clone())
            .block(PROBE, Duration::from_secs(3600))
            .await
            .unwrap();
        let closed =
            RateLimiter::gcra(quota.clone()).with_store(sentinel_closed(set, timeout).await);
        let local = RateLimiter::gcra(quota).with_store(
            RedisStore::sentinel(set.urls(), MASTER)
                .await
                .unwrap()
                .on_failure(OnFailure::Local(memory))
                .timeout(timeout),
        );
        let mut load = Self {
            start: Instant::now(),
            stop: Arc::default(),
            closed: Arc::default(),
            local: Arc::default(),
            tasks: Vec::new(),
        };
        // Two tasks per store, so that checks overlap.
        for _ in 0..2 {
            let (limiter, log, stop, start) = (
                closed.clone(),
                load.closed.clone(),
                load.stop.clone(),
                load.start,
            );
            load.tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let answer = match limiter.check(PROBE).await {
                        Ok(d) => {
                            assert!(d.allowed, "Redis admits: the quota is far from spent");
                            Answer::Redis
                        }
                        Err(e) => Answer::Failed(e.kind()),
                    };
                    log.push(start.elapsed(), answer, asked.elapsed());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
            let (limiter, log, stop, start) = (
                local.clone(),
                load.local.clone(),
                load.stop.clone(),
                load.start,
            );
            load.tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let d = limiter
                        .check(PROBE)
                        .await
                        .expect("the local fallback always answers");
                    let answer = if d.allowed {
                        Answer::Redis
                    } else {
                        let retry = d.retry_after.expect("a block says when it ends");
                        assert!(retry > Duration::from_secs(3000), "the local block: {d:?}");
                        Answer::Local
                    };
                    log.push(start.elapsed(), answer, asked.elapsed());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
        load
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Waits until both stores got an answer from Redis after `after`, or panics at `within`.
    async fn until_redis_answers(&self, after: Duration, within: Duration) -> Duration {
        let deadline = Instant::now() + within;
        loop {
            let closed = self.closed.first(after, |a| a == Answer::Redis);
            let local = self.local.first(after, |a| a == Answer::Redis);
            if let (Some(closed), Some(local)) = (closed, local) {
                return closed.max(local);
            }
            self.wait(deadline, within).await;
        }
    }

    /// Waits until both stores got an answer from their failure policy after `after`, then
    /// one from Redis; when that was, or a panic at `within`.
    async fn until_redis_answers_again(&self, after: Duration, within: Duration) -> Duration {
        let deadline = Instant::now() + within;
        loop {
            let again = |log: &Log| {
                let failed = log.first(after, |a| a != Answer::Redis)?;
                log.first(failed, |a| a == Answer::Redis)
            };
            if let (Some(closed), Some(local)) = (again(&self.closed), again(&self.local)) {
                return closed.max(local);
            }
            self.wait(deadline, within).await;
        }
    }

    /// Waits until both stores have answered only from Redis for `quiet`, and answered since
    /// their last other answer; panics after `within`.
    async fn until_only_redis_for(&self, quiet: Duration, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let now = self.now();
            let settled = |log: &Log| {
                let answers = log.answers();
                let since = answers
                    .iter()
                    .rev()
                    .find(|&&(_, a)| a != Answer::Redis)
                    .map_or(Duration::ZERO, |&(at, _)| at);
                now.saturating_sub(since) >= quiet
                    && answers.last().is_some_and(|&(at, _)| at > since)
            };
            if settled(&self.closed) && settled(&self.local) {
                return;
            }
            self.wait(deadline, within).await;
        }
    }

    /// Polls again soon, unless `deadline` is past.
    async fn wait(&self, deadline: Instant, within: Duration) {
        assert!(
            Instant::now() < deadline,
            "Redis answered no check within {within:?} (closed: {:?}, local: {:?})",
            self.closed.answers().last(),
            self.local.answers().last()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    async fn stop(self) -> (Vec<(Duration, Answer)>, Vec<(Duration, Answer)>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("a load task");
        }
        (self.closed.answers(), self.local.answers())
    }
}

/// Checks the answers around a failover: before `down` (the primary killed or frozen), Redis
/// alone; from `down` to `settled`, Redis (a call already on its way, or a store that found
/// the new primary before the other) or what `failed` accepts from the failure policy; after
/// `settled`, Redis alone. Returns how many answers the failure policy gave.
fn judge(
    answers: &[(Duration, Answer)],
    down: Duration,
    settled: Duration,
    failed: impl Fn(Answer) -> bool,
) -> usize {
    let mut by_policy = 0;
    for &(at, answer) in answers {
        if at < down {
            assert_eq!(
                answer,
                Answer::Redis,
                "at {at:?}, before the primary went down"
            );
        } else if at > settled {
            assert_eq!(answer, Answer::Redis, "at {at:?}, after the failover");
        } else if answer != Answer::Redis {
            assert!(failed(answer), "at {at:?}: {answer:?}");
            by_policy += 1;
        }
    }
    by_policy
}

fn a_killed_primary_fails_over_and_decisions_resume_on_the_promoted_replica() {
    let Some(mut set) = RedisSentinels::start(1) else {
        return;
    };
    let old = set.servers[0].port;
    runtime().block_on(async {
        let load = Load::start(&set, Duration::from_secs(1)).await;
        let warm = load
            .until_redis_answers(Duration::ZERO, Duration::from_secs(5))
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(warm > Duration::ZERO);

        let killed = load.now();
        set.server(old).kill();
        // When all three sentinels name the new primary (polled every 20 ms, off the load's
        // worker thread).
        let (new, switched) = tokio::task::block_in_place(|| {
            let new = set.wait_for_new_primary(old, Duration::from_secs(30));
            (new, load.now())
        });
        let back = load
            .until_redis_answers_again(killed, Duration::from_secs(30))
            .await;
        println!(
            "sentinel failover (SIGKILL): {:?} from the kill to the first decision from Redis \
             again; the sentinels all named the new primary after {:?} (down-after {} ms, \
             failover-timeout {} ms)",
            back - killed,
            switched - killed,
            server::DOWN_AFTER_MS,
            server::FAILOVER_TIMEOUT_MS
        );
        assert!(back - killed < Duration::from_secs(30));
        // Once both stores found the new primary, Redis alone answers: for a while.
        let settled = back + Duration::from_millis(100);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (closed, local) = load.stop().await;
        let unreachable = |a| {
            matches!(
                a,
                Answer::Failed(ErrorKind::Unreachable) | Answer::Failed(ErrorKind::Timeout)
            )
        };
        let failed = judge(&closed, killed, settled, unreachable);
        let local_answers = judge(&local, killed, settled, |a| a == Answer::Local);
        assert!(
            failed > 0,
            "the closed policy answered while no primary did"
        );
        assert!(
            local_answers > 0,
            "the local fallback answered while no primary did"
        );
        assert!(closed.last().unwrap().0 > settled + Duration::from_millis(300));
        // The promoted replica decided: its script cache was filled through NOSCRIPT.
        let stats = server::cli(new, &["INFO", "commandstats"]);
        assert!(stats.contains("cmdstat_script|load"), "{stats}");
        assert!(stats.contains("cmdstat_evalsha"), "{stats}");
    });
}

fn the_old_primary_restarted_comes_back_as_a_replica_and_breaks_nothing() {
    let Some(mut set) = RedisSentinels::start(1) else {
        return;
    };
    let old = set.servers[0].port;
    runtime().block_on(async {
        // A store that sees no traffic through the failover: its connection is to the old
        // primary when the old primary is back.
        let idle = RateLimiter::gcra(Quota::per_hour(100).named("idle"))
            .with_store(sentinel_closed(&set, Duration::from_secs(1)).await);
        assert!(idle.check("k").await.unwrap().allowed);

        let load = Load::start(&set, Duration::from_secs(1)).await;
        load.until_redis_answers(Duration::ZERO, Duration::from_secs(5))
            .await;
        let killed = load.now();
        set.server(old).kill();
        load.until_redis_answers_again(killed, Duration::from_secs(30))
            .await;
        let new = set.wait_for_new_primary(old, Duration::from_secs(10));
        // Both stores settled on the new primary: nothing but Redis for longer than a recheck
        // period. (A store may still be between lookups when the sentinels agree, and an
        // answer logged after a failure may have come before it: the failover's own answers
        // are the other tests' business.)
        load.until_only_redis_for(Duration::from_millis(1_500), Duration::from_secs(10))
            .await;

        // The old primary comes back (empty, and calling itself a primary until the sentinels
        // turn it into a replica): no call goes to it, none fails.
        let restarted = load.now();
        set.server(old).restart();
        // Sentinels read an instance's role every 10 s: on a busy machine the conversion may
        // come after 20 s (it did once in CI).
        set.wait_until_replica_of(old, new, Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (closed, local) = load.stop().await;
        for (at, answer) in closed.iter().chain(&local) {
            if *at > restarted {
                assert_eq!(
                    *answer,
                    Answer::Redis,
                    "at {at:?}, after the old primary restarted at {restarted:?}"
                );
            }
        }

        // The idle store finds the new primary on its first calls (its connection died with
        // the old primary), and never goes back to the old one.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut failures = 0;
        loop {
            match idle.check("k").await {
                Ok(d) => {
                    assert!(d.allowed);
                    break;
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Unreachable, "{e}");
                    failures += 1;
                }
            }
            assert!(Instant::now() < deadline, "the idle store found no primary");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            failures <= 3,
            "{failures} failures before the idle store moved"
        );
        for _ in 0..20 {
            assert!(idle.check("k").await.unwrap().allowed);
        }

        // A store made now is exact on the new primary, shared with a plain connection to it.
        let quota = Quota::per_hour(4).named("after");
        let fresh = RateLimiter::gcra(quota.clone())
            .with_store(sentinel_closed(&set, Duration::from_secs(1)).await);
        let direct = RateLimiter::gcra(quota).with_store(
            RedisStore::connect(&format!("redis://127.0.0.1:{new}/"))
                .await
                .unwrap()
                .on_failure(OnFailure::Closed)
                .timeout(Duration::from_secs(1)),
        );
        for n in 0..4 {
            let limiter = if n % 2 == 0 { &fresh } else { &direct };
            assert!(limiter.check("u").await.unwrap().allowed);
        }
        assert!(!fresh.check("u").await.unwrap().allowed);
        assert!(!direct.check("u").await.unwrap().allowed);
        // Nothing was written to the old primary since it became a replica: its keys are
        // the new primary's.
        let keys = |port: u16| server::cli(port, &["DBSIZE"]).trim().to_owned();
        let deadline = Instant::now() + Duration::from_secs(5);
        while keys(old) != keys(new) {
            assert!(Instant::now() < deadline, "the replica caught up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

fn a_frozen_primary_fails_over_and_decisions_resume() {
    let Some(mut set) = RedisSentinels::start(1) else {
        return;
    };
    let old = set.servers[0].port;
    runtime().block_on(async {
        let timeout = Duration::from_millis(400);
        let load = Load::start(&set, timeout).await;
        load.until_redis_answers(Duration::ZERO, Duration::from_secs(5))
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // SIGSTOP: the connections stay open and nothing answers, as with a host gone.
        let frozen = load.now();
        set.server(old).pause();
        let switched = tokio::task::block_in_place(|| {
            set.wait_for_new_primary(old, Duration::from_secs(30));
            load.now()
        });
        let back = load
            .until_redis_answers_again(frozen, Duration::from_secs(30))
            .await;
        println!(
            "sentinel failover (SIGSTOP): {:?} from the freeze to the first decision from \
             Redis again; the sentinels all named the new primary after {:?}",
            back - frozen,
            switched - frozen
        );
        // The old primary wakes up calling itself a primary (the sentinels turn it into a
        // replica some seconds later): no call goes back to it.
        set.server(old).resume();
        let resumed = load.now();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            server::role(old),
            "master",
            "still calling itself a primary"
        );
        let slowest = [load.closed.slowest(), load.local.slowest()];
        let (closed, local) = load.stop().await;
        assert!(closed.last().unwrap().0 > resumed + Duration::from_millis(300));
        let settled = back + Duration::from_millis(100);
        let failed = judge(&closed, frozen, settled, |a| {
            matches!(
                a,
                Answer::Failed(ErrorKind::Unreachable) | Answer::Failed(ErrorKind::Timeout)
            )
        });
        let local_answers = judge(&local, frozen, settled, |a| a == Answer::Local);
        assert!(failed > 0 && local_answers > 0);
        // While frozen, each check waited at most about the store's timeout.
        for slowest in slowest {
            assert!(
                slowest < timeout * 3,
                "a check waited {slowest:?} with a timeout of {timeout:?}"
            );
        }
    });
}

fn a_primary_demoted_while_reachable_loses_its_calls_before_it_is_a_replica() {
    let Some(set) = RedisSentinels::start(1) else {
        return;
    };
    let old = set.servers[0].port;
    runtime().block_on(async {
        let load = Load::start(&set, Duration::from_secs(1)).await;
        load.until_redis_answers(Duration::ZERO, Duration::from_secs(5))
            .await;
        // A failover while the old primary runs: it answers as a primary until the sentinels
        // turn it into a replica, some 10 s later here (minutes with their defaults).
        let asked = server::cli(set.sentinels[0].port, &["SENTINEL", "FAILOVER", MASTER]);
        assert_eq!(asked.trim(), "OK");
        let new = set.wait_for_new_primary(old, Duration::from_secs(10));
        let switched = load.now();
        let evalsha = |port: u16| {
            let stats = server::command(port, "INFO commandstats").unwrap_or_default();
            stats
                .lines()
                .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // Calls leave the old primary (its EVALSHA count stands still) for the new one.
        let deadline = Instant::now() + Duration::from_secs(5);
        let moved = loop {
            let (old_calls, new_calls) = (evalsha(old), evalsha(new));
            tokio::time::sleep(Duration::from_millis(200)).await;
            if evalsha(old) == old_calls && evalsha(new) > new_calls {
                break load.now();
            }
            assert!(
                Instant::now() < deadline,
                "calls still go to the old primary 5 s after the switch"
            );
        };
        assert_eq!(
            server::role(old),
            "master",
            "the calls left before the sentinels demoted the old primary"
        );
        println!(
            "sentinel failover (SENTINEL FAILOVER, old primary reachable): calls left it within \
             {:?} of the switch",
            moved - switched
        );
        let (closed, local) = load.stop().await;
        let unreachable = |a| a == Answer::Failed(ErrorKind::Unreachable);
        judge(&closed, Duration::ZERO, moved, unreachable);
        judge(&local, Duration::ZERO, moved, |a| a == Answer::Local);
    });
}

/// A client cannot make a store drop its primary: a check cancelled at once, after the store
/// has been idle for longer than a stall (the primary answered nothing because nothing was
/// asked), leaves the primary where it is, and the next check is decided by Redis.
fn a_check_cancelled_after_an_idle_second_keeps_the_primary() {
    // No replica: the sentinels, whose `down-after-milliseconds` is short, have nothing to
    // fail over to when a loaded machine delays the primary's answers to them, so the store
    // has no reason to leave it but its own.
    let Some(set) = RedisSentinels::start(0) else {
        return;
    };
    // One thread: the connection's task cannot read Redis's answer while the check is polled
    // the first time (on a runtime with workers it could, on a loaded machine, and the check
    // was answered before it was dropped).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter = RateLimiter::gcra(Quota::per_hour(1_000).named("idle"))
            .with_store(sentinel_closed(&set, Duration::from_secs(1)).await);
        assert!(limiter.check("k").await.unwrap().allowed);
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            // Polled once (the call is sent), then dropped unanswered.
            {
                use std::future::Future;
                let mut check = std::pin::pin!(limiter.check("k"));
                let first =
                    std::future::poll_fn(|cx| std::task::Poll::Ready(check.as_mut().poll(cx)))
                        .await;
                assert!(
                    first.is_pending(),
                    "answered before Redis could: {:?}",
                    first.map(|answer| answer.map(|d| d.allowed))
                );
            }
            let next = limiter.check("k").await;
            assert!(
                next.as_ref().is_ok_and(|d| d.allowed),
                "the next check after a cancelled one: {next:?}"
            );
        }
    });
}

/// A frozen primary is left once a call has waited a second for it unanswered: with a timeout
/// of a second, the first check that times out drops it, and the next is answered at once by
/// the failure policy rather than after another second's wait (three in a row would hold
/// every request for three timeouts). Once the primary wakes, decisions come from it again.
fn a_frozen_primary_is_left_after_one_timeout_of_a_second() {
    // No replica: the sentinels have nothing to fail over to, and keep naming the primary.
    let Some(mut set) = RedisSentinels::start(0) else {
        return;
    };
    let primary = set.servers[0].port;
    runtime().block_on(async {
        let timeout = Duration::from_secs(1);
        let limiter = RateLimiter::gcra(Quota::per_hour(1_000).named("long"))
            .with_store(sentinel_closed(&set, timeout).await);
        assert!(limiter.check("k").await.unwrap().allowed);
        set.server(primary).pause();
        let first = limiter.check("k").await;
        assert_eq!(
            first.as_ref().map_err(|e| e.kind()).err(),
            Some(ErrorKind::Timeout),
            "the first check on the frozen primary: {:?}",
            first.map(|d| d.allowed)
        );
        let started = Instant::now();
        let second = limiter.check("k").await;
        let waited = started.elapsed();
        set.server(primary).resume();
        assert!(second.is_err(), "decided by a frozen primary");
        assert!(
            waited < Duration::from_millis(500),
            "the check after a second of silence waited {waited:?} ({:?}): the frozen primary \
             was kept",
            second.map_err(|e| e.kind()).err()
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while !limiter.check("k").await.is_ok_and(|d| d.allowed) {
            assert!(
                Instant::now() < deadline,
                "the woken primary never decided again"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

fn a_bad_master_name_or_no_sentinel_fails_at_construction_naming_it() {
    let Some(set) = RedisSentinels::start(0) else {
        return;
    };
    runtime().block_on(async {
        let error = RedisStore::sentinel(set.urls(), "no-such-master")
            .await
            .unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{message}");
        assert!(message.contains("\"no-such-master\""), "{message}");
        assert!(message.contains("[\"mymaster\"]"), "{message}");
        assert!(message.contains("sentinel monitor"), "{message}");

        // Nothing listens on these ports.
        let nobody: Vec<String> = (0..2)
            .map(|_| {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                format!(
                    "redis://127.0.0.1:{}/",
                    listener.local_addr().unwrap().port()
                )
            })
            .collect();
        let error = RedisStore::sentinel(&nobody, MASTER).await.unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{message}");
        for url in &nobody {
            let address = url.trim_start_matches("redis://").trim_end_matches('/');
            assert!(message.contains(address), "{message}");
        }
        assert!(message.contains("redis-sentinel runs there"), "{message}");

        // A Redis server given for a sentinel.
        let error = RedisStore::sentinel([set.servers[0].url()], MASTER)
            .await
            .unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{message}");
        assert!(message.contains("not a Redis Sentinel"), "{message}");

        // The same sentinel twice (the trailing slash aside): refused, naming both URLs.
        let twice = [
            set.urls()[0].clone(),
            set.urls()[0].trim_end_matches('/').to_owned(),
        ];
        let error = RedisStore::sentinel(twice, MASTER).await.unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{message}");
        assert!(message.contains("#1 and #2"), "{message}");
        assert!(message.contains("list each sentinel once"), "{message}");

        // No URL; a URL that does not parse, its password kept out of the message.
        let error = RedisStore::sentinel(Vec::<String>::new(), MASTER)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured);
        assert!(error.to_string().contains("no sentinel URL"), "{error}");
        let bad = "redis://user:hunter2@127.0.0.1:notaport/";
        let error = RedisStore::sentinel([bad], MASTER).await.unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{message}");
        assert!(message.contains("sentinel URL #1"), "{message}");
        assert!(message.contains("127.0.0.1:notaport"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");

        // The right name still works, through a list that starts with a dead sentinel.
        let mut urls = nobody.clone();
        urls.extend(set.urls());
        let store = RedisStore::sentinel(&urls, MASTER)
            .await
            .unwrap()
            .on_failure(OnFailure::Closed)
            .timeout(Duration::from_secs(1));
        let limiter = RateLimiter::gcra(Quota::per_hour(1).named("ok")).with_store(store);
        assert!(limiter.check("k").await.unwrap().allowed);
        assert!(!limiter.check("k").await.unwrap().allowed);
    });
}

/// A stale sentinel names a primary of its own (as one that missed a failover names the old
/// primary, restarted empty and still a primary). Listed first, before the three that agree, it
/// chooses nothing: the store is built on the primary the majority names, and the checks of
/// which primary the sentinels name, every second while calls come, keep it there (each call
/// decided by Redis, none by the failure policy). With one sentinel on each side no primary
/// has a majority, and no store is built; nor when the stale sentinel is listed twice, under
/// its address and under `localhost` (it votes once).
fn a_stale_sentinel_never_chooses_the_primary() {
    let Some(set) = RedisSentinels::start(1) else {
        return;
    };
    let Some(stale) = StaleSentinel::start() else {
        return;
    };
    let (primary, elsewhere) = (set.servers[0].port, stale.server.port);
    runtime().block_on(async {
        let mut urls = vec![stale.sentinel.url()];
        urls.extend(set.urls());
        let store = RedisStore::sentinel(&urls, MASTER)
            .await
            .expect("three of four sentinels name the primary")
            .on_failure(OnFailure::Closed)
            .timeout(Duration::from_secs(1));
        let limiter = RateLimiter::gcra(Quota::per_hour(3).named("stale")).with_store(store);
        // Over three seconds, so that the sentinels are asked again at least twice.
        let start = Instant::now();
        let mut decided = 0;
        while start.elapsed() < Duration::from_secs(3) {
            let decision = limiter.check("client").await;
            let decision = decision.unwrap_or_else(|e| panic!("check #{decided}: {e}"));
            assert_eq!(decision.allowed, decided < 3, "check #{decided}");
            decided += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let keys = |port: u16| server::cli(port, &["DBSIZE"]).trim().parse::<u64>().ok();
        assert!(keys(primary) > Some(0), "the key is on the primary");
        assert_eq!(
            keys(elsewhere),
            Some(0),
            "nothing reached the stale primary"
        );

        let split = [stale.sentinel.url(), set.sentinels[0].url()];
        let error = RedisStore::sentinel(split, MASTER).await.unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{message}");
        assert!(message.contains("no majority"), "{message}");
        for port in [primary, elsewhere] {
            assert!(
                message.contains(&format!("1 of 2 name 127.0.0.1:{port}")),
                "{message}"
            );
        }

        // The stale sentinel under two names (its address and `localhost`) beside one that
        // agrees with the rest: it votes once, so neither primary has two of three.
        let aliased = [
            stale.sentinel.url(),
            format!("redis://localhost:{}/", stale.sentinel.port),
            set.sentinels[0].url(),
        ];
        let error = RedisStore::sentinel(aliased, MASTER).await.unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{message}");
        assert!(message.contains("1 of 3 name"), "{message}");
        assert!(
            message.contains("1 answered again under another URL"),
            "{message}"
        );
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "a_check_cancelled_after_an_idle_second_keeps_the_primary",
            a_check_cancelled_after_an_idle_second_keeps_the_primary,
        ),
        server::needs_redis(
            "decisions_through_the_sentinels_are_exact_and_shared_with_the_primary",
            decisions_through_the_sentinels_are_exact_and_shared_with_the_primary,
        ),
        server::needs_redis(
            "a_killed_primary_fails_over_and_decisions_resume_on_the_promoted_replica",
            a_killed_primary_fails_over_and_decisions_resume_on_the_promoted_replica,
        ),
        server::needs_redis(
            "the_old_primary_restarted_comes_back_as_a_replica_and_breaks_nothing",
            the_old_primary_restarted_comes_back_as_a_replica_and_breaks_nothing,
        ),
        server::needs_redis(
            "a_frozen_primary_fails_over_and_decisions_resume",
            a_frozen_primary_fails_over_and_decisions_resume,
        ),
        server::needs_redis(
            "a_primary_demoted_while_reachable_loses_its_calls_before_it_is_a_replica",
            a_primary_demoted_while_reachable_loses_its_calls_before_it_is_a_replica,
        ),
        server::needs_redis(
            "a_frozen_primary_is_left_after_one_timeout_of_a_second",
            a_frozen_primary_is_left_after_one_timeout_of_a_second,
        ),
        server::needs_redis(
            "a_stale_sentinel_never_chooses_the_primary",
            a_stale_sentinel_never_chooses_the_primary,
        ),
        server::needs_redis(
            "a_bad_master_name_or_no_sentinel_fails_at_construction_naming_it",
            a_bad_master_name_or_no_sentinel_fails_at_construction_naming_it,
        ),
    ]
}
