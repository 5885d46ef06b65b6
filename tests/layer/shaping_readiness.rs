//! What a request waiting in the layer holds of the inner service: nothing. A request delayed
//! by shaping, or refused, gives back the readiness `poll_ready` took (a `ConcurrencyLimit`
//! permit), so one client's queue never blocks another client; the delayed request readies
//! the inner service again once its turn comes. Time moves by a `ManualClock`, never by
//! sleeping.

use crate::support::drive;
use crate::support::stores::SlowStore;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::{Header, KeyError, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::limit::{ConcurrencyLimit, ConcurrencyLimitLayer, GlobalConcurrencyLimitLayer};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use drive::poll_once;

fn ok(
    calls: &Arc<AtomicUsize>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    let calls = calls.clone();
    tower::service_fn(move |_req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    })
}

fn from(client: &str) -> Request<String> {
    Request::builder()
        .header("x-client", client)
        .body(String::new())
        .unwrap()
}

/// 10 a second with a burst of 1, shaped up to 10 s: one request passes at once, the next
/// ones wait 100 ms each.
fn shaped(clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_second(10).with_burst(1))
        .key(Header::new("x-client"))
        .max_delay(Duration::from_secs(10))
        .clock(clock.clone())
}

/// One client queues 64 requests behind a concurrency limit of 1; another client's request is
/// served at once, while they wait. Then the queued ones are served in their turn.
#[tokio::test]
async fn requests_waiting_their_turn_hold_no_permit() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(shaped(&clock))
        .layer(ConcurrencyLimitLayer::new(1))
        .service(ok(&calls));
    let first = svc.clone().oneshot(from("greedy")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let mut queued: Vec<_> = (0..64)
        .map(|_| Box::pin(svc.clone().oneshot(from("greedy"))))
        .collect();
    for fut in &mut queued {
        assert!(poll_once(fut).is_pending(), "waits its turn");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let mut other = Box::pin(svc.clone().oneshot(from("polite")));
    let Poll::Ready(Ok(resp)) = poll_once(&mut other) else {
        panic!("another client's request waits behind a queue it is not in");
    };
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Each queued request goes on once its turn comes, readying the inner service again.
    for (i, fut) in queued.iter_mut().enumerate() {
        clock.advance(Duration::from_millis(100));
        let Poll::Ready(Ok(resp)) = poll_once(fut) else {
            panic!("queued request {i} goes on in its turn");
        };
        assert_eq!(resp.status(), StatusCode::OK);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 66);
}

/// A service kept and called again (not a clone per request): after it hands a request over to
/// a delay or refuses one, `poll_ready` finds the permit free for the next request.
#[tokio::test]
async fn a_kept_service_gives_back_its_readiness_when_it_does_not_call() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::gcra(Quota::per_second(10).with_burst(1))
                .key(Header::new("x-client"))
                .max_delay(Duration::from_millis(100))
                .clock(clock.clone()),
        )
        .layer(ConcurrencyLimitLayer::new(1))
        .service(ok(&calls));
    let mut cx = Context::from_waker(Waker::noop());

    assert!(svc.poll_ready(&mut cx).is_ready());
    let first = svc.call(from("a")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // Delayed 100 ms.
    assert!(svc.poll_ready(&mut cx).is_ready());
    let mut delayed = Box::pin(svc.call(from("a")));
    assert!(poll_once(&mut delayed).is_pending());
    // Refused: past the 100 ms it may wait.
    assert!(svc.poll_ready(&mut cx).is_ready());
    let refused = svc.call(from("a")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // A sibling service (another connection) finds the permit free.
    let mut sibling = svc.clone();
    assert!(
        sibling.poll_ready(&mut cx).is_ready(),
        "the permit was kept"
    );
    let resp = sibling.call(from("b")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    clock.advance(Duration::from_millis(100));
    let Poll::Ready(Ok(resp)) = poll_once(&mut delayed) else {
        panic!("the delayed request goes on after 100 ms");
    };
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// Over HTTP: while one client's request waits its turn in the layer, in front of a
/// concurrency limit of 1, another client's request is answered.
#[tokio::test]
async fn another_client_is_served_during_a_delay_over_http() {
    let clock = ManualClock::new();
    // The key extractor tells the test when the request that will wait has reached the layer:
    // by the time the test runs again (one thread), the layer has put it to wait.
    let arrived = Arc::new(tokio::sync::Notify::new());
    let key = {
        let arrived = arrived.clone();
        move |head: RequestHead<'_>| -> Result<Option<Key>, KeyError> {
            let client = head
                .headers()
                .get("x-client")
                .map(|v| Key::from(v.as_bytes()));
            if head.headers().contains_key("x-signal") {
                arrived.notify_one();
            }
            Ok(client)
        }
    };
    let layer = RateLimitLayer::gcra(Quota::per_second(1).with_burst(1))
        .key(key)
        .max_delay(Duration::from_secs(10))
        .clock(clock.clone());
    // The concurrency limit right inside the layer (axum's `Route` between them would be
    // always ready), one semaphore however many times axum applies the stack.
    let stack = ServiceBuilder::new()
        .layer(layer)
        .layer(GlobalConcurrencyLimitLayer::new(1));
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(stack);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    // The timeout only keeps a broken server from hanging the test run.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    let resp = client
        .get(&url)
        .header("x-client", "a")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let waiting = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            let resp = client
                .get(&url)
                .header("x-client", "a")
                .header("x-signal", "1")
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    });
    arrived.notified().await;

    let resp = client
        .get(&url)
        .header("x-client", "b")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), "hello");
    assert!(!waiting.is_finished(), "client a still waits its turn");

    clock.advance(Duration::from_secs(1));
    assert_eq!(waiting.await.unwrap(), (StatusCode::OK, "hello".to_owned()));
}

/// The documented choice: `poll_ready` waits for the inner service, so a request that will be
/// refused also waits for it. With `LoadShed` between the layer and a busy inner service,
/// refusals are answered at once, and allowed requests shed while it is busy.
#[tokio::test]
async fn with_load_shed_inside_refusals_do_not_wait_for_the_inner_service() {
    let clock = ManualClock::new();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(Some(released)));
    // A handler whose first call is busy until released.
    let handler = tower::service_fn(move |_req: Request<String>| {
        let wait = released.lock().unwrap().take();
        async move {
            if let Some(wait) = wait {
                let _ = wait.await;
            }
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }
    });
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::gcra(Quota::per_minute(1))
                .key(Header::new("x-client"))
                .clock(clock.clone()),
        )
        .layer(tower::load_shed::LoadShedLayer::new())
        .layer(ConcurrencyLimitLayer::new(1))
        .service(handler);
    let mut busy = Box::pin(svc.clone().oneshot(from("a")));
    assert!(
        poll_once(&mut busy).is_pending(),
        "the inner service is busy"
    );

    // Client a is over its limit: refused at once, though the inner service is busy.
    let mut refused = Box::pin(svc.clone().oneshot(from("a")));
    let Poll::Ready(Ok(resp)) = poll_once(&mut refused) else {
        panic!("a refusal waits for the inner service");
    };
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // Client b is allowed, and shed by `LoadShed` while the inner service is busy.
    let mut shed = Box::pin(svc.clone().oneshot(from("b")));
    assert!(matches!(poll_once(&mut shed), Poll::Ready(Err(_))));

    release.send(()).unwrap();
    assert!(matches!(busy.await, Ok(resp) if resp.status() == StatusCode::OK));
}

/// A request the layer answers for a key error (here a missing header: 400) gives back the
/// permit its `poll_ready` took, like a refusal.
#[tokio::test]
async fn a_key_error_gives_back_its_readiness() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::gcra(Quota::per_second(10)).key(Header::new("x-client")))
        .layer(ConcurrencyLimitLayer::new(1))
        .service(ok(&calls));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    let answered = svc.call(Request::new(String::new())).await.unwrap();
    assert_eq!(answered.status(), StatusCode::BAD_REQUEST);
    let mut sibling = svc.clone();
    assert!(
        sibling.poll_ready(&mut cx).is_ready(),
        "the permit was kept"
    );
    let resp = sibling.call(from("b")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A request waiting for a store that answers later (as Redis does) leaves the permit free
/// while it waits; once admitted, it waits for the permit like a new request, then calls the
/// inner service once.
#[tokio::test]
async fn a_request_waiting_for_its_store_holds_no_permit() {
    let calls = Arc::new(AtomicUsize::new(0));
    let limited = ConcurrencyLimit::new(ok(&calls), 1);
    let mut svc = RateLimitLayer::gcra(Quota::per_second(10))
        .key(Header::new("x-client"))
        .store(SlowStore::default())
        .clock(ManualClock::new())
        .layer(limited.clone());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    // The store's answer is pending: the request waits for it.
    let mut waiting = Box::pin(svc.call(from("a")));
    let mut bypass = limited.clone();
    assert!(
        bypass.poll_ready(&mut cx).is_ready(),
        "the request waiting for its store holds the permit"
    );
    assert!(
        poll_once(&mut waiting).is_pending(),
        "admitted, waits for the permit"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    drop(bypass);
    let Poll::Ready(Ok(resp)) = poll_once(&mut waiting) else {
        panic!("goes on once the permit is free");
    };
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
