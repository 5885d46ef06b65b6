//! Attacks on costs settled after the response, in combination with the layer's other
//! options: stacked settling layers, resets, live plan changes, huge costs, handlers that
//! panic or never answer, bodies that fail, and usage reported too late.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tollgate::clock::ManualClock;
use tollgate::layer::ResponseBody;
use tollgate::{Quota, RateLimitLayer, Usage};
use tower::{Layer, ServiceExt};

use super::settle::{
    configured, handler, per_minute, remaining, request, send, tokens, Streamed, Svc,
};

type Stacked = tower::util::BoxCloneService<
    Request<String>,
    Response<ResponseBody<ResponseBody<Streamed>>>,
    Infallible,
>;

/// Two settling layers on one route: the handler reports once, and each layer settles what
/// it reported (the inner layer's `Usage` reports to the outer's too).
#[tokio::test]
async fn stacked_settling_layers_both_charge_the_true_cost() {
    let clock = ManualClock::new();
    let outer = configured(
        RateLimitLayer::gcra(Quota::per_minute(60).named("outer")).settle(),
        &clock,
    );
    let inner = configured(
        RateLimitLayer::gcra(Quota::per_minute(6000).named("inner")).settle(),
        &clock,
    );
    let (outer_handle, inner_handle) = (outer.handle(), inner.handle());
    let svc = Stacked::new(outer.layer(inner.layer(handler())));
    let response = svc
        .oneshot(request(&[("x-estimate", "1"), ("x-set", "100")]))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
    let inner_standing = inner_handle.peek("k").await.unwrap();
    assert_eq!(
        inner_standing.remaining, 5900,
        "the inner layer settled 100"
    );
    let outer_standing = outer_handle.peek("k").await.unwrap();
    assert!(
        !outer_standing.allowed,
        "100 of 60 used: the outer layer must be in debt, has {} left",
        outer_standing.remaining
    );
}

/// Quotas changed while a request streams, the request using less than it reserved: never
/// more than the difference is given back. (Today nothing is: the refund reaches the old
/// quotas; the client loses, never gains.)
#[tokio::test]
async fn an_overestimate_settled_after_a_live_change_gives_back_at_most_the_difference() {
    let clock = ManualClock::new();
    let (handle, svc) = own(&clock);
    let streaming = streaming(&svc, "50", "1", "0").await;
    handle
        .set_quotas(Quota::per_minute(120).named("tokens"))
        .unwrap();
    assert_eq!(remaining(&svc).await, 70, "50 reserved, carried over");
    streaming.into_body().collect().await.unwrap();
    let left = remaining(&svc).await;
    assert!(left <= 120, "never more than a fresh key: {left}");
    assert_eq!(
        left, 70,
        "the refund goes to the quotas that admitted it, replaced since: the key keeps its reservation"
    );
}

/// The largest costs reported, on every algorithm that settles and on tiers: no panic, no
/// wrap-around into a fresh key; the key is in debt, its headers are written, a reset
/// forgives it.
#[tokio::test]
async fn a_cost_of_u64_max_is_a_debt_without_overflow() {
    let max = u64::MAX.to_string();
    let layers = [
        RateLimitLayer::gcra(Quota::per_minute(60).named("tokens")),
        RateLimitLayer::token_bucket(Quota::per_minute(60).named("tokens")),
        RateLimitLayer::leaky_bucket(Quota::per_minute(60).named("tokens")),
        RateLimitLayer::gcra([
            Quota::per_minute(60).named("tpm"),
            Quota::per_day(1000).named("tpd"),
        ]),
    ];
    for layer in layers {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(3600));
        let layer = configured(layer.settle(), &clock);
        let handle = layer.handle();
        let svc = Svc::new(layer.layer(handler()));
        let (status, _, _) = send(&svc, &[("x-estimate", "1"), ("x-set", &max)]).await;
        assert_eq!(status, StatusCode::OK);
        // Streamed: adds that saturate.
        send(
            &svc,
            &[("x-estimate", "0"), ("x-chunks", "3"), ("x-tokens", &max)],
        )
        .await;
        let standing = handle.peek("k").await.unwrap();
        assert!(!standing.allowed, "in debt");
        let (status, _, retry) = send(&svc, &[("x-estimate", "1")]).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        // A debt past the clock's end is "never": refused without a Retry-After.
        let _ = retry;
        clock.advance(Duration::from_secs(365 * 24 * 3600));
        let (status, _, _) = send(&svc, &[("x-estimate", "1")]).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "a year does not pay it"
        );
        handle.reset("k").await.unwrap();
        let (status, _, _) = send(&svc, &[("x-estimate", "1")]).await;
        assert_eq!(status, StatusCode::OK, "a reset forgives it");
    }
}

/// A reservation of u64::MAX never passes, and takes nothing.
#[tokio::test]
async fn a_reservation_of_u64_max_is_refused_and_takes_nothing() {
    let clock = ManualClock::new();
    let svc = tokens(per_minute(), &clock);
    let max = u64::MAX.to_string();
    let (status, _, _) = send(&svc, &[("x-estimate", &max), ("x-set", "0")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(remaining(&svc).await, 60);
}

/// `Usage` reports what it was told, up to the largest cost.
#[test]
fn usage_reports_u64_max_as_set() {
    let usage = Usage::default();
    usage.set(u64::MAX);
    assert_eq!(usage.get(), Some(u64::MAX));
}

/// `add` saturates and never wraps to a small cost.
#[test]
fn usage_add_saturates() {
    let usage = Usage::default();
    usage.add(u64::MAX - 1);
    usage.add(u64::MAX);
    usage.add(7);
    assert!(usage.get().unwrap() >= u64::MAX - 1);
    let usage = Usage::default();
    usage.set(3);
    usage.add(0);
    assert_eq!(usage.get(), Some(3));
}

/// A response future dropped before the response (the client left): the reservation
/// stands, and nothing is left pending.
#[tokio::test]
async fn a_response_future_dropped_before_the_response_keeps_the_reservation() {
    let clock = ManualClock::new();
    let never = tower::service_fn(|_: Request<String>| {
        std::future::pending::<Result<Response<Streamed>, Infallible>>()
    });
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(never));
    let mut future = Box::pin(svc.oneshot(request(&[("x-estimate", "10")])));
    assert!((&mut future).now_or_never().is_none());
    drop(future);
    assert_eq!(handle.peek("k").await.unwrap().remaining, 50);
}

/// A handler that panics before answering: the reservation stands, the limiter goes on.
#[tokio::test]
async fn a_panicking_handler_keeps_the_reservation_and_the_limiter_works() {
    let clock = ManualClock::new();
    let panics = tower::service_fn(|req: Request<String>| async move {
        if let Some(usage) = req.extensions().get::<Usage>() {
            usage.set(500);
        }
        if req.headers().contains_key("x-panic") {
            panic!("the handler failed");
        }
        Ok::<_, Infallible>(Response::new(Streamed {
            chunks: 0,
            tokens: 0,
            usage: None,
        }))
    });
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(panics));
    let call = svc
        .clone()
        .oneshot(request(&[("x-estimate", "10"), ("x-panic", "1")]));
    assert!(tokio::spawn(call).await.unwrap_err().is_panic());
    assert_eq!(
        handle.peek("k").await.unwrap().remaining,
        50,
        "the reservation stands; the 500 reported was never settled"
    );
}

/// A body that reports its usage, then panics mid-stream: dropped while unwinding, it
/// settles what was reported (no double panic, no abort).
struct Panicking(Usage);

impl Body for Panicking {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.set(100);
        panic!("the body failed");
    }
}

#[tokio::test]
async fn a_body_that_panics_settles_what_it_reported() {
    let clock = ManualClock::new();
    let svc = tower::service_fn(|req: Request<String>| {
        let usage = req.extensions().get::<Usage>().cloned();
        async move { Ok::<_, Infallible>(Response::new(Panicking(usage.unwrap_or_default()))) }
    });
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let svc = layer.layer(svc);
    let response = svc.oneshot(request(&[("x-estimate", "10")])).await.unwrap();
    let read = tokio::spawn(async move { response.into_body().collect().await.map(|_| ()) });
    assert!(read.await.unwrap_err().is_panic());
    let standing = handle.peek("k").await.unwrap();
    assert_eq!(
        standing.retry_after,
        Some(Duration::from_secs(40)),
        "100 of 60"
    );
}

/// A body that reports as it streams, then fails: what was reported is settled.
struct Failing {
    usage: Usage,
    sent: bool,
}

impl Body for Failing {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.sent {
            return Poll::Ready(Some(Err(std::io::Error::other("upstream reset"))));
        }
        self.sent = true;
        self.usage.add(30);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"part")))))
    }
}

#[tokio::test]
async fn a_body_that_errors_mid_stream_settles_what_it_reported() {
    let clock = ManualClock::new();
    let svc = tower::service_fn(|req: Request<String>| {
        let usage = req.extensions().get::<Usage>().cloned().unwrap_or_default();
        async move { Ok::<_, Infallible>(Response::new(Failing { usage, sent: false })) }
    });
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let response = layer
        .layer(svc)
        .oneshot(request(&[("x-estimate", "10")]))
        .await
        .unwrap();
    assert!(response.into_body().collect().await.is_err());
    assert_eq!(handle.peek("k").await.unwrap().remaining, 30);
}

/// Usage reported after the body ended (a clone kept by a task) is not settled: the
/// request keeps its reservation. As documented ("until the response body ends"); no panic.
#[tokio::test]
async fn usage_reported_after_the_body_ended_is_ignored() {
    let clock = ManualClock::new();
    let kept: Arc<Mutex<Option<Usage>>> = Arc::default();
    let stash = kept.clone();
    let svc = tower::service_fn(move |req: Request<String>| {
        *stash.lock().unwrap() = req.extensions().get::<Usage>().cloned();
        async move {
            Ok::<_, Infallible>(Response::new(Streamed {
                chunks: 1,
                tokens: 0,
                usage: None,
            }))
        }
    });
    let layer = configured(per_minute(), &clock);
    let handle = layer.handle();
    let response = layer
        .layer(svc)
        .oneshot(request(&[("x-estimate", "5")]))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
    let late = kept.lock().unwrap().take().unwrap();
    late.set(500);
    assert_eq!(handle.peek("k").await.unwrap().remaining, 55);
}

/// With `count_if`, a response that does not count gives back its whole reservation,
/// whatever its handler reported: as documented, a failed answer that streamed a large
/// cost costs nothing.
#[tokio::test]
async fn count_if_forgives_the_usage_of_a_response_that_does_not_count() {
    let clock = ManualClock::new();
    let layer = per_minute().count_if(|parts| parts.status.is_success());
    let svc = tokens(layer, &clock);
    send(
        &svc,
        &[("x-estimate", "10"), ("x-set", "1000"), ("x-status", "500")],
    )
    .await;
    assert_eq!(remaining(&svc).await, 60);
    send(&svc, &[("x-estimate", "10"), ("x-set", "1000")]).await;
    let (status, _, _) = send(&svc, &[("x-estimate", "1")]).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the counted one is a debt"
    );
}

/// A blocked key's request is refused before the handler: no usage, nothing settled. A
/// request streaming when the block starts still settles its debt.
#[tokio::test]
async fn a_block_while_streaming_keeps_the_debt() {
    let clock = ManualClock::new();
    let (handle, svc) = own(&clock);
    let streaming = streaming(&svc, "1", "2", "60").await;
    handle.block("k", Duration::from_secs(5)).await.unwrap();
    streaming.into_body().collect().await.unwrap();
    clock.advance(Duration::from_secs(6));
    let (status, _, retry) = send(&svc, &[("x-estimate", "1")]).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "120 of 60: still in debt"
    );
    assert_eq!(retry.as_deref(), Some("55"));
}

/// A settlement that reaches new quotas before the key came back: what it reserved under
/// the old quotas is kept, and the overspend charged on top.
#[tokio::test]
async fn a_charge_after_a_live_change_before_the_key_returns_keeps_its_reservation() {
    let clock = ManualClock::new();
    let (handle, svc) = own(&clock);
    let streaming = streaming(&svc, "10", "1", "100").await;
    handle
        .set_quotas(Quota::per_minute(120).named("tokens"))
        .unwrap();
    streaming.into_body().collect().await.unwrap();
    assert_eq!(remaining(&svc).await, 20, "100 of 120 used");
}

/// A shaped layer does not let a key in debt through by delaying it: its request waits
/// out the debt and its own cost.
#[tokio::test]
async fn a_shaped_request_waits_out_a_debt() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_minute(60).named("tokens"))
        .max_delay(Duration::from_secs(10))
        .settle();
    let svc = tokens(layer, &clock);
    send(&svc, &[("x-estimate", "1"), ("x-set", "65")]).await;
    let waits = svc
        .clone()
        .oneshot(request(&[("x-estimate", "1"), ("x-set", "1")]));
    let pending = tokio::spawn(async move { waits.await.unwrap().status() });
    tokio::task::yield_now().await;
    assert!(!pending.is_finished(), "5 s of debt and 1 s of its own");
    clock.advance(Duration::from_secs(5));
    tokio::task::yield_now().await;
    assert!(!pending.is_finished(), "1 s still to wait");
    clock.advance(Duration::from_secs(1));
    assert_eq!(pending.await.unwrap(), StatusCode::OK);
}

/// A debt larger than `max_delay` is refused, not queued.
#[tokio::test]
async fn a_shaped_layer_refuses_a_debt_past_its_max_delay() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_minute(60).named("tokens"))
        .max_delay(Duration::from_secs(10))
        .settle();
    let svc = tokens(layer, &clock);
    send(&svc, &[("x-estimate", "1"), ("x-set", "200")]).await;
    let (status, _, _) = send(&svc, &[("x-estimate", "1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

/// The handle and the service of a layer of 60 tokens a minute on `clock`.
fn own(clock: &ManualClock) -> (tollgate::layer::Handle, Svc) {
    let layer = configured(per_minute(), clock);
    (layer.handle(), Svc::new(layer.layer(handler())))
}

/// A response reserving `estimate`, its body not read yet: `chunks` chunks of `tokens`.
async fn streaming(
    svc: &Svc,
    estimate: &str,
    chunks: &str,
    tokens: &str,
) -> Response<ResponseBody<Streamed>> {
    let headers = [
        ("x-estimate", estimate),
        ("x-chunks", chunks),
        ("x-tokens", tokens),
    ];
    svc.clone().oneshot(request(&headers)).await.unwrap()
}

/// A request the layer leaves unlimited (`skip`) carries no `Usage`: a handler that requires
/// one (axum's `Extension<Usage>`) fails those requests; take `Option<Extension<Usage>>`.
#[tokio::test]
async fn a_skipped_request_carries_no_usage() {
    let clock = ManualClock::new();
    let seen: Arc<Mutex<Option<bool>>> = Arc::default();
    let record = seen.clone();
    let svc = tower::service_fn(move |req: Request<String>| {
        *record.lock().unwrap() = Some(req.extensions().get::<Usage>().is_some());
        async { Ok::<_, Infallible>(Response::new(String::new())) }
    });
    let layer = configured(per_minute(), &clock).skip(|head| head.uri().path() == "/healthz");
    let svc = layer.layer(svc);
    let mut req = request(&[]);
    *req.uri_mut() = "/healthz".parse().unwrap();
    svc.oneshot(req).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(false));
}

/// A reset, then an admission at the same instant and cost as one in flight: the older
/// request's receipt matches the fresh admission's schedule, and its refund must not give
/// that away (a third request would pass: 120 of a 60 burst at one instant).
async fn refund_after_reset(layer: RateLimitLayer) {
    let clock = ManualClock::new();
    let layer = configured(layer.settle(), &clock);
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(handler()));
    // Reserves 60, will report 0 when its body is read.
    let first = svc
        .clone()
        .oneshot(request(&[
            ("x-estimate", "60"),
            ("x-chunks", "1"),
            ("x-tokens", "0"),
        ]))
        .await
        .unwrap();
    handle.reset("k").await.unwrap();
    let (status, _, _) = send(&svc, &[("x-estimate", "60"), ("x-set", "60")]).await;
    assert_eq!(status, StatusCode::OK, "the fresh key's burst");
    first.into_body().collect().await.unwrap();
    let (status, _, _) = send(&svc, &[("x-estimate", "60"), ("x-set", "60")]).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "60 already used at this instant: a third 60 would pass the burst"
    );
}

#[tokio::test]
async fn a_refund_after_a_reset_never_frees_a_later_admission_gcra() {
    refund_after_reset(RateLimitLayer::gcra(Quota::per_minute(60).named("tokens"))).await;
}

#[tokio::test]
async fn a_refund_after_a_reset_never_frees_a_later_admission_token_bucket() {
    let quota = Quota::per_minute(60).named("tokens");
    refund_after_reset(RateLimitLayer::token_bucket(quota)).await;
}

#[tokio::test]
async fn a_refund_after_a_reset_never_frees_a_later_admission_tiers() {
    let tiers = [
        Quota::per_minute(60).named("tpm"),
        Quota::per_hour(600).named("tph"),
    ];
    refund_after_reset(RateLimitLayer::gcra(tiers)).await;
}

/// A stream of requests of one key, some held in flight, their true costs above and below
/// their reservations, the clock moved forward and back between admissions and settlements:
/// at every admission, the true costs admitted so far stay within the burst, what the latest
/// time reached lets through at the quota's rate, and what the requests in flight overspent.
#[tokio::test]
async fn a_clock_that_jumps_back_between_admission_and_settlement_keeps_the_bound() {
    for seed in 1..=12u64 {
        let clock = ManualClock::new();
        let start = Duration::from_secs(10_000);
        clock.set(start);
        let svc = tokens(per_minute(), &clock);
        let mut next = below(seed);
        let (mut now, mut latest) = (start, start);
        let mut admitted_cost = 0u64;
        let mut held: Vec<(u64, Response<ResponseBody<Streamed>>)> = Vec::new();
        for step in 0..400 {
            match next(6) {
                0 => now += Duration::from_millis(next(6_000)),
                1 => now = now.saturating_sub(Duration::from_millis(next(4_000))),
                _ => {}
            }
            clock.set(now);
            latest = latest.max(now);
            if next(3) == 0 && !held.is_empty() {
                let (_, response) = held.remove(next(held.len() as u64) as usize);
                response.into_body().collect().await.unwrap();
                continue;
            }
            let (estimate, cost) = (1 + next(20), next(40));
            let (estimate_text, cost_text) = (estimate.to_string(), cost.to_string());
            let headers = [("x-estimate", &*estimate_text), ("x-set", &*cost_text)];
            let response = svc.clone().oneshot(request(&headers)).await.unwrap();
            if response.status() != StatusCode::OK {
                continue;
            }
            admitted_cost += cost;
            held.push((cost.saturating_sub(estimate), response));
            let overspent: u64 = held.iter().map(|(over, _)| over).sum();
            let allowed = 60 + (latest - start).as_secs() + overspent;
            assert!(
                admitted_cost <= allowed,
                "seed {seed}, step {step}: {admitted_cost} admitted, at most {allowed}"
            );
            if held.len() > 3 {
                let (_, response) = held.remove(0);
                response.into_body().collect().await.unwrap();
            }
        }
    }
}

/// Tiers, a tuple key with an `.or` part, a per-key plan whose quotas are cut mid-stream, and
/// requests held in flight while costs settle above and below their reservations: every
/// tier keeps the bound, under the plan's first quotas over the whole stream and under its
/// new ones from the change on.
#[tokio::test]
async fn a_plans_tiers_cut_mid_stream_keep_the_bound_for_a_tuple_key() {
    use tollgate::key::{Header, KeyExtractor, RequestHead};
    use tollgate::Key;

    let first = [
        Quota::per_minute(120).named("m"),
        Quota::per_hour(3_000).named("h"),
    ];
    let cut = [
        Quota::per_minute(30).named("m"),
        Quota::per_hour(2_000).named("h"),
    ];
    for seed in 1..=8u64 {
        let clock = ManualClock::new();
        let plan = first.clone();
        let layer = RateLimitLayer::gcra([
            Quota::per_minute(6).named("m"),
            Quota::per_hour(20).named("h"),
        ])
        .key((
            Header::new("x-key"),
            Header::new("x-org").or(Header::new("x-team")),
        ))
        .quota_for(move |_: &Key, _: RequestHead<'_>| plan.clone())
        .clock(clock.clone())
        .cost(|_: &Key, head: RequestHead<'_>| {
            head.headers()
                .get("x-estimate")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .settle();
        let handle = layer.handle();
        let svc = Svc::new(layer.layer(handler()));
        let mut next = below(seed);
        // (admitted at, true cost) of each admission.
        let mut admitted: Vec<(Duration, u64)> = Vec::new();
        // (admission index, overspend, response) of the requests in flight.
        let mut held: Vec<(usize, u64, Response<ResponseBody<Streamed>>)> = Vec::new();
        let mut now = Duration::ZERO;
        let mut cut_at = None;
        for step in 0..300 {
            if step == 150 {
                handle.set_plan_quotas(first.clone(), cut.clone()).unwrap();
                cut_at = Some(admitted.len());
            }
            now += Duration::from_millis(next(4_000));
            clock.set(now);
            if next(3) == 0 && !held.is_empty() {
                let (_, _, response) = held.remove(next(held.len() as u64) as usize);
                response.into_body().collect().await.unwrap();
                continue;
            }
            let (estimate, cost) = ((1 + next(10)).to_string(), next(25));
            let request = Request::builder()
                .header("x-key", "k")
                .header("x-org", "acme")
                .header("x-estimate", &estimate)
                .header("x-set", cost.to_string())
                .body(String::new())
                .unwrap();
            let response = svc.clone().oneshot(request).await.unwrap();
            if response.status() != StatusCode::OK {
                continue;
            }
            let estimate: u64 = estimate.parse().unwrap();
            admitted.push((now, cost));
            held.push((admitted.len() - 1, cost.saturating_sub(estimate), response));
            // What the window's requests still in flight overspent.
            let since = |from: usize| {
                let spent: u64 = admitted[from..].iter().map(|(_, c)| c).sum();
                let over = held.iter().filter(|(at, ..)| *at >= from);
                (
                    spent,
                    now - admitted[from].0,
                    over.map(|(_, o, _)| o).sum::<u64>(),
                )
            };
            let check = |quotas: &[Quota; 2], from: usize, when: &str| {
                let (spent, elapsed, overspent) = since(from);
                for quota in quotas {
                    let interval = quota.period() / quota.limit() as u32;
                    let bound = quota.burst()
                        + (elapsed.as_nanos() / interval.as_nanos()) as u64
                        + overspent;
                    assert!(
                        spent <= bound,
                        "seed {seed}, step {step}, {when}: {spent} spent, {quota:?} allows {bound}"
                    );
                }
            };
            for from in 0..admitted.len() {
                check(&first, from, "first quotas");
            }
            if let Some(cut_at) = cut_at.filter(|&at| at < admitted.len()) {
                for from in cut_at..admitted.len() {
                    check(&cut, from, "cut quotas");
                }
            }
            if held.len() > 3 {
                let (_, _, response) = held.remove(0);
                response.into_body().collect().await.unwrap();
            }
        }
    }
}

/// Numbers below the `n` each call gives, from a 64-bit linear congruential generator: the
/// same sequence for the same seed.
fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    }
}
