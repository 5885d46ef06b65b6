//! In-flight limits combined with the layer's other options: answers (HTTP and gRPC), costs,
//! dry run, long keys and tuples, stacking with a rate limit, shaping, the memory bound, and the
//! options that do not apply (refused where the layer is built).

use crate::support::in_flight as held;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Request, StatusCode, Version};
use http_body_util::BodyExt;
use tollgate::clock::ManualClock;
use tollgate::key::{Header, KeyExtractor};
use tollgate::store::MemoryStore;
use tollgate::{InFlightLayer, Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

use held::{Controls, Fate};

type Svc = tower::util::BoxCloneService<
    Request<()>,
    http::Response<tollgate::layer::ResponseBody<tollgate::layer::ResponseBody<held::TestBody>>>,
    std::convert::Infallible,
>;
type One = tower::util::BoxCloneService<
    Request<()>,
    http::Response<tollgate::layer::ResponseBody<held::TestBody>>,
    std::convert::Infallible,
>;

async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// A request with `headers`, id `id` (its handler waits for the test), or a peek without one.
fn request(id: Option<u64>, headers: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder();
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    match id {
        Some(id) => builder.header("x-id", id.to_string()),
        None => builder.header("x-peek", "1"),
    }
    .body(())
    .unwrap()
}

/// Peeks cost nothing; any other request costs `x-cost` (default 1).
fn cost(_key: &Key, head: tollgate::key::RequestHead<'_>) -> u64 {
    if head.headers().contains_key("x-peek") {
        return 0;
    }
    head.headers()
        .get("x-cost")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1)
}

/// Sends `req` on a task: its response headers and status come back once answered.
fn send<S>(
    svc: &S,
    req: Request<()>,
) -> tokio::sync::oneshot::Receiver<(StatusCode, HeaderMap, String)>
where
    S: tower::Service<Request<()>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: IntoParts,
    S::Error: std::fmt::Debug,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let svc = svc.clone();
    tokio::spawn(async move {
        let resp = svc.oneshot(req).await.unwrap();
        let (status, headers, body) = resp.into_parts_text().await;
        let _ = tx.send((status, headers, body));
    });
    rx
}

/// A response as status, headers and body text, the body read to its end.
trait IntoParts: Send + 'static {
    fn into_parts_text(
        self,
    ) -> impl std::future::Future<Output = (StatusCode, HeaderMap, String)> + Send;
}

impl<B> IntoParts for http::Response<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Debug,
{
    async fn into_parts_text(self) -> (StatusCode, HeaderMap, String) {
        let (parts, body) = self.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }
}

/// The `r` of this layer's `RateLimit` item named `name`.
fn free(headers: &HeaderMap, name: &str) -> u64 {
    let value = headers["ratelimit"].to_str().unwrap();
    let item = value
        .split(", ")
        .find(|i| i.starts_with(&format!("\"{name}\";")))
        .unwrap_or_else(|| panic!("{value}"));
    item.split(';')
        .find_map(|p| p.strip_prefix("r="))
        .unwrap()
        .parse()
        .unwrap()
}

struct Held {
    controls: Controls,
    live: Arc<AtomicUsize>,
}

impl Held {
    fn new() -> Self {
        Self {
            controls: Controls::default(),
            live: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn handler(
        &self,
    ) -> impl tower::Service<
        Request<()>,
        Response = http::Response<held::TestBody>,
        Error = std::convert::Infallible,
        Future: Send,
    > + Clone
           + Send
           + 'static {
        held::handler(self.controls.clone(), self.live.clone())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_refusal_names_no_wait_over_http_and_grpc() {
    let h = Held::new();
    let svc = One::new(
        InFlightLayer::new(1)
            .key(Header::new("x-key"))
            .cost(cost)
            .layer(h.handler()),
    );
    let k = [("x-key", "k")];
    let mut first = h.controls.register(1);
    let answered = send(&svc, request(Some(1), &k));
    settle().await;
    let (status, headers, body) = svc
        .clone()
        .oneshot(request(Some(2), &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(!headers.contains_key("retry-after"), "{headers:?}");
    assert_eq!(
        body,
        "Too many requests in progress: retry once one has finished.\n"
    );
    assert_eq!(headers["ratelimit"], "\"in-flight\";r=0");
    assert_eq!(
        headers["ratelimit-policy"],
        "\"in-flight\";q=1;qu=\"concurrent-requests\""
    );

    // gRPC: RESOURCE_EXHAUSTED, the message, and no pushback (the client's own policy).
    let mut grpc = request(
        Some(3),
        &[("x-key", "k"), ("content-type", "application/grpc")],
    );
    *grpc.method_mut() = http::Method::POST;
    *grpc.version_mut() = Version::HTTP_2;
    let (status, headers, _) = svc
        .clone()
        .oneshot(grpc)
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["grpc-status"], "8");
    assert!(
        headers["grpc-message"]
            .to_str()
            .unwrap()
            .contains("in progress"),
        "{headers:?}"
    );
    assert!(
        !headers.contains_key("grpc-retry-pushback-ms"),
        "{headers:?}"
    );

    // A cost above the limit is never let through: the answer of a request too large.
    let big = [("x-key", "other"), ("x-cost", "2")];
    let (status, headers, body) = svc
        .clone()
        .oneshot(request(Some(4), &big))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        body.contains("costs more than the rate limit ever allows"),
        "{body}"
    );
    assert!(!headers.contains_key("retry-after"));
    let mut grpc = request(
        Some(5),
        &[
            ("x-key", "other"),
            ("x-cost", "2"),
            ("content-type", "application/grpc"),
        ],
    );
    *grpc.method_mut() = http::Method::POST;
    *grpc.version_mut() = Version::HTTP_2;
    let (_, headers, _) = svc
        .clone()
        .oneshot(grpc)
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(headers["grpc-retry-pushback-ms"], "-1");

    // The allowed request's own headers: no slot left while it runs.
    first.fate.take().unwrap().send(Fate::Complete).unwrap();
    let (status, headers, body) = answered.await.unwrap();
    assert_eq!((status, body.as_str()), (StatusCode::OK, "done"));
    assert_eq!(headers["ratelimit"], "\"in-flight\";r=0");
    let (_, headers, _) = svc
        .clone()
        .oneshot(request(None, &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(free(&headers, "in-flight"), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn costs_take_that_many_slots_and_status_and_on_limited_apply() {
    let h = Held::new();
    let svc = One::new(
        InFlightLayer::new(4)
            .policy_name("jobs")
            .key(Header::new("x-key"))
            .cost(cost)
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .on_limited(|decision, _head| {
                assert_eq!(decision.retry_after, None);
                assert_eq!(decision.policy(), Some("jobs"));
                http::Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .body(format!("busy: {} free", decision.remaining))
                    .unwrap()
            })
            .layer(h.handler()),
    );
    let mut c = h.controls.register(1);
    let _heavy = send(&svc, request(Some(1), &[("x-key", "k"), ("x-cost", "3")]));
    settle().await;
    let (status, headers, body) = svc
        .clone()
        .oneshot(request(Some(2), &[("x-key", "k"), ("x-cost", "2")]))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "busy: 1 free");
    assert!(!headers.contains_key("retry-after"));
    // One slot is left, for a request of cost 1.
    let mut d = h.controls.register(3);
    let light = send(&svc, request(Some(3), &[("x-key", "k")]));
    settle().await;
    assert_eq!(h.live.load(Ordering::SeqCst), 2);
    c.fate.take().unwrap().send(Fate::Complete).unwrap();
    d.fate.take().unwrap().send(Fate::Complete).unwrap();
    assert_eq!(light.await.unwrap().0, StatusCode::OK);
    settle().await;
    let (_, headers, _) = svc
        .clone()
        .oneshot(request(None, &[("x-key", "k")]))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(free(&headers, "jobs"), 4);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dry_run_lets_refused_requests_through_without_a_slot() {
    let h = Held::new();
    let svc = One::new(
        InFlightLayer::new(1)
            .key(Header::new("x-key"))
            .cost(cost)
            .dry_run(true)
            .layer(h.handler()),
    );
    let k = [("x-key", "k")];
    let mut a = h.controls.register(1);
    let mut b = h.controls.register(2);
    let first = send(&svc, request(Some(1), &k));
    let second = send(&svc, request(Some(2), &k));
    settle().await;
    assert_eq!(
        h.live.load(Ordering::SeqCst),
        2,
        "the dry run refuses nothing"
    );
    // The first one holds the slot; the second, let through over the limit, holds none.
    a.fate.take().unwrap().send(Fate::Complete).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    settle().await;
    let (_, headers, _) = svc
        .clone()
        .oneshot(request(None, &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(free(&headers, "in-flight"), 1);
    b.fate.take().unwrap().send(Fate::Complete).unwrap();
    let (status, headers, _) = second.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        free(&headers, "in-flight"),
        0,
        "reported as it would have been refused"
    );
    settle().await;
    let (_, headers, _) = svc
        .clone()
        .oneshot(request(None, &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(
        free(&headers, "in-flight"),
        1,
        "nothing was given back twice"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn long_keys_tuples_and_or_chains_keep_their_own_slots() {
    let h = Held::new();
    let key = (Header::new("x-a"), Header::new("x-b")).or(Header::new("x-c"));
    let svc = One::new(InFlightLayer::new(1).key(key).cost(cost).layer(h.handler()));
    let long = "x".repeat(300);
    let mut long2 = long.clone();
    long2.push('y');
    let mut ids = 0;
    let mut held_ctl = Vec::new();
    // Each of these is a key of its own: all let through at once.
    let keys: Vec<Vec<(&str, &str)>> = vec![
        vec![("x-a", &long), ("x-b", "1")],
        vec![("x-a", &long2), ("x-b", "1")],
        vec![("x-a", &long), ("x-b", "2")],
        // No `x-b`: the tuple has no key, the chain goes on to `x-c`, a key apart from any tuple.
        vec![("x-a", &long), ("x-c", &long)],
        vec![("x-c", &long2)],
    ];
    let mut pending = Vec::new();
    for headers in &keys {
        ids += 1;
        held_ctl.push(h.controls.register(ids));
        pending.push(send(&svc, request(Some(ids), headers)));
        settle().await;
        assert_eq!(
            h.live.load(Ordering::SeqCst),
            ids as usize,
            "{headers:?} shared a slot"
        );
    }
    // A second request of any of them is refused.
    for headers in &keys {
        ids += 1;
        let (status, _, _) = svc
            .clone()
            .oneshot(request(Some(ids), headers))
            .await
            .unwrap()
            .into_parts_text()
            .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{headers:?}");
    }
    for mut c in held_ctl {
        c.fate.take().unwrap().send(Fate::Complete).unwrap();
    }
    for p in pending {
        assert_eq!(p.await.unwrap().0, StatusCode::OK);
    }
    settle().await;
    for headers in &keys {
        let (_, h, _) = svc
            .clone()
            .oneshot(request(None, headers))
            .await
            .unwrap()
            .into_parts_text()
            .await;
        assert_eq!(free(&h, "in-flight"), 1);
    }
}

/// The order of an in-flight layer and a rate limit decides which counts a request the other
/// refuses.
#[tokio::test(flavor = "current_thread")]
async fn stacked_with_a_rate_limit_the_outer_layer_decides_first() {
    let clock = ManualClock::new();
    let rate = || {
        RateLimitLayer::gcra(Quota::per_minute(2).named("rate"))
            .key(Header::new("x-key"))
            .clock(clock.clone())
            .cost(cost)
    };
    let in_flight = || InFlightLayer::new(1).key(Header::new("x-key")).cost(cost);
    let k = [("x-key", "k")];

    // The rate limit outside: the in-flight refusal has used up a request of the rate.
    let h = Held::new();
    let svc = Svc::new(rate().layer(in_flight().layer(h.handler())));
    let mut a = h.controls.register(1);
    let first = send(&svc, request(Some(1), &k));
    settle().await;
    let (status, headers, _) = svc
        .clone()
        .oneshot(request(Some(2), &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(free(&headers, "rate"), 0);
    assert_eq!(free(&headers, "in-flight"), 0);
    // The rate now refuses before the in-flight limit sees the request.
    let (status, headers, _) = svc
        .clone()
        .oneshot(request(Some(3), &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        headers.contains_key("retry-after"),
        "the rate limit's refusal names its wait"
    );
    a.fate.take().unwrap().send(Fate::Complete).unwrap();
    first.await.unwrap();

    // The in-flight limit outside: a request the rate refuses holds its slot only while its
    // refusal is written, and the rate is not spent by in-flight refusals.
    let h = Held::new();
    let svc = Svc::new(in_flight().layer(rate().layer(h.handler())));
    let k = [("x-key", "k2")];
    let mut a = h.controls.register(1);
    let first = send(&svc, request(Some(1), &k));
    settle().await;
    for id in 2..5 {
        let (status, headers, _) = svc
            .clone()
            .oneshot(request(Some(id), &k))
            .await
            .unwrap()
            .into_parts_text()
            .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            !headers.contains_key("retry-after"),
            "refused by the in-flight limit"
        );
    }
    a.fate.take().unwrap().send(Fate::Complete).unwrap();
    first.await.unwrap();
    settle().await;
    // One request of the rate is left: the refusals above did not spend it.
    let mut b = h.controls.register(5);
    let second = send(&svc, request(Some(5), &k));
    settle().await;
    b.fate.take().unwrap().send(Fate::Complete).unwrap();
    assert_eq!(second.await.unwrap().0, StatusCode::OK);
    // The rate is spent: refused by it, the request gives its slot back at once.
    let (status, headers, _) = svc
        .clone()
        .oneshot(request(Some(6), &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.contains_key("retry-after"));
    let (_, headers, _) = svc
        .clone()
        .oneshot(request(None, &k))
        .await
        .unwrap()
        .into_parts_text()
        .await;
    assert_eq!(free(&headers, "in-flight"), 1);
}

/// Shaping outside an in-flight layer: a delayed request holds no slot while it waits. Inside
/// one, it does.
#[tokio::test(flavor = "current_thread")]
async fn a_request_delayed_by_shaping_holds_a_slot_only_inside_the_in_flight_layer() {
    let clock = ManualClock::new();
    let shaping = || {
        RateLimitLayer::gcra(Quota::per_second(1).named("shape"))
            .max_delay(Duration::from_secs(10))
            .key(Header::new("x-key"))
            .clock(clock.clone())
            .cost(cost)
    };
    let in_flight = || InFlightLayer::new(2).key(Header::new("x-key")).cost(cost);

    for shaping_outside in [true, false] {
        let h = Held::new();
        let svc = if shaping_outside {
            Svc::new(shaping().layer(in_flight().layer(h.handler())))
        } else {
            Svc::new(in_flight().layer(shaping().layer(h.handler())))
        };
        let k = [("x-key", if shaping_outside { "out" } else { "in" })];
        let mut a = h.controls.register(1);
        let mut b = h.controls.register(2);
        let first = send(&svc, request(Some(1), &k));
        let second = send(&svc, request(Some(2), &k));
        settle().await;
        // The second waits for its turn (1 s): it has not reached the handler.
        assert_eq!(h.live.load(Ordering::SeqCst), 1);
        let (_, headers, _) = svc
            .clone()
            .oneshot(request(None, &k))
            .await
            .unwrap()
            .into_parts_text()
            .await;
        let expected = if shaping_outside { 1 } else { 0 };
        assert_eq!(
            free(&headers, "in-flight"),
            expected,
            "shaping outside: {shaping_outside}"
        );
        clock.advance(Duration::from_secs(1));
        settle().await;
        assert_eq!(h.live.load(Ordering::SeqCst), 2);
        a.fate.take().unwrap().send(Fate::Complete).unwrap();
        b.fate.take().unwrap().send(Fate::Complete).unwrap();
        assert_eq!(first.await.unwrap().0, StatusCode::OK);
        assert_eq!(second.await.unwrap().0, StatusCode::OK);
        settle().await;
        let (_, headers, _) = svc
            .clone()
            .oneshot(request(None, &k))
            .await
            .unwrap()
            .into_parts_text()
            .await;
        assert_eq!(free(&headers, "in-flight"), 2);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_keys_is_bounded_in_memory_and_skipped_requests_hold_nothing() {
    let h = Held::new();
    let svc = One::new(
        InFlightLayer::new(1)
            .store(MemoryStore::new().with_max_keys(64))
            .key(Header::new("x-key"))
            .cost(cost)
            .skip(|head| head.uri().path() == "/health")
            .layer(h.handler()),
    );
    let mut controls = Vec::new();
    let mut pending = Vec::new();
    let mut unavailable = 0;
    for id in 1..=2000u64 {
        let key = format!("flood-{id}");
        let c = h.controls.register(id);
        let rx = send(&svc, request(Some(id), &[("x-key", &key)]));
        settle().await;
        controls.push(c);
        pending.push(rx);
    }
    let live = h.live.load(Ordering::SeqCst);
    assert!(live <= 64, "{live} keys held slots past the bound");
    for mut rx in pending.drain(..) {
        if let Ok((status, _, body)) = rx.try_recv() {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert!(!body.contains("flood-"), "{body}");
            unavailable += 1;
        }
    }
    assert_eq!(unavailable + live, 2000);
    // Skipped requests are not limited and take nothing.
    let mut health = request(Some(9999), &[("x-key", "flood-1")]);
    *health.uri_mut() = "/health".parse().unwrap();
    let mut c = h.controls.register(9999);
    let skipped = send(&svc, health);
    settle().await;
    assert_eq!(h.live.load(Ordering::SeqCst), live + 1);
    c.fate.take().unwrap().send(Fate::Complete).unwrap();
    let (status, headers, _) = skipped.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(!headers.contains_key("ratelimit"));
    // Once the flood ends, new keys find room again.
    for mut c in controls {
        if let Some(fate) = c.fate.take() {
            let _ = fate.send(Fate::Complete);
        }
    }
    settle().await;
    assert_eq!(h.live.load(Ordering::SeqCst), 0);
    let mut c = h.controls.register(10_000);
    let after = send(&svc, request(Some(10_000), &[("x-key", "after")]));
    settle().await;
    assert_eq!(h.live.load(Ordering::SeqCst), 1);
    c.fate.take().unwrap().send(Fate::Complete).unwrap();
    assert_eq!(after.await.unwrap().0, StatusCode::OK);
}

#[track_caller]
fn panics_with(build: impl FnOnce() -> InFlightLayer + std::panic::UnwindSafe, expected: &str) {
    let error = std::panic::catch_unwind(build).expect_err("the layer was built");
    let message = error
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| error.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap();
    assert!(message.contains(expected), "{message}");
}

/// Values out of range panic where the layer is built. (Options of a rate limit, such as
/// `count_if`, `quota_for`, `max_delay` or `sub_windows`, do not compile on an in-flight
/// layer, nor `lease_ttl` and `policy_name` on a rate limit: `tests/in_flight/compile_fail.md`.)
#[test]
fn options_that_do_not_apply_are_refused_where_the_layer_is_built() {
    panics_with(|| InFlightLayer::new(0), "InFlightLayer::new(0)");
    panics_with(
        || InFlightLayer::new(2).lease_ttl(Duration::from_millis(500)),
        "lease_ttl(500ms)",
    );
    panics_with(
        || InFlightLayer::new(2).lease_ttl(Duration::from_secs(2 * 86_400)),
        "from 1 s to 24 h",
    );
    panics_with(|| InFlightLayer::new(2).policy_name(""), "printable ASCII");
    #[cfg(feature = "redis")]
    panics_with(
        || InFlightLayer::new(2).on_failure(tollgate::store::OnFailure::Closed),
        "InFlightLayer::on_failure(Closed): the layer's store is not a RedisStore",
    );
    // In range, they build.
    let layer = InFlightLayer::new(2)
        .lease_ttl(Duration::from_secs(1))
        .policy_name("ok");
    assert_eq!(layer.policy(), "ok");
    assert!(format!("{layer:?}").contains("limit: 2"), "{layer:?}");
}

/// An in-flight layer's handle blocks and resets keys as a rate limit's does, and refuses to
/// change quotas it does not have, naming where its slots are set.
#[tokio::test]
async fn a_handle_blocks_and_resets_keys_and_has_no_quotas_to_change() {
    let clock = ManualClock::new();
    let layer = InFlightLayer::new(1)
        .key(Header::new("x-user"))
        .clock(clock.clone());
    let handle = layer.handle();
    let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    }));
    let call = |user: &str| {
        let req = Request::builder().header("x-user", user).body(()).unwrap();
        svc.clone().oneshot(req)
    };
    handle.block("a", Duration::from_secs(60)).await.unwrap();
    let blocked = call("a").await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(blocked.headers()["retry-after"], "60");
    assert_eq!(call("b").await.unwrap().status(), StatusCode::OK);
    handle.reset("a").await.unwrap();
    assert_eq!(call("a").await.unwrap().status(), StatusCode::OK);

    let refused = handle.set_quotas(Quota::per_second(1)).unwrap_err();
    assert_eq!(refused.kind(), tollgate::ErrorKind::Misconfigured);
    assert!(
        refused.to_string().contains("slots, not quotas"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("InFlightLayer::new"),
        "{refused}"
    );
    let refused = handle
        .peek_plan(Quota::per_second(1), "a")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("InFlightLayer"), "{refused}");
}
