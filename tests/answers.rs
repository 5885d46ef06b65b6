//! What denied clients get: a configurable status, a custom response, RFC 9457 problem details,
//! and dry runs that only report.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tollgate::body::ResponseBody;
use tollgate::clock::ManualClock;
use tollgate::key::PeerAddr;
use tollgate::layer::problem_details;
use tollgate::{Decision, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

fn request(grpc: bool) -> Request<String> {
    let mut builder = Request::builder().uri("/orders");
    if grpc {
        builder = builder.header("content-type", "application/grpc");
    }
    let mut req = builder.body(String::new()).unwrap();
    req.extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse::<SocketAddr>().unwrap()));
    req
}

/// A handler that counts its calls and echoes whether the decision it saw allowed it.
fn handler(
    calls: &Arc<AtomicUsize>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future = impl Send>
       + Clone {
    let calls = calls.clone();
    tower::service_fn(move |req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let decision = req.extensions().get::<Decision>().cloned();
        async move {
            Ok::<_, Infallible>(Response::new(format!(
                "{:?}",
                decision.map(|d| (d.allowed, d.remaining))
            )))
        }
    })
}

async fn send<S>(svc: &S, req: Request<String>) -> (Response<ResponseBody<String>>, String)
where
    S: Service<Request<String>, Response = Response<ResponseBody<String>>, Error = Infallible>
        + Clone,
{
    let response = svc.clone().oneshot(req).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (Response::from_parts(parts, ResponseBody::full(bytes)), text)
}

fn header<'a, B>(response: &'a Response<B>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn denials_can_use_another_status() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .layer(handler(&calls));
    assert_eq!(send(&svc, request(false)).await.0.status(), StatusCode::OK);
    let (denied, body) = send(&svc, request(false)).await;
    assert_eq!(denied.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&denied, "retry-after"), Some("60"));
    assert_eq!(header(&denied, "ratelimit"), Some("\"1/min\";r=0;t=60"));
    assert!(body.contains("retry in 60 seconds"), "{body}");
    // gRPC clients still get RESOURCE_EXHAUSTED, not a 503 they would read as UNAVAILABLE.
    let (grpc, _) = send(&svc, request(true)).await;
    assert_eq!(grpc.status(), StatusCode::OK);
    assert_eq!(header(&grpc, "grpc-status"), Some("8"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
#[should_panic(expected = "4xx or 5xx")]
fn a_success_status_for_denials_is_refused() {
    let _ = RateLimitLayer::gcra(Quota::per_minute(1)).status(StatusCode::OK);
}

#[tokio::test]
async fn on_limited_replaces_the_denial_and_keeps_the_headers() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_second(2))
        .clock(ManualClock::new())
        .on_limited(
            |decision: &Decision, head: tollgate::key::RequestHead<'_>| {
                Response::builder()
                    .status(StatusCode::TOO_MANY_REQUESTS)
                    .header("content-type", "text/html")
                    .body(format!(
                        "<p>{} is busy; {} left</p>",
                        head.uri().path(),
                        decision.remaining
                    ))
                    .unwrap()
            },
        )
        .layer(handler(&calls));
    for _ in 0..2 {
        assert_eq!(send(&svc, request(false)).await.0.status(), StatusCode::OK);
    }
    let (denied, body) = send(&svc, request(false)).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body, "<p>/orders is busy; 0 left</p>");
    assert_eq!(header(&denied, "content-type"), Some("text/html"));
    assert_eq!(header(&denied, "retry-after"), Some("1"));
    assert_eq!(header(&denied, "ratelimit"), Some("\"2/s\";r=0;t=1"));
    let (grpc, grpc_body) = send(&svc, request(true)).await;
    assert_eq!(header(&grpc, "grpc-status"), Some("8"));
    assert_eq!(header(&grpc, "grpc-retry-pushback-ms"), Some("500"));
    assert_eq!(grpc_body, "");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn problem_details_are_rfc_9457_json() {
    let calls = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new();
    let svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .clock(clock.clone())
        .on_limited(problem_details)
        .layer(handler(&calls));
    send(&svc, request(false)).await;
    send(&svc, request(false)).await;
    clock.advance(std::time::Duration::from_millis(500));
    let (denied, body) = send(&svc, request(false)).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&denied, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&denied, "retry-after"), Some("30"));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "type": "about:blank",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Too many requests: retry in 30 seconds.",
            "retry_after": 30,
            "limit": 2,
            "remaining": 0,
        })
    );
}

/// A log sink shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn dry_run_refuses_nothing_and_reports_what_it_would_have_done() {
    let log = Captured::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_minute(2).named("orders"))
        .clock(ManualClock::new())
        .dry_run(true)
        .layer(handler(&calls));
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (response, body) = send(&svc, request(false)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("retry-after").is_none());
        seen.push((header(&response, "ratelimit").map(str::to_owned), body));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        seen,
        [
            (
                Some("\"orders\";r=1;t=30".to_owned()),
                "Some((true, 1))".to_owned()
            ),
            (
                Some("\"orders\";r=0;t=60".to_owned()),
                "Some((true, 0))".to_owned()
            ),
            (
                Some("\"orders\";r=0;t=60".to_owned()),
                "Some((false, 0))".to_owned()
            ),
            (
                Some("\"orders\";r=0;t=60".to_owned()),
                "Some((false, 0))".to_owned()
            ),
        ]
    );
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let would = text
        .lines()
        .filter(|l| l.contains("dry run: request would have been rate limited"))
        .collect::<Vec<_>>();
    assert_eq!(would.len(), 2, "{text}");
    assert!(
        would
            .iter()
            .all(|l| l.contains("policy=\"orders\"") && l.contains("retry_after_ms=30000")),
        "{text}"
    );
}
