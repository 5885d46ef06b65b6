//! A Redis that is down is answered at once by the failure policy, not after the store's
//! timeout once per call: a killed server (refused connections), a frozen one (calls time out
//! again and again), shared by every table and clone of the store; back on Redis within 1 s
//! of it answering again; and a Redis that is slow once, or answers errors, is not down.

use crate::support::redis as server;

use std::time::{Duration, Instant};

use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Error, ErrorKind, Quota, RateLimiter};

type Limiter = RateLimiter<tollgate::algorithm::Gcra, RedisStore>;

/// Two worker threads: the store's probe runs on them while a test blocks its own thread
/// (restarting a server, waiting for it).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn store(url: &str, timeout: Duration, on_failure: OnFailure) -> RedisStore {
    RedisStore::connect(url)
        .await
        .unwrap()
        .timeout(timeout)
        .on_failure(on_failure)
}

fn limiter(store: &RedisStore, name: &str) -> Limiter {
    RateLimiter::gcra(Quota::per_hour(5).named(name)).with_store(store.clone())
}

/// An error answered while the store knows Redis is down: `Unreachable`, saying so.
fn assert_down_error(error: &Error) {
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("failure policy") && text.contains("probe"),
        "the error says the store answers from the failure policy until a probe: {text}"
    );
}

/// Checks on `limiter` until one answers in less than `fast`; how many it took (at most
/// `within`).
async fn until_fast(limiter: &Limiter, fast: Duration, within: usize) -> usize {
    for n in 1..=within {
        let started = Instant::now();
        let _ = limiter.check("trip").await;
        if started.elapsed() < fast {
            return n;
        }
    }
    panic!(
        "no check answered within {fast:?} in {within} checks: the store never knew Redis was down"
    );
}

/// Checks with `limiter` every 10 ms until Redis decides one (a store failing closed answers
/// `Ok` only from Redis); how long that took.
async fn until_back(limiter: &Limiter, within: Duration) -> Duration {
    let started = Instant::now();
    while started.elapsed() < within {
        if limiter.check("back").await.is_ok() {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("Redis decided no check within {within:?} of answering again");
}

/// 1. Redis killed: with a 2 s timeout, 50 checks take well under one timeout in all, each
///    answered by the failure policy.
fn a_dead_redis_is_answered_at_once() {
    let Some(mut server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let timeout = Duration::from_secs(2);
        let local = store(&server.url(), timeout, OnFailure::Local(MemoryStore::new())).await;
        let open = store(&server.url(), timeout, OnFailure::Open).await;
        let closed = store(&server.url(), timeout, OnFailure::Closed).await;
        let (local, open, closed) = (
            limiter(&local, "local"),
            limiter(&open, "open"),
            limiter(&closed, "closed"),
        );
        for limiter in [&local, &open, &closed] {
            assert!(limiter.check("warm").await.unwrap().allowed);
        }
        server.kill();

        let started = Instant::now();
        let mut admitted = Vec::new();
        for _ in 0..50 {
            admitted.push(local.check("k").await.unwrap().allowed);
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "50 local checks took {took:?}"
        );
        // The local table limits on its own: the quota's 5, then denials.
        assert_eq!(admitted.iter().filter(|a| **a).count(), 5, "{admitted:?}");
        assert!(admitted[..5].iter().all(|a| *a), "{admitted:?}");

        let started = Instant::now();
        for _ in 0..50 {
            assert!(
                open.check("k").await.unwrap().allowed,
                "failing open admits"
            );
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "50 open checks took {took:?}"
        );

        let started = Instant::now();
        let mut errors = Vec::new();
        for _ in 0..50 {
            errors.push(closed.check("k").await.unwrap_err());
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "50 closed checks took {took:?}"
        );
        // The first call may be the one that found the connection dropped; the later ones are
        // answered from what the store knows.
        for error in &errors {
            assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
        }
        assert_down_error(&errors[49]);
    });
}

/// 2. Recovery: Redis restarted on its port is deciding again within 1 s of answering.
fn a_restarted_redis_decides_again_within_a_second() {
    let Some(mut server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        for timeout in [RedisStore::DEFAULT_TIMEOUT, Duration::from_secs(2)] {
            let store = store(&server.url(), timeout, OnFailure::Closed).await;
            let limiter = limiter(&store, "recovery");
            assert!(limiter.check("warm").await.unwrap().allowed);
            server.kill();
            for _ in 0..5 {
                assert!(limiter.check("k").await.is_err());
            }
            // Down for a while: several probes fail.
            tokio::time::sleep(Duration::from_millis(700)).await;
            assert_down_error(&limiter.check("k").await.unwrap_err());
            // `restart` returns once the server answers PING (polled every 20 ms).
            tokio::task::block_in_place(|| server.restart());
            let took = until_back(&limiter, Duration::from_secs(5)).await;
            println!("timeout {timeout:?}: Redis decided again {took:?} after it answered PING");
            assert!(took <= Duration::from_secs(1), "back after {took:?}");
        }
    });
}

/// 3. Frozen Redis: after a few calls time out in a row, checks are answered at once; after it
///    goes on, back within 1 s. Resets and blocks made meanwhile do not wait either.
fn a_frozen_redis_is_answered_at_once_once_known() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let timeout = Duration::from_millis(200);
        let local = store(&server.url(), timeout, OnFailure::Local(MemoryStore::new())).await;
        let closed = store(&server.url(), timeout, OnFailure::Closed).await;
        let (local, closed) = (limiter(&local, "frozen-local"), limiter(&closed, "frozen"));
        assert!(closed.check("warm").await.unwrap().allowed);
        assert!(local.check("warm").await.unwrap().allowed);
        server.pause();

        let first = closed.check("k").await.unwrap_err();
        assert_eq!(
            first.kind(),
            ErrorKind::Timeout,
            "one timeout is only a timeout: {first}"
        );
        let tripped = until_fast(&closed, Duration::from_millis(50), 10).await;
        println!("answered at once after {tripped} calls timed out in a row");
        let started = Instant::now();
        for _ in 0..20 {
            assert_down_error(&closed.check("k").await.unwrap_err());
        }
        let took = started.elapsed();
        assert!(
            took < timeout,
            "20 checks took {took:?}, a timeout is {timeout:?}"
        );

        until_fast(&local, Duration::from_millis(50), 10).await;
        let started = Instant::now();
        assert!(local.block("b", Duration::from_secs(60)).await.is_err());
        assert!(local.reset("r").await.is_err());
        let took = started.elapsed();
        assert!(took < timeout, "a reset and a block took {took:?}");
        assert!(
            !local.check("b").await.unwrap().allowed,
            "the block holds in the local fallback"
        );

        server.resume();
        let took = until_back(&closed, Duration::from_secs(5)).await;
        println!("Redis decided again {took:?} after SIGCONT");
        assert!(took <= Duration::from_secs(1), "back after {took:?}");
    });
}

/// 4. Every table of a store, and its clones, know Redis is down once one call found it.
fn the_tables_and_clones_of_a_store_share_what_it_knows() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let timeout = Duration::from_millis(200);
        let store = store(&server.url(), timeout, OnFailure::Closed).await;
        let first = limiter(&store, "first");
        let second = RateLimiter::fixed_window(Quota::per_minute(10).named("second"))
            .with_store(store.clone());
        let cloned = limiter(&store.clone(), "cloned");
        assert!(first.check("warm").await.unwrap().allowed);
        assert!(second.check("warm").await.unwrap().allowed);
        assert!(cloned.check("warm").await.unwrap().allowed);
        server.pause();
        until_fast(&first, Duration::from_millis(50), 10).await;
        let started = Instant::now();
        assert_down_error(&second.check("k").await.unwrap_err());
        assert_down_error(&cloned.check("k").await.unwrap_err());
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(50),
            "the other tables waited: {took:?}"
        );
        server.resume();
        until_back(&first, Duration::from_secs(5)).await;
        assert!(second.check("after").await.is_ok());
        assert!(cloned.check("after").await.is_ok());
    });
}

/// 5. A Redis slow once (a `DEBUG SLEEP` longer than the timeout, while many calls wait on it)
///    is not down: the next call goes to Redis. Nor is one that answers errors (a state it
///    cannot read, out of memory).
fn a_slow_or_erring_redis_is_not_down() {
    let Some(server) = server::RedisServer::start_with(&["--enable-debug-command", "yes"]) else {
        return;
    };
    runtime().block_on(async {
        let timeout = Duration::from_millis(100);
        let store = store(&server.url(), timeout, OnFailure::Closed).await;
        let limiter = limiter(&store, "slow");
        assert!(limiter.check("warm").await.unwrap().allowed);
        let port = server.port;
        let sleep = tokio::task::spawn_blocking(move || server::command(port, "DEBUG SLEEP 0.25"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let checks: Vec<_> = (0..20)
            .map(|i| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.check(format!("c{i}")).await })
            })
            .collect();
        for check in checks {
            let error = check.await.unwrap().unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
        }
        assert!(sleep.await.unwrap().is_some_and(|r| r.starts_with("+OK")));
        let before = server.calls("evalsha");
        assert!(
            limiter.check("after").await.unwrap().allowed,
            "Redis decides"
        );
        assert_eq!(server.calls("evalsha"), before + 1);

        // Errors Redis answers are answers: a state it cannot read, then no memory left.
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let junk = limiter.table().redis_keys(&"junk".into()).remove(0);
        let _: () = redis::cmd("SET")
            .arg(junk)
            .arg("gcra:12x4")
            .query_async(&mut conn)
            .await
            .unwrap();
        for _ in 0..10 {
            let error = limiter.check("junk").await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        }
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("1")
            .query_async(&mut conn)
            .await
            .unwrap();
        for i in 0..10 {
            let error = limiter.check(format!("oom{i}")).await.unwrap_err();
            assert!(error.to_string().contains("OOM"), "{error}");
            assert_ne!(error.kind(), ErrorKind::Unreachable, "{error}");
        }
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("0")
            .query_async(&mut conn)
            .await
            .unwrap();
        let before = server.calls("evalsha");
        assert!(limiter.check("after-errors").await.unwrap().allowed);
        assert_eq!(server.calls("evalsha"), before + 1);
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "a_dead_redis_is_answered_at_once",
            a_dead_redis_is_answered_at_once,
        ),
        server::needs_redis(
            "a_restarted_redis_decides_again_within_a_second",
            a_restarted_redis_decides_again_within_a_second,
        ),
        server::needs_redis(
            "a_frozen_redis_is_answered_at_once_once_known",
            a_frozen_redis_is_answered_at_once_once_known,
        ),
        server::needs_redis(
            "the_tables_and_clones_of_a_store_share_what_it_knows",
            the_tables_and_clones_of_a_store_share_what_it_knows,
        ),
        server::needs_redis(
            "a_slow_or_erring_redis_is_not_down",
            a_slow_or_erring_redis_is_not_down,
        ),
    ]
}
