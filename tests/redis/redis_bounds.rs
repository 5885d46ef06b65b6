//! A quota too large for an algorithm's Redis script fails where the limiter or layer gets the
//! store, with a panic naming the figure, its value, the bound and the fix; one just inside the
//! bound is accepted and decides end to end on a real `redis-server`.

use crate::support::redis as server;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use tollgate::store::{OnFailure, RedisStore};
use tollgate::{Quota, RateLimitLayer, RateLimiter};

const GCRA_MAX: u64 = 1 << 52;
const WINDOW_MAX: u64 = (1 << 53) - 1;
const BUCKET_MAX: u64 = 1 << 53;

fn one_per(ns: u64) -> Quota {
    Quota::new(1, Duration::from_nanos(ns))
}

/// The panic message of `build`, or `None` when it did not panic.
fn panic_of<T>(build: impl FnOnce() -> T) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(build)) {
        Ok(_) => None,
        Err(panic) => Some(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        ),
    }
}

/// Checks that a message names the algorithm, the figure, the value, the bound and a fix.
fn assert_names(message: &str, algorithm: &str, figure: &str, value: u64, bound: u64) {
    for part in [
        format!("its {algorithm} {figure}"),
        format!("is {value},"),
        format!("bound of {bound}"),
        "choose ".to_owned(),
        "or keep this limit in a MemoryStore".to_owned(),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message:?}");
    }
}

/// One case: the limiter at the edge passes and decides (first request allowed, second denied
/// with the wait of the whole period); one nanosecond more panics at `with_store`.
macro_rules! edge {
    ($store:expr, $make:expr, $inside:expr, $algorithm:expr, $figure:expr, $bound:expr) => {{
        let store: &RedisStore = $store;
        let make = $make;
        let limiter = make(one_per($inside)).with_store(store.clone());
        let first = limiter.check("edge").await.unwrap();
        assert!(first.allowed, "{}: {first:?}", $algorithm);
        let second = limiter.check("edge").await.unwrap();
        assert!(!second.allowed, "{}: {second:?}", $algorithm);
        let wait = second.retry_after.expect("a wait");
        assert!(
            wait > Duration::from_nanos($inside - 60_000_000_000)
                && wait <= Duration::from_nanos($inside),
            "{}: {wait:?}",
            $algorithm
        );
        let outside = $inside + 1;
        let message = panic_of(|| make(one_per(outside)).with_store(store.clone()))
            .unwrap_or_else(|| panic!("{}: 1 per {outside} ns was accepted", $algorithm));
        assert_names(&message, $algorithm, $figure, outside, $bound);
    }};
}

fn every_algorithm_accepts_its_bound_and_refuses_one_past_it_at_build() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Failing open: a refused policy that slipped through would pass every request.
        let store = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .on_failure(OnFailure::Open);
        let s = &store;
        edge!(
            s,
            RateLimiter::gcra,
            GCRA_MAX,
            "gcra",
            "emission interval",
            GCRA_MAX
        );
        edge!(
            s,
            RateLimiter::leaky_bucket,
            GCRA_MAX,
            "leaky_bucket",
            "emission interval",
            GCRA_MAX
        );
        edge!(
            s,
            RateLimiter::token_bucket,
            BUCKET_MAX,
            "token_bucket",
            "emission interval",
            BUCKET_MAX
        );
        edge!(
            s,
            RateLimiter::fixed_window,
            WINDOW_MAX,
            "fixed_window",
            "period",
            WINDOW_MAX
        );
        edge!(
            s,
            RateLimiter::sliding_log,
            WINDOW_MAX,
            "sliding_log",
            "period",
            WINDOW_MAX
        );
        edge!(
            s,
            RateLimiter::hybrid,
            BUCKET_MAX,
            "hybrid",
            "period",
            BUCKET_MAX
        );
        // The sliding window's horizon is the period and one sub-window: for k = 1, twice the
        // period.
        let half = WINDOW_MAX / 2;
        let limiter = RateLimiter::sliding_window(one_per(half)).with_store(s.clone());
        assert!(limiter.check("edge").await.unwrap().allowed);
        assert!(!limiter.check("edge").await.unwrap().allowed);
        let message =
            panic_of(|| RateLimiter::sliding_window(one_per(half + 1)).with_store(s.clone()))
                .expect("a horizon past the bound is refused");
        assert_names(
            &message,
            "sliding_window",
            "horizon",
            2 * (half + 1),
            WINDOW_MAX,
        );
    });
}

fn the_issue_quota_and_other_figures_are_refused_at_build() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(&server.url()).await.unwrap();
        // GCRA, 1000 per 90 days: a tolerance of 90 days.
        let ninety_days = Duration::from_secs(90 * 86_400);
        let message =
            panic_of(|| RateLimiter::gcra(Quota::new(1000, ninety_days)).with_store(store.clone()))
                .expect("refused");
        assert_names(
            &message,
            "gcra",
            "tolerance",
            90 * 86_400_000_000_000,
            GCRA_MAX,
        );
        assert!(message.contains("\"1000/90d\""), "{message}");
        // Through the layer, at `.store(..)`.
        let message =
            panic_of(|| RateLimitLayer::gcra(Quota::new(1000, ninety_days)).store(store.clone()))
                .expect("refused");
        assert_names(
            &message,
            "gcra",
            "tolerance",
            90 * 86_400_000_000_000,
            GCRA_MAX,
        );
        // One a day, 200 at once: GCRA's tolerance of 200 days.
        let message = panic_of(|| {
            RateLimiter::gcra(Quota::per_day(1).with_burst(200)).with_store(store.clone())
        })
        .expect("refused");
        assert_names(
            &message,
            "gcra",
            "tolerance",
            200 * 86_400_000_000_000,
            GCRA_MAX,
        );
        // Shaping adds its wait to the bound.
        let fine = Quota::per_day(10);
        let _ = RateLimiter::gcra(fine.clone()).with_store(store.clone());
        let message = panic_of(|| {
            RateLimiter::gcra(fine)
                .with_store(store.clone())
                .max_delay(Duration::from_secs(60 * 86_400))
        })
        .expect("refused");
        assert!(message.contains("max_delay"), "{message}");
        // A limit past the windows' bound.
        let message = panic_of(|| {
            RateLimiter::fixed_window(Quota::per_hour(WINDOW_MAX + 1)).with_store(store.clone())
        })
        .expect("refused");
        assert_names(
            &message,
            "fixed_window",
            "limit",
            WINDOW_MAX + 1,
            WINDOW_MAX,
        );
        // Tiers name the tier.
        let message = panic_of(|| {
            RateLimiter::gcra([Quota::per_second(10), Quota::new(1000, ninety_days)])
                .with_store(store.clone())
        })
        .expect("refused");
        assert!(message.contains("(tier 1)"), "{message}");
    });
}

/// A plan that `quota_for` picks while serving a request and that Redis cannot keep never
/// panics in the request, and never gives its clients the layer's own quota (which may be
/// looser than the plan's): its requests are refused as by a store that fails closed.
fn a_per_key_plan_too_large_for_redis_is_refused_not_panicked_nor_loosened() {
    use std::convert::Infallible;
    use tollgate::key::PeerAddr;
    use tower::{Layer, ServiceExt};

    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = server::closed(&server.url()).await;
        let huge = Quota::new(1000, Duration::from_secs(90 * 86_400)).named("huge");
        let layer = RateLimitLayer::gcra(Quota::per_minute(2).named("base"))
            .store(store)
            .quota_for(move |_, _| huge.clone());
        let svc = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }));
        let request = || {
            let mut req = http::Request::new(String::new());
            req.extensions_mut()
                .insert(PeerAddr("192.0.2.8:1".parse().unwrap()));
            req
        };
        let statuses: Vec<u16> = futures_statuses(&svc, request).await;
        assert_eq!(statuses, [503, 503, 503]);
    });

    async fn futures_statuses<S, F>(svc: &S, request: F) -> Vec<u16>
    where
        S: tower::Service<
                http::Request<String>,
                Response = http::Response<tollgate::layer::ResponseBody<String>>,
                Error = Infallible,
            > + Clone,
        F: Fn() -> http::Request<String>,
    {
        let mut out = Vec::new();
        for _ in 0..3 {
            let resp = svc.clone().oneshot(request()).await.unwrap();
            out.push(resp.status().as_u16());
        }
        out
    }
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "every_algorithm_accepts_its_bound_and_refuses_one_past_it_at_build",
            every_algorithm_accepts_its_bound_and_refuses_one_past_it_at_build,
        ),
        server::needs_redis(
            "the_issue_quota_and_other_figures_are_refused_at_build",
            the_issue_quota_and_other_figures_are_refused_at_build,
        ),
        server::needs_redis(
            "a_per_key_plan_too_large_for_redis_is_refused_not_panicked_nor_loosened",
            a_per_key_plan_too_large_for_redis_is_refused_not_panicked_nor_loosened,
        ),
    ]
}
