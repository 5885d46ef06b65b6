//! `block`, `reset` and `peek` on the Redis store, against a real `redis-server`: for every
//! algorithm and tiers, a limiter in Redis decides as a memory twin that never saw its blocks;
//! a block and a reset on one store are seen by another on the same Redis (and by the deny
//! caches, within their bound); on a Redis Cluster the block lives in its key's slot. Bans of
//! repeat offenders, and a live layer's blocks and resets through its handle (under its plans
//! too), hold across two servers on one Redis.

use crate::support::parity;
use crate::support::redis as server;
use crate::support::request;
use crate::support::services;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::{Clock, ManualClock};
use tollgate::layer::{Ban, Handle};
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Key, Quota, RateLimitLayer, RateLimiter};
use tower::{Layer, ServiceExt};

use parity::{fresh_key, keep, store, EPOCH};
use request::Req;
use server::{needs_redis, needs_redis_async, runtime, Trial};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check(u64),
    Peek,
    Block(u64),
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(|ms| Op::Advance(ms * 1_000_000)),
        1 => (0u64..5).prop_map(|k| Op::Advance(k * 250_000_000)),
        6 => prop_oneof![4 => Just(1u64), 1 => 0u64..4].prop_map(Op::Check),
        1 => Just(Op::Peek),
        1 => (0u64..4_000).prop_map(|ms| Op::Block(ms * 1_000_000 + 1)),
        1 => Just(Op::Reset),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..50)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    }
}

fn clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    clock
}

/// Runs `ops` for a fresh key on `redis` (a limiter on the Redis store) and on memory twins
/// `make` builds that never see a block: a blocked check is denied with what is left of the
/// block, and every other decision equals the twin's; a reset starts a new twin.
async fn against_a_twin<A>(
    redis: &RateLimiter<A, RedisStore, ManualClock>,
    make: impl Fn() -> RateLimiter<A, MemoryStore, ManualClock>,
    clock: &ManualClock,
    ops: &[Op],
) -> Result<(), TestCaseError>
where
    A: RedisAlgorithm,
{
    let key = fresh_key();
    let mut twin = make();
    let mut until = 0u64;
    let mut names = redis.table().redis_keys(&key);
    names.push(redis.table().block_key(&key));
    for (i, op) in ops.iter().enumerate() {
        let now = clock.now_nanos();
        match *op {
            Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
            Op::Block(ns) => {
                redis
                    .block(key.clone(), Duration::from_nanos(ns))
                    .await
                    .unwrap();
                until = until.max(now + ns);
            }
            Op::Reset => {
                redis.reset(key.clone()).await.unwrap();
                twin = make();
                until = 0;
            }
            Op::Check(_) | Op::Peek => {
                let got = match *op {
                    Op::Check(cost) => redis.check_n(key.clone(), cost).await,
                    _ => redis.peek(key.clone()).await,
                };
                let got = got.map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
                if now < until {
                    let left = Duration::from_nanos(until - now);
                    prop_assert!(got.is_blocked() && !got.allowed, "step {i}: {got:?}");
                    prop_assert_eq!(got.retry_after, Some(left), "step {}", i);
                    prop_assert_eq!(got.remaining, 0);
                    prop_assert_eq!(got.tiers().len(), redis.quotas().len());
                    for tier in got.tiers() {
                        prop_assert_eq!(tier.retry_after, Some(left));
                    }
                } else {
                    let expected = match *op {
                        Op::Check(cost) => twin.check_n(key.clone(), cost).await,
                        _ => twin.peek(key.clone()).await,
                    }
                    .unwrap();
                    prop_assert!(!got.is_blocked(), "step {i}: {got:?}");
                    prop_assert_eq!(&got, &expected, "step {} {:?} in {:?}", i, op, ops);
                    prop_assert_eq!(got.tiers(), expected.tiers());
                }
            }
        }
        if !keep(&names) {
            return Ok(());
        }
    }
    Ok(())
}

macro_rules! twin_case {
    ($name:ident, $quota:expr, |$q:ident| $build:expr) => {
        fn $name() {
            let Some(server) = server::RedisServer::start() else {
                return;
            };
            let rt = runtime();
            let redis = rt.block_on(store(&server.url()));
            proptest!(config(), |($q in $quota, ops in ops())| {
                let clock = clock();
                let shared = $build.with_clock(clock.clone()).with_store(redis.clone());
                let make = || $build.with_clock(clock.clone());
                rt.block_on(against_a_twin(&shared, make, &clock, &ops))?;
            });
        }
    };
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..8, 1u64..4_000, 1u64..10).prop_map(|(limit, period_ms, burst)| {
        Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst)
    })
}

fn window() -> impl Strategy<Value = Quota> {
    (1u64..8, 1u64..4_000)
        .prop_map(|(limit, period_ms)| Quota::new(limit, Duration::from_millis(period_ms)))
}

fn pair<Q: Strategy<Value = Quota>>(q: fn() -> Q) -> impl Strategy<Value = [Quota; 2]> {
    (q(), q()).prop_map(|(a, b)| [a.named("a"), b.named("b")])
}

twin_case!(gcra, quota(), |q| RateLimiter::gcra(q.clone()));
twin_case!(gcra_shaping, quota(), |q| RateLimiter::gcra(q.clone())
    .max_delay(Duration::from_millis(1_500)));
twin_case!(token_bucket, quota(), |q| RateLimiter::token_bucket(
    q.clone()
));
twin_case!(leaky_bucket, quota(), |q| RateLimiter::leaky_bucket(
    q.clone()
));
twin_case!(fixed_window, window(), |q| RateLimiter::fixed_window(
    q.clone()
));
twin_case!(sliding_window, window(), |q| RateLimiter::sliding_window(
    q.clone()
));
twin_case!(sliding_window_sub_windows, window(), |q| {
    RateLimiter::sliding_window(q.clone()).sub_windows(4)
});
twin_case!(sliding_log, window(), |q| RateLimiter::sliding_log(
    q.clone()
));
twin_case!(hybrid, window(), |q| RateLimiter::hybrid(q.clone()));
twin_case!(tiers_of_gcra, pair(quota), |q| RateLimiter::gcra(q.clone()));
twin_case!(tiers_of_token_buckets, pair(quota), |q| {
    RateLimiter::token_bucket(q.clone())
});
twin_case!(tiers_of_leaky_buckets, pair(quota), |q| {
    RateLimiter::leaky_bucket(q.clone())
});
twin_case!(tiers_of_fixed_windows, pair(window), |q| {
    RateLimiter::fixed_window(q.clone())
});
twin_case!(tiers_of_sliding_windows, pair(window), |q| {
    RateLimiter::sliding_window(q.clone())
});
twin_case!(tiers_of_sliding_logs, pair(window), |q| {
    RateLimiter::sliding_log(q.clone())
});
twin_case!(tiers_of_hybrids, pair(window), |q| RateLimiter::hybrid(
    q.clone()
));

/// Two stores on one Redis, each with its deny cache: a block on one holds on the other; a
/// reset on one lifts it on the other, at once on the store that reset and within
/// `BLOCK_CACHE_HOLD` on a store that remembered the blocked denial.
fn blocks_and_resets_hold_across_stores_and_deny_caches() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let clock = clock();
        let connect = || async {
            RedisStore::connect(&server.url())
                .await
                .unwrap()
                .with_caller_clock()
                .on_failure(OnFailure::Closed)
        };
        let quota = Quota::per_minute(5).named("across");
        let a = RateLimiter::gcra(quota.clone())
            .with_clock(clock.clone())
            .with_store(connect().await);
        let b = RateLimiter::gcra(quota)
            .with_clock(clock.clone())
            .with_store(connect().await);
        assert!(a.check("k").await.unwrap().allowed);
        b.block("k", Duration::from_secs(600)).await.unwrap();
        let denied = a.check("k").await.unwrap();
        assert!(denied.is_blocked());
        assert_eq!(denied.retry_after, Some(Duration::from_secs(600)));
        assert_eq!(
            a.table().cached_denials(),
            1,
            "a block is remembered locally"
        );
        clock.advance(Duration::from_millis(400));
        // From the cache: what is left of the block, aged.
        let cached = a.check("k").await.unwrap();
        assert!(cached.is_blocked());
        assert_eq!(cached.retry_after, Some(Duration::from_millis(599_600)));

        // A reset on b: b passes at once; a remembers the block for at most the hold.
        b.reset("k").await.unwrap();
        let fresh = b.check("k").await.unwrap();
        assert!(fresh.allowed);
        assert_eq!(fresh.remaining, 4, "the reset forgot the key's usage");
        assert!(a.check("k").await.unwrap().is_blocked(), "within the hold");
        clock.advance(RedisStore::BLOCK_CACHE_HOLD - Duration::from_millis(400));
        let lifted = a.check("k").await.unwrap();
        assert!(lifted.allowed, "past the hold, a asks Redis: {lifted:?}");
        assert_eq!(lifted.remaining, 3);

        // A reset on the store that remembers the denial lifts it there at once.
        a.block("k", Duration::from_secs(60)).await.unwrap();
        assert!(a.check("k").await.unwrap().is_blocked());
        assert_eq!(a.table().cached_denials(), 1);
        a.reset("k").await.unwrap();
        assert_eq!(a.table().cached_denials(), 0);
        assert!(a.check("k").await.unwrap().allowed);

        // Ordinary denials: a reset elsewhere is seen once the remembered denial ends.
        for _ in 0..5 {
            a.check("q").await.unwrap();
        }
        let limited = a.check("q").await.unwrap();
        assert!(!limited.allowed && !limited.is_blocked());
        b.reset("q").await.unwrap();
        assert!(b.check("q").await.unwrap().allowed);
        assert!(
            !a.check("q").await.unwrap().allowed,
            "a remembers its denial"
        );
        clock.advance(limited.retry_after.unwrap());
        assert!(a.check("q").await.unwrap().allowed);

        // The block key is kept two spans of the quota (60 s each) past the block's end, so
        // that under `volatile-ttl` it outlives the states written while it lasts; a reset
        // deletes every key.
        let key = Key::from("k");
        a.block(key.clone(), Duration::from_secs(30)).await.unwrap();
        let block_key = a.table().block_key(&key);
        let name = String::from_utf8(block_key).unwrap();
        let pttl = server::command(server.port, &format!("PTTL {name}")).unwrap();
        let pttl: i64 = pttl.trim().trim_start_matches(':').parse().unwrap();
        assert!((149_000..=150_000).contains(&pttl), "PTTL {pttl}");
        a.reset(key).await.unwrap();
        let left = server::command(server.port, "DBSIZE").unwrap();
        let before_q: u64 = left.trim().trim_start_matches(':').parse().unwrap();
        // Only "q"'s state is left.
        assert_eq!(before_q, 1, "{left}");
    });
}

/// On Redis `TIME`: a block's `retry_after` counts down on the server's clock.
fn a_block_on_server_time() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .on_failure(OnFailure::Closed);
        let limiter = RateLimiter::sliding_log(Quota::per_second(3)).with_store(store);
        limiter.block("k", Duration::from_secs(90)).await.unwrap();
        let denied = limiter.peek("k").await.unwrap();
        assert!(denied.is_blocked());
        let left = denied.retry_after.unwrap();
        assert!(
            left <= Duration::from_secs(90) && left > Duration::from_secs(85),
            "{left:?}"
        );
        // Far past the end of the clock: blocked for good, never an error.
        limiter.block("z", Duration::MAX).await.unwrap();
        assert!(limiter.check("z").await.unwrap().is_blocked());
        limiter.block("y", Duration::from_nanos(1)).await.unwrap();
        limiter.reset("z").await.unwrap();
        assert!(limiter.check("z").await.unwrap().allowed);
    });
}

/// On a Redis Cluster, a key's block lives in its slot (one script reads it with the state),
/// and holds for every connection.
fn the_block_lives_in_the_key_slot_on_a_cluster() {
    let Some(cluster) = server::RedisCluster::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let connect = || async {
            RedisStore::cluster(cluster.urls())
                .await
                .unwrap()
                .on_failure(OnFailure::Closed)
                .timeout(Duration::from_secs(5))
        };
        let tiers = [
            Quota::per_second(2).named("s"),
            Quota::per_hour(50).named("h"),
        ];
        let a = RateLimiter::gcra(tiers.clone()).with_store(connect().await);
        let b = RateLimiter::gcra(tiers).with_store(connect().await);
        let port = cluster.nodes[0].port;
        let slot = |k: &[u8]| {
            let k = String::from_utf8(k.to_vec()).unwrap();
            server::command(port, &format!("CLUSTER KEYSLOT \"{k}\"")).unwrap()
        };
        for n in 0..30u64 {
            let key = Key::from(format!("user-{n}").as_str());
            a.block(key.clone(), Duration::from_secs(60)).await.unwrap();
            let denied = b.check(key.clone()).await.unwrap();
            assert!(denied.is_blocked(), "{denied:?}");
            assert_eq!(denied.tiers().len(), 2);
            let block = a.table().block_key(&key);
            for state in a.table().redis_keys(&key) {
                assert_eq!(slot(&block), slot(&state));
            }
            b.reset(key.clone()).await.unwrap();
            assert!(a.check(key).await.unwrap().allowed);
        }
    });
}

type Svc = tower::util::BoxCloneService<
    http::Request<String>,
    http::Response<tollgate::layer::ResponseBody<String>>,
    std::convert::Infallible,
>;

/// A layer made by `layer` on each of two servers, each with a store of its own on the Redis
/// at `url`, on `clock`: their handles and services.
async fn two_servers(
    url: &str,
    clock: &ManualClock,
    layer: impl Fn() -> RateLimitLayer,
) -> (Vec<Handle>, Vec<Svc>) {
    let (mut handles, mut services) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let store = server::closed_on_caller_clock(url).await;
        let layer = layer().store(store).clock(clock.clone());
        handles.push(layer.handle());
        services.push(Svc::new(layer.layer(services::ok())));
    }
    (handles, services)
}

/// The status and `Retry-After` of `svc`'s answer to `req`.
async fn answer(svc: &Svc, req: http::Request<String>) -> (u16, Option<String>) {
    let resp = svc.clone().oneshot(req).await.unwrap();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status().as_u16(), retry)
}

/// Two servers' layers on one Redis ban a client together: its denials on either count, the
/// ban holds on both, and after it the client is back to its quota.
async fn bans_hold_across_two_servers() {
    let server = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (_, services) = two_servers(&server.url(), &clock, || {
        RateLimitLayer::gcra(Quota::per_minute(2).named("api")).ban(Ban::new(
            3,
            Duration::from_secs(60),
            Duration::from_secs(600),
        ))
    })
    .await;
    let send = |i: usize| answer(&services[i % 2], Req::new().from("192.0.2.7:1").build());
    assert_eq!(send(0).await.0, 200);
    assert_eq!(send(1).await.0, 200);
    // Three denials, on either server, are allowed without a ban; the fourth bans.
    for i in 0..3 {
        assert_eq!(send(i).await, (429, Some("30".to_owned())), "denial {i}");
    }
    assert_eq!(send(3).await, (429, Some("600".to_owned())), "banned");
    clock.advance(Duration::from_secs(100));
    // Banned on both, whatever the quota says.
    assert_eq!(send(0).await, (429, Some("500".to_owned())));
    assert_eq!(send(1).await, (429, Some("500".to_owned())));
    // Another client is untouched.
    let other = services[1]
        .clone()
        .oneshot(Req::new().from("192.0.2.8:1").build::<String>())
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 200);
    clock.advance(Duration::from_secs(500));
    assert_eq!(send(0).await.0, 200, "back to its quota after the ban");
    assert_eq!(send(1).await.0, 200);
}

/// A live layer's handle on one server blocks and resets a client for every server on the same
/// Redis: under the layer's own policy, and under a per-key plan both servers have made.
async fn a_handles_block_and_reset_hold_on_every_server() {
    let server = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (handles, services) = two_servers(&server.url(), &clock, || {
        RateLimitLayer::gcra(Quota::per_minute(2).named("api")).quota_for(
            |key: &Key, _head: tollgate::key::RequestHead<'_>| {
                let pro = "192.0.2.7".parse::<std::net::IpAddr>().unwrap();
                if key.as_ip() == Some(pro) {
                    Quota::per_minute(100).named("pro")
                } else {
                    Quota::per_minute(2).named("api")
                }
            },
        )
    })
    .await;
    let send = |i: usize, from: &'static str| answer(&services[i], Req::new().from(from).build());
    // The pro plan is made on both servers.
    assert_eq!(send(0, "192.0.2.7:1").await.0, 200);
    assert_eq!(send(1, "192.0.2.7:1").await.0, 200);
    let pro = tollgate::key::PeerIp.key_for("192.0.2.7".parse().unwrap());
    let base = tollgate::key::PeerIp.key_for("192.0.2.9".parse().unwrap());
    handles[0]
        .block(pro.clone(), Duration::from_secs(600))
        .await
        .unwrap();
    handles[0]
        .block(base.clone(), Duration::from_secs(600))
        .await
        .unwrap();
    for i in 0..2 {
        assert_eq!(send(i, "192.0.2.7:1").await, (429, Some("600".to_owned())));
        assert_eq!(send(i, "192.0.2.9:1").await, (429, Some("600".to_owned())));
    }
    // Others go on.
    assert_eq!(send(1, "192.0.2.8:1").await.0, 200);
    handles[0].reset(pro).await.unwrap();
    handles[0].reset(base).await.unwrap();
    // The server of the handle passes the client at once; the other one remembers the
    // block it saw for at most its deny cache's hold.
    assert_eq!(send(0, "192.0.2.7:1").await.0, 200);
    assert_eq!(send(1, "192.0.2.7:1").await.0, 429);
    clock.advance(RedisStore::BLOCK_CACHE_HOLD);
    assert_eq!(send(1, "192.0.2.7:1").await.0, 200);
    assert_eq!(send(1, "192.0.2.9:1").await.0, 200);
    assert_eq!(send(1, "192.0.2.9:1").await.0, 200);
    assert_eq!(
        send(0, "192.0.2.9:1").await.0,
        429,
        "a reset gives one fresh budget"
    );
}

/// While Redis is away, the failure policy decides: with the local fallback the count and the
/// ban hold on this server (the ban is not written to Redis, and the block call says so);
/// failing open bans no one.
fn bans_while_redis_is_away() {
    let Some(mut server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let clock = clock();
        let connect = |on_failure: OnFailure| {
            let url = server.url();
            async move {
                RedisStore::connect(&url)
                    .await
                    .unwrap()
                    .with_caller_clock()
                    .on_failure(on_failure)
                    .timeout(Duration::from_millis(200))
            }
        };
        let ban = Ban::new(1, Duration::from_secs(60), Duration::from_secs(600));
        let local = RateLimitLayer::gcra(Quota::per_minute(1).named("local"))
            .store(connect(OnFailure::Local(MemoryStore::new())).await)
            .clock(clock.clone())
            .ban(ban)
            .layer(services::ok());
        let open = RateLimitLayer::gcra(Quota::per_minute(1).named("open"))
            .store(connect(OnFailure::Open).await)
            .clock(clock.clone())
            .ban(ban)
            .layer(services::ok());
        let direct = RateLimiter::gcra(Quota::per_minute(1).named("direct"))
            .with_clock(clock.clone())
            .with_store(connect(OnFailure::Local(MemoryStore::new())).await);
        server.kill();
        let send = |svc: &tollgate::RateLimit<_>| {
            let svc = svc.clone();
            async move {
                let resp = svc
                    .oneshot(Req::new().from("192.0.2.7:1").build::<String>())
                    .await
                    .unwrap();
                let retry = resp
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                (resp.status().as_u16(), retry)
            }
        };
        assert_eq!(send(&local).await, (200, None));
        assert_eq!(send(&local).await, (429, Some("60".to_owned())));
        // The second denial bans: the block fails in Redis but holds here.
        assert_eq!(send(&local).await.0, 429);
        clock.advance(Duration::from_secs(120));
        assert_eq!(
            send(&local).await,
            (429, Some("480".to_owned())),
            "banned here"
        );
        clock.advance(Duration::from_secs(480));
        assert_eq!(send(&local).await.0, 200, "back after the ban");

        for _ in 0..10 {
            assert_eq!(send(&open).await.0, 200, "failing open bans no one");
        }

        let refused = direct
            .block("k", Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            matches!(
                refused.kind(),
                tollgate::ErrorKind::Unreachable | tollgate::ErrorKind::Timeout
            ),
            "{refused}"
        );
        assert!(
            direct.check("k").await.unwrap().is_blocked(),
            "blocked locally"
        );
        direct.reset("k").await.unwrap_err();
        assert!(direct.check("k").await.unwrap().allowed, "reset locally");
    });
}

/// A layer keyed on a tuple, `(Route, PeerIp)`: the key built from its parts
/// (`Key::from(("/login", PeerIp.key_for(ip)))`) blocks that client on that route on every
/// server, its whole IPv6 /64 included, and nowhere else; a reset lifts it.
async fn a_handle_reaches_a_client_of_a_tuple_keyed_layer() {
    let server = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (handles, services) = two_servers(&server.url(), &clock, || {
        RateLimitLayer::gcra(Quota::per_minute(5).named("api"))
            .key((tollgate::key::Route, tollgate::key::PeerIp))
    })
    .await;
    let send = |i: usize, from: &'static str, path: &'static str| {
        answer(&services[i], Req::new().from(from).path(path).build())
    };
    let ip = "2001:db8:0:7::1".parse().unwrap();
    let client = Key::from(("/login", tollgate::key::PeerIp.key_for(ip)));
    handles[0]
        .block(client.clone(), Duration::from_secs(600))
        .await
        .unwrap();
    for i in 0..2 {
        assert_eq!(send(i, "[2001:db8:0:7::1]:1", "/login").await.0, 429);
        assert_eq!(send(i, "[2001:db8:0:7::ffff]:1", "/login").await.0, 429);
        assert_eq!(send(i, "[2001:db8:0:7::1]:1", "/search").await.0, 200);
        assert_eq!(send(i, "[2001:db8:0:8::1]:1", "/login").await.0, 200);
    }
    handles[1].reset(client).await.unwrap();
    assert_eq!(send(1, "[2001:db8:0:7::1]:1", "/login").await.0, 200);
}

pub(crate) fn trials() -> Vec<server::Trial> {
    let trials: Vec<Trial> = vec![
        needs_redis("gcra", gcra),
        needs_redis("gcra_shaping", gcra_shaping),
        needs_redis("token_bucket", token_bucket),
        needs_redis("leaky_bucket", leaky_bucket),
        needs_redis("fixed_window", fixed_window),
        needs_redis("sliding_window", sliding_window),
        needs_redis("sliding_window_sub_windows", sliding_window_sub_windows),
        needs_redis("sliding_log", sliding_log),
        needs_redis("hybrid", hybrid),
        needs_redis("tiers_of_gcra", tiers_of_gcra),
        needs_redis("tiers_of_token_buckets", tiers_of_token_buckets),
        needs_redis("tiers_of_leaky_buckets", tiers_of_leaky_buckets),
        needs_redis("tiers_of_fixed_windows", tiers_of_fixed_windows),
        needs_redis("tiers_of_sliding_windows", tiers_of_sliding_windows),
        needs_redis("tiers_of_sliding_logs", tiers_of_sliding_logs),
        needs_redis("tiers_of_hybrids", tiers_of_hybrids),
        needs_redis(
            "blocks_and_resets_hold_across_stores_and_deny_caches",
            blocks_and_resets_hold_across_stores_and_deny_caches,
        ),
        needs_redis("a_block_on_server_time", a_block_on_server_time),
        needs_redis(
            "the_block_lives_in_the_key_slot_on_a_cluster",
            the_block_lives_in_the_key_slot_on_a_cluster,
        ),
        needs_redis_async("bans_hold_across_two_servers", bans_hold_across_two_servers),
        needs_redis("bans_while_redis_is_away", bans_while_redis_is_away),
        needs_redis_async(
            "a_handles_block_and_reset_hold_on_every_server",
            a_handles_block_and_reset_hold_on_every_server,
        ),
        needs_redis_async(
            "a_handle_reaches_a_client_of_a_tuple_keyed_layer",
            a_handle_reaches_a_client_of_a_tuple_keyed_layer,
        ),
    ];
    trials
}
