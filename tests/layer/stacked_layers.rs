//! Layers stack: a global limit per client IP around a per-route login limit around a per-key
//! plan limit, in a real axum server called over HTTP. Every layer's items reach the client in
//! the list fields, the single-value styles report the most restrictive layer, and the handler
//! sees every layer's decision.

use crate::support::http as web;

use std::time::Duration;

use axum::routing::get;
use axum::{Extension, Router};
use reqwest::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::{Decision, Decisions, HeaderStyle, InFlightLayer, Key, Quota, RateLimitLayer};

use web::{header, serve};

/// What the handler saw: the most restrictive decision, then every layer's, outermost first.
async fn show(
    Extension(strictest): Extension<Decision>,
    all: Option<Extension<Decisions>>,
) -> String {
    let name = |d: &Decision| d.policy().unwrap_or("?").to_owned();
    let layers: Vec<String> = all
        .map(|Extension(all)| {
            all.iter()
                .map(|d| format!("{}:{}", name(d), d.remaining))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "strictest={}:{} layers={}",
        name(&strictest),
        strictest.remaining,
        layers.join(",")
    )
}

fn app(clock: &ManualClock, style: HeaderStyle) -> Router {
    let global = RateLimitLayer::gcra(Quota::per_minute(100).named("global"))
        .clock(clock.clone())
        .headers(style);
    let login = RateLimitLayer::fixed_window(Quota::per_minute(3).named("login"))
        .clock(clock.clone())
        .headers(style);
    // Per plan: keys starting with `pro_` (API keys of any length) get 4 a minute, others 2.
    let pro = Quota::per_minute(4).named("pro");
    let plan = RateLimitLayer::gcra(Quota::per_minute(2).named("plan"))
        .key(Header::new("x-api-key"))
        .quota_for(move |key: &Key, _head| {
            if key.as_bytes().is_some_and(|k| k.starts_with(b"pro_")) {
                pro.clone()
            } else {
                Quota::per_minute(2).named("plan")
            }
        })
        .clock(clock.clone())
        .headers(style);
    Router::new()
        .route("/api", get(show))
        .route("/login", get(show).route_layer(login))
        .layer(plan)
        .layer(global)
}

async fn call(client: &reqwest::Client, url: &str, key: &str) -> reqwest::Response {
    client
        .get(url)
        .header("x-api-key", key)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn three_layers_each_describe_their_own_quota() {
    let clock = ManualClock::new();
    let base = serve(app(&clock, HeaderStyle::Ietf)).await;
    let client = reqwest::Client::new();
    let api = format!("{base}/api");

    // Global: 100/min, one every 0.6 s; plan: 2/min, one every 30 s.
    let resp = call(&client, &api, "alice").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        r#""plan";q=2;w=60, "global";q=100;w=60"#
    );
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""plan";r=1;t=30, "global";r=99;t=1"#
    );
    assert_eq!(
        resp.text().await.unwrap(),
        "strictest=plan:1 layers=global:99,plan:1"
    );

    let resp = call(&client, &api, "alice").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""plan";r=0;t=60, "global";r=98;t=2"#
    );
    assert_eq!(
        resp.text().await.unwrap(),
        "strictest=plan:0 layers=global:98,plan:0"
    );

    // The plan denies: the 429 names the plan that denied, with nothing left, beside the
    // global standing (the global layer let the request in, so it counted there).
    let resp = call(&client, &api, "alice").await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "30");
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""plan";r=0;t=60, "global";r=97;t=2"#
    );
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        r#""plan";q=2;w=60, "global";q=100;w=60"#
    );

    // The login route has a third layer inside the other two; another key has its own plan.
    let login = format!("{base}/login");
    let resp = call(&client, &login, "bob").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""login";r=2;t=60, "plan";r=1;t=30, "global";r=96;t=3"#
    );
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        r#""login";q=3;w=60, "plan";q=2;w=60, "global";q=100;w=60"#
    );
    assert_eq!(
        resp.text().await.unwrap(),
        "strictest=plan:1 layers=global:96,plan:1,login:2"
    );

    // A pro key as long as a JWT: the plan layer picks the pro plan (the selector sees the whole
    // key) and names it.
    let pro_key = format!("pro_{}", "k".repeat(120));
    let resp = call(&client, &api, &pro_key).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""pro";r=3;t=15, "global";r=95;t=3"#
    );
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        r#""pro";q=4;w=60, "global";q=100;w=60"#
    );
    assert_eq!(
        resp.text().await.unwrap(),
        "strictest=pro:3 layers=global:95,pro:3"
    );

    // A minute on, everything is fresh again.
    clock.advance(Duration::from_secs(60));
    let resp = call(&client, &login, "bob").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""login";r=2;t=60, "plan";r=1;t=30, "global";r=99;t=1"#
    );
}

#[tokio::test]
async fn single_value_styles_report_the_most_restrictive_layer() {
    for style in [
        HeaderStyle::Draft7,
        HeaderStyle::Draft6,
        HeaderStyle::GitHub,
    ] {
        let clock = ManualClock::new();
        let base = serve(app(&clock, style)).await;
        let client = reqwest::Client::new();
        let api = format!("{base}/api");
        let _ = call(&client, &api, "carol").await;
        let _ = call(&client, &api, "carol").await;
        let resp = call(&client, &api, "carol").await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{style:?}");
        // The plan's figures (nothing left, full again in 60 s), not the global layer's 97.
        match style {
            HeaderStyle::Draft7 => {
                assert_eq!(header(&resp, "ratelimit"), "limit=2, remaining=0, reset=60");
                assert_eq!(header(&resp, "ratelimit-policy"), "2;w=60, 100;w=60");
            }
            HeaderStyle::Draft6 => {
                assert_eq!(header(&resp, "ratelimit-limit"), "2");
                assert_eq!(header(&resp, "ratelimit-remaining"), "0");
                assert_eq!(header(&resp, "ratelimit-reset"), "60");
            }
            _ => {
                assert_eq!(header(&resp, "x-ratelimit-limit"), "2");
                assert_eq!(header(&resp, "x-ratelimit-remaining"), "0");
                assert_eq!(header(&resp, "x-ratelimit-used"), "2");
            }
        }
        // An allowed request for another key: the global layer has 96 left, the plan 1.
        let resp = call(&client, &api, "dave").await;
        assert_eq!(resp.status(), StatusCode::OK);
        let remaining = match style {
            HeaderStyle::Draft7 => header(&resp, "ratelimit"),
            HeaderStyle::Draft6 => header(&resp, "ratelimit-remaining"),
            _ => header(&resp, "x-ratelimit-remaining"),
        };
        assert!(
            remaining == "1" || remaining.contains("remaining=1,"),
            "{style:?}: {remaining}"
        );
    }
}

/// Headers describe the decision as of when the response leaves: a handler that takes 20 s
/// (on the manual clock) sends what is left of the wait, not the wait when it was decided.
#[tokio::test]
async fn a_slow_handler_reports_what_is_left_of_the_wait() {
    let clock = ManualClock::new();
    let slow = {
        let clock = clock.clone();
        move || {
            let clock = clock.clone();
            async move {
                clock.advance(Duration::from_secs(20));
                "done"
            }
        }
    };
    for (style, field, value) in [
        (HeaderStyle::Ietf, "ratelimit", r#""plan";r=1;t=10"#),
        (
            HeaderStyle::Draft7,
            "ratelimit",
            "limit=2, remaining=1, reset=10",
        ),
        (HeaderStyle::Draft6, "ratelimit-reset", "10"),
    ] {
        let plan = RateLimitLayer::gcra(Quota::per_minute(2).named("plan"))
            .clock(clock.clone())
            .headers(style);
        let base = serve(Router::new().route("/", get(slow.clone())).layer(plan)).await;
        let resp = reqwest::get(format!("{base}/")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, field), value, "{style:?}");
        clock.advance(Duration::from_secs(60));
    }
}

/// The single-value fields of `style` on `resp`, as `name: value` (missing ones left out).
fn single_values(resp: &reqwest::Response, style: HeaderStyle) -> Vec<String> {
    let names: &[&str] = match style {
        HeaderStyle::Draft7 => &["ratelimit"],
        HeaderStyle::Draft6 => &["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"],
        _ => &[
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-used",
            "x-ratelimit-reset",
        ],
    };
    names
        .iter()
        .filter_map(|name| {
            let value = resp.headers().get(*name)?.to_str().ok()?;
            Some(format!("{name}: {value}"))
        })
        .collect()
}

/// What an in-flight limit of `limit`, at `free` slots free, reports in `style`: no reset time.
fn in_flight_figures(style: HeaderStyle, limit: u64, free: u64) -> Vec<String> {
    match style {
        HeaderStyle::Draft7 => vec![format!("ratelimit: limit={limit}, remaining={free}")],
        HeaderStyle::Draft6 => vec![
            format!("ratelimit-limit: {limit}"),
            format!("ratelimit-remaining: {free}"),
        ],
        _ => vec![
            format!("x-ratelimit-limit: {limit}"),
            format!("x-ratelimit-remaining: {free}"),
            format!("x-ratelimit-used: {}", limit - free),
        ],
    }
}

/// A rate limit and an in-flight limit stacked, in either order: the single-value fields a
/// client sees are one layer's, the most restrictive, never one layer's limit beside the other's
/// remaining or reset.
#[tokio::test]
async fn stacked_in_flight_and_rate_layers_report_one_layers_figures() {
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    for style in [
        HeaderStyle::Draft7,
        HeaderStyle::Draft6,
        HeaderStyle::GitHub,
    ] {
        for rate_outside in [true, false] {
            let clock = ManualClock::new();
            let gate = Arc::new(Semaphore::new(0));
            let (entered, mut inside) = tokio::sync::mpsc::unbounded_channel::<()>();
            let handler_gate = gate.clone();
            let handler = move || {
                let (gate, entered) = (handler_gate.clone(), entered.clone());
                async move {
                    let _ = entered.send(());
                    if let Ok(permit) = gate.acquire().await {
                        permit.forget();
                    }
                    "done"
                }
            };
            let rate = RateLimitLayer::gcra(Quota::per_minute(100))
                .clock(clock.clone())
                .headers(style);
            let in_flight = InFlightLayer::new(1).headers(style);
            let router = Router::new().route("/", get(handler));
            // axum's last layer is the outermost.
            let router = if rate_outside {
                router.layer(in_flight).layer(rate)
            } else {
                router.layer(rate).layer(in_flight)
            };
            let base = serve(router).await;
            let client = reqwest::Client::new();
            let case = format!("{style:?}, rate layer outside: {rate_outside}");
            // One request held in the handler...
            let held = tokio::spawn({
                let (client, base) = (client.clone(), base.clone());
                async move { client.get(&base).send().await.unwrap() }
            });
            inside.recv().await.unwrap();
            // ...holds the one slot: a second request is refused.
            let refused = client.get(&base).send().await.unwrap();
            assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{case}");
            // The in-flight layer refused it: no slot free, and no reset (it has none).
            assert_eq!(
                single_values(&refused, style),
                in_flight_figures(style, 1, 0),
                "{case}: the refusal"
            );
            gate.add_permits(1);
            let served = held.await.unwrap();
            assert_eq!(served.status(), StatusCode::OK, "{case}");
            // While it ran, its one slot was taken: the in-flight layer (0 free) is more
            // restrictive than the rate layer (99 or so left).
            assert_eq!(
                single_values(&served, style),
                in_flight_figures(style, 1, 0),
                "{case}: the response of the request in flight"
            );
        }
    }
}
