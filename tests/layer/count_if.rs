//! Counting only some outcomes: failed logins are limited, successful ones cost nothing.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::PeerAddr;
use tollgate::{Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use crate::support::stores::SlowStore;

/// A login handler: the password is in the `x-password` header, and only "right" is right.
fn login(
    calls: &Arc<AtomicUsize>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future = impl Send>
       + Clone {
    let calls = calls.clone();
    tower::service_fn(move |req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let ok = req
            .headers()
            .get("x-password")
            .is_some_and(|p| p == "right");
        async move {
            let mut response =
                Response::new(String::from(if ok { "welcome" } else { "wrong password" }));
            if !ok {
                *response.status_mut() = StatusCode::UNAUTHORIZED;
            }
            Ok::<_, Infallible>(response)
        }
    })
}

fn attempt(password: &str) -> Request<String> {
    let mut req = Request::builder()
        .uri("/login")
        .header("x-password", password)
        .body(String::new())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse::<SocketAddr>().unwrap()));
    req
}

async fn outcome<S>(svc: &S, password: &str) -> (StatusCode, String)
where
    S: Service<
            Request<String>,
            Response = Response<tollgate::layer::ResponseBody<String>>,
            Error = Infallible,
        > + Clone,
{
    let response = svc.clone().oneshot(attempt(password)).await.unwrap();
    let rate = response
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (response.status(), rate)
}

/// Two failed logins per minute.
fn failed_logins() -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::new(2, Duration::from_secs(60)).named("login"))
}

#[tokio::test]
async fn successes_never_consume_failures_do_and_the_refusal_comes_first() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = failed_logins()
        .clock(clock.clone())
        .count_if(|response| response.status == StatusCode::UNAUTHORIZED)
        .layer(login(&calls));

    // Successes cost nothing: the headers show the full quota after each.
    for _ in 0..10 {
        assert_eq!(
            outcome(&svc, "right").await,
            (StatusCode::OK, "\"login\";r=2;t=0".to_owned())
        );
    }
    // Failures count.
    assert_eq!(
        outcome(&svc, "wrong").await,
        (StatusCode::UNAUTHORIZED, "\"login\";r=1;t=30".to_owned())
    );
    assert_eq!(
        outcome(&svc, "right").await,
        (StatusCode::OK, "\"login\";r=1;t=30".to_owned())
    );
    assert_eq!(
        outcome(&svc, "wrong").await,
        (StatusCode::UNAUTHORIZED, "\"login\";r=0;t=60".to_owned())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 13);
    // Failures spent: refused before the handler runs, even with the right password.
    let (status, _) = outcome(&svc, "right").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        outcome(&svc, "wrong").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(calls.load(Ordering::SeqCst), 13);
    // One failure's worth comes back after 30 s.
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        outcome(&svc, "right").await,
        (StatusCode::OK, "\"login\";r=1;t=30".to_owned())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 14);
}

/// A dry run of `layer` (two failures a minute) where a request past the quota goes on
/// without taking capacity: its success gives none back, whatever `name` of store it is on.
async fn a_dry_run_gives_nothing_back(layer: RateLimitLayer, name: &str) {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = layer
        .clock(clock.clone())
        .count_if(|response| response.status == StatusCode::UNAUTHORIZED)
        .dry_run(true)
        .layer(login(&calls));
    outcome(&svc, "wrong").await;
    outcome(&svc, "wrong").await;
    for _ in 0..3 {
        assert_eq!(
            outcome(&svc, "right").await,
            (StatusCode::OK, "\"login\";r=0;t=60".to_owned()),
            "{name}"
        );
    }
    assert_eq!(
        outcome(&svc, "wrong").await,
        (StatusCode::UNAUTHORIZED, "\"login\";r=0;t=60".to_owned()),
        "{name}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 6, "{name}");
}

#[tokio::test]
async fn a_refund_never_gives_back_more_than_was_taken() {
    // In a dry run, a request past the quota goes on without taking capacity; its success
    // must not give any back.
    a_dry_run_gives_nothing_back(failed_logins(), "memory").await;
}

#[tokio::test]
async fn a_dry_run_gives_nothing_back_on_a_window_whatever_the_store() {
    // On a fixed window (whose refund finds the window by the admission's receipt), over a
    // store that answers at once and one whose checks are pending first (as a remote store's
    // are).
    let window =
        || RateLimitLayer::fixed_window(Quota::new(2, Duration::from_secs(60)).named("login"));
    a_dry_run_gives_nothing_back(window(), "memory").await;
    a_dry_run_gives_nothing_back(window().store(SlowStore::default()), "slow store").await;
}

#[tokio::test]
async fn without_count_if_every_request_counts() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = failed_logins().clock(clock.clone()).layer(login(&calls));
    assert_eq!(outcome(&svc, "right").await.0, StatusCode::OK);
    assert_eq!(outcome(&svc, "right").await.0, StatusCode::OK);
    assert_eq!(
        outcome(&svc, "right").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}
