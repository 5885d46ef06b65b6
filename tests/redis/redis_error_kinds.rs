//! `Error::kind` against real `redis-server` processes: a hung server is a timeout, a port
//! with nothing listening is unreachable, a malformed state is a protocol error, and a quota
//! beyond what the scripts decide exactly is a misconfiguration, refused where it is built.

use crate::support::redis as server;

use std::net::TcpListener;
use std::time::Duration;

use redis::AsyncCommands;
use tollgate::store::{OnFailure, RedisStore};
use tollgate::{ErrorKind, Key, Quota, RateLimiter};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A store on `url` that answers an error when Redis does not (fail closed).
async fn closed(url: &str, timeout: Duration) -> RedisStore {
    RedisStore::connect(url)
        .await
        .unwrap()
        .timeout(timeout)
        .on_failure(OnFailure::Closed)
}

fn a_hung_server_is_a_timeout() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = closed(&server.url(), Duration::from_millis(100)).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("t")).with_store(store);
        assert!(limiter.check("warm").await.unwrap().allowed);
        server.pause();
        let error = limiter.check("k").await.unwrap_err();
        server.resume();
        assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
        assert!(error.to_string().contains("timed out"), "{error}");
        assert!(!error.to_string().contains("\"k\""), "{error}");
    });
}

fn a_port_with_nothing_listening_is_unreachable() {
    // A port that was free a moment ago: nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    runtime().block_on(async {
        let error = RedisStore::connect(&format!("redis://127.0.0.1:{port}"))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
        assert!(error.to_string().contains("unreachable"), "{error}");
    });
}

fn a_server_that_died_is_unreachable() {
    let Some(mut server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        // Long enough for the connection's own attempts to reconnect to give up first.
        let store = closed(&server.url(), Duration::from_secs(30)).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("d")).with_store(store);
        assert!(limiter.check("warm").await.unwrap().allowed);
        server.kill();
        let error = limiter.check("k").await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
    });
}

fn a_malformed_state_is_a_protocol_error() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = closed(&server.url(), Duration::from_secs(5)).await;
        let limiter = RateLimiter::gcra(Quota::per_hour(5).named("p")).with_store(store);
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let name = |key: &str| limiter.table().redis_keys(&Key::from(key)).remove(0);
        let _: () = conn.set(name("junk"), "gcra:12x4").await.unwrap();
        let _: () = conn.rpush(name("list"), "x").await.unwrap();
        for key in ["junk", "list"] {
            let error = limiter.check(key).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol, "{key}: {error}");
            assert!(!error.to_string().contains(key), "{error}");
        }
    });
}

fn a_quota_beyond_the_scripts_bound_is_a_misconfiguration_where_it_is_built() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    runtime().block_on(async {
        let store = closed(&server.url(), Duration::from_secs(5)).await;
        // One request per 60 days: GCRA's interval is above 2^52 ns.
        let slow = Quota::new(1, Duration::from_secs(60 * 86_400)).named("slow");
        let error = RateLimiter::gcra(slow)
            .try_with_store(store.clone())
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{error}");
        assert!(error.to_string().contains("emission interval"), "{error}");
        // A sliding log longer than the store keeps.
        let long = Quota::per_hour(501).named("long");
        let error = RateLimiter::sliding_log(long)
            .try_with_store(store.clone())
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{error}");
        assert!(error.to_string().contains("501"), "{error}");
        // Within the bounds, the same store takes the limiter.
        let fine = RateLimiter::gcra(Quota::per_hour(5).named("fine")).try_with_store(store);
        assert!(fine.unwrap().check("k").await.unwrap().allowed);
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis("a_hung_server_is_a_timeout", a_hung_server_is_a_timeout),
        server::plain(
            "a_port_with_nothing_listening_is_unreachable",
            a_port_with_nothing_listening_is_unreachable,
        ),
        server::needs_redis(
            "a_server_that_died_is_unreachable",
            a_server_that_died_is_unreachable,
        ),
        server::needs_redis(
            "a_malformed_state_is_a_protocol_error",
            a_malformed_state_is_a_protocol_error,
        ),
        server::needs_redis(
            "a_quota_beyond_the_scripts_bound_is_a_misconfiguration_where_it_is_built",
            a_quota_beyond_the_scripts_bound_is_a_misconfiguration_where_it_is_built,
        ),
    ]
}
