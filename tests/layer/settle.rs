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

use crate::support::stores::SlowStore;

/// A body of `chunks` chunks that reports `tokens` per chunk through `usage` as it streams,
/// the way an LLM proxy counts an answer.
pub(super) struct Streamed {
    pub(super) chunks: u64,
    pub(super) tokens: u64,
    pub(super) usage: Option<Usage>,
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
pub(super) fn handler() -> impl Service<
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

pub(super) type Svc =
    tower::util::BoxCloneService<Request<String>, Response<ResponseBody<Streamed>>, Infallible>;

/// `layer` per `x-key` on `clock`, reserving `x-estimate`.
pub(super) fn configured(layer: RateLimitLayer, clock: &ManualClock) -> RateLimitLayer {
    let estimate = |_: &Key, head: RequestHead<'_>| {
        head.headers()
            .get("x-estimate")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    };
    layer
        .key(Header::new("x-key"))
        .clock(clock.clone())
        .cost(estimate)
}

/// The handler behind `layer` configured on `clock`.
pub(super) fn tokens(layer: RateLimitLayer, clock: &ManualClock) -> Svc {
    Svc::new(configured(layer, clock).layer(handler()))
}

pub(super) fn per_minute() -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_minute(60).named("tokens")).settle()
}

pub(super) fn request(headers: &[(&str, &str)]) -> Request<String> {
    let mut req = Request::builder().uri("/v1/chat/completions");
    req = req.header("x-key", "k");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.body(String::new()).unwrap()
}

/// Sends `headers`, reads the whole body; the status, `RateLimit` and `Retry-After`.
pub(super) async fn send(
    svc: &Svc,
    headers: &[(&str, &str)],
) -> (StatusCode, String, Option<String>) {
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
pub(super) async fn remaining(svc: &Svc) -> u64 {
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

/// A dry run of `layer` settles nothing: a denied request let through incurs no debt.
async fn a_dry_run_of_settles_nothing(layer: RateLimitLayer) {
    let clock = ManualClock::new();
    let svc = tokens(layer.dry_run(true), &clock);
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

#[tokio::test]
async fn a_dry_run_settles_nothing() {
    a_dry_run_of_settles_nothing(per_minute()).await;
}

#[tokio::test]
async fn a_dry_run_settles_nothing_when_the_store_answers_later() {
    // Over a store whose checks are pending first (as a remote store's are).
    a_dry_run_of_settles_nothing(per_minute().store(SlowStore::default())).await;
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

#[tokio::test]
async fn a_handle_peeks_a_keys_debt_and_a_reset_forgives_it() {
    let clock = ManualClock::new();
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(handler()));
    send(&svc, &[("x-estimate", "1"), ("x-set", "100")]).await;
    let standing = handle.peek("k").await.unwrap();
    assert!(!standing.allowed, "40 tokens of debt");
    assert_eq!(standing.retry_after, Some(Duration::from_secs(40)));
    handle.reset("k").await.unwrap();
    assert_eq!(remaining(&svc).await, 60);
}

#[tokio::test]
async fn a_plans_request_settles_on_its_plan() {
    let clock = ManualClock::new();
    let (pro, layer) = with_pro_plan(&clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(handler()));
    let req = |key: &'static str, set: &'static str| {
        let mut req = request(&[("x-estimate", "10"), ("x-set", set)]);
        req.headers_mut().insert("x-key", key.parse().unwrap());
        req
    };
    let response = svc.clone().oneshot(req("pro", "400")).await.unwrap();
    response.into_body().collect().await.unwrap();
    let standing = handle.peek_plan(pro, "pro").await.unwrap();
    assert_eq!(standing.remaining, 200, "400 of the plan's 600 used");
    assert_eq!(remaining(&svc).await, 60, "the layer's own quota untouched");
}

#[tokio::test]
async fn a_request_reserving_nothing_is_charged_what_it_reports() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    send(&svc, &[("x-estimate", "0"), ("x-set", "45")]).await;
    assert_eq!(remaining(&svc).await, 15);
}

#[tokio::test]
async fn a_shaped_request_settles_after_its_wait() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_minute(60).named("tokens"))
        .max_delay(Duration::from_secs(10))
        .settle();
    let svc = tokens(layer, &clock);
    send(&svc, &[("x-estimate", "60"), ("x-set", "60")]).await;
    // Five tokens' wait: the request is delayed, then reports 1 and gives 4 back.
    let waits = svc
        .clone()
        .oneshot(request(&[("x-estimate", "5"), ("x-set", "1")]));
    let pending = tokio::spawn(async move {
        let response = waits.await.unwrap();
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    });
    tokio::task::yield_now().await;
    clock.advance(Duration::from_secs(5));
    assert_eq!(pending.await.unwrap(), StatusCode::OK);
    // 61 used, 5 earned back by the end of the wait: 56 owed, 4 left.
    assert_eq!(remaining(&svc).await, 4);
    clock.advance(Duration::from_secs(4));
    assert_eq!(remaining(&svc).await, 8);
}

#[tokio::test]
async fn a_debt_made_under_old_quotas_stays_after_a_live_change() {
    let clock = ManualClock::new();
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(handler()));
    let streaming = svc
        .clone()
        .oneshot(request(&[
            ("x-estimate", "10"),
            ("x-chunks", "1"),
            ("x-tokens", "100"),
        ]))
        .await
        .unwrap();
    handle
        .set_quotas(Quota::per_minute(120).named("tokens"))
        .unwrap();
    // The key is carried over to the new quotas (10 reserved) before the answer ends.
    assert_eq!(remaining(&svc).await, 110);
    streaming.into_body().collect().await.unwrap();
    // 100 used of 120: the settlement reaches the quotas in force.
    assert_eq!(remaining(&svc).await, 20);
}

/// A reset forgets what the key used, its reservations in flight included: a request in
/// flight then settles by its difference alone. Its cost above the reservation is charged
/// (the tokens were used), and a cost below gives nothing back to the fresh key.
#[tokio::test]
async fn a_settlement_after_a_reset_charges_the_overspend_alone() {
    let clock = ManualClock::new();
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(handler()));
    let over = [("x-estimate", "10"), ("x-chunks", "1"), ("x-tokens", "100")];
    let under = [("x-estimate", "40"), ("x-chunks", "1"), ("x-tokens", "5")];
    let over = svc.clone().oneshot(request(&over)).await.unwrap();
    let under = svc.clone().oneshot(request(&under)).await.unwrap();
    handle.reset("k").await.unwrap();
    assert_eq!(remaining(&svc).await, 60);
    under.into_body().collect().await.unwrap();
    assert_eq!(
        remaining(&svc).await,
        60,
        "nothing given back past a fresh key's budget"
    );
    over.into_body().collect().await.unwrap();
    let (status, _, retry) = send(&svc, &[("x-estimate", "1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        retry.as_deref(),
        Some("31"),
        "90 charged of 60: 30 s of debt and 1 s"
    );
}

/// A key in debt blocked for less than its debt is told to retry when the debt is paid, not
/// when the block ends (it would be denied again); blocked for longer, when the block ends.
#[tokio::test]
async fn a_blocked_key_in_debt_retries_when_both_are_over() {
    let clock = ManualClock::new();
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(handler()));
    send(&svc, &[("x-estimate", "1"), ("x-set", "100")]).await;
    handle.block("k", Duration::from_secs(10)).await.unwrap();
    let (status, _, retry) = send(&svc, &[("x-estimate", "0")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        retry.as_deref(),
        Some("40"),
        "40 s of debt outlast the block"
    );
    handle.block("k", Duration::from_secs(90)).await.unwrap();
    let (_, _, retry) = send(&svc, &[("x-estimate", "0")]).await;
    assert_eq!(retry.as_deref(), Some("90"));
}

/// Two settling layers on one route (a per-minute limit inside a per-day one): the handler
/// sees one `Usage`, and what it reports settles on both.
#[tokio::test]
async fn stacked_settling_layers_both_settle_what_the_handler_reports() {
    let clock = ManualClock::new();
    let day = configured(
        RateLimitLayer::gcra(Quota::per_day(1000).named("day")).settle(),
        &clock,
    );
    let minute = configured(per_minute(), &clock);
    let (day_handle, minute_handle) = (day.handle(), minute.handle());
    let svc = tower::ServiceBuilder::new()
        .layer(day)
        .layer(minute)
        .service(handler());
    let response = svc
        .oneshot(request(&[("x-estimate", "10"), ("x-set", "50")]))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(minute_handle.peek("k").await.unwrap().remaining, 10);
    assert_eq!(day_handle.peek("k").await.unwrap().remaining, 950);
}

/// The tokens layer on `clock` with a plan of 600 a minute for the key `pro`; the plan too.
pub(super) fn with_pro_plan(clock: &ManualClock) -> (Quota, RateLimitLayer) {
    let pro = Quota::per_minute(600).named("pro");
    let plan = pro.clone();
    let layer = per_minute().quota_for(move |key: &Key, _: RequestHead<'_>| {
        if key.as_bytes() == Some(b"pro".as_slice()) {
            plan.clone()
        } else {
            Quota::per_minute(60).named("tokens")
        }
    });
    (pro, configured(layer, clock))
}
