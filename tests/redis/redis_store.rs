//! The Redis store against a real `redis-server`: one limit across many connections and
//! processes, keys that expire when fresh, one round trip per decision and none for a
//! remembered denial, the failure policies when Redis dies or hangs, and garbage in Redis.

use crate::support::hammer;
use crate::support::redis as server;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use tollgate::clock::ManualClock;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Key, Quota, RateLimiter};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn eight_connections_hammering_one_key_admit_exactly_the_quota() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let quota = Quota::per_hour(100).named("hammer");
        let mut limiters = Vec::new();
        for _ in 0..8 {
            // Eight stores: eight connections, as eight servers would have.
            let store = server::closed(&server.url())
                .await
                .timeout(Duration::from_secs(5));
            limiters.push(RateLimiter::gcra(quota.clone()).with_store(store));
        }
        let admitted = hammer::admitted_together(limiters, "one-key", 60).await;
        assert_eq!(admitted, 100, "480 attempts on one key of 100 an hour");
    });
}

/// Run by `separate_processes_share_one_limit` in child processes (see `main`).
fn worker_process() {
    let Ok(url) = std::env::var("TOLLGATE_REDIS_WORKER_URL") else {
        return;
    };
    let admitted = runtime().block_on(async {
        let store = server::closed(&url).await.timeout(Duration::from_secs(5));
        let limiter = RateLimiter::gcra(Quota::per_hour(50).named("processes")).with_store(store);
        let mut admitted = 0;
        for _ in 0..40 {
            if limiter.check("shared").await.unwrap().allowed {
                admitted += 1;
            }
        }
        admitted
    });
    println!("admitted={admitted}");
}

fn separate_processes_share_one_limit() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "redis_store::worker_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("TOLLGATE_REDIS_WORKER_URL", server.url())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut total = 0;
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let admitted: u64 = stdout
            .lines()
            .find_map(|l| l.split("admitted=").nth(1))
            .unwrap_or_else(|| panic!("no count in {stdout}"))
            .parse()
            .unwrap();
        total += admitted;
    }
    assert_eq!(
        total, 50,
        "4 processes x 40 attempts on one key of 50 an hour"
    );
}

fn keys_live_as_long_as_their_state_matters() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let clock = ManualClock::new();
        let store = server::closed_on_caller_clock(&server.url()).await;
        // T = 6 s, burst 10.
        let limiter = RateLimiter::gcra(Quota::per_minute(10).named("ttl"))
            .with_clock(clock.clone())
            .with_store(store.clone());
        let mut conn = raw(&server.url()).await;
        let key = limiter.table().redis_keys(&Key::from("alice")).remove(0);
        assert!(key.starts_with(b"tollgate:{s:alice}:ttl:gcra."));
        let key = &key[..];
        // A key is kept until its state is fresh, and past that by the share of its burst
        // used of the time a full burst takes to be fresh (60 s here): 18 s + 3/10 x 60 s.
        let first = limiter.check_n("alice", 3).await.unwrap();
        assert_eq!(first.reset_after, Duration::from_secs(18));
        let ttl: i64 = conn.pttl(key).await.unwrap();
        assert!((35_900..=36_000).contains(&ttl), "PTTL {ttl}");
        clock.advance(Duration::from_millis(2500));
        let d = limiter.check("alice").await.unwrap();
        assert_eq!(d.reset_after, Duration::from_millis(21_500));
        assert_eq!(d.remaining, 6);
        // 21.5 s + 4/10 x 60 s.
        let ttl: i64 = conn.pttl(key).await.unwrap();
        assert!((45_400..=45_500).contains(&ttl), "PTTL {ttl}");
        // Giving everything back makes the key fresh: it is deleted, not kept.
        clock.advance(Duration::from_secs(1));
        let _ = limiter.refund("alice", &d, 1).await.unwrap();
        let d = limiter.refund("alice", &first, 3).await.unwrap();
        assert_eq!(d.remaining, 10);
        let exists: bool = conn.exists(key).await.unwrap();
        assert!(!exists, "a fresh key is deleted");
        // A peek or a denial never writes a key.
        let _ = limiter.check_n("bob", 0).await.unwrap();
        let _ = limiter.check_n("bob", 11).await.unwrap();
        let bob = limiter.table().redis_keys(&Key::from("bob")).remove(0);
        let exists: bool = conn.exists(bob).await.unwrap();
        assert!(!exists);
        // The prefix and the tiers' keys.
        let tiered = RateLimiter::gcra([Quota::per_second(1), Quota::per_hour(10)])
            .with_clock(clock.clone())
            .with_store(store.prefix("app"));
        assert!(tiered.check(7u64).await.unwrap().allowed);
        let keys = tiered.table().redis_keys(&Key::from(7u64));
        assert!(keys[0].starts_with(b"app:{n:7}:1/s+10/h:gcra.") && keys[0].ends_with(b":0"));
        assert!(keys[1].starts_with(b"app:{n:7}:1/s+10/h:gcra.") && keys[1].ends_with(b":1"));
        // The first tier is at its limit (1 of 1): a whole span more, 1 s + 1 s + 1 s; the
        // second used 1 of 10: 360 s + 1/10 x 3600 s.
        let ttl0: i64 = conn.pttl(&keys[0]).await.unwrap();
        let ttl1: i64 = conn.pttl(&keys[1]).await.unwrap();
        assert!((2_900..=3_000).contains(&ttl0), "PTTL {ttl0}");
        assert!((719_900..=720_000).contains(&ttl1), "PTTL {ttl1}");
    });
}

fn one_round_trip_per_decision_and_none_for_a_remembered_denial() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = server::closed(&server.url()).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("trips")).with_store(store);
        // The first call finds no script (NOSCRIPT) and loads it.
        assert!(limiter.check("warm").await.unwrap().allowed);
        let before = server.calls("evalsha");
        for i in 0..20u64 {
            assert!(limiter.check(i).await.unwrap().allowed);
        }
        assert_eq!(server.calls("evalsha") - before, 20);
        for _ in 0..5 {
            assert!(limiter.check("abuser").await.unwrap().allowed);
        }
        let denied = limiter.check("abuser").await.unwrap();
        assert!(!denied.allowed);
        let before = server.calls("evalsha");
        for _ in 0..100 {
            let d = limiter.check("abuser").await.unwrap();
            assert!(!d.allowed);
            assert!(d.retry_after.unwrap() <= denied.retry_after.unwrap());
        }
        assert_eq!(
            server.calls("evalsha"),
            before,
            "remembered denials cost no round trip"
        );
        // A request of cost 2 is not answered from memory.
        assert!(!limiter.check_n("abuser", 2).await.unwrap().allowed);
        assert_eq!(server.calls("evalsha"), before + 1);
        // After SCRIPT FLUSH (a restarted or failed-over Redis) the script is loaded again.
        assert!(server::command(server.port, "SCRIPT FLUSH").is_some());
        assert!(limiter.check("after-flush").await.unwrap().allowed);
    });
}

fn callers_that_find_the_script_missing_together_load_it_once() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = server::closed(&server.url()).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(40).named("once")).with_store(store);
        // 64 checks at once on `key`: how many pass, once they all answered.
        let admitted_at_once = |key: &'static str| {
            let limiter = limiter.clone();
            async move {
                let checks: Vec<_> = (0..64)
                    .map(|_| {
                        let limiter = limiter.clone();
                        tokio::spawn(async move { limiter.check(key).await.unwrap().allowed })
                    })
                    .collect();
                let mut admitted = 0;
                for check in checks {
                    admitted += usize::from(check.await.unwrap());
                }
                admitted
            }
        };
        // A fresh server: every caller's first EVALSHA finds no script.
        assert_eq!(admitted_at_once("first").await, 40);
        assert_eq!(server.calls("script|load"), 1, "one load for 64 callers");
        // A flushed one (restarted, failed over): loaded once more, not once per caller.
        assert!(server::command(server.port, "SCRIPT FLUSH").is_some());
        assert_eq!(admitted_at_once("second").await, 40);
        assert_eq!(server.calls("script|load"), 2);
    });
}

fn garbage_in_redis_is_an_error_never_a_panic() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = server::closed(&server.url()).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("g")).with_store(store);
        let mut conn = raw(&server.url()).await;
        let name = |key: &str| limiter.table().redis_keys(&Key::from(key)).remove(0);
        let _: () = conn.rpush(name("list"), "x").await.unwrap();
        let _: () = conn.set(name("junk"), "gcra:12x4").await.unwrap();
        let _: () = conn.set(name("empty"), "").await.unwrap();
        let _: () = conn
            .set(name("huge"), format!("gcra:{}", "9".repeat(400)))
            .await
            .unwrap();
        for key in ["list", "junk", "empty", "huge"] {
            let error = limiter.check(key).await.unwrap_err();
            assert!(!error.to_string().is_empty());
        }
        // Another algorithm's state under the same name is refused, not misread.
        let _: () = conn.set(name("other"), "fixed:1:2").await.unwrap();
        let error = limiter.check("other").await.unwrap_err();
        assert!(error.to_string().contains("holds no gcra state"), "{error}");
    });
}

fn a_dead_or_hung_redis_is_answered_by_the_failure_policy_within_the_timeout() {
    let Some(mut server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let timeout = Duration::from_millis(100);
        let connect = |policy: OnFailure| {
            let url = server.url();
            async move {
                RedisStore::connect(&url)
                    .await
                    .unwrap()
                    .timeout(timeout)
                    .on_failure(policy)
            }
        };
        let quota = |name: &str| Quota::per_hour(2).named(name);
        let open = RateLimiter::gcra(quota("open")).with_store(connect(OnFailure::Open).await);
        let closed =
            RateLimiter::gcra(quota("closed")).with_store(connect(OnFailure::Closed).await);
        let local = RateLimiter::gcra(quota("local"))
            .with_store(connect(OnFailure::Local(MemoryStore::new())).await);
        for limiter in [&open, &closed] {
            assert!(limiter.check("warm").await.unwrap().allowed);
        }
        assert!(local.check("warm").await.unwrap().allowed);

        // Hung: connections stay open and nothing answers.
        server.pause();
        let started = Instant::now();
        assert!(open.check("k").await.unwrap().allowed);
        assert!(closed.check("k").await.is_err());
        let local_decisions: Vec<bool> = [
            local.check("k").await.unwrap().allowed,
            local.check("k").await.unwrap().allowed,
            local.check("k").await.unwrap().allowed,
        ]
        .into();
        assert_eq!(
            local_decisions,
            [true, true, false],
            "the local store keeps limiting"
        );
        // Five calls, each bounded by the timeout (with room for a loaded machine).
        assert!(started.elapsed() < 5 * timeout + Duration::from_secs(2));
        server.resume();

        // Dead: the process is gone.
        server.kill();
        assert!(open.check("k").await.unwrap().allowed);
        assert!(closed.check("k").await.is_err());
        assert!(
            !local.check("k").await.unwrap().allowed,
            "the local store remembers"
        );

        // Back: checks reach Redis again without a new store.
        server.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut back = false;
        while Instant::now() < deadline {
            if closed.check("after").await.is_ok() {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(back, "the store reconnects after Redis restarts");
        let before = server.calls("evalsha");
        assert!(open.check("after").await.unwrap().allowed);
        assert!(local.check("after").await.unwrap().allowed);
        // Allow for reconnection attempts that failed before Redis came back.
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.calls("evalsha") < before + 2 && Instant::now() < deadline {
            let _ = open.check("after").await;
            let _ = local.check("after").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            server.calls("evalsha") >= before + 2,
            "every store is back on Redis"
        );
    });
}

fn keys_are_binary_safe() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = server::closed(&server.url()).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(1).named("bin")).with_store(store);
        let odd: &[u8] = b"\x00\xff}{\r\n ";
        assert!(limiter.check(Key::from(odd)).await.unwrap().allowed);
        assert!(!limiter.check(Key::from(odd)).await.unwrap().allowed);
        // A different key that shares a prefix is its own.
        assert!(limiter.check(Key::from(&odd[..3])).await.unwrap().allowed);
        let mut conn = raw(&server.url()).await;
        let key = limiter.table().redis_keys(&Key::from(odd)).remove(0);
        // Braces and bytes outside printable ASCII are escaped: the hash tag is the whole
        // client key, legible.
        assert!(key.starts_with(b"tollgate:{s:%00%FF%7D%7B%0D%0A%20}:bin:gcra."));
        let exists: bool = conn.exists(key).await.unwrap();
        assert!(exists);
    });
}

fn connecting_reads_the_server_version_once() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        // Each `calls` reads INFO itself, and sees the INFO calls made before it.
        let before = server.calls("info");
        let store = server::closed(&server.url()).await;
        let after_connect = server.calls("info");
        assert_eq!(
            after_connect - before,
            2,
            "one INFO to connect, one to count"
        );
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("v")).with_store(store);
        for i in 0..5u64 {
            assert!(limiter.check(i).await.unwrap().allowed);
        }
        assert_eq!(server.calls("info") - after_connect, 1, "no INFO per check");

        // Over a connection of the caller's, the first call reads it, once.
        let manager =
            redis::aio::ConnectionManager::new(redis::Client::open(server.url()).unwrap())
                .await
                .unwrap();
        let store = RedisStore::from_connection_manager(manager).on_failure(OnFailure::Closed);
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("v2")).with_store(store);
        let before = server.calls("info");
        for i in 0..5u64 {
            assert!(limiter.check(i).await.unwrap().allowed);
        }
        assert_eq!(
            server.calls("info") - before,
            2,
            "one INFO for the first check"
        );
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    // A child process of `separate_processes_share_one_limit` runs only its worker.
    if std::env::var_os("TOLLGATE_REDIS_WORKER_URL").is_some() {
        return vec![server::plain("worker_process", worker_process)];
    }
    vec![
        server::needs_redis(
            "eight_connections_hammering_one_key_admit_exactly_the_quota",
            eight_connections_hammering_one_key_admit_exactly_the_quota,
        ),
        server::needs_redis(
            "separate_processes_share_one_limit",
            separate_processes_share_one_limit,
        ),
        server::needs_redis(
            "keys_live_as_long_as_their_state_matters",
            keys_live_as_long_as_their_state_matters,
        ),
        server::needs_redis(
            "one_round_trip_per_decision_and_none_for_a_remembered_denial",
            one_round_trip_per_decision_and_none_for_a_remembered_denial,
        ),
        server::needs_redis(
            "callers_that_find_the_script_missing_together_load_it_once",
            callers_that_find_the_script_missing_together_load_it_once,
        ),
        server::needs_redis(
            "garbage_in_redis_is_an_error_never_a_panic",
            garbage_in_redis_is_an_error_never_a_panic,
        ),
        server::needs_redis(
            "a_dead_or_hung_redis_is_answered_by_the_failure_policy_within_the_timeout",
            a_dead_or_hung_redis_is_answered_by_the_failure_policy_within_the_timeout,
        ),
        server::needs_redis("keys_are_binary_safe", keys_are_binary_safe),
        server::needs_redis(
            "connecting_reads_the_server_version_once",
            connecting_reads_the_server_version_once,
        ),
    ]
}
