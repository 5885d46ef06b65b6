//! The code of the README's "Testing your limits" and "Recipes", compiled and run: each block of
//! those sections is an item of this file, word for word (the last test checks it), and the
//! tests drive them over real TCP.
#![cfg(feature = "axum")]

use crate::support::http as web;

use axum::http::StatusCode;
use web::{client, header, serve};

// Recipe: layers in a struct, or returned from a function.

use axum::routing::{get, post};
use axum::Router;
use tollgate::key::{Header, KeyExtractor, PeerIp};
use tollgate::store::MemoryStore;
use tollgate::{Quota, RateLimitLayer};

/// Every limit of the app, built once where the configuration is read.
#[derive(Clone)]
pub struct Limits {
    pub global: RateLimitLayer,
    pub api: RateLimitLayer,
}

pub fn limits(store: &MemoryStore) -> Limits {
    Limits {
        global: RateLimitLayer::gcra(Quota::per_minute(100).named("global")).store(store.clone()),
        api: api_limit(store),
    }
}

pub fn api_limit(store: &MemoryStore) -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_minute(5).named("api"))
        .key(Header::new("x-api-key").or(PeerIp))
        .store(store.clone())
}

// Recipe: limits per route group, with `nest`, under one global limit.

pub fn app(limits: Limits) -> Router {
    let api = Router::new()
        .route("/orders", get(|| async { "orders\n" }))
        .route("/orders/{id}", post(|| async { "updated\n" }))
        .layer(limits.api); // the /api routes only

    Router::new()
        .route("/", get(|| async { "home\n" }))
        .nest("/api", api)
        .layer(limits.global) // every route above
        .route("/healthz", get(|| async { "ok\n" })) // added after: not limited
}

// Recipe: plans in a map, captured in an `Arc`.

use std::collections::HashMap;
use std::sync::Arc;
use tollgate::key::{from_fn, KeyError, RequestHead};
use tollgate::Key;

pub fn plans_limit(plans: Arc<HashMap<String, Quota>>) -> RateLimitLayer {
    let free = Quota::per_minute(10).named("free");
    let issued = plans.clone();
    let api_key = from_fn(move |head: RequestHead<'_>| {
        match head.headers().get("x-api-key").map(|v| v.to_str()) {
            Some(Ok(key)) if issued.contains_key(key) => Ok(Some(Key::from(key))),
            _ => Err(KeyError::new(StatusCode::UNAUTHORIZED, "no issued API key")),
        }
    });
    RateLimitLayer::gcra(free.clone())
        .key(api_key.or(PeerIp))
        .quota_for(move |key: &Key, _head: RequestHead<'_>| {
            let name = key
                .as_bytes()
                .and_then(|bytes| std::str::from_utf8(bytes).ok());
            let plan = name.and_then(|name| plans.get(name));
            plan.cloned().unwrap_or_else(|| free.clone())
        })
}

// Recipe: the plan an authentication middleware found, read from the extensions.

#[derive(Clone, Copy)]
pub enum Plan {
    Free,
    Pro,
}

pub fn plan_limit() -> RateLimitLayer {
    let free = Quota::per_minute(10).named("free");
    let pro = Quota::per_minute(100).named("pro");
    RateLimitLayer::gcra(free.clone())
        .key(Header::new("x-api-key"))
        .quota_for(
            move |_key: &Key, head: RequestHead<'_>| match head.extensions().get::<Plan>() {
                Some(Plan::Pro) => pro.clone(),
                _ => free.clone(),
            },
        )
}

// Recipe: a JSON 429, and JSON for requests without a key.

use axum::response::IntoResponse;
use axum::Json;

pub fn json_answers(layer: RateLimitLayer) -> RateLimitLayer {
    layer
        .on_limited(|decision, _head| {
            let body = serde_json::json!({
                "error": "rate_limited",
                "retry_after_seconds": decision.retry_after_secs(),
            });
            (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
        })
        .on_key_error(|error, _head| {
            let body = serde_json::json!({ "error": error.message() });
            (error.status(), Json(body)).into_response()
        })
}

// The recipes, served and driven over TCP.

#[tokio::test]
async fn nested_groups_stack_under_the_global_limit_and_clients_see_both() {
    let store = MemoryStore::new();
    let base = serve(app(limits(&store))).await;
    for remaining in (0..5).rev() {
        let response = client()
            .get(format!("{base}/api/orders"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // The inner layer's item first, then the outer one's.
        let items = header(&response, "ratelimit");
        assert!(
            items.starts_with(&format!("\"api\";r={remaining};t=")),
            "{items}"
        );
        assert!(items.contains(", \"global\";r="), "{items}");
        assert_eq!(
            header(&response, "ratelimit-policy"),
            "\"api\";q=5;w=60, \"global\";q=100;w=60"
        );
    }
    let denied = client()
        .get(format!("{base}/api/orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // Outside the group only the global limit counts.
    let home = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(home.status(), StatusCode::OK);
    let items = header(&home, "ratelimit");
    assert!(items.starts_with("\"global\";r=93;"), "{items}");
    // With an API key, the group's budget is the key's own.
    let keyed = client()
        .post(format!("{base}/api/orders/7"))
        .header("x-api-key", "k-1")
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), StatusCode::OK);
    let health = client()
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap();
    assert!(health.headers().get("ratelimit").is_none());
}

#[tokio::test]
async fn plans_come_from_a_captured_map_or_from_the_extensions() {
    let plans = Arc::new(HashMap::from([(
        "k-pro".to_owned(),
        Quota::per_minute(3).named("pro"),
    )]));
    let base = serve(
        Router::new()
            .route("/", get(|| async { "hi" }))
            .layer(plans_limit(plans)),
    )
    .await;
    for key in ["k-pro", "k-other"] {
        let response = client()
            .get(&base)
            .header("x-api-key", key)
            .send()
            .await
            .unwrap();
        let expected = if key == "k-pro" {
            "\"pro\";q=3;w=60"
        } else {
            "\"free\";q=10;w=60"
        };
        assert_eq!(header(&response, "ratelimit-policy"), expected);
    }
    // A key never issued starts no budget of its own: it shares its IP's, which `k-other` used.
    let response = client()
        .get(&base)
        .header("x-api-key", "k-invented")
        .send()
        .await
        .unwrap();
    let rate = header(&response, "ratelimit");
    assert!(rate.starts_with("\"free\";r=8;"), "{rate}");

    async fn authenticate(
        mut req: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let pro = req.headers().get("x-api-key").is_some_and(|k| k == "k-pro");
        req.extensions_mut()
            .insert(if pro { Plan::Pro } else { Plan::Free });
        next.run(req).await
    }
    let app = Router::new()
        .route("/", get(|| async { "hi" }))
        .layer(plan_limit())
        .layer(axum::middleware::from_fn(authenticate));
    let base = serve(app).await;
    for (key, policy) in [
        ("k-pro", "\"pro\";q=100;w=60"),
        ("k-x", "\"free\";q=10;w=60"),
    ] {
        let response = client()
            .get(&base)
            .header("x-api-key", key)
            .send()
            .await
            .unwrap();
        assert_eq!(header(&response, "ratelimit-policy"), policy);
    }
}

#[tokio::test]
async fn json_answers_for_denials_and_missing_keys() {
    let layer =
        json_answers(RateLimitLayer::gcra(Quota::per_minute(1)).key(Header::new("x-api-key")));
    let base = serve(
        Router::new()
            .route("/", get(|| async { "hi" }))
            .layer(layer),
    )
    .await;
    let missing = client().get(&base).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&missing, "content-type"), "application/json");
    let send = || client().get(&base).header("x-api-key", "k").send();
    assert_eq!(send().await.unwrap().status(), StatusCode::OK);
    let denied = send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "60");
    assert_eq!(
        denied.text().await.unwrap(),
        r#"{"error":"rate_limited","retry_after_seconds":60}"#
    );
}

/// Every ```rust block of the README's "Testing your limits" and "Recipes" sections is in this
/// file, word for word: what the README shows is what compiles and passes here.
#[test]
fn the_readmes_recipes_are_this_files_code() {
    let readme = include_str!("../../README.md");
    let this = [include_str!("readme.rs"), include_str!("readme_testing.rs")].concat();
    let mut checked = 0;
    for section in ["## Testing your limits", "## Recipes"] {
        let start = readme
            .find(section)
            .unwrap_or_else(|| panic!("no {section} in README"));
        let body = &readme[start + section.len()..];
        let body = &body[..body.find("\n## ").unwrap_or(body.len())];
        let mut blocks = body.split("```rust\n").skip(1);
        for block in blocks.by_ref() {
            let code = &block[..block.find("```").unwrap()];
            assert!(
                this.contains(code),
                "README block not in tests/readme*.rs:\n{code}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} blocks");
}
