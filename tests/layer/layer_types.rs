//! The middleware's types hold whatever the algorithm, key, store and clock: layers of four
//! algorithms live in one `Vec<RateLimitLayer>`, a service names `RateLimit<S>` in a struct,
//! and each still decides as its own algorithm. Misconfigurations fail where the layer is built.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::{Global, Header, PeerAddr};
use tollgate::store::MemoryStore;
use tollgate::{Quota, RateLimit, RateLimitLayer, RateLimiter};
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};

type Inner = BoxCloneSyncService<Request<String>, Response<String>, Infallible>;

/// An application's state that names the middleware's type: only the inner service.
struct App {
    limited: Vec<RateLimit<Inner>>,
}

fn inner() -> Inner {
    BoxCloneSyncService::new(tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }))
}

fn request(key: &str) -> Request<String> {
    let mut req = Request::builder()
        .header("x-api-key", key)
        .body(String::new())
        .unwrap();
    let peer: SocketAddr = ([192, 0, 2, 1], 4000).into();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

/// Sends requests until the first denial; returns how many passed (at most 10).
async fn passes(svc: &mut RateLimit<Inner>, key: &str) -> usize {
    for passed in 0..10 {
        let resp = send(svc, request(key)).await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            return passed;
        }
        assert_eq!(resp.status(), StatusCode::OK);
    }
    10
}

/// `req` through `svc`, once it is ready.
async fn send<S>(svc: &mut S, req: Request<String>) -> S::Response
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    svc.ready().await.unwrap().call(req).await.unwrap()
}

#[tokio::test]
async fn layers_of_four_algorithms_share_one_type() {
    let clock = ManualClock::new();
    let q = Quota::per_minute(3);
    let layers: Vec<RateLimitLayer> = vec![
        RateLimitLayer::gcra(q.clone()).clock(clock.clone()),
        RateLimitLayer::sliding_window(q.clone())
            .key(Header::new("x-api-key"))
            .clock(clock.clone()),
        RateLimitLayer::fixed_window([q.clone(), Quota::per_hour(100)])
            .key(Global)
            .store(MemoryStore::new())
            .clock(clock.clone()),
        RateLimitLayer::leaky_bucket(q.with_burst(2)).clock(clock.clone()),
    ];
    let mut app = App {
        limited: layers.iter().map(|layer| layer.layer(inner())).collect(),
    };
    // Each decides as its algorithm: three at once, or a queue of 2 for the leaky bucket
    // (whose third request waits its turn: it is not denied, so stop before it).
    let mut counts = Vec::new();
    for svc in &mut app.limited[..3] {
        counts.push(passes(svc, "k1").await);
    }
    assert_eq!(counts, [3, 3, 3]);
    // The sliding window is keyed by the header: another key has its own budget.
    assert_eq!(passes(&mut app.limited[1], "k2").await, 3);
    // The fixed window is global: another key shares it.
    assert_eq!(passes(&mut app.limited[2], "k2").await, 0);
    // The leaky bucket lets the first through at once and queues the next one for its turn.
    let leaky = &mut app.limited[3];
    let resp = send(leaky, request("k")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let queued = tokio::spawn(leaky.clone().oneshot(request("k")));
    tokio::task::yield_now().await;
    assert!(!queued.is_finished());
    clock.advance(Duration::from_secs(20));
    assert_eq!(queued.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(layers[3].policy(), "3/min;burst=2");
    assert_eq!(layers[2].quotas().len(), 2);
}

#[test]
fn a_layer_is_send_sync_clone_and_static() {
    fn assert_all<T: Send + Sync + Clone + 'static>() {}
    assert_all::<RateLimitLayer>();
    assert_all::<RateLimit<Inner>>();
}

#[test]
#[should_panic(
    expected = "only gcra and token_bucket shape; this layer's algorithm is sliding_window"
)]
fn shaping_a_window_fails_where_the_layer_is_built() {
    let _ = RateLimitLayer::sliding_window(Quota::per_minute(3)).max_delay(Duration::from_secs(1));
}

#[test]
#[should_panic(expected = "sub-windows are the sliding window's; this layer's algorithm is gcra")]
fn sub_windows_of_gcra_fail_where_the_layer_is_built() {
    let _ = RateLimitLayer::gcra(Quota::per_minute(3)).sub_windows(4);
}

#[test]
#[should_panic(expected = "RateLimitLayer::store: this layer was made by from_limiter")]
fn a_store_for_a_hand_built_limiter_fails_where_the_layer_is_built() {
    let limiter = RateLimiter::gcra(Quota::per_minute(3));
    let _ = RateLimitLayer::from_limiter(limiter).store(MemoryStore::new());
}

#[tokio::test]
async fn a_hand_built_limiter_is_the_layers_limiter() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_minute(2)).with_clock(clock.clone());
    let mut svc = RateLimitLayer::from_limiter(limiter.clone())
        .key(Global)
        .layer(inner());
    assert_eq!(passes(&mut svc, "k").await, 2);
    // The limiter outside the layer sees the same state.
    assert!(!limiter.check_now(tollgate::Key::from(0u64)).allowed);
    clock.advance(Duration::from_secs(30));
    assert!(limiter.check_now(tollgate::Key::from(0u64)).allowed);
}

/// A limiter built by hand (over a shared store, on a manual clock) works with every option
/// that keeps it: the key, costs, `count_if`, headers, the status, and a handle's block,
/// reset and peek, all on the limiter's own state.
#[tokio::test]
async fn a_hand_built_limiter_takes_the_options_that_keep_it() {
    let clock = ManualClock::new();
    let store = MemoryStore::new();
    let limiter = RateLimiter::sliding_log(Quota::per_minute(4).named("hand"))
        .with_store(store.clone())
        .with_clock(clock.clone());
    let layer = RateLimitLayer::from_limiter(limiter.clone())
        .key(Header::new("x-api-key"))
        .cost(|_key: &tollgate::Key, head| if head.uri().path() == "/bulk" { 2 } else { 1 })
        .count_if(|response| response.status != StatusCode::NO_CONTENT)
        .headers(tollgate::HeaderStyle::GitHub)
        .status(StatusCode::SERVICE_UNAVAILABLE);
    let handle = layer.handle();
    let mut svc = layer.layer(BoxCloneSyncService::new(tower::service_fn(
        |req: Request<String>| async move {
            let status = match req.uri().path() {
                "/free" => StatusCode::NO_CONTENT,
                _ => StatusCode::OK,
            };
            let mut response = Response::new(String::new());
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        },
    )));
    let call = |path: &'static str, key: &'static str| {
        let mut req = request(key);
        *req.uri_mut() = path.parse().unwrap();
        req
    };
    // Responses that do not count give their capacity back; a bulk request costs 2.
    for _ in 0..3 {
        let resp = send(&mut svc, call("/free", "a")).await;
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    }
    let resp = send(&mut svc, call("/bulk", "a")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-ratelimit-remaining"], "2");
    // The limiter outside the layer reads the same state, keyed as the layer keys.
    let key = tollgate::Key::from("a");
    assert_eq!(limiter.peek(key.clone()).await.unwrap().remaining, 2);
    assert_eq!(handle.peek("a").await.unwrap().remaining, 2);
    let resp = send(&mut svc, call("/bulk", "a")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = send(&mut svc, call("/", "a")).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The handle resets and blocks the key on the limiter's state.
    handle.reset("a").await.unwrap();
    assert_eq!(limiter.peek(key.clone()).await.unwrap().remaining, 4);
    handle.block("b", Duration::from_secs(60)).await.unwrap();
    let resp = send(&mut svc, call("/", "b")).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    clock.advance(Duration::from_secs(60));
    let resp = send(&mut svc, call("/", "b")).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

/// A plan of tiers on a layer built with one quota: since plans are no longer tied to the
/// layer's type, a selector may return several quotas for any layer. Each tier must hold: a
/// client on the plan [10/s, 3/min] gets 3 a minute however it spaces them, and its requests
/// never borrow from the layer's own looser quota.
#[tokio::test]
async fn a_plan_of_tiers_on_a_one_quota_layer_holds_every_tier() {
    let clock = ManualClock::new();
    let tiers = vec![
        Quota::per_second(10).named("t-s"),
        Quota::per_minute(3).named("t-m"),
    ];
    let layer = RateLimitLayer::gcra(Quota::per_minute(100))
        .key(Header::new("x-api-key"))
        .quota_for(move |key: &tollgate::Key, _head| {
            if key.as_bytes() == Some(&b"tiered"[..]) {
                tiers.clone()
            } else {
                vec![Quota::per_minute(100)]
            }
        })
        .clock(clock.clone());
    let mut svc = layer.layer(inner());
    let mut passed = 0;
    for _ in 0..20 {
        // Spaced past the per-second tier: only the per-minute tier can stop them.
        clock.advance(Duration::from_millis(500));
        let resp = send(&mut svc, request("tiered")).await;
        if resp.status() == StatusCode::OK {
            passed += 1;
        } else {
            assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        }
    }
    // 10 s of requests: the per-minute tier allows its burst of 3 and nothing more.
    assert_eq!(passed, 3);
    // Another key on the layer's quota is not held by the plan.
    assert_eq!(passes(&mut svc, "other").await, 10);
}
