//! What a request waiting for Redis holds of the inner service: nothing. While its check waits
//! for Redis (frozen here with SIGSTOP), the readiness the layer's `poll_ready` took (a
//! `ConcurrencyLimit` permit, a `Buffer` slot) is given back, so a stalled Redis never keeps
//! other requests from the inner service; once admitted, the request readies the inner service
//! again, then calls it. Denials, in-flight slots and `count_if` refunds come out exactly as
//! without the wait. Real `redis-server` processes; the store decides on a `ManualClock` that
//! never moves, and real time only bounds Redis's own timeout.

use crate::support::drive::poll_once;
use crate::support::http as web;
use crate::support::redis as server;

use std::future::{ready, Ready};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::{Header, KeyError, RequestHead};
use tollgate::store::RedisStore;
use tollgate::{InFlightLayer, Key, Quota, RateLimitLayer};
use tower::buffer::Buffer;
use tower::limit::{ConcurrencyLimit, GlobalConcurrencyLimitLayer};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// The inner service's readiness failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Broken;

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the inner service is broken")
    }
}

impl std::error::Error for Broken {}

/// A handler the test steers: it counts its calls, answers with the status the test set (200
/// at first), and fails its `poll_ready` while broken. Its clones share all three.
#[derive(Clone)]
struct Handler {
    calls: Arc<AtomicUsize>,
    status: Arc<AtomicU16>,
    broken: Arc<AtomicBool>,
}

impl Handler {
    fn new() -> Self {
        Self {
            calls: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            broken: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn answer(&self, status: StatusCode) {
        self.status.store(status.as_u16(), Ordering::SeqCst);
    }

    fn break_readiness(&self, broken: bool) {
        self.broken.store(broken, Ordering::SeqCst);
    }
}

impl Service<Request<String>> for Handler {
    type Response = Response<String>;
    type Error = Broken;
    type Future = Ready<Result<Response<String>, Broken>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Broken>> {
        if self.broken.load(Ordering::SeqCst) {
            return Poll::Ready(Err(Broken));
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<String>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let status = StatusCode::from_u16(self.status.load(Ordering::SeqCst)).unwrap();
        let mut response = Response::new(String::from("handled"));
        *response.status_mut() = status;
        ready(Ok(response))
    }
}

fn from(client: &str) -> Request<String> {
    Request::builder()
        .header("x-client", client)
        .body(String::new())
        .unwrap()
}

/// A store on `redis` that fails closed, decides on the caller's clock, and waits for Redis up
/// to 5 s: far longer than any assertion below waits.
async fn patient(redis: &server::RedisServer) -> RedisStore {
    server::closed_on_caller_clock(&redis.url())
        .await
        .timeout(Duration::from_secs(5))
}

/// Whether `inner` (a clone of it, standing for a path that does not go through the rate
/// limit) is ready at once: no request holds its readiness.
fn ready_at_once<S: Service<Request<String>> + Clone>(inner: &S) -> bool {
    let mut bypass = inner.clone();
    let ready = bypass
        .poll_ready(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    ready
}

/// The test of [`a_request_waiting_for_redis_holds_no_permit`] for any inner service whose
/// readiness is scarce (`inner`, over `handler`): a request allowed after a wait for Redis, one
/// denied after a wait, and one denied from the deny cache while Redis is frozen.
async fn a_wait_for_redis_holds_nothing_of<S>(
    redis: &server::RedisServer,
    inner: S,
    handler: &Handler,
) where
    S: Service<Request<String>, Response = Response<String>> + Clone,
    S::Error: std::fmt::Debug,
{
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .key(Header::new("x-client"))
        .clock(ManualClock::new())
        .store(patient(redis).await)
        .layer(inner.clone());
    // Connected, the script loaded.
    let resp = svc.clone().oneshot(from("warm")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    // Allowed after a wait.
    redis.pause();
    let mut allowed = Box::pin(svc.clone().oneshot(from("a")));
    assert!(poll_once(&mut allowed).is_pending(), "waits for Redis");
    assert!(
        ready_at_once(&inner),
        "the request waiting for Redis holds the inner service's readiness"
    );
    assert!(
        poll_once(&mut allowed).is_pending(),
        "still waits for Redis"
    );
    redis.resume();
    let resp = allowed.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(handler.calls(), 2, "the handler ran once for it");

    // Denied after a wait: the handler never runs.
    redis.pause();
    let mut denied = Box::pin(svc.clone().oneshot(from("a")));
    assert!(poll_once(&mut denied).is_pending(), "waits for Redis");
    assert!(
        ready_at_once(&inner),
        "the request waiting for Redis holds the inner service's readiness"
    );
    redis.resume();
    let resp = denied.await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(handler.calls(), 2);

    // Denied from the deny cache: answered at once, Redis still frozen, as before.
    redis.pause();
    let mut cached = Box::pin(svc.clone().oneshot(from("a")));
    let Poll::Ready(Ok(resp)) = poll_once(&mut cached) else {
        panic!("a denial in the deny cache waits for Redis");
    };
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(ready_at_once(&inner), "the denial kept the readiness");
    redis.resume();
    assert_eq!(handler.calls(), 2);
}

/// A concurrency limit of 1 inside the layer: a request waiting for a frozen Redis leaves the
/// permit free (before, it held it until Redis answered or the timeout ended the wait).
async fn a_request_waiting_for_redis_holds_no_permit() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let handler = Handler::new();
    let inner = ConcurrencyLimit::new(handler.clone(), 1);
    a_wait_for_redis_holds_nothing_of(&redis, inner, &handler).await;
}

/// A `Buffer` of 1 inside the layer: a request waiting for a frozen Redis leaves its slot free.
async fn a_request_waiting_for_redis_holds_no_buffer_slot() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let handler = Handler::new();
    let inner = Buffer::new(handler.clone(), 1);
    a_wait_for_redis_holds_nothing_of(&redis, inner, &handler).await;
}

/// Over HTTP: while one client's request waits for a frozen Redis, a route without the rate
/// limit, behind the same concurrency limit of 1, answers at once.
async fn another_route_is_served_while_redis_stalls_over_http() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    // The key extractor tells the test when the request that will wait has reached the layer:
    // by the time the test runs again (one thread), the layer has sent its check to Redis.
    let arrived = Arc::new(tokio::sync::Notify::new());
    let key = {
        let arrived = arrived.clone();
        move |head: RequestHead<'_>| -> Result<Option<Key>, KeyError> {
            if head.headers().contains_key("x-signal") {
                arrived.notify_one();
            }
            Ok(Some(Key::from(&b"one client"[..])))
        }
    };
    let layer = RateLimitLayer::gcra(Quota::per_minute(10))
        .key(key)
        .clock(ManualClock::new())
        .store(patient(&redis).await);
    let permits = Arc::new(tokio::sync::Semaphore::new(1));
    let limited = ServiceBuilder::new()
        .layer(layer)
        .layer(GlobalConcurrencyLimitLayer::with_semaphore(permits.clone()));
    let app = Router::new()
        .route("/limited", get(|| async { "limited" }).layer(limited))
        .route(
            "/free",
            get(|| async { "free" }).layer(GlobalConcurrencyLimitLayer::with_semaphore(permits)),
        );
    let url = web::serve(app).await;
    let client = web::client();
    let resp = client.get(format!("{url}/limited")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    redis.pause();
    let waiting = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            let resp = client
                .get(format!("{url}/limited"))
                .header("x-signal", "1")
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    });
    arrived.notified().await;
    let started = Instant::now();
    let resp = client.get(format!("{url}/free")).send().await.unwrap();
    let waited = started.elapsed();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), "free");
    assert!(
        waited < Duration::from_secs(2),
        "the free route waited {waited:?} for a request waiting for Redis"
    );
    assert!(!waiting.is_finished(), "the limited request still waits");
    redis.resume();
    assert_eq!(
        waiting.await.unwrap(),
        (StatusCode::OK, "limited".to_owned())
    );
}

/// Sends requests of `client` until one passes, giving the release of its slot (on a task of
/// its own) time to reach Redis; bounded, and each try is a round trip, not a sleep.
async fn passes_once_freed<S>(svc: &S, client: &str) -> S::Response
where
    S: Service<Request<String>, Response = Response<tollgate::layer::ResponseBody<String>>> + Clone,
    S::Error: std::fmt::Debug,
{
    for _ in 0..1000 {
        let resp = svc.clone().oneshot(from(client)).await.unwrap();
        if resp.status() == StatusCode::OK {
            return resp;
        }
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        tokio::task::yield_now().await;
    }
    panic!("{client}: its slot never came back");
}

/// An in-flight limit of 1 on Redis over a concurrency limit of 1. A request admitted after a
/// wait for Redis takes its slot on admission, waits for the permit (taken meanwhile by a path
/// that bypasses the limit) while holding that slot, runs the handler once, and gives the slot
/// back once: one request holds it again, the next is refused.
async fn an_admitted_request_readies_the_inner_service_and_holds_one_slot() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let handler = Handler::new();
    let inner = ConcurrencyLimit::new(handler.clone(), 1);
    let svc = InFlightLayer::new(1)
        .key(Header::new("x-client"))
        .clock(ManualClock::new())
        .store(patient(&redis).await)
        .layer(inner.clone());
    let resp = svc.clone().oneshot(from("warm")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);

    redis.pause();
    let mut first = Box::pin(svc.clone().oneshot(from("k")));
    assert!(poll_once(&mut first).is_pending(), "waits for Redis");
    let mut second = Box::pin(svc.clone().oneshot(from("k")));
    assert!(poll_once(&mut second).is_pending(), "waits for Redis");
    // A path that bypasses the limit takes the permit while both wait.
    let mut bypass = inner.clone();
    assert!(
        bypass
            .poll_ready(&mut Context::from_waker(Waker::noop()))
            .is_ready(),
        "the requests waiting for Redis hold the permit"
    );
    redis.resume();
    // Redis answers in order: the first took the one slot, the second is refused at once,
    // though the permit is taken.
    let resp = second.await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // The first is admitted and waits for the permit.
    assert!(poll_once(&mut first).is_pending(), "waits for the permit");
    assert_eq!(handler.calls(), 1);
    drop(bypass);
    let resp = first.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(handler.calls(), 2, "the handler ran once for it");
    // Its slot is held until its response ends.
    let refused = svc.clone().oneshot(from("k")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(resp);
    // Given back once: one request holds it again, the next is refused.
    let held = passes_once_freed(&svc, "k").await;
    let refused = svc.clone().oneshot(from("k")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    assert!(ready_at_once(&inner), "no permit kept");
}

/// A request admitted after a wait for Redis whose inner service then fails to get ready: the
/// inner service's error comes out of the layer as it is, the handler never runs, and the slot
/// its admission took comes back.
async fn a_readiness_error_after_admission_gives_the_slot_back() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let handler = Handler::new();
    let svc = InFlightLayer::new(1)
        .key(Header::new("x-client"))
        .clock(ManualClock::new())
        .store(patient(&redis).await)
        .layer(handler.clone());
    let resp = svc.clone().oneshot(from("warm")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);

    redis.pause();
    let mut failing = Box::pin(svc.clone().oneshot(from("k")));
    assert!(poll_once(&mut failing).is_pending(), "waits for Redis");
    handler.break_readiness(true);
    redis.resume();
    assert_eq!(failing.await.unwrap_err(), Broken);
    assert_eq!(handler.calls(), 1, "the handler never ran for it");
    handler.break_readiness(false);
    let held = passes_once_freed(&svc, "k").await;
    let refused = svc.clone().oneshot(from("k")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "one slot");
    drop(held);
}

/// `count_if` after waits for Redis, over a concurrency limit of 1: a response that does not
/// count gives its capacity back once, one that counts keeps it, and a readiness error after
/// admission counts, as an error from the call does.
async fn count_if_counts_exactly_after_waits_for_redis() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let handler = Handler::new();
    let inner = ConcurrencyLimit::new(handler.clone(), 1);
    let svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .key(Header::new("x-client"))
        .clock(ManualClock::new())
        .store(patient(&redis).await)
        .count_if(|response| !response.status.is_success())
        .layer(inner.clone());
    let resp = svc.clone().oneshot(from("warm")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    let after_a_wait = |expected: StatusCode| {
        let (svc, inner) = (svc.clone(), inner.clone());
        let redis = &redis;
        async move {
            redis.pause();
            let mut waiting = Box::pin(svc.oneshot(from("k")));
            assert!(poll_once(&mut waiting).is_pending(), "waits for Redis");
            assert!(
                ready_at_once(&inner),
                "the request waiting for Redis holds the permit"
            );
            redis.resume();
            let resp = waiting.await.unwrap();
            assert_eq!(resp.status(), expected);
            resp.headers()["ratelimit"].to_str().unwrap().to_owned()
        }
    };
    // A success does not count: the quota is untouched.
    assert_eq!(after_a_wait(StatusCode::OK).await, r#""2/min";r=2;t=0"#);
    assert_eq!(handler.calls(), 2);
    // A failure counts.
    handler.answer(StatusCode::UNAUTHORIZED);
    assert_eq!(
        after_a_wait(StatusCode::UNAUTHORIZED).await,
        r#""2/min";r=1;t=30"#
    );
    assert_eq!(handler.calls(), 3);
    // A readiness error after admission counts.
    redis.pause();
    let mut failing = Box::pin(svc.clone().oneshot(from("k")));
    assert!(poll_once(&mut failing).is_pending(), "waits for Redis");
    handler.break_readiness(true);
    redis.resume();
    assert_eq!(failing.await.unwrap_err(), Broken);
    handler.break_readiness(false);
    assert_eq!(handler.calls(), 3);
    // The quota is spent.
    let resp = svc.clone().oneshot(from("k")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(handler.calls(), 3);
    assert!(ready_at_once(&inner), "no permit kept");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis_async(
            "a_request_waiting_for_redis_holds_no_permit",
            a_request_waiting_for_redis_holds_no_permit,
        ),
        server::needs_redis_async(
            "a_request_waiting_for_redis_holds_no_buffer_slot",
            a_request_waiting_for_redis_holds_no_buffer_slot,
        ),
        server::needs_redis_async(
            "another_route_is_served_while_redis_stalls_over_http",
            another_route_is_served_while_redis_stalls_over_http,
        ),
        server::needs_redis_async(
            "an_admitted_request_readies_the_inner_service_and_holds_one_slot",
            an_admitted_request_readies_the_inner_service_and_holds_one_slot,
        ),
        server::needs_redis_async(
            "a_readiness_error_after_admission_gives_the_slot_back",
            a_readiness_error_after_admission_gives_the_slot_back,
        ),
        server::needs_redis_async(
            "count_if_counts_exactly_after_waits_for_redis",
            count_if_counts_exactly_after_waits_for_redis,
        ),
    ]
}
