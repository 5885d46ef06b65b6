//! A settling layer (`.settle()`) on a fleet: servers (each its own `RedisStore`) on one real
//! `redis-server`, one `ManualClock`, the same scenarios run on a `MemoryStore` for the figures
//! to agree with.
//!
//! - A cost reported above the reservation through one server puts the key in debt on the
//!   other, with the same `Retry-After`.
//! - A charge made after the layer's quotas changed goes to the quotas in force, as in memory.
//! - A debt outlives new quotas, smaller or larger, as in memory (GCRA, the token bucket, tiers).

use crate::support::redis as server;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::layer::{Handle, ResponseBody};
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{Key, Quota, RateLimitLayer, Usage};
use tower::{Layer, ServiceExt};

use server::{needs_redis_async, RedisServer};

type Svc =
    tower::util::BoxCloneService<Request<String>, Response<ResponseBody<String>>, Infallible>;

/// A fresh prefix for one test's servers.
fn prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("settle{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A server's store on `url` under `prefix`: its own connection, on the caller's clock.
async fn redis_store(url: &str, prefix: &str) -> RedisStore {
    server::closed_on_caller_clock(url)
        .await
        .deny_cache(0)
        .timeout(Duration::from_secs(5))
        .prefix(prefix)
}

/// A handler that reports `x-set` tokens, if the request says.
fn handler() -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|req: Request<String>| {
        let set = req
            .headers()
            .get("x-set")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let (Some(set), Some(usage)) = (set, req.extensions().get::<Usage>()) {
            usage.set(set);
        }
        async { Ok::<_, Infallible>(Response::new(String::new())) }
    })
}

/// 60 tokens a minute, settled, per `x-key`, reserving `x-estimate`, on `store` and `clock`.
fn layer<St: tollgate::layer::LayerStore>(store: St, clock: &ManualClock) -> RateLimitLayer {
    let one: Build = |q| RateLimitLayer::gcra(q[0].clone());
    settling(
        one,
        vec![Quota::per_minute(60).named("tokens")],
        store,
        clock,
    )
}

fn serve(layer: RateLimitLayer) -> (Handle, Svc) {
    let handle = layer.handle();
    (handle, Svc::new(layer.layer(handler())))
}

/// Sends a request reserving `estimate` and reporting `set` (if any), reads its body to the
/// end (where it settles); its status and `Retry-After`.
async fn send(svc: &Svc, estimate: u64, set: Option<u64>) -> (StatusCode, Option<String>) {
    let mut req = Request::builder()
        .header("x-key", "k")
        .header("x-estimate", estimate.to_string());
    if let Some(set) = set {
        req = req.header("x-set", set.to_string());
    }
    let response = svc
        .clone()
        .oneshot(req.body(String::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    body.collect().await.unwrap();
    let retry = parts
        .headers
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (parts.status, retry)
}

/// Waits (at most 2 s) for the settlement a server's body spawned on the runtime to reach
/// Redis: until `handle` peeks `key` denied.
async fn settled_in_debt(handle: &Handle) -> tollgate::Decision {
    for _ in 0..200 {
        let standing = handle.peek("k").await.unwrap();
        if !standing.allowed {
            return standing;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the charge never reached Redis");
}

/// A cost above the reservation reported through A is a debt on B, with the same wait.
async fn a_debt_settled_through_one_server_holds_on_the_other() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = serve(layer(redis_store(&redis.url(), &prefix).await, &clock));
    let (b, on_b) = serve(layer(redis_store(&redis.url(), &prefix).await, &clock));
    assert_eq!(send(&on_a, 10, Some(100)).await.0, StatusCode::OK);
    let on_a_standing = settled_in_debt(&a).await;
    assert_eq!(on_a_standing.retry_after, Some(Duration::from_secs(40)));
    assert_eq!(b.peek("k").await.unwrap(), on_a_standing);
    let (status, retry) = send(&on_b, 1, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        retry.as_deref(),
        Some("41"),
        "40 s of debt and 1 s for the token"
    );
    clock.advance(Duration::from_secs(41));
    assert_eq!(send(&on_b, 1, None).await.0, StatusCode::OK);
}

/// The same steps on a memory store and on Redis: a request in flight while the layer's
/// quotas change is charged on the quotas in force (on Redis, by the table that carries usage
/// over), then goes into debt there. Each figure is the same on both stores.
async fn a_charge_after_new_quotas_is_the_same_on_redis_as_in_memory() {
    let redis = RedisServer::start().expect("redis-server");
    let prefix = prefix();
    let mut seen = Vec::new();
    for on_redis in [false, true] {
        let clock = ManualClock::new();
        let layer = if on_redis {
            layer(redis_store(&redis.url(), &prefix).await, &clock)
        } else {
            layer(MemoryStore::new(), &clock)
        };
        let (handle, svc) = serve(layer);
        let mut figures = Vec::new();
        // Reserved under 60 a minute, reported after the change to 120 a minute.
        let req = Request::builder()
            .header("x-key", "k")
            .header("x-estimate", "10")
            .header("x-set", "100")
            .body(String::new())
            .unwrap();
        let in_flight = svc.clone().oneshot(req).await.unwrap();
        handle
            .set_quotas(Quota::per_minute(120).named("tokens"))
            .unwrap();
        figures.push(handle.peek("k").await.unwrap().remaining);
        in_flight.into_body().collect().await.unwrap();
        // On Redis the settlement runs on the runtime: until it lands, the reservation shows.
        let mut remaining = handle.peek("k").await.unwrap().remaining;
        for _ in 0..200 {
            if remaining != figures[0] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            remaining = handle.peek("k").await.unwrap().remaining;
        }
        figures.push(remaining);
        // Into debt under 120 a minute, then back to 60 a minute: the debt stays.
        send(&svc, 1, Some(100)).await;
        let standing = settled_in_debt(&handle).await;
        figures.push(standing.retry_after.unwrap().as_millis() as u64);
        seen.push(figures);
    }
    assert_eq!(seen[0], seen[1], "memory, then Redis");
    assert_eq!(
        seen[0],
        [110, 20, 40_000],
        "100 used of 120 once settled, then 80 of debt"
    );
}

/// Builds a settling layer of quotas on a store and a clock.
type Build = fn(Vec<Quota>) -> RateLimitLayer;

/// `build`'s layer of `quotas`, settled, per `x-key`, reserving `x-estimate`, on `store` and
/// `clock`.
fn settling<St: tollgate::layer::LayerStore>(
    build: Build,
    quotas: Vec<Quota>,
    store: St,
    clock: &ManualClock,
) -> RateLimitLayer {
    build(quotas)
        .store(store)
        .clock(clock.clone())
        .key(Header::new("x-key"))
        .cost(|_: &Key, head: RequestHead<'_>| {
            head.headers()
                .get("x-estimate")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .settle()
}

/// A peek's figures: allowed, remaining, `retry_after` in ms.
async fn standing(handle: &Handle) -> (bool, u64, Option<u128>) {
    let d = handle.peek("k").await.unwrap();
    (d.allowed, d.remaining, d.retry_after.map(|r| r.as_millis()))
}

/// A key 180 tokens in debt under 120 a minute (and, tiered, 300 of 1 000 an hour), then moved
/// to 60 a minute (500 an hour), 10 s later to 180 a minute (2 000 an hour), and checked as
/// its debt is paid back: every figure the same on a memory store and on Redis.
async fn a_debt_outlives_new_quotas_on_redis_as_in_memory() {
    let redis = RedisServer::start().expect("redis-server");
    let one = |q: Vec<Quota>| RateLimitLayer::gcra(q[0].clone());
    let bucket = |q: Vec<Quota>| RateLimitLayer::token_bucket(q[0].clone());
    let tiers = |q: Vec<Quota>| RateLimitLayer::gcra(q);
    let cases: [(&str, Build, bool); 3] = [
        ("gcra", one, false),
        ("token_bucket", bucket, false),
        ("gcra tiers", tiers, true),
    ];
    for (name, build, tiered) in cases {
        let quotas = |minute: u64, hour: u64| {
            let mut q = vec![Quota::per_minute(minute).named("m")];
            if tiered {
                q.push(Quota::per_hour(hour).named("h"));
            }
            q
        };
        let mut seen = Vec::new();
        for on_redis in [false, true] {
            let clock = ManualClock::new();
            let layer = if on_redis {
                let store = redis_store(&redis.url(), &prefix()).await;
                settling(build, quotas(120, 1000), store, &clock)
            } else {
                settling(build, quotas(120, 1000), MemoryStore::new(), &clock)
            };
            let (handle, svc) = serve(layer);
            let set = |q: Vec<Quota>| {
                if tiered {
                    handle.set_quotas(q)
                } else {
                    handle.set_quotas(q[0].clone())
                }
                .unwrap();
            };
            let mut figures = Vec::new();
            assert_eq!(send(&svc, 1, Some(300)).await.0, StatusCode::OK);
            settled_in_debt(&handle).await;
            figures.push(standing(&handle).await);
            set(quotas(60, 500));
            figures.push(standing(&handle).await);
            clock.advance(Duration::from_secs(10));
            figures.push(standing(&handle).await);
            let (status, retry) = send(&svc, 1, None).await;
            set(quotas(180, 2000));
            figures.push(standing(&handle).await);
            let mut sent = vec![(status, retry)];
            for step in [1, 5, 10, 20, 40] {
                clock.advance(Duration::from_secs(step));
                figures.push(standing(&handle).await);
                sent.push(send(&svc, 2, None).await);
            }
            seen.push((figures, sent));
        }
        assert_eq!(seen[0], seen[1], "{name}: memory, then Redis");
        let (figures, _) = &seen[0];
        assert_eq!(
            figures[1].2,
            Some(180_000),
            "{name}: 180 owed at 1 a second"
        );
        assert!(
            !figures[3].0,
            "{name}: still in debt under the larger quota"
        );
    }
}

/// Scripts Redis ran for 20 requests of `layer` on one key, each reserving 1 and costing
/// that (nothing to settle), after one request that loads the scripts.
async fn scripts_for_requests(redis: &RedisServer, layer: RateLimitLayer) -> u64 {
    let (_, svc) = serve(layer);
    assert_eq!(send(&svc, 1, None).await.0, StatusCode::OK);
    let before = redis.calls("evalsha");
    for _ in 0..20 {
        assert_eq!(send(&svc, 1, None).await.0, StatusCode::OK);
    }
    redis.calls("evalsha") - before
}

/// A settling layer's store is told to expect refunds where the layer is built, whether
/// `.settle()` comes before or after the store and the clock: its table leases no slices (a
/// refund on one server while another leases the same state would let the fleet past the
/// quota, see `Leases`), even on a server whose requests have not been refunded yet.
async fn a_settle_before_the_store_stops_its_leases_as_after_it() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let leased = || async {
        redis_store(&redis.url(), &prefix())
            .await
            .local_leases(tollgate::store::Leases::default())
    };
    let cost = |_: &Key, head: RequestHead<'_>| {
        head.headers()
            .get("x-estimate")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    };
    let quota = || Quota::per_minute(600).named("tokens");
    let plain = RateLimitLayer::gcra(quota())
        .store(leased().await)
        .clock(clock.clone())
        .key(Header::new("x-key"));
    let after = plain.clone().store(leased().await).cost(cost).settle();
    let before = RateLimitLayer::gcra(quota())
        .settle()
        .store(leased().await)
        .clock(clock.clone())
        .key(Header::new("x-key"))
        .cost(cost);
    let leasing = scripts_for_requests(&redis, plain).await;
    let told = scripts_for_requests(&redis, after).await;
    assert!(
        leasing < 20,
        "a layer that never refunds leases: {leasing} scripts"
    );
    assert_eq!(told, 20, "a settling layer decides each request in Redis");
    let not_told = scripts_for_requests(&redis, before).await;
    assert_eq!(
        not_told, told,
        "settle() before store(..) left its leases on"
    );
    // A per-key plan's limiter, made by the settling layer's service, is told too.
    let plans = RateLimitLayer::gcra(quota())
        .store(leased().await)
        .clock(clock.clone())
        .key(Header::new("x-key"))
        .quota_for(|_: &Key, _: RequestHead<'_>| vec![Quota::per_minute(900).named("plan")])
        .settle();
    let on_plan = scripts_for_requests(&redis, plans).await;
    assert_eq!(on_plan, told, "a settling layer's plan leases");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        needs_redis_async(
            "a_debt_settled_through_one_server_holds_on_the_other",
            a_debt_settled_through_one_server_holds_on_the_other,
        ),
        needs_redis_async(
            "a_charge_after_new_quotas_is_the_same_on_redis_as_in_memory",
            a_charge_after_new_quotas_is_the_same_on_redis_as_in_memory,
        ),
        needs_redis_async(
            "a_debt_outlives_new_quotas_on_redis_as_in_memory",
            a_debt_outlives_new_quotas_on_redis_as_in_memory,
        ),
        needs_redis_async(
            "a_settle_before_the_store_stops_its_leases_as_after_it",
            a_settle_before_the_store_stops_its_leases_as_after_it,
        ),
    ]
}
