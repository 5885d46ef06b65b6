//! A client of a per-key plan that wants more than its quota, against a plan changed live
//! while one of its requests is still in the service.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tokio::sync::Notify;
use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

fn pro(n: u64) -> Quota {
    Quota::per_minute(n).named("pro")
}

fn req(key: &str, hold: bool) -> Request<String> {
    let mut b = Request::builder().header("x-key", key);
    if hold {
        b = b.header("x-hold", "1");
    }
    b.body(String::new()).unwrap()
}

/// A request admitted under a plan's old quotas, whose response does not count, gives back
/// what it took after the plan moved from 5 to 6 a minute: the key has at most 6 less the 4
/// that counted left, never more.
#[tokio::test]
async fn a_refund_across_a_plan_change_never_gives_more_than_the_new_quota() {
    let makers: [fn(Quota) -> RateLimitLayer; 4] = [
        RateLimitLayer::gcra,
        RateLimitLayer::token_bucket,
        RateLimitLayer::fixed_window,
        RateLimitLayer::sliding_log,
    ];
    for make in makers {
        let clock = ManualClock::new();
        let go = Arc::new(Notify::new());
        let layer = make(Quota::per_minute(2).named("free"))
            .key(Header::new("x-key"))
            .clock(clock.clone())
            .quota_for(|key: &Key, _: RequestHead<'_>| {
                if key.as_bytes().is_some_and(|k| k.starts_with(b"pro-")) {
                    pro(5)
                } else {
                    Quota::per_minute(2).named("free")
                }
            })
            .count_if(|parts| parts.status != StatusCode::INTERNAL_SERVER_ERROR);
        let handle = layer.handle();
        let wait = go.clone();
        let svc = layer.layer(tower::service_fn(move |req: Request<String>| {
            let wait = wait.clone();
            async move {
                let status = if req.headers().contains_key("x-hold") {
                    wait.notified().await;
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                };
                let mut res = Response::new(String::new());
                *res.status_mut() = status;
                Ok::<_, std::convert::Infallible>(res)
            }
        }));
        let held = tokio::spawn(svc.clone().oneshot(req("pro-1", true)));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let mut passed = 0;
        for _ in 0..4 {
            let res = svc.clone().oneshot(req("pro-1", false)).await.unwrap();
            passed += usize::from(res.status() == StatusCode::OK);
        }
        assert_eq!(passed, 4);
        handle.set_plan_quotas(pro(5), pro(6)).unwrap();
        go.notify_one();
        let res = held.await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let mut more = 0;
        for _ in 0..10 {
            let res = svc.clone().oneshot(req("pro-1", false)).await.unwrap();
            more += usize::from(res.status() == StatusCode::OK);
        }
        assert!(more <= 2, "{more} more admitted after 4 counted of 6");
    }
}

/// Costs a client picks (0, huge) on a shaped, banned plan with a tuple key: a huge cost is
/// refused without using anything, a zero cost uses nothing, and the plan still admits
/// exactly its quota.
#[tokio::test]
async fn huge_and_zero_costs_on_a_shaped_plan_admit_exactly_its_quota() {
    use std::time::Duration;
    use tollgate::layer::Ban;
    for huge in [u64::MAX, u64::MAX / 2, 1 << 53, 6] {
        let clock = ManualClock::new();
        let layer = RateLimitLayer::gcra(Quota::per_minute(2).named("free"))
            .key((Header::new("x-key"), Header::new("x-org")))
            .clock(clock.clone())
            .max_delay(Duration::from_millis(1))
            .ban(Ban::new(
                1000,
                Duration::from_secs(60),
                Duration::from_secs(60),
            ))
            .quota_for(|_: &Key, _: RequestHead<'_>| pro(5))
            .cost(|_: &Key, head: RequestHead<'_>| {
                head.headers()
                    .get("x-cost")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(1)
            });
        let svc = layer.layer(tower::service_fn(|_: Request<String>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
        let send = |cost: u64| {
            let req = Request::builder()
                .header("x-key", "k".repeat(10_000))
                .header("x-org", "o")
                .header("x-cost", cost.to_string())
                .body(String::new())
                .unwrap();
            svc.clone().oneshot(req)
        };
        let res = send(huge).await.unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "cost {huge}");
        let mut passed = 0;
        for _ in 0..3 {
            passed += usize::from(send(0).await.unwrap().status() == StatusCode::OK);
        }
        assert_eq!(passed, 3, "cost 0 always passes");
        let mut passed = 0;
        for _ in 0..10 {
            passed += usize::from(send(1).await.unwrap().status() == StatusCode::OK);
        }
        assert_eq!(passed, 5, "cost {huge} first");
    }
}
