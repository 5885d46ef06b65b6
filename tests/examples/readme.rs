//! The code of the guide's "Testing your limits" and "Recipes" (`src/guide/`), compiled and run:
//! each block of those sections is an item of this file, word for word (a test below checks it),
//! and the tests drive them over real TCP. The README's own code is a doctest (checked below).
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

/// The visible lines of a rustdoc code block: those rustdoc hides (`# ` or a lone `#`) left out.
fn visible(block: &str) -> String {
    block
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !(line == "#" || line.starts_with("# "))
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The code of every Rust block of `text`, as rustdoc reads them: fences with no language, or
/// `rust` with or without options such as `no_run`.
fn rust_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<(bool, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                let rust = info
                    .split(',')
                    .all(|part| matches!(part.trim(), "" | "rust" | "no_run" | "ignore"));
                open = Some((rust, String::new()));
            }
            (Some(_), Some(_)) => {
                if let Some((true, code)) = open.take() {
                    blocks.push(code);
                }
            }
            (Some((_, code)), None) => {
                code.push_str(line);
                code.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The lines of `text` from the heading `heading` to the next heading of its level or above,
/// headings inside code blocks (rustdoc's hidden `# ` lines) aside.
fn section(text: &str, heading: &str) -> String {
    let level = heading.find(' ').unwrap_or(0);
    let mut out = String::new();
    let (mut inside, mut fenced) = (false, false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.len() - line.trim_start_matches('#').len();
        let is_heading = !fenced && hashes > 0 && line[hashes..].starts_with(' ');
        if is_heading && inside && hashes <= level {
            break;
        }
        if line == heading {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every ```rust block of the guide's "Testing your limits" and "Recipes" is in this file, word
/// for word (the lines rustdoc hides aside): what the guide shows is what compiles and passes
/// here over real TCP, besides its doctests.
#[test]
fn the_guides_recipes_are_this_files_code() {
    let testing = include_str!("../../src/guide/testing.md");
    let recipes = include_str!("../../src/guide/recipes.md");
    let this = [include_str!("readme.rs"), include_str!("readme_testing.rs")].concat();
    let body = section(testing, "# Testing your limits");
    assert!(
        !body.is_empty(),
        "no # Testing your limits in src/guide/testing.md"
    );
    let mut checked = 0;
    for block in rust_blocks(&body).into_iter().chain(rust_blocks(recipes)) {
        let code = visible(&block);
        assert!(
            this.contains(&code),
            "guide block not in tests/examples/readme*.rs:\n{code}"
        );
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} blocks");
}

/// Every ```rust block of the README is the visible part of a doctest of the crate docs or the
/// guide, word for word: the README's code compiles and runs with `cargo test --doc`.
#[test]
fn the_readmes_code_is_doctested() {
    let readme = include_str!("../../README.md");
    let lib: String = include_str!("../../src/lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| format!("{}\n", line.strip_prefix(' ').unwrap_or(line)))
        .collect();
    let guide = [
        lib.as_str(),
        include_str!("../../src/guide/algorithms.md"),
        include_str!("../../src/guide/keys.md"),
        include_str!("../../src/guide/responses.md"),
        include_str!("../../src/guide/recipes.md"),
        include_str!("../../src/guide/testing.md"),
        include_str!("../../src/guide/operating.md"),
        include_str!("../../src/guide/redis.md"),
        include_str!("../../src/guide/config.md"),
    ];
    let doctests: Vec<String> = guide
        .iter()
        .flat_map(|text| rust_blocks(text))
        .map(|block| visible(&block))
        .collect();
    let blocks = rust_blocks(readme);
    assert!(!blocks.is_empty(), "no ```rust block in README.md");
    for block in blocks {
        assert!(
            doctests.contains(&block),
            "README block is no doctest of src/lib.rs or src/guide/:\n{block}"
        );
    }
}

/// The README opens with the two commands that work on a fresh machine.
#[test]
fn the_readme_opens_with_the_quickstart_and_the_test_command() {
    let readme = include_str!("../../README.md");
    let first = &readme[readme.find("```sh\n").expect("no ```sh block in README.md")..];
    let first = &first[..first[3..].find("```").unwrap() + 3];
    assert!(first.contains("cargo run --example quickstart"), "{first}");
    assert!(first.contains("cargo test --all-features"), "{first}");
}
