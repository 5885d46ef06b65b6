//! Costs settled after the response: the layer reserves the request's cost, the handler
//! reports the true cost through `Usage`, and the layer settles when the response body ends
//! or is dropped (refund below the reservation, debt above it).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::layer::ResponseBody;
use tollgate::{Key, Quota, RateLimitLayer, Usage};
use tower::{Layer, Service, ServiceExt};

/// A body of `chunks` chunks that reports `tokens` per chunk through `usage` as it streams,
/// the way an LLM proxy counts an answer.
struct Streamed {
    chunks: u64,
    tokens: u64,
    usage: Option<Usage>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.chunks == 0 {
            return Poll::Ready(None);
        }
        self.chunks -= 1;
        if let Some(usage) = &self.usage {
            usage.add(self.tokens);
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
            b"data: token\n\n",
        )))))
    }
}

/// A handler whose answer streams `x-chunks` chunks of `x-tokens` tokens each (reported as
/// they go), or reports `x-set` tokens at once, or reports nothing.
fn handler() -> impl Service<
    Request<String>,
    Response = Response<Streamed>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|req: Request<String>| {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        };
        let usage = req.extensions().get::<Usage>().cloned();
        if let (Some(set), Some(usage)) = (header("x-set"), &usage) {
            usage.set(set);
        }
        let body = Streamed {
            chunks: header("x-chunks").unwrap_or(0),
            tokens: header("x-tokens").unwrap_or(0),
            usage,
        };
        let status = header("x-status").map_or(StatusCode::OK, |s| {
            StatusCode::from_u16(s as u16).unwrap_or(StatusCode::OK)
        });
        async move {
            let mut response = Response::new(body);
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        }
    })
}

type Svc =
    tower::util::BoxCloneService<Request<String>, Response<ResponseBody<Streamed>>, Infallible>;

/// 60 tokens a minute (one a second, 60 at once), per `x-key`, reserving `x-estimate`.
fn tokens(layer: RateLimitLayer, clock: &ManualClock) -> Svc {
    let layer = layer.key(Header::new("x-key")).clock(clock.clone()).cost(
        |_: &Key, head: RequestHead<'_>| {
            head.headers()
                .get("x-estimate")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        },
    );
    Svc::new(layer.layer(handler()))
}

fn per_minute() -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_minute(60).named("tokens")).settle()
}

fn request(headers: &[(&str, &str)]) -> Request<String> {
    let mut req = Request::builder().uri("/v1/chat/completions");
    req = req.header("x-key", "k");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.body(String::new()).unwrap()
}

/// Sends `headers`, reads the whole body; the status, `RateLimit` and `Retry-After`.
async fn send(svc: &Svc, headers: &[(&str, &str)]) -> (StatusCode, String, Option<String>) {
    let response = svc.clone().oneshot(request(headers)).await.unwrap();
    let (parts, body) = response.into_parts();
    body.collect().await.unwrap();
    let header = |name| {
        parts
            .headers
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    (
        parts.status,
        header("ratelimit").unwrap_or_default(),
        header("retry-after"),
    )
}

/// The key's remaining tokens, from the headers of a request that reserves none.
async fn remaining(svc: &Svc) -> u64 {
    let (_, rate, _) = send(svc, &[("x-estimate", "0")]).await;
    let r = rate.split(";r=").nth(1).expect("an r= parameter");
    r.split(';').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_cost_under_the_reservation_is_given_back_when_the_body_ends() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    let (status, rate, _) = send(&svc, &[("x-estimate", "20"), ("x-set", "5")]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        rate.contains(";r=40;"),
        "the headers show the reservation: {rate}"
    );
    assert_eq!(remaining(&svc).await, 55, "5 of 60 used once settled");
}

#[tokio::test]
async fn a_cost_over_the_reservation_is_a_debt_paid_at_the_quotas_rate() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    let (status, _, _) = send(&svc, &[("x-estimate", "10"), ("x-set", "90")]).await;
    assert_eq!(status, StatusCode::OK);
    // 90 used of 60 at once: 30 tokens of debt, paid at one a second.
    let (status, _, retry) = send(&svc, &[("x-estimate", "1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        retry.as_deref(),
        Some("31"),
        "30 s of debt and 1 s for the token"
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        send(&svc, &[("x-estimate", "1")]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(send(&svc, &[("x-estimate", "1")]).await.0, StatusCode::OK);
    assert_eq!(remaining(&svc).await, 0);
}

#[tokio::test]
async fn a_streamed_body_settles_what_it_counted_by_its_end() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    let headers = [("x-estimate", "10"), ("x-chunks", "4"), ("x-tokens", "7")];
    let response = svc.clone().oneshot(request(&headers)).await.unwrap();
    // Nothing settled while the answer streams: the reservation holds.
    assert_eq!(remaining(&svc).await, 50);
    response.into_body().collect().await.unwrap();
    assert_eq!(remaining(&svc).await, 32, "28 tokens streamed");
}

#[tokio::test]
async fn a_body_dropped_early_settles_what_was_reported_until_then() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    let headers = [("x-estimate", "30"), ("x-chunks", "5"), ("x-tokens", "2")];
    let response = svc.clone().oneshot(request(&headers)).await.unwrap();
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    body.frame().await.unwrap().unwrap();
    drop(body);
    assert_eq!(
        remaining(&svc).await,
        56,
        "4 tokens streamed before the client left"
    );
}

#[tokio::test]
async fn a_request_whose_usage_is_never_reported_keeps_its_reservation() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    send(&svc, &[("x-estimate", "25")]).await;
    assert_eq!(remaining(&svc).await, 35);
    // And one whose body is dropped before it reports anything.
    let response = svc
        .clone()
        .oneshot(request(&[
            ("x-estimate", "5"),
            ("x-chunks", "3"),
            ("x-tokens", "9"),
        ]))
        .await
        .unwrap();
    drop(response);
    assert_eq!(remaining(&svc).await, 30);
}

#[tokio::test]
async fn a_response_that_does_not_count_gives_the_whole_reservation_back() {
    let clock = ManualClock::new();
    let layer = per_minute().count_if(|parts| parts.status.is_success());
    let svc = tokens(layer, &clock);
    let failed = [("x-estimate", "20"), ("x-set", "500"), ("x-status", "502")];
    assert_eq!(send(&svc, &failed).await.0, StatusCode::BAD_GATEWAY);
    assert_eq!(
        remaining(&svc).await,
        60,
        "an upstream failure costs nothing"
    );
    send(&svc, &[("x-estimate", "20"), ("x-set", "12")]).await;
    assert_eq!(remaining(&svc).await, 48);
}

#[tokio::test]
async fn tiers_are_each_charged_the_true_cost() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra([
        Quota::per_minute(60).named("tpm"),
        Quota::per_day(100).named("tpd"),
    ])
    .settle();
    let svc = tokens(layer, &clock);
    send(&svc, &[("x-estimate", "10"), ("x-set", "50")]).await;
    // A minute later the per-minute tier is whole again; the day has 50 left.
    clock.advance(Duration::from_secs(60));
    let (status, rate, _) = send(&svc, &[("x-estimate", "0")]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(rate.contains("\"tpd\";r=50;"), "{rate}");
    send(&svc, &[("x-estimate", "10"), ("x-set", "60")]).await;
    clock.advance(Duration::from_secs(60));
    // The day's tier is 10 in debt: denied for what 11 of 100 a day take.
    let (status, _, retry) = send(&svc, &[("x-estimate", "1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let day = 86_400 / 100;
    assert_eq!(
        retry,
        Some((11 * day - 120).to_string()),
        "two minutes have passed"
    );
}

#[tokio::test]
async fn without_settle_a_request_carries_no_usage() {
    let seen = tower::service_fn(|req: Request<String>| async move {
        Ok::<_, Infallible>(Response::new(
            req.extensions().get::<Usage>().is_some().to_string(),
        ))
    });
    let plain = RateLimitLayer::gcra(Quota::per_minute(60)).key(Header::new("x-key"));
    let response = plain.layer(seen).oneshot(request(&[])).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "false");
    let settled = RateLimitLayer::gcra(Quota::per_minute(60))
        .key(Header::new("x-key"))
        .settle();
    let response = settled.layer(seen).oneshot(request(&[])).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "true");
}

#[tokio::test]
async fn a_dry_run_settles_nothing() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute().dry_run(true), &clock);
    send(&svc, &[("x-estimate", "60"), ("x-set", "60")]).await;
    send(&svc, &[("x-estimate", "1"), ("x-set", "500")]).await;
    assert_eq!(remaining(&svc).await, 0);
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        remaining(&svc).await,
        10,
        "no debt: the denied request was not settled"
    );
}

#[test]
fn algorithms_that_cannot_carry_a_debt_are_refused_where_the_layer_is_built() {
    let quota = Quota::per_minute(60);
    type Make = fn(Quota) -> RateLimitLayer;
    let layers: [(&str, Make); 4] = [
        ("fixed window", RateLimitLayer::fixed_window),
        ("sliding window", RateLimitLayer::sliding_window),
        ("sliding log", RateLimitLayer::sliding_log),
        ("hybrid", RateLimitLayer::hybrid),
    ];
    for (name, make) in layers {
        let built = std::panic::catch_unwind(|| make(quota.clone()).settle());
        let message = built.err().map(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        });
        let message = message.unwrap_or_else(|| panic!("{name} was not refused"));
        assert!(
            message.contains("RateLimitLayer::settle") && message.contains("gcra"),
            "{name}: {message}"
        );
    }
    for make in [
        RateLimitLayer::gcra,
        RateLimitLayer::token_bucket,
        RateLimitLayer::leaky_bucket,
    ] {
        let _ = make(quota.clone()).settle();
    }
}
