//! In-flight limits in Redis: servers share one set of slots per key, a lease a dead server
//! never gave back comes back after its TTL, a long request's lease is renewed, a request
//! dropped while Redis answers gives its lease back, failure policies apply, a file's limit is
//! shared by the servers built from it, a Redis Cluster keeps each key's leases in one slot,
//! and a handle's block holds on every server. Time moves by a `ManualClock` the store decides
//! on (`with_caller_clock`), which also times the renewals.

use crate::support::in_flight as held;
use crate::support::redis as server;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{InFlightLayer, Key};
use tower::{Layer, ServiceExt};

use held::{Control, Controls, Fate};

type Svc = tower::util::BoxCloneService<
    Request<()>,
    http::Response<tollgate::layer::ResponseBody<held::TestBody>>,
    std::convert::Infallible,
>;

/// Peeks cost nothing.
fn cost(_key: &Key, head: tollgate::key::RequestHead<'_>) -> u64 {
    u64::from(!head.headers().contains_key("x-peek"))
}

/// A server: an in-flight layer of `limit` on `store`, over a handler the test holds.
struct Server {
    svc: Svc,
    handle: tollgate::layer::Handle,
    controls: Controls,
    live: Arc<AtomicUsize>,
}

fn server(store: RedisStore, limit: u64, clock: &ManualClock) -> Server {
    let controls = Controls::default();
    let live = Arc::new(AtomicUsize::new(0));
    let layer = InFlightLayer::new(limit)
        .policy_name("jobs")
        .lease_ttl(Duration::from_secs(3))
        .key(Header::new("x-key"))
        .cost(cost)
        .clock(clock.clone())
        .store(store);
    Server {
        handle: layer.handle(),
        svc: Svc::new(layer.layer(held::handler(controls.clone(), live.clone()))),
        controls,
        live,
    }
}

/// Two servers of `limit` slots per key on `redis`, each with a store of its own.
async fn two_servers(
    redis: &server::RedisServer,
    limit: u64,
    clock: &ManualClock,
) -> (Server, Server) {
    let url = redis.url();
    let a = server(server::closed_on_caller_clock(&url).await, limit, clock);
    let b = server(server::closed_on_caller_clock(&url).await, limit, clock);
    (a, b)
}

/// A request the test holds, once let through.
struct Holding {
    control: Control,
    task: tokio::task::JoinHandle<StatusCode>,
}

impl Server {
    /// Sends a request of `key` with id `id`: `Some` once it holds a slot (its handler runs),
    /// `None` when refused.
    async fn start(&self, key: &str, id: u64) -> Option<Holding> {
        match self.try_start(key, id).await {
            Ok(holding) => Some(holding),
            Err(status) => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                None
            }
        }
    }

    /// Sends request `id` for `key`: held once its handler starts, or the refusal's status.
    async fn try_start(&self, key: &str, id: u64) -> Result<Holding, StatusCode> {
        let control = self.controls.register(id);
        let req = Request::builder()
            .header("x-key", key)
            .header("x-id", id.to_string())
            .body(())
            .unwrap();
        let svc = self.svc.clone();
        let before = self.live.load(Ordering::SeqCst);
        let mut task = tokio::spawn(async move {
            let resp = svc.oneshot(req).await.unwrap();
            let status = resp.status();
            let _ = resp.into_body().collect().await;
            status
        });
        // Either the handler starts (the request is live) or the refusal comes back.
        loop {
            if self.live.load(Ordering::SeqCst) > before {
                return Ok(Holding { control, task });
            }
            if task.is_finished() {
                return Err((&mut task).await.unwrap());
            }
            tokio::task::yield_now().await;
        }
    }

    /// The answer to a peek at `key` (a request of cost 0).
    async fn peek(
        &self,
        key: &str,
    ) -> http::Response<tollgate::layer::ResponseBody<held::TestBody>> {
        let req = Request::builder()
            .header("x-key", key)
            .header("x-peek", "1")
            .body(())
            .unwrap();
        self.svc.clone().oneshot(req).await.unwrap()
    }

    /// A peek at `key` (cost 0): `None` when it passes, the `Retry-After` of its denial when
    /// the key is blocked.
    async fn blocked(&self, key: &str) -> Option<String> {
        let resp = self.peek(key).await;
        if resp.status() == StatusCode::OK {
            return None;
        }
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry = resp
            .headers()
            .get("retry-after")
            .expect("a blocked key's retry");
        Some(retry.to_str().unwrap().to_owned())
    }

    /// The slots of `key` free now, as a peek reports them.
    async fn free(&self, key: &str) -> u64 {
        let resp = self.peek(key).await;
        assert_eq!(resp.status(), StatusCode::OK, "{:?}", resp.headers());
        let value = resp.headers()["ratelimit"].to_str().unwrap().to_owned();
        value
            .strip_prefix("\"jobs\";r=")
            .unwrap_or_else(|| panic!("{value}"))
            .parse()
            .unwrap()
    }
}

impl Holding {
    async fn finish(mut self) {
        self.control
            .fate
            .take()
            .unwrap()
            .send(Fate::Complete)
            .unwrap();
        assert_eq!(self.task.await.unwrap(), StatusCode::OK);
    }
}

/// Lets the tasks that give leases back send their calls.
async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// Waits until `free` reports `expected` slots of `key`, as a release runs on its own task
/// (bounded; each look is a round trip to Redis, not a sleep).
async fn free_becomes(server: &Server, key: &str, expected: u64) {
    let mut last = 0;
    for _ in 0..10_000 {
        last = server.free(key).await;
        if last == expected {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{key}: {last} slots free, expected {expected}");
}

async fn two_servers_share_the_slots_of_a_key() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let (a, b) = two_servers(&redis, 3, &clock).await;
    let one = a.start("k", 1).await.expect("a slot");
    let two = b.start("k", 2).await.expect("a slot");
    let three = a.start("k", 3).await.expect("a slot");
    assert!(
        b.start("k", 4).await.is_none(),
        "three in flight across both servers"
    );
    assert!(a.start("k", 5).await.is_none());
    assert_eq!(a.free("k").await, 0);
    // Another key has its own slots.
    let other = b.start("other", 6).await.expect("a slot");
    two.finish().await;
    free_becomes(&a, "k", 1).await;
    let four = a
        .start("k", 7)
        .await
        .expect("the slot given back on the other server");
    for held in [one, three, four, other] {
        held.finish().await;
    }
    free_becomes(&b, "k", 3).await;
    free_becomes(&b, "other", 3).await;
    // Keys with no lease left are deleted from Redis.
    let keys = server::command(redis.port, "DBSIZE").unwrap();
    assert_eq!(keys.trim(), ":0", "{keys}");
}

async fn a_lease_never_given_back_comes_back_after_its_ttl() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    // A server that takes a lease and dies: its runtime ends (no renewal, no release) and the
    // request's hold is never dropped.
    {
        let url = redis.url();
        let clock = clock.clone();
        std::thread::spawn(move || {
            server::runtime().block_on(async move {
                let dying = server(server::closed_on_caller_clock(&url).await, 2, &clock);
                let held = dying.start("k", 1).await.expect("a slot");
                std::mem::forget(held);
                std::mem::forget(dying);
            });
        })
        .join()
        .unwrap();
    }
    let alive = server(
        server::closed_on_caller_clock(&redis.url()).await,
        2,
        &clock,
    );
    assert_eq!(
        alive.free("k").await,
        1,
        "the dead server's lease still holds"
    );
    let mine = alive.start("k", 2).await.expect("a slot");
    assert!(alive.start("k", 3).await.is_none());
    // Just before its TTL (3 s) the lease holds; then it is given back. (This server's own
    // lease is renewed meanwhile, every second of the clock.)
    clock.advance(Duration::from_millis(2_999));
    settle().await;
    assert!(alive.start("k", 4).await.is_none());
    clock.advance(Duration::from_millis(2));
    let late = alive
        .start("k", 5)
        .await
        .expect("the dead server's slot came back");
    late.finish().await;
    mine.finish().await;
    free_becomes(&alive, "k", 2).await;
}

async fn a_request_longer_than_the_ttl_keeps_its_slot() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let (a, b) = two_servers(&redis, 1, &clock).await;
    let long = a.start("k", 1).await.expect("a slot");
    let leases = |port| {
        server::command(
            port,
            "ZRANGE tollgate:{s:k}:jobs:in_flight.1:l 0 -1 WITHSCORES",
        )
    };
    let first = leases(redis.port).unwrap();
    // Ten TTLs go by, a second at a time: the lease is renewed every second (a third of its
    // TTL), so the other server never finds the slot free.
    for _ in 0..30 {
        clock.advance(Duration::from_secs(1));
        // The renewal runs on its own task: wait until Redis has it (each look a round trip).
        let mut renewed = false;
        for _ in 0..10_000 {
            let now = leases(redis.port).unwrap();
            if now != first && now.contains(&(clock.now_millis_for_test() + 3_000).to_string()) {
                renewed = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(
            renewed,
            "the lease was not renewed: {}",
            leases(redis.port).unwrap()
        );
        assert!(b.start("k", 2).await.is_none());
    }
    long.finish().await;
    free_becomes(&b, "k", 1).await;
}

trait Millis {
    fn now_millis_for_test(&self) -> u64;
}

impl Millis for ManualClock {
    fn now_millis_for_test(&self) -> u64 {
        use tollgate::clock::Clock;
        self.now_nanos() / 1_000_000
    }
}

async fn a_request_dropped_while_redis_answers_gives_its_lease_back() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let store = server::closed_on_caller_clock(&redis.url())
        .await
        .timeout(Duration::from_secs(10));
    let a = server(store, 1, &clock);
    redis.pause();
    let req = Request::builder()
        .header("x-key", "k")
        .header("x-id", "1")
        .body(())
        .unwrap();
    let svc = a.svc.clone();
    let waiting = tokio::spawn(async move { svc.oneshot(req).await });
    settle().await;
    // The client goes away while the acquire is on its way: the lease it may take is given
    // back, in order after it.
    waiting.abort();
    settle().await;
    redis.resume();
    assert_eq!(a.free("k").await, 1);
    let keys = server::command(redis.port, "DBSIZE").unwrap();
    assert_eq!(keys.trim(), ":0", "{keys}");
    let held = a.start("k", 2).await.expect("the slot");
    held.finish().await;
}

/// Three servers of 1 slot per key on `redis`: failing closed, open and local.
async fn by_policy(redis: &server::RedisServer, clock: &ManualClock) -> [Server; 3] {
    let url = redis.url();
    let connect = |on_failure| async {
        let store = RedisStore::connect(&url).await.unwrap();
        let store = store
            .with_caller_clock()
            .timeout(Duration::from_millis(200));
        server(store.on_failure(on_failure), 1, clock)
    };
    [
        connect(OnFailure::Closed).await,
        connect(OnFailure::Open).await,
        connect(OnFailure::Local(MemoryStore::new())).await,
    ]
}

async fn failure_policies_apply() {
    let Some(mut redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let [closed, open, local] = by_policy(&redis, &clock).await;
    redis.kill();
    // Closed: 503, the handler never runs.
    let req = Request::builder()
        .header("x-key", "k")
        .header("x-id", "1")
        .body(())
        .unwrap();
    let resp = closed.svc.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Open: let through without a slot, so more than the limit pass.
    let one = open.start("k", 2).await.expect("let through");
    let two = open.start("k", 3).await.expect("let through");
    // Local: the local store limits, and its slot is given back there.
    let mine = local.start("k", 4).await.expect("a local slot");
    assert!(local.start("k", 5).await.is_none());
    mine.finish().await;
    let again = local
        .start("k", 6)
        .await
        .expect("the local slot given back");
    for held in [one, two, again] {
        held.finish().await;
    }
}

/// A Redis out of memory (`maxmemory` under `noeviction`) records no lease: whatever the
/// failure policy, no request is let through past the limit (a client that fills Redis with
/// keys it mints must not lift the limit on its requests in flight).
async fn a_full_redis_lets_no_request_past_the_limit() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let [_, open, local] = by_policy(&redis, &clock).await;
    for cmd in [
        "CONFIG SET maxmemory-policy noeviction",
        "CONFIG SET maxmemory 1",
    ] {
        let reply = server::command(redis.port, cmd);
        assert!(
            reply.as_deref().is_some_and(|r| r.starts_with("+OK")),
            "{cmd}: {reply:?}"
        );
    }
    for (name, server) in [("open", &open), ("local", &local)] {
        let (mut held, mut refused) = (Vec::new(), Vec::new());
        for id in 1..=3 {
            match server.try_start("k", id).await {
                Ok(holding) => held.push(holding),
                Err(status) => refused.push(status),
            }
        }
        assert!(
            held.len() <= 1,
            "{name}: {} requests in flight past a limit of 1 on a full Redis",
            held.len()
        );
        assert!(
            refused
                .iter()
                .all(|s| s.is_client_error() || s.is_server_error()),
            "{name}: {refused:?}"
        );
        for holding in held {
            holding.finish().await;
        }
    }
}

fn a_cluster_keeps_each_keys_leases_in_one_slot() {
    let Some(cluster) = server::RedisCluster::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = ManualClock::new();
        let store = RedisStore::cluster(cluster.urls())
            .await
            .unwrap()
            .on_failure(OnFailure::Closed)
            .timeout(Duration::from_secs(5))
            .with_caller_clock();
        let a = server(store, 2, &clock);
        let mut held = Vec::new();
        let mut id = 0;
        // Long keys and tuples of every kind spread over the masters.
        let keys: Vec<String> = (0..24)
            .map(|i| format!("user-{i}-{}", "x".repeat(i * 5)))
            .collect();
        for key in &keys {
            for _ in 0..2 {
                id += 1;
                held.push(a.start(key, id).await.expect("a slot"));
            }
            id += 1;
            assert!(a.start(key, id).await.is_none(), "{key}");
        }
        for h in held {
            h.finish().await;
        }
        for key in &keys {
            free_becomes(&a, key, 2).await;
        }
    });
}

/// A block through one server's handle holds on every server on the Redis: another server
/// denies the key, with what is left of the block in `Retry-After`, though its slots are free;
/// other keys go on; a reset through the handle lifts it everywhere; a block ends on time.
async fn a_handles_block_holds_on_every_server() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let (a, b) = two_servers(&redis, 3, &clock).await;
    a.handle.block("k", Duration::from_secs(600)).await.unwrap();
    assert_eq!(b.blocked("k").await.as_deref(), Some("600"));
    assert!(
        b.start("k", 1).await.is_none(),
        "blocked on the other server"
    );
    b.start("other", 2).await.expect("a slot").finish().await;
    clock.advance(Duration::from_secs(100));
    assert_eq!(b.blocked("k").await.as_deref(), Some("500"));
    a.handle.reset("k").await.unwrap();
    assert_eq!(b.blocked("k").await, None);
    b.start("k", 3).await.expect("lifted").finish().await;
    // A block from the other side ends on time, to the ms.
    b.handle
        .block("k", Duration::from_millis(1500))
        .await
        .unwrap();
    assert_eq!(a.blocked("k").await.as_deref(), Some("2"));
    clock.advance(Duration::from_millis(1499));
    assert!(a.start("k", 4).await.is_none());
    clock.advance(Duration::from_millis(1));
    a.start("k", 5)
        .await
        .expect("the block is over")
        .finish()
        .await;
}

/// In-flight layers of other limits (both unnamed, so both named `in-flight`) keep their
/// blocks apart, as their slots: a block on one does not reach the other, and a reset on the
/// other does not lift it.
async fn blocks_of_in_flight_layers_of_other_limits_stay_apart() {
    let redis = server::RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let url = redis.url();
    let layer = |limit: u64| {
        InFlightLayer::new(limit)
            .key(Header::new("x-key"))
            .cost(cost)
            .clock(clock.clone())
    };
    let mut handles = Vec::new();
    let mut services = Vec::new();
    for limit in [1, 1, 100] {
        let layer = layer(limit).store(server::closed_on_caller_clock(&url).await);
        handles.push(layer.handle());
        services.push(Svc::new(layer.layer(held::handler(
            Controls::default(),
            Arc::new(AtomicUsize::new(0)),
        ))));
    }
    let peek = |i: usize| {
        let req = Request::builder()
            .header("x-key", "k")
            .header("x-peek", "1")
            .body(())
            .unwrap();
        let svc = services[i].clone();
        async move {
            let resp = svc.oneshot(req).await.unwrap();
            let retry = resp.headers().get("retry-after");
            let retry = retry.map(|v| v.to_str().unwrap().to_owned());
            (resp.status().as_u16(), retry)
        }
    };
    handles[0]
        .block("k", Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(
        peek(1).await,
        (429, Some("600".to_owned())),
        "the other upload server"
    );
    assert_eq!(peek(2).await, (200, None), "a layer of another limit");
    clock.advance(Duration::from_secs(10));
    handles[2].reset("k").await.unwrap();
    assert_eq!(
        peek(1).await,
        (429, Some("590".to_owned())),
        "not lifted by the other"
    );
}

/// A file's limit on requests in flight, built on two servers over one Redis, shares its
/// slots between them; a limit the Redis store cannot keep is an error naming it.
async fn a_configured_in_flight_limit_is_shared_by_the_servers() {
    use tollgate::config::{ConfiguredStore, Limits};
    let redis = server::RedisServer::start().expect("redis-server");
    let limits: Limits = toml::from_str(
        r#"
        [limits.api]
        quota = "100/min"
        [limits.uploads]
        in_flight = 1
        key = { header = "x-key" }
        "#,
    )
    .unwrap();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let store = ConfiguredStore::from(server::closed(&redis.url()).await);
        let mut layers = limits.in_flight_layers_in(&store).unwrap();
        let layer = layers.remove("uploads").unwrap();
        assert_eq!(layer.policy(), "uploads");
        servers.push(layer.layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        })));
    }
    let call = |i: usize| {
        let req = Request::builder().header("x-key", "k").body(()).unwrap();
        servers[i].clone().oneshot(req)
    };
    // The first response, unread, holds the key's slot on every server.
    let held = call(0).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let refused = call(1).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().get("retry-after").is_none());
    drop((held, refused));
    // The lease is given back on the runtime: a short bounded wait for the real server.
    let mut status = StatusCode::TOO_MANY_REQUESTS;
    for _ in 0..100 {
        status = call(1).await.unwrap().status();
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, StatusCode::OK, "the slot came back");

    let mut big = limits.clone();
    big.limits.get_mut("uploads").unwrap().in_flight = Some((1 << 53) + 1);
    let store = ConfiguredStore::from(server::closed(&redis.url()).await);
    let err = big.in_flight_layers_in(&store).unwrap_err();
    assert_eq!(err.field(), "limits.uploads.in_flight", "{err}");
    assert!(err.to_string().contains("cannot keep it"), "{err}");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis_async(
            "a_configured_in_flight_limit_is_shared_by_the_servers",
            a_configured_in_flight_limit_is_shared_by_the_servers,
        ),
        server::needs_redis_async(
            "two_servers_share_the_slots_of_a_key",
            two_servers_share_the_slots_of_a_key,
        ),
        server::needs_redis_async(
            "a_lease_never_given_back_comes_back_after_its_ttl",
            a_lease_never_given_back_comes_back_after_its_ttl,
        ),
        server::needs_redis_async(
            "a_request_longer_than_the_ttl_keeps_its_slot",
            a_request_longer_than_the_ttl_keeps_its_slot,
        ),
        server::needs_redis_async(
            "a_request_dropped_while_redis_answers_gives_its_lease_back",
            a_request_dropped_while_redis_answers_gives_its_lease_back,
        ),
        server::needs_redis_async("failure_policies_apply", failure_policies_apply),
        server::needs_redis_async(
            "a_full_redis_lets_no_request_past_the_limit",
            a_full_redis_lets_no_request_past_the_limit,
        ),
        server::needs_redis_async(
            "a_handles_block_holds_on_every_server",
            a_handles_block_holds_on_every_server,
        ),
        server::needs_redis_async(
            "blocks_of_in_flight_layers_of_other_limits_stay_apart",
            blocks_of_in_flight_layers_of_other_limits_stay_apart,
        ),
        server::needs_redis(
            "a_cluster_keeps_each_keys_leases_in_one_slot",
            a_cluster_keeps_each_keys_leases_in_one_slot,
        ),
    ]
}
