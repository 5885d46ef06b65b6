//! `Handle::set_quotas`: new quotas at once, each key keeping what it used, counted in requests.
//!
//! - The figures users are promised: used 2 of 2/min and moved to 10/min: 8 more; used 1 of
//!   10/min and moved to 2/min: 1 more; headers name the quotas in force.
//! - For every algorithm and tiers, after any sequence of changes, time steps and requests:
//!   within each stretch of one quota, the live layer admits no more than a fresh layer of
//!   that quota would over the same requests (so a key never gets more than each quota
//!   allowed over its time).
//! - A key untouched through several changes still carries its usage.
//! - Refusals change nothing: no quota, two quotas for a one-quota layer, a layer from a
//!   limiter.
//! - Requests racing changes on many threads.

use crate::support::live;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::key::Global;
use tollgate::{ErrorKind, Quota, RateLimitLayer, RateLimiter};
use tower::ServiceExt;

use live::{layer_of, pool};

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn send(rt: &tokio::runtime::Runtime, app: &Router) -> Response<Body> {
    let request = Request::get("/").body(Body::empty()).unwrap();
    rt.block_on(app.clone().oneshot(request)).unwrap()
}

/// Whether a request passes: answered OK, or admitted with a wait (the leaky bucket queues,
/// and the manual clock never ends the wait: the request is counted, then dropped).
fn allowed(rt: &tokio::runtime::Runtime, app: &Router) -> bool {
    let request = Request::get("/").body(Body::empty()).unwrap();
    let mut response = std::pin::pin!(app.clone().oneshot(request));
    let _guard = rt.enter();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match response.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(response) => response.unwrap().status() == StatusCode::OK,
        std::task::Poll::Pending => true,
    }
}

/// How many of `n` requests pass.
fn passes(rt: &tokio::runtime::Runtime, app: &Router, n: usize) -> usize {
    (0..n).filter(|_| allowed(rt, app)).count()
}

/// `layer` keyed globally on `clock`: its handle and the app it limits.
fn live(layer: RateLimitLayer, clock: &ManualClock) -> (tollgate::layer::Handle, Router) {
    let layer = layer.key(Global).clock(clock.clone());
    (layer.handle(), app(layer))
}

#[test]
fn an_upgrade_keeps_what_was_used_and_gives_the_rest() {
    let rt = runtime();
    let (handle, app) = live(
        RateLimitLayer::gcra(Quota::per_minute(2)),
        &ManualClock::new(),
    );
    assert_eq!(passes(&rt, &app, 3), 2);
    handle.set_quotas(Quota::per_minute(10)).unwrap();
    let first = send(&rt, &app);
    assert_eq!(first.status(), StatusCode::OK);
    // 2 used, this one, 7 left; the headers name the quota in force.
    assert_eq!(first.headers()["ratelimit"], "\"10/min\";r=7;t=18");
    assert_eq!(first.headers()["ratelimit-policy"], "\"10/min\";q=10;w=60");
    assert_eq!(passes(&rt, &app, 10), 7);
}

/// The quotas in force given again (a configuration watcher applying the same file) change
/// nothing: no key's partial use is rounded up to a whole request.
#[test]
fn the_quotas_in_force_given_again_change_nothing() {
    let rt = runtime();
    let clock = ManualClock::new();
    let quota = Quota::new(1, Duration::from_secs(10));
    let (handle, app) = live(RateLimitLayer::gcra(quota.clone()), &clock);
    assert_eq!(passes(&rt, &app, 1), 1);
    clock.advance(Duration::from_secs(1));
    handle.set_quotas(quota).unwrap();
    let standing = rt.block_on(handle.peek(tollgate::Key::from(0u64))).unwrap();
    // 9 s to the next request, as before: converted, it would be 10.
    assert_eq!(standing.reset_after, Duration::from_secs(9));
}

#[test]
fn a_downgrade_leaves_what_the_new_quota_has_left() {
    let rt = runtime();
    let (handle, app) = live(
        RateLimitLayer::fixed_window(Quota::per_minute(10)),
        &ManualClock::new(),
    );
    assert_eq!(passes(&rt, &app, 1), 1);
    handle.set_quotas(Quota::per_minute(2)).unwrap();
    assert_eq!(passes(&rt, &app, 5), 1);
    // Used 8 of 10, moved to 2: nothing left until the new window.
    let clock = ManualClock::new();
    let (handle, app) = live(RateLimitLayer::fixed_window(Quota::per_minute(10)), &clock);
    assert_eq!(passes(&rt, &app, 8), 8);
    handle.set_quotas(Quota::per_minute(2)).unwrap();
    assert_eq!(passes(&rt, &app, 3), 0);
    clock.advance(Duration::from_secs(60));
    assert_eq!(passes(&rt, &app, 3), 2);
}

#[test]
fn a_key_untouched_through_several_changes_keeps_its_usage() {
    let rt = runtime();
    let clock = ManualClock::new();
    let (handle, app) = live(RateLimitLayer::sliding_log(Quota::per_hour(3)), &clock);
    assert_eq!(passes(&rt, &app, 3), 3);
    for limit in (4..=12).chain([6]) {
        clock.advance(Duration::from_secs(60));
        handle.set_quotas(Quota::per_hour(limit)).unwrap();
    }
    // The 3 used carry through ten changes to the quota of 6.
    assert_eq!(passes(&rt, &app, 6), 3);
}

#[test]
fn every_new_tier_is_charged_what_the_key_used() {
    let rt = runtime();
    let (handle, app) = live(
        RateLimitLayer::gcra([Quota::per_second(5), Quota::per_hour(20)]),
        &ManualClock::new(),
    );
    assert_eq!(passes(&rt, &app, 6), 5);
    // Every tier, the added one too, is charged the 5 used: the hour's 6 has 1 left.
    handle
        .set_quotas(vec![
            Quota::per_second(8),
            Quota::per_hour(6),
            Quota::per_day(100),
        ])
        .unwrap();
    assert_eq!(passes(&rt, &app, 5), 1);
    // A list of one is still tiers.
    handle.set_quotas(vec![Quota::per_second(1)]).unwrap();
    assert_eq!(handle.quotas(), [Quota::per_second(1)]);
}

#[test]
fn refused_changes_change_nothing() {
    let rt = runtime();
    let (handle, app) = live(
        RateLimitLayer::gcra(Quota::per_minute(2)),
        &ManualClock::new(),
    );
    let none = handle.set_quotas(Vec::<Quota>::new()).unwrap_err();
    assert_eq!(none.kind(), ErrorKind::Misconfigured);
    assert!(none.to_string().contains("no quota given"), "{none}");
    let two = handle
        .set_quotas([Quota::per_minute(5), Quota::per_hour(50)])
        .unwrap_err();
    assert_eq!(two.kind(), ErrorKind::Misconfigured);
    assert!(two.to_string().contains("one quota against tiers"), "{two}");
    assert_eq!(handle.quotas(), [Quota::per_minute(2)]);
    assert_eq!(passes(&rt, &app, 3), 2);

    let by_hand = RateLimitLayer::from_limiter(RateLimiter::gcra(Quota::per_minute(2)));
    let refused = by_hand
        .handle()
        .set_quotas(Quota::per_minute(5))
        .unwrap_err();
    assert!(refused.to_string().contains("from_limiter"), "{refused}");
}

#[test]
fn a_handle_reaches_services_made_before_and_after_it_and_clones() {
    let rt = runtime();
    let layer = RateLimitLayer::gcra(Quota::per_minute(1))
        .key(Global)
        .clock(ManualClock::new());
    let before = app(layer.clone());
    let handle = layer.handle();
    // The key and answers may change after the handle is taken.
    let after = app(layer.status(StatusCode::SERVICE_UNAVAILABLE));
    handle.set_quotas(Quota::per_minute(3)).unwrap();
    // One budget of 3, shared by both services.
    assert_eq!(passes(&rt, &before, 2) + passes(&rt, &after, 2), 3);
    assert_eq!(send(&rt, &after).status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[test]
fn plans_of_the_layers_own_quotas_follow_the_change() {
    let rt = runtime();
    let free = Quota::per_minute(2);
    let layer = RateLimitLayer::gcra(free.clone())
        .key(Global)
        .clock(ManualClock::new())
        .quota_for(move |_, _| free.clone());
    let handle = layer.handle();
    let app = app(layer);
    assert_eq!(passes(&rt, &app, 1), 1);
    handle.set_quotas(Quota::per_minute(4)).unwrap();
    assert_eq!(passes(&rt, &app, 5), 3);
}

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Request,
    /// New quotas: indexes into the quota pool.
    Change(Vec<usize>),
}

fn steps(tiered: bool) -> impl Strategy<Value = Vec<Step>> {
    let tiers = if tiered { 1..3usize } else { 1..2 };
    let change = prop::collection::vec(0..6usize, tiers).prop_map(Step::Change);
    let step = prop_oneof![
        3 => (0u64..1_500).prop_map(Step::Advance),
        6 => Just(Step::Request),
        1 => change,
    ];
    prop::collection::vec(step, 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Within each stretch of one set of quotas, the live layer admits no more than a layer of
    /// those quotas that starts fresh and sees the same requests: what a key used before a
    /// change only ever takes from what it gets after. For the algorithms whose state only
    /// ever holds capacity back (GCRA, the token and leaky buckets, the sliding log); the
    /// window algorithms count in windows that start where the change charged the key's usage
    /// (a fresh layer's start at its first request), so stretches of theirs are compared in
    /// `with_time_stopped_a_change_gives_only_what_is_left`.
    #[test]
    fn no_stretch_admits_more_than_its_quotas_allow_fresh(
        kind in prop_oneof![Just(0usize), Just(1), Just(2), Just(5)],
        tiered in any::<bool>(),
        first in prop::collection::vec(0..6usize, 1..3),
        steps in steps(true),
    ) {
        let rt = runtime();
        let pool = pool();
        let pick = |ix: &[usize]| -> Vec<Quota> {
            let mut q: Vec<Quota> = ix.iter().map(|&i| pool[i].clone()).collect();
            if !tiered { q.truncate(1); }
            q
        };
        let clock = ManualClock::new();
        let live = layer_of(kind, pick(&first), tiered).key(Global).clock(clock.clone());
        let handle = live.handle();
        let live = app(live);
        let fresh_twin = |ix: &[usize]| app(layer_of(kind, pick(ix), tiered).key(Global).clock(clock.clone()));
        let mut twin = fresh_twin(&first);
        let (mut got, mut fresh) = (0, 0);
        let mut stretch = 0;
        for step in steps {
            match step {
                Step::Advance(ms) => clock.advance(Duration::from_millis(ms)),
                Step::Request => {
                    got += usize::from(allowed(&rt, &live));
                    fresh += usize::from(allowed(&rt, &twin));
                    prop_assert!(got <= fresh, "stretch {}: {} admitted, a fresh layer {}", stretch, got, fresh);
                }
                Step::Change(ix) => {
                    let ix = if tiered { ix } else { ix[..1].to_vec() };
                    handle.set_quotas(pick(&ix)).unwrap();
                    twin = fresh_twin(&ix);
                    (got, fresh) = (0, 0);
                    stretch += 1;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// With time stopped, a change gives exactly what the new quotas have left after what the
    /// key used: `max(used, what the new quotas allow at once)` in all, for every algorithm
    /// and tiers. A change that started keys fresh would give `used` more.
    #[test]
    fn with_time_stopped_a_change_gives_only_what_is_left(
        kind in 0..live::KINDS.len(),
        tiered in any::<bool>(),
        old in prop::collection::vec(0..6usize, 1..3),
        new in prop::collection::vec(0..6usize, 1..3),
        before in 0usize..12,
    ) {
        let rt = runtime();
        let pool = pool();
        let pick = |ix: &[usize]| -> Vec<Quota> {
            let mut q: Vec<Quota> = ix.iter().map(|&i| pool[i].clone()).collect();
            if !tiered { q.truncate(1); }
            q
        };
        let (old, new) = (pick(&old), pick(&new));
        let at_once = |quotas: &[Quota]| {
            let twin = app(layer_of(kind, quotas.to_vec(), tiered).key(Global).clock(ManualClock::new()));
            passes_now(&rt, &twin, 40)
        };
        let (could_old, could_new) = (at_once(&old), at_once(&new));
        let live = layer_of(kind, old, tiered).key(Global).clock(ManualClock::new());
        let handle = live.handle();
        let live = app(live);
        let used = passes_now(&rt, &live, before);
        prop_assert_eq!(used, before.min(could_old));
        handle.set_quotas(new).unwrap();
        let after = passes_now(&rt, &live, 40);
        prop_assert_eq!(used + after, used.max(could_new), "used {}, then {} under a quota that allows {} at once", used, after, could_new);
    }
}

/// How many of `n` requests pass, counting a queued one as passed.
fn passes_now(rt: &tokio::runtime::Runtime, app: &Router, n: usize) -> usize {
    (0..n).filter(|_| allowed(rt, app)).count()
}

/// Threads request one key while the quotas change under them, with time stopped: each of the
/// `changes + 1` stretches admits at most its burst, and a request that raced a change may
/// have been counted under the quotas it started with (at most one per thread per change).
#[test]
fn requests_racing_changes_never_exceed_the_bursts() {
    const THREADS: u64 = 4;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS as usize)
        .build()
        .unwrap();
    let (handle, app) = live(
        RateLimitLayer::gcra(Quota::per_hour(5)),
        &ManualClock::new(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let mut bursts = 5;
    let changes = 40;
    rt.block_on(async {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (app, admitted) = (app.clone(), admitted.clone());
                tokio::spawn(async move {
                    for _ in 0..400 {
                        let request = Request::get("/").body(Body::empty()).unwrap();
                        let response = app.clone().oneshot(request).await.unwrap();
                        if response.status() == StatusCode::OK {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for i in 0..changes {
            let limit = 5 + (i % 3);
            handle.set_quotas(Quota::per_hour(limit)).unwrap();
            bursts += limit;
            tokio::task::yield_now().await;
        }
        for worker in workers {
            worker.await.unwrap();
        }
    });
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        admitted <= bursts + THREADS * changes,
        "{admitted} admitted, at most {bursts} + {} expected",
        THREADS * changes
    );
    // Time stands still: the last quota is spent.
    let rt = runtime();
    assert!(!allowed(&rt, &app));
}
