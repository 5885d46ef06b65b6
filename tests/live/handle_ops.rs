//! A live layer's `Handle::peek`, `reset` and `block`, through the layer and in combination:
//!
//! - a block holds under the layer's quotas and under every per-key plan, a plan made after the
//!   block (or first picked for the key after it) included: a client cannot step out of a
//!   block by landing on another plan;
//! - a block ends on time, to the nanosecond, and the key stands as before it;
//! - a block survives `set_quotas` (named and unnamed quotas), and so do bans;
//! - a reset makes the key fresh under the layer and every plan, lifts its block, and starts
//!   its count of denials towards a ban afresh;
//! - calendar windows (which decide on the wall clock) keep a block for its duration;
//! - `peek` consumes nothing.

use crate::support::live_app;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Response, StatusCode};
use live_app::{live, passes, runtime, send};
use proptest::prelude::*;
use tollgate::clock::{Clock, ManualClock};
use tollgate::key::RequestHead;
use tollgate::layer::Ban;
use tollgate::{Key, Quota, RateLimitLayer};

fn retry_after(response: &Response<Body>) -> Option<u64> {
    let value = response.headers().get("retry-after")?;
    value.to_str().ok()?.parse().ok()
}

/// Plans by the key's first letter: `p…` is on "pro" (100/min), `e…` on "enterprise"
/// (1000/min), anything else on the layer's own 2/min.
fn plans(layer: RateLimitLayer) -> RateLimitLayer {
    layer.quota_for(|key: &Key, _head: RequestHead<'_>| {
        match key.as_bytes().and_then(|b| b.first()) {
            Some(b'p') => vec![Quota::per_minute(100).named("pro")],
            Some(b'e') => vec![Quota::per_minute(1000).named("enterprise")],
            _ => vec![Quota::per_minute(2).named("base")],
        }
    })
}

#[test]
fn a_block_holds_under_every_plan_made_before_or_after_it() {
    let rt = runtime();
    let clock = ManualClock::new();
    let (handle, app) = live(
        plans(RateLimitLayer::gcra(Quota::per_minute(2).named("base"))),
        &clock,
    );
    // "pro" is made before the block; "enterprise" is first picked after it.
    assert!(passes(&rt, &app, "pat"));
    rt.block_on(handle.block("pat", Duration::from_secs(60)))
        .unwrap();
    rt.block_on(handle.block("eve", Duration::from_secs(60)))
        .unwrap();
    rt.block_on(handle.block("bob", Duration::from_secs(60)))
        .unwrap();
    for key in ["pat", "eve", "bob"] {
        let denied = send(&rt, &app, key);
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS, "{key}");
        assert_eq!(retry_after(&denied), Some(60), "{key}");
    }
    // Other keys of each plan go on.
    for key in ["pam", "ed", "ben"] {
        assert!(passes(&rt, &app, key), "{key}");
    }
    clock.advance(Duration::from_secs(59));
    for key in ["pat", "eve", "bob"] {
        assert_eq!(retry_after(&send(&rt, &app, key)), Some(1), "{key}");
    }
    clock.advance(Duration::from_secs(1));
    for key in ["pat", "eve", "bob"] {
        assert!(passes(&rt, &app, key), "{key} after its block");
    }
}

#[test]
fn a_reset_reaches_every_plan_and_lifts_the_block() {
    let rt = runtime();
    let clock = ManualClock::new();
    let (handle, app) = live(
        plans(RateLimitLayer::gcra(Quota::per_minute(2).named("base"))),
        &clock,
    );
    assert!(passes(&rt, &app, "bob"));
    assert!(passes(&rt, &app, "bob"));
    assert!(!passes(&rt, &app, "bob"));
    rt.block_on(handle.block("pat", Duration::from_secs(3600)))
        .unwrap();
    rt.block_on(handle.block("bob", Duration::from_secs(3600)))
        .unwrap();
    assert!(!passes(&rt, &app, "pat"));
    rt.block_on(handle.reset("pat")).unwrap();
    rt.block_on(handle.reset("bob")).unwrap();
    assert!(passes(&rt, &app, "pat"));
    assert!(passes(&rt, &app, "bob"));
    assert!(passes(&rt, &app, "bob"));
    assert!(!passes(&rt, &app, "bob"), "a reset gives one fresh budget");
}

#[test]
fn peek_consumes_nothing_and_shows_a_block() {
    let rt = runtime();
    let clock = ManualClock::new();
    let (handle, app) = live(RateLimitLayer::gcra(Quota::per_minute(3)), &clock);
    assert!(passes(&rt, &app, "alice"));
    for _ in 0..5 {
        let standing = rt.block_on(handle.peek("alice")).unwrap();
        assert!(standing.allowed);
        assert_eq!(standing.remaining, 2);
    }
    rt.block_on(handle.block("alice", Duration::from_secs(10)))
        .unwrap();
    let standing = rt.block_on(handle.peek("alice")).unwrap();
    assert!(standing.is_blocked());
    assert_eq!(standing.retry_after, Some(Duration::from_secs(10)));
    // A peek at a key never seen is a fresh key's standing.
    assert_eq!(rt.block_on(handle.peek("nobody")).unwrap().remaining, 3);
}

#[test]
fn a_block_survives_new_quotas_named_or_not() {
    for quota in [Quota::per_minute(2), Quota::per_minute(2).named("api")] {
        let rt = runtime();
        let clock = ManualClock::new();
        let (handle, app) = live(RateLimitLayer::gcra(quota), &clock);
        rt.block_on(handle.block("alice", Duration::from_secs(30)))
            .unwrap();
        handle.set_quotas(Quota::per_minute(100)).unwrap();
        let denied = send(&rt, &app, "alice");
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry_after(&denied), Some(30));
        handle.set_quotas(Quota::per_minute(50)).unwrap();
        clock.advance(Duration::from_secs(29));
        assert!(!passes(&rt, &app, "alice"));
        clock.advance(Duration::from_secs(1));
        assert!(passes(&rt, &app, "alice"));
        // And a reset after a change does not bring back what was used before it.
        for _ in 0..49 {
            assert!(passes(&rt, &app, "alice"));
        }
        assert!(!passes(&rt, &app, "alice"));
        handle.set_quotas(Quota::per_minute(60)).unwrap();
        rt.block_on(handle.reset("alice")).unwrap();
        for _ in 0..60 {
            assert!(passes(&rt, &app, "alice"));
        }
        assert!(!passes(&rt, &app, "alice"));
    }
}

#[test]
fn bans_hold_across_new_quotas_and_a_reset_starts_their_count_afresh() {
    let rt = runtime();
    let clock = ManualClock::new();
    let ban = Ban::new(2, Duration::from_secs(60), Duration::from_secs(600));
    let (handle, app) = live(RateLimitLayer::gcra(Quota::per_minute(1)).ban(ban), &clock);
    assert!(passes(&rt, &app, "mallory"));
    assert!(!passes(&rt, &app, "mallory"));
    assert!(!passes(&rt, &app, "mallory"));
    // New quotas: the ban is still applied (the third denial bans).
    handle.set_quotas(Quota::per_minute(1)).unwrap();
    let banned = send(&rt, &app, "mallory");
    assert_eq!(banned.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&banned), Some(600));
    // The handle's reset lifts the ban and forgets the denials counted so far.
    rt.block_on(handle.reset("mallory")).unwrap();
    assert!(passes(&rt, &app, "mallory"));
    assert!(!passes(&rt, &app, "mallory"));
    assert!(!passes(&rt, &app, "mallory"));
    assert_eq!(retry_after(&send(&rt, &app, "mallory")), Some(600));
}

#[test]
fn calendar_windows_keep_a_block_for_its_duration() {
    let rt = runtime();
    let clock = ManualClock::new();
    clock.set_wall_time(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let (handle, app) = live(
        RateLimitLayer::fixed_window(Quota::per_minute(5)).aligned(),
        &clock,
    );
    rt.block_on(handle.block("alice", Duration::from_secs(90)))
        .unwrap();
    let denied = send(&rt, &app, "alice");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&denied), Some(90));
    clock.advance(Duration::from_secs(89));
    assert!(!passes(&rt, &app, "alice"));
    clock.advance(Duration::from_secs(1));
    assert!(passes(&rt, &app, "alice"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever plans the key lands on, in whatever order, and whatever else happens (new
    /// quotas, time), a blocked key gets nothing until its block ends.
    #[test]
    fn no_plan_lets_a_blocked_key_through(
        steps in proptest::collection::vec((0u8..3, 0u64..20, any::<bool>()), 1..40),
        block_secs in 1u64..60,
    ) {
        let rt = runtime();
        let clock = ManualClock::new();
        let (handle, app) = live(
            plans(RateLimitLayer::gcra(Quota::per_minute(2).named("base"))),
            &clock,
        );
        let start = clock.now_nanos();
        rt.block_on(handle.block("plan", Duration::from_secs(block_secs))).unwrap();
        rt.block_on(handle.block("enterprise", Duration::from_secs(block_secs))).unwrap();
        rt.block_on(handle.block("b", Duration::from_secs(block_secs))).unwrap();
        for (which, secs, change) in steps {
            let key = ["plan", "enterprise", "b"][which as usize];
            if change {
                handle.set_quotas(Quota::per_minute(2 + secs)).unwrap();
            }
            let blocked = clock.now_nanos() - start < block_secs * 1_000_000_000;
            let response = send(&rt, &app, key);
            if blocked {
                prop_assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            }
            clock.advance(Duration::from_secs(secs));
        }
    }
}

/// A handle taken before the store, the clock or an algorithm's option is set would reach a
/// limiter the layer no longer uses (an operator's block would do nothing): setting them
/// after panics where the layer is built, naming the method. Settings that keep the limiter
/// may follow, and the handle reaches the layer.
#[test]
fn a_handle_taken_before_the_limiter_is_set_is_refused() {
    type Rebuild = Box<dyn FnOnce(RateLimitLayer) -> RateLimitLayer>;
    let rebuilds: [(&str, Rebuild); 3] = [
        (
            "store",
            Box::new(|l| l.store(tollgate::store::MemoryStore::new())),
        ),
        ("clock", Box::new(|l| l.clock(ManualClock::new()))),
        (
            "max_delay",
            Box::new(|l| l.max_delay(Duration::from_millis(5))),
        ),
    ];
    for (method, rebuild) in rebuilds {
        let layer = RateLimitLayer::gcra(Quota::per_minute(2));
        let _handle = layer.handle();
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rebuild(layer)))
            .expect_err(method);
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.starts_with(&format!("RateLimitLayer::{method}: a Handle was taken")),
            "{message}"
        );
    }
    let rt = runtime();
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_minute(2)).clock(clock.clone());
    let handle = layer.handle();
    let layer = layer
        .ban(Ban::new(
            5,
            Duration::from_secs(60),
            Duration::from_secs(60),
        ))
        .key(tollgate::key::Header::new("x-api-key"));
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(layer);
    rt.block_on(handle.block("k", Duration::from_secs(60)))
        .unwrap();
    assert!(!passes(&rt, &app, "k"));
    assert!(passes(&rt, &app, "other"));
}

/// An in-flight layer's limiter wraps no other: every operation of its handle reaches it
/// (through the blocks the handle keeps) and answers, an error where a limit on requests in
/// flight has no quotas, and none panics; a request through the layer is denied while its
/// key is blocked and admitted once the block is lifted.
#[test]
fn every_handle_operation_on_an_in_flight_layer_answers() {
    use tollgate::key::Header;
    use tollgate::InFlightLayer;
    use tower::{Layer, ServiceExt};

    runtime().block_on(async {
        let layer = InFlightLayer::new(2)
            .key(Header::new("x-api-key"))
            .clock(ManualClock::new());
        let handle = layer.handle();
        let misconfigured = Some(tollgate::ErrorKind::Misconfigured);
        let svc = layer.layer(tower::service_fn(|_: http::Request<Body>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
        }));
        assert!(handle.peek("k").await.unwrap().allowed);
        handle.block("k", Duration::from_secs(60)).await.unwrap();
        assert!(!handle.peek("k").await.unwrap().allowed);
        let call = || {
            let request = http::Request::builder()
                .header("x-api-key", "k")
                .body(Body::empty())
                .unwrap();
            svc.clone().oneshot(request)
        };
        assert_eq!(
            call().await.unwrap().status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        handle.reset("k").await.unwrap();
        assert!(handle.peek("k").await.unwrap().allowed);
        assert_eq!(call().await.unwrap().status(), StatusCode::OK);
        assert!(!handle.policy().is_empty());
        assert!(handle.quotas().is_empty());
        let changed = handle.set_quotas(Quota::per_second(1));
        assert_eq!(changed.map_err(|e| e.kind()).err(), misconfigured);
        let plan = Quota::per_second(1);
        assert!(handle
            .set_plan_quotas(plan.clone(), Quota::per_second(2))
            .is_err());
        let _ = handle.plan_quotas(plan.clone());
        assert!(handle.peek_plan(plan, "k").await.is_err());
        assert!(!format!("{layer:?} {svc:?}").is_empty());
    });
}

/// A block made through a handle before the layer made any service is a denial to the
/// handle's `peek` (as the docs promise of a blocked key), and to the first request: on an
/// in-flight layer, on a rate limit layer, and on one with per-key plans.
#[test]
fn a_block_before_any_service_is_a_denial_to_peek() {
    use tollgate::key::Header;
    use tollgate::InFlightLayer;
    use tower::{Layer, ServiceExt};

    let ok = || {
        tower::service_fn(|_: http::Request<Body>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
        })
    };
    let request = || {
        http::Request::builder()
            .header("x-api-key", "k")
            .body(Body::empty())
            .unwrap()
    };
    runtime().block_on(async {
        let in_flight = InFlightLayer::new(2)
            .key(Header::new("x-api-key"))
            .clock(ManualClock::new());
        let handle = in_flight.handle();
        handle.block("k", Duration::from_secs(60)).await.unwrap();
        let standing = handle.peek("k").await.unwrap();
        assert!(!standing.allowed, "in flight: {standing:?}");
        let svc = in_flight.layer(ok());
        let status = svc.oneshot(request()).await.unwrap().status();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

        let rate = RateLimitLayer::gcra(Quota::per_minute(5))
            .key(Header::new("x-api-key"))
            .clock(ManualClock::new());
        for layer in [rate.clone(), plans(rate)] {
            let handle = layer.handle();
            handle.block("k", Duration::from_secs(60)).await.unwrap();
            let standing = handle.peek("k").await.unwrap();
            assert!(!standing.allowed, "rate: {standing:?}");
            let svc = layer.layer(ok());
            let status = svc.oneshot(request()).await.unwrap().status();
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        }
    });
}
