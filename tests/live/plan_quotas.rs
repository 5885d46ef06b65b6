//! A per-key plan's quotas changed live (`Handle::set_plan_quotas`) on one server in memory:
//! its clients keep what they used, plans made after the change start with it, a plan's
//! standing is reported (`Handle::peek_plan`), and misuse is refused where it is made.

use crate::support::services;

use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::layer::Handle;
use tollgate::{ErrorKind, Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

type Svc = tower::util::BoxCloneService<
    Request<String>,
    Response<tollgate::layer::ResponseBody<String>>,
    std::convert::Infallible,
>;

fn pro() -> Quota {
    Quota::per_minute(5).named("pro")
}

/// A layer of 2 a minute ("free"), whose keys starting with `pro-` get [`pro`], keyed on
/// `x-key`; algorithm `make`.
fn layer(make: fn(Quota) -> RateLimitLayer, clock: &ManualClock) -> (Handle, Svc) {
    let layer = make(Quota::per_minute(2).named("free"))
        .key(Header::new("x-key"))
        .clock(clock.clone())
        .quota_for(|key: &Key, _: RequestHead<'_>| {
            if key.as_bytes().is_some_and(|k| k.starts_with(b"pro-")) {
                pro()
            } else {
                Quota::per_minute(2).named("free")
            }
        });
    let handle = layer.handle();
    (handle, Svc::new(layer.layer(services::ok())))
}

async fn admitted(svc: &Svc, key: &str, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        let req = Request::builder()
            .header("x-key", key)
            .body(String::new())
            .unwrap();
        passed += usize::from(svc.clone().oneshot(req).await.unwrap().status() == StatusCode::OK);
    }
    passed
}

const ALGORITHMS: [fn(Quota) -> RateLimitLayer; 3] = [
    RateLimitLayer::gcra,
    RateLimitLayer::fixed_window,
    RateLimitLayer::sliding_log,
];

/// Every number used of 5 a minute, moved to 3 and to 8 a minute: what is left is the new
/// quota less what was used, never a fresh budget; the layer's own quotas do not move.
#[tokio::test]
async fn a_plans_clients_keep_what_they_used() {
    for make in ALGORITHMS {
        for used in 0..=5usize {
            for to in [3usize, 8] {
                let clock = ManualClock::new();
                let (handle, svc) = layer(make, &clock);
                assert_eq!(admitted(&svc, "pro-1", used).await, used);
                let new = Quota::per_minute(to as u64).named("pro");
                handle.set_plan_quotas(pro(), new.clone()).unwrap();
                assert_eq!(handle.plan_quotas(pro()), [new]);
                assert_eq!(handle.quotas(), [Quota::per_minute(2).named("free")]);
                let left = to.saturating_sub(used);
                let seen = handle.peek_plan(pro(), Key::from("pro-1")).await.unwrap();
                assert_eq!(seen.remaining, left as u64, "used {used}, to {to}");
                assert_eq!(
                    admitted(&svc, "pro-1", 10).await,
                    left,
                    "used {used}, to {to}"
                );
                // A client of the plan first seen after the change gets the new quota.
                assert_eq!(admitted(&svc, "pro-2", 10).await, to);
                // The layer's own clients are not moved.
                assert_eq!(admitted(&svc, "free-1", 5).await, 2);
            }
        }
    }
}

/// A plan changed before any of its clients came: its first limiter is made with the new
/// quotas. Changed back, its clients keep what they used.
#[tokio::test]
async fn a_plan_changed_before_its_first_request_starts_with_the_change() {
    let clock = ManualClock::new();
    let (handle, svc) = layer(RateLimitLayer::gcra, &clock);
    handle
        .set_plan_quotas(pro(), Quota::per_minute(3).named("pro"))
        .unwrap();
    assert_eq!(admitted(&svc, "pro-1", 2).await, 2);
    handle.set_plan_quotas(pro(), pro()).unwrap();
    assert_eq!(handle.plan_quotas(pro()), [pro()]);
    assert_eq!(admitted(&svc, "pro-1", 10).await, 3);
}

/// `peek_plan` reports the plan's standing, where `peek` reports the layer's own quotas.
#[tokio::test]
async fn peek_plan_reports_a_key_under_its_plan() {
    let clock = ManualClock::new();
    let (handle, svc) = layer(RateLimitLayer::gcra, &clock);
    assert_eq!(admitted(&svc, "pro-1", 4).await, 4);
    let plan = handle.peek_plan(pro(), Key::from("pro-1")).await.unwrap();
    assert_eq!((plan.limit, plan.remaining), (5, 1));
    let own = handle.peek(Key::from("pro-1")).await.unwrap();
    assert_eq!((own.limit, own.remaining), (2, 2));
}

/// Misuse is refused with an error of kind Misconfigured that names the fix, and changes
/// nothing.
#[tokio::test]
async fn misuse_is_refused_naming_the_fix() {
    let clock = ManualClock::new();
    let plain = RateLimitLayer::gcra(Quota::per_minute(2)).clock(clock.clone());
    let error = plain
        .handle()
        .set_plan_quotas(pro(), Quota::per_minute(9))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    assert!(error.to_string().contains("quota_for"), "{error}");

    let (handle, _svc) = layer(RateLimitLayer::gcra, &clock);
    let cases: [(Vec<Quota>, Vec<Quota>, &str); 4] = [
        (vec![pro()], vec![], "at least one"),
        (vec![], vec![Quota::per_minute(9)], "set_quotas"),
        (
            vec![Quota::per_minute(2).named("free")],
            vec![Quota::per_minute(9)],
            "set_quotas",
        ),
        (
            vec![pro()],
            vec![Quota::per_minute(9), Quota::per_hour(90)],
            "tiers",
        ),
    ];
    for (plan, quotas, fix) in cases {
        let error = handle.set_plan_quotas(plan.clone(), quotas).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{plan:?}");
        assert!(error.to_string().contains(fix), "{error}");
    }
    assert_eq!(handle.plan_quotas(pro()), [pro()]);
}

/// Calendar windows need a period of at least 1 ms. A plan (`quota_for`) or a quota changed
/// live with a shorter one is refused as a misconfiguration, where the layer meets it: the
/// request is answered `503` as any limiter error (not passed on), and a handle's change
/// returns an error; nothing panics.
#[tokio::test]
async fn calendar_windows_refuse_a_plan_or_a_change_shorter_than_a_millisecond() {
    let short = || Quota::new(5, std::time::Duration::from_micros(500));
    let layer = RateLimitLayer::fixed_window(Quota::per_minute(2).named("free"))
        .aligned()
        .key(Header::new("x-key"))
        .clock(ManualClock::new())
        .quota_for(move |key: &Key, _: RequestHead<'_>| {
            let bytes = key.as_bytes().unwrap_or_default();
            if bytes.starts_with(b"pro-") {
                short().named("short")
            } else if bytes.starts_with(b"team-") {
                Quota::per_minute(3).named("team")
            } else {
                Quota::per_minute(2).named("free")
            }
        });
    let handle = layer.handle();
    let svc = Svc::new(layer.layer(services::ok()));
    let req = |key: &str| {
        Request::builder()
            .header("x-key", key)
            .body(String::new())
            .unwrap()
    };
    // Spawned: a panic would be a JoinError here rather than this test's own.
    let answer = tokio::spawn(svc.clone().oneshot(req("pro-1"))).await;
    let status = answer.expect("no panic").unwrap().status();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // The other keys are unaffected.
    assert_eq!(admitted(&svc, "free-1", 3).await, 2);

    let error = handle.set_quotas(short()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured, "{error}");
    assert!(error.to_string().contains("1 ms"), "{error}");
    let team = Quota::per_minute(3).named("team");
    assert_eq!(admitted(&svc, "team-1", 1).await, 1);
    let error = handle.set_plan_quotas(team.clone(), short()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured, "{error}");
    assert!(error.to_string().contains("1 ms"), "{error}");
    assert_eq!(handle.plan_quotas(team.clone()), [team]);
    assert_eq!(admitted(&svc, "team-1", 3).await, 2);
}
