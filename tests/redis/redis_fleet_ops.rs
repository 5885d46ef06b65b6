//! A fleet acts as one server: blocks, resets and the lifting of bans made through one server's
//! `Handle` hold on every server sharing the Redis, under every plan of the layer (plans the
//! calling server never made, plans dropped from its LRU, plans made later), and a reset frees
//! the client everywhere within `RedisStore::DENY_CACHE_HOLD` (1 s), deny caches and local
//! leases included. Each "server" is a layer with a `RedisStore` of its own on one real
//! `redis-server`; time moves by one `ManualClock` they share.

use crate::support::parity::EPOCH;
use crate::support::redis as server;
use crate::support::request::Req;
use crate::support::services;

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::layer::{Ban, Handle};
use tollgate::store::{Leases, RedisStore};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

use server::needs_redis_async;

/// The longest a reset through one server takes to free the client on the others.
const HOLD: Duration = Duration::from_secs(1);

type Svc = tower::util::BoxCloneService<
    http::Request<String>,
    http::Response<tollgate::layer::ResponseBody<String>>,
    std::convert::Infallible,
>;

/// One server: its layer's handle and service.
struct Server {
    handle: Handle,
    svc: Svc,
}

impl Server {
    /// The status and `Retry-After` of the answer to a request of client `key` on `plan`
    /// (`None`: the layer's own quotas).
    async fn send(&self, key: &str, plan: Option<&str>) -> (u16, Option<u64>) {
        let mut req = Req::new().from("192.0.2.1:1").header("x-api-key", key);
        if let Some(plan) = plan {
            req = req.header("x-plan", plan);
        }
        let resp = self.svc.clone().oneshot(req.build()).await.unwrap();
        let retry = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse().unwrap());
        (resp.status().as_u16(), retry)
    }

    async fn status(&self, key: &str, plan: Option<&str>) -> u16 {
        self.send(key, plan).await.0
    }
}

/// What the servers are made of.
#[derive(Clone, Default)]
struct Fleet {
    ban: Option<Ban>,
    leases: bool,
}

impl Fleet {
    /// One server on the Redis at `url`: 2 an hour per API key (`x-api-key`), or the plan
    /// named by `x-plan` (2 an hour under that name); the layer's own quotas are named "base".
    async fn server(&self, url: &str, clock: &ManualClock) -> Server {
        self.server_with(RedisStore::connect(url).await.unwrap(), clock)
    }

    fn server_with(&self, store: RedisStore, clock: &ManualClock) -> Server {
        let mut store = store
            .on_failure(tollgate::store::OnFailure::Closed)
            .with_caller_clock();
        let mut quota = Quota::per_hour(2);
        if self.leases {
            store = store.local_leases(Leases::default());
            quota = Quota::per_hour(40);
        }
        let plans = quota.clone();
        let mut layer = RateLimitLayer::fixed_window(quota.clone().named("base"))
            .key(Header::new("x-api-key"))
            .store(store)
            .clock(clock.clone())
            .quota_for(move |_key: &Key, head: RequestHead<'_>| {
                let name = head.headers().get("x-plan").and_then(|v| v.to_str().ok());
                plans.clone().named(name.unwrap_or("base"))
            });
        if let Some(ban) = self.ban {
            layer = layer.ban(ban);
        }
        Server {
            handle: layer.handle(),
            svc: Svc::new(layer.layer(services::ok())),
        }
    }

    async fn two(&self, url: &str, clock: &ManualClock) -> (Server, Server) {
        (self.server(url, clock).await, self.server(url, clock).await)
    }
}

fn clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    clock
}

/// Sends `key`'s requests on `plan` to `server` until one is denied (the denial is then in
/// the server's deny cache); its `Retry-After`.
async fn deny(server: &Server, key: &str, plan: Option<&str>) -> u64 {
    for _ in 0..100 {
        if let (429, retry) = server.send(key, plan).await {
            return retry.unwrap();
        }
    }
    panic!("{key} was never denied on {plan:?}");
}

/// A blocks a key before it has served a request of the key's plan: B, which has, denies it.
async fn a_block_reaches_a_plan_the_blocking_server_never_made() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (a, b) = Fleet::default().two(&redis.url(), &clock).await;
    assert_eq!(b.status("other", Some("pro")).await, 200, "B made pro");
    a.handle.block("k", Duration::from_secs(600)).await.unwrap();
    assert_eq!(b.send("k", Some("pro")).await, (429, Some(600)), "B, pro");
    assert_eq!(b.send("k", None).await, (429, Some(600)), "B, base");
    assert_eq!(a.send("k", Some("pro")).await, (429, Some(600)), "A, pro");
    assert_eq!(b.status("other", Some("pro")).await, 200, "others go on");
}

/// A plan first picked after the block, on either server or on a server started after it,
/// denies the key while the block lasts, and not after.
async fn a_plan_made_after_the_block_is_blocked_too() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let fleet = Fleet::default();
    let (a, b) = fleet.two(&redis.url(), &clock).await;
    a.handle.block("k", Duration::from_secs(600)).await.unwrap();
    clock.advance(Duration::from_secs(100));
    let c = fleet.server(&redis.url(), &clock).await;
    // A plan of its own on each server (2 an hour each): each made after the block.
    for (name, server) in [("A", &a), ("B", &b), ("C", &c)] {
        assert_eq!(
            server.send("k", Some(name)).await,
            (429, Some(500)),
            "{name}: a plan made after the block"
        );
    }
    clock.advance(Duration::from_secs(500));
    for (name, server) in [("A", &a), ("B", &b), ("C", &c)] {
        assert_eq!(server.status("k", Some(name)).await, 200, "{name}: ended");
    }
}

/// A client denied on B (the denial in B's deny cache, for half an hour), reset through A: B
/// admits it once 1 s has passed on the clock, and not later.
async fn a_reset_frees_a_client_denied_on_another_server_within_a_second(fleet: Fleet) {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (a, b) = fleet.two(&redis.url(), &clock).await;
    for plan in [None, Some("pro")] {
        let key = format!("k-{plan:?}");
        let retry = deny(&b, &key, plan).await;
        assert!(retry > 60, "denied for {retry} s");
        a.handle.reset(key.as_str()).await.unwrap();
        clock.advance(HOLD);
        assert_eq!(
            b.status(&key, plan).await,
            200,
            "B, {plan:?}: 1 s after a reset through A"
        );
        clock.advance(Duration::from_secs(1));
    }
}

async fn a_reset_frees_a_denied_client_on_every_server() {
    a_reset_frees_a_client_denied_on_another_server_within_a_second(Fleet::default()).await;
}

async fn a_reset_frees_a_denied_client_on_every_server_with_leases() {
    let fleet = Fleet {
        leases: true,
        ..Fleet::default()
    };
    a_reset_frees_a_client_denied_on_another_server_within_a_second(fleet).await;
}

/// A denial is answered from B's cache for at most 1 s: a knocking client costs B one round
/// trip a second, and Redis's answer (still denied) comes back with the true wait.
async fn a_cached_denial_is_asked_again_after_a_second() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (_a, b) = Fleet::default().two(&redis.url(), &clock).await;
    let first = deny(&b, "k", None).await;
    let calls = redis.calls("evalsha");
    for _ in 0..10 {
        assert_eq!(b.status("k", None).await, 429);
    }
    assert_eq!(redis.calls("evalsha"), calls, "answered from the cache");
    clock.advance(HOLD);
    assert_eq!(b.send("k", None).await, (429, Some(first - 1)));
    assert_eq!(redis.calls("evalsha"), calls + 1, "one round trip");
}

/// A reset through A of a plan only B made frees B's client under it.
async fn a_reset_reaches_a_plan_only_another_server_made() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (a, b) = Fleet::default().two(&redis.url(), &clock).await;
    deny(&b, "k", Some("pro")).await;
    a.handle.reset("k").await.unwrap();
    clock.advance(HOLD);
    assert_eq!(b.status("k", Some("pro")).await, 200, "the state is gone");
    assert_eq!(
        b.status("k", Some("pro")).await,
        200,
        "a whole fresh budget"
    );
    assert_eq!(b.status("k", Some("pro")).await, 429);
}

/// The same on a Redis Cluster: the client's keys under every plan are deleted in its slot.
async fn a_reset_reaches_a_plan_only_another_server_made_on_a_cluster() {
    let cluster = server::RedisCluster::start().expect("a Redis Cluster");
    let clock = clock();
    let fleet = Fleet::default();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::cluster(cluster.urls()).await.unwrap();
        servers.push(fleet.server_with(store, &clock));
    }
    for key in ["k1", "k2", "k3"] {
        deny(&servers[1], key, Some("pro")).await;
        servers[0].handle.reset(key).await.unwrap();
    }
    clock.advance(HOLD);
    for key in ["k1", "k2", "k3"] {
        assert_eq!(servers[1].status(key, Some("pro")).await, 200, "{key}");
    }
}

/// A plan dropped from A's LRU (more plans than it holds) is reached by A's block and reset,
/// and B, which made the plan, sees both.
async fn a_plan_dropped_from_the_lru_is_reached_by_block_and_reset() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let (a, b) = Fleet::default().two(&redis.url(), &clock).await;
    assert_eq!(a.status("k", Some("p0")).await, 200);
    for n in 1..300 {
        assert_eq!(a.status("warm", Some(&format!("p{n}"))).await, 200);
    }
    assert_eq!(b.status("k", Some("p0")).await, 200);
    assert_eq!(b.status("k", Some("p0")).await, 429, "denied on B, cached");
    a.handle.block("k", Duration::from_secs(600)).await.unwrap();
    a.handle
        .block("k2", Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(b.send("k2", Some("p0")).await, (429, Some(600)));
    clock.advance(HOLD);
    assert_eq!(
        b.send("k", Some("p0")).await,
        (429, Some(599)),
        "blocked on B"
    );
    for key in ["k", "k2"] {
        a.handle.reset(key).await.unwrap();
    }
    clock.advance(HOLD);
    for key in ["k", "k2"] {
        assert_eq!(b.status(key, Some("p0")).await, 200, "{key} reset on B");
    }
}

/// A client banned on B under a plan A never made, reset through A: B lifts the ban within
/// 1 s, and its count of denials starts afresh (its next denial is no ban).
async fn a_reset_lifts_a_ban_and_its_count_on_every_server() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = clock();
    let fleet = Fleet {
        ban: Some(Ban::new(
            1,
            Duration::from_secs(60),
            Duration::from_secs(600),
        )),
        ..Fleet::default()
    };
    let (a, b) = fleet.two(&redis.url(), &clock).await;
    for plan in [Some("pro"), None] {
        let key = format!("k-{plan:?}");
        assert_eq!(b.status(&key, plan).await, 200);
        assert_eq!(b.status(&key, plan).await, 200);
        assert_eq!(b.send(&key, plan).await, (429, Some(3600)), "one denial");
        assert_eq!(b.send(&key, plan).await, (429, Some(600)), "banned");
        a.handle.reset(key.as_str()).await.unwrap();
        clock.advance(HOLD);
        assert_eq!(b.status(&key, plan).await, 200, "{plan:?}: ban lifted on B");
        assert_eq!(b.status(&key, plan).await, 200);
        assert_eq!(
            b.send(&key, plan).await,
            (429, Some(3600)),
            "{plan:?}: a first denial again, no ban"
        );
    }
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        needs_redis_async(
            "a_block_reaches_a_plan_the_blocking_server_never_made",
            a_block_reaches_a_plan_the_blocking_server_never_made,
        ),
        needs_redis_async(
            "a_plan_made_after_the_block_is_blocked_too",
            a_plan_made_after_the_block_is_blocked_too,
        ),
        needs_redis_async(
            "a_reset_frees_a_denied_client_on_every_server",
            a_reset_frees_a_denied_client_on_every_server,
        ),
        needs_redis_async(
            "a_reset_frees_a_denied_client_on_every_server_with_leases",
            a_reset_frees_a_denied_client_on_every_server_with_leases,
        ),
        needs_redis_async(
            "a_cached_denial_is_asked_again_after_a_second",
            a_cached_denial_is_asked_again_after_a_second,
        ),
        needs_redis_async(
            "a_reset_reaches_a_plan_only_another_server_made",
            a_reset_reaches_a_plan_only_another_server_made,
        ),
        needs_redis_async(
            "a_reset_reaches_a_plan_only_another_server_made_on_a_cluster",
            a_reset_reaches_a_plan_only_another_server_made_on_a_cluster,
        ),
        needs_redis_async(
            "a_plan_dropped_from_the_lru_is_reached_by_block_and_reset",
            a_plan_dropped_from_the_lru_is_reached_by_block_and_reset,
        ),
        needs_redis_async(
            "a_reset_lifts_a_ban_and_its_count_on_every_server",
            a_reset_lifts_a_ban_and_its_count_on_every_server,
        ),
    ]
}
