//! A complete app: the limits a real axum service behind a proxy needs, together.
//!
//! - a global limit per client IP, read from `X-Forwarded-For` only when the connection comes
//!   from a trusted proxy (`TRUSTED_PROXIES`, by default the loopback, so you can try it with
//!   curl);
//! - on `POST /login`, failed logins limited per account and client IP, and per account from
//!   anywhere, keyed on the account name read from the JSON body (bounded, normalised, handed on
//!   intact to the handler), counting only failures (`count_if`);
//! - under `/api/v1` (a nested router), a limit per API key whose plan (free or pro) an
//!   authentication middleware puts in the request extensions, where `quota_for` reads it;
//! - JSON bodies for every answer the limits make (429, and the key errors);
//! - tower-http's `TraceLayer` and `CompressionLayer` around it all;
//! - the limits in Redis when `REDIS_URL` is set (feature `redis`), in memory otherwise.
//!
//! Run it with `cargo run --example production` (set `PORT` to use another port than 3000; with
//! Redis: `REDIS_URL=redis://127.0.0.1:6379 cargo run --example production --features redis`),
//! then:
//!
//! ```text
//! curl -s -i http://127.0.0.1:3000/healthz
//! for i in $(seq 1 6); do curl -s -w ' %{http_code}\n' -H 'content-type: application/json' \
//!     -d '{"username":" Alice ","password":"guess"}' http://127.0.0.1:3000/login; done
//! for i in $(seq 1 6); do curl -s -i -H 'x-api-key: free_9Lk4' http://127.0.0.1:3000/api/v1/me \
//!     | grep -Ei '^(HTTP|ratelimit|retry-after)'; done
//! curl -s -i -H 'x-api-key: pro_7Qx2' -H 'x-forwarded-for: 203.0.113.9' http://127.0.0.1:3000/api/v1/me
//! ```
//!
//! The 6th wrong password for alice (however her name is spaced or capitalised) gets a JSON 429
//! before the password is checked; the free key's 6th call in a minute too, with the plan's and
//! the global `RateLimit` items in its headers. The last call comes through the loopback, a
//! trusted proxy, so its global budget is that of the client it forwards (`"global";r=59`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::json;
use tollgate::key::{ClientIp, KeyError, RequestHead};
use tollgate::store::MemoryStore;
use tollgate::{Decision, Key, Quota, RateLimitLayer};
use tower_http::compression::CompressionLayer;
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

/// The most bytes a login body may have: enough for any real name and password.
pub const MAX_LOGIN_BODY: usize = 4 * 1024;

/// Account names: after trimming, 1 to 64 ASCII letters, digits, `.`, `_` or `-`; compared
/// without case.
pub const MAX_NAME: usize = 64;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_max_level(Level::INFO).init();
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };
    let proxies = std::env::var("TRUSTED_PROXIES").unwrap_or_else(|_| "127.0.0.1,::1".into());
    let client_ip = ClientIp::trusting(proxies.split(',').map(str::trim))
        .map_err(|e| format!("TRUSTED_PROXIES={proxies:?}: {e}"))?;
    let backend = Backend::from_env().await?;

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!("tollgate production example on http://{addr} ({backend})");
    println!("  curl -s -i http://{addr}/healthz");
    println!("  for i in $(seq 1 6); do curl -s -w ' %{{http_code}}\\n' -H 'content-type: application/json' -d '{{\"username\":\" Alice \",\"password\":\"guess\"}}' http://{addr}/login; done");
    println!("  for i in $(seq 1 6); do curl -s -i -H 'x-api-key: free_9Lk4' http://{addr}/api/v1/me | grep -Ei '^(HTTP|ratelimit|retry-after)'; done");
    println!("  curl -s -i -H 'x-api-key: pro_7Qx2' -H 'x-forwarded-for: 203.0.113.9' http://{addr}/api/v1/me");
    println!("Press Ctrl-C to stop.");

    // The peer address is what `ClientIp` starts from: serve with connect info.
    axum::serve(
        listener,
        app(Limits::new(&backend, client_ip)).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// Where the limits are kept: one store for every layer (each layer's policy name keeps its
/// state apart).
#[derive(Clone)]
pub enum Backend {
    /// This process's memory: each server limits on its own.
    Memory(MemoryStore),
    /// Redis: one limit across every server.
    #[cfg(feature = "redis")]
    Redis(tollgate::store::RedisStore),
}

impl Backend {
    /// Redis at `REDIS_URL` when it is set, else memory.
    pub async fn from_env() -> Result<Self, Box<dyn std::error::Error>> {
        Self::new(std::env::var("REDIS_URL").ok()).await
    }

    /// Redis at `redis_url` when there is one, else memory.
    pub async fn new(redis_url: Option<String>) -> Result<Self, Box<dyn std::error::Error>> {
        match redis_url {
            None => Ok(Self::Memory(MemoryStore::new())),
            #[cfg(feature = "redis")]
            Some(url) => {
                // 200 ms: Redis under load answers well within it, so a busy Redis is not
                // taken for a failed one (the logins would answer 503, the other limits
                // fall back to each server's own budget).
                let store = tollgate::store::RedisStore::connect(&url)
                    .await
                    .map_err(|e| format!("REDIS_URL: cannot use Redis: {e}"))?
                    .timeout(Duration::from_millis(200));
                Ok(Self::Redis(store))
            }
            #[cfg(not(feature = "redis"))]
            Some(_) => Err("REDIS_URL is set: run with `--features redis` to use Redis".into()),
        }
    }

    /// `layer` keeping its state here.
    pub fn apply(&self, layer: RateLimitLayer) -> RateLimitLayer {
        match self {
            Self::Memory(store) => layer.store(store.clone()),
            #[cfg(feature = "redis")]
            Self::Redis(store) => layer.store(store.clone()),
        }
    }

    /// `layer` keeping its state here and, on Redis, answering 503 while Redis fails (fail
    /// closed): for logins. The store's default fallback, a local budget on each server, would
    /// give a guesser one budget per server and a fresh one at each outage.
    pub fn apply_closed(&self, layer: RateLimitLayer) -> RateLimitLayer {
        match self {
            Self::Memory(store) => layer.store(store.clone()),
            #[cfg(feature = "redis")]
            Self::Redis(store) => layer
                .store(store.clone())
                .on_failure(tollgate::store::OnFailure::Closed),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory(_) => f.write_str("limits in memory"),
            #[cfg(feature = "redis")]
            Self::Redis(_) => f.write_str("limits in Redis"),
        }
    }
}

/// Every limit of the app, built once: layers are values, kept in a struct like any other.
#[derive(Clone)]
pub struct Limits {
    /// Every request but health checks, per client IP.
    pub global: RateLimitLayer,
    /// Failed logins per account and client IP.
    pub login_here: RateLimitLayer,
    /// Failed logins per account, from any address (a botnet guessing one password).
    pub login_anywhere: RateLimitLayer,
    /// API calls per customer, with the quota of the customer's plan.
    pub api: RateLimitLayer,
}

impl Limits {
    /// The app's limits over `backend`, with client IPs found by `client_ip`.
    pub fn new(backend: &Backend, client_ip: ClientIp) -> Self {
        let global = RateLimitLayer::gcra(Quota::per_minute(60).named("global"))
            .key(client_ip.clone())
            .on_limited(too_many)
            .on_key_error(no_key);

        // Keyed on the account the handler looks up (put in the extensions by `login_name`):
        // the same account however the client spells it.
        let account = |head: RequestHead<'_>| match head.extensions().get::<LoginName>() {
            Some(LoginName(name)) => Ok(Some(Key::from(name.as_str()))),
            None => Err(KeyError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the login limit needs the `login_name` middleware outside it",
            )),
        };
        let failed =
            |response: &axum::http::response::Parts| response.status == StatusCode::UNAUTHORIZED;
        let fifteen_minutes = Duration::from_secs(15 * 60);
        let login_here = RateLimitLayer::gcra(Quota::new(5, fifteen_minutes).named("login"))
            .key((account, client_ip))
            .count_if(failed)
            .on_limited(too_many)
            .on_key_error(no_key);
        let login_anywhere = RateLimitLayer::gcra(Quota::per_hour(20).named("login-account"))
            .key(account)
            .count_if(failed)
            .on_limited(too_many)
            .on_key_error(no_key);

        // Keyed on the customer `authenticate` found; the quota is the customer's plan, read
        // from the same extension.
        let free = Quota::per_minute(5).named("free");
        let pro = Quota::per_minute(50).named("pro");
        let api = RateLimitLayer::gcra(free.clone())
            .key(
                |head: RequestHead<'_>| match head.extensions().get::<Customer>() {
                    Some(customer) => Ok(Some(Key::from(customer.id))),
                    None => Err(KeyError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the API limit needs the `authenticate` middleware outside it",
                    )),
                },
            )
            .quota_for(move |_key: &Key, head: RequestHead<'_>| {
                match head.extensions().get::<Customer>().map(|c| c.plan) {
                    Some(Plan::Pro) => pro.clone(),
                    _ => free.clone(),
                }
            })
            .on_limited(too_many)
            .on_key_error(no_key);

        Self {
            global: backend.apply(global),
            login_here: backend.apply_closed(login_here),
            login_anywhere: backend.apply_closed(login_anywhere),
            api: backend.apply(api),
        }
    }
}

/// The app. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn app(limits: Limits) -> Router {
    let customers = Arc::new(customers());

    // A nested router with its own limit: `layer` on it covers its routes only. Layers run
    // outermost last-added: `authenticate` first, then the limit, which reads what it found.
    let api = Router::new()
        .route("/me", get(me))
        .route("/items", get(items))
        .layer(limits.api)
        .layer(middleware::from_fn_with_state(customers, authenticate));

    // One route with its own limits: `login_name` reads the body once and puts the account in
    // the extensions, then both login limits count the failures.
    let login = Router::new()
        .route("/login", post(login))
        .route_layer(limits.login_anywhere)
        .route_layer(limits.login_here)
        .route_layer(middleware::from_fn(login_name));

    Router::new()
        .merge(login)
        .nest("/api/v1", api)
        .layer(limits.global)
        // Added after the global limit: health checks are not limited.
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(CompressionLayer::new())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
}

/// The JSON answer to a denied request. The layer adds `Retry-After` and the `RateLimit`
/// headers.
pub fn too_many(decision: &Decision, _head: RequestHead<'_>) -> Response {
    let body = json!({
        "error": "rate_limited",
        "policy": decision.policy(),
        "retry_after_seconds": decision.retry_after_secs(),
    });
    (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
}

/// The JSON answer to a request the limits cannot key.
pub fn no_key(error: &KeyError, _head: RequestHead<'_>) -> Response {
    error_json(error.status(), "no_key", error.message())
}

fn error_json(status: StatusCode, error: &str, message: &str) -> Response {
    (status, Json(json!({ "error": error, "message": message }))).into_response()
}

/// The account a login names, as the handler looks it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginName(pub String);

/// The account name `raw` stands for: trimmed of whitespace, ASCII only, lower-cased. `None`
/// for a name no account can have. Unicode is refused rather than normalised: no two spellings
/// (`alice`, `ALICE`, ` alice `, `ａｌｉｃｅ`) may reach the handler as two accounts. An app whose
/// account names allow Unicode normalises them here exactly as its account lookup does
/// (NFKC and case folding), so the key is the account.
pub fn account_name(raw: &str) -> Option<String> {
    let name = raw.trim();
    let valid = (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    valid.then(|| name.to_ascii_lowercase())
}

/// Reads a login's JSON body once (at most [`MAX_LOGIN_BODY`] bytes), puts its account in the
/// extensions as a [`LoginName`], and hands the body on intact. A body too large gets 413, one
/// without a valid `username` 400: neither reaches the handler, so neither can guess a
/// password, and the global limit has counted them.
pub async fn login_name(req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_LOGIN_BODY).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return error_json(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "a login body is at most 4 KiB",
            )
        }
    };
    let name = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|value| value.get("username")?.as_str().and_then(account_name));
    let Some(name) = name else {
        return error_json(
            StatusCode::BAD_REQUEST,
            "bad_login",
            "send {\"username\": \"...\", \"password\": \"...\"}",
        );
    };
    parts.extensions.insert(LoginName(name));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The accounts and their passwords (a real service keeps password hashes in its database).
const ACCOUNTS: &[(&str, &str)] = &[("alice", "hunter2"), ("bob", "hunter2")];

/// Checks the password of the account `login_name` found: 200, or 401 for a wrong password or
/// an unknown account (not told apart).
async fn login(Extension(LoginName(name)): Extension<LoginName>, body: Bytes) -> Response {
    let password = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|value| value.get("password")?.as_str().map(str::to_owned));
    let known = ACCOUNTS.iter().find(|(account, _)| *account == name);
    match known {
        Some((_, secret)) if password.as_deref() == Some(*secret) => {
            Json(json!({ "welcome": name })).into_response()
        }
        _ => error_json(
            StatusCode::UNAUTHORIZED,
            "bad_credentials",
            "wrong account or password",
        ),
    }
}

/// A customer's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// 5 calls a minute.
    Free,
    /// 50 calls a minute.
    Pro,
}

/// The customer an API key belongs to, put in the extensions by [`authenticate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Customer {
    /// The customer's id: the limit's key.
    pub id: u64,
    /// The customer's plan: the limit's quota.
    pub plan: Plan,
}

/// The issued API keys (a real service looks them up in its database).
fn customers() -> HashMap<&'static str, Customer> {
    HashMap::from([
        (
            "free_9Lk4",
            Customer {
                id: 1,
                plan: Plan::Free,
            },
        ),
        (
            "pro_7Qx2",
            Customer {
                id: 2,
                plan: Plan::Pro,
            },
        ),
    ])
}

/// Finds the customer of the request's `x-api-key` (one header line, an issued key) and puts it
/// in the extensions; anything else gets 401 without reaching the API or its limit.
async fn authenticate(
    State(customers): State<Arc<HashMap<&'static str, Customer>>>,
    mut req: Request,
    next: Next,
) -> Response {
    let mut values = req.headers().get_all("x-api-key").iter();
    let customer = match (values.next(), values.next()) {
        (Some(value), None) => value
            .to_str()
            .ok()
            .and_then(|key| customers.get(key))
            .copied(),
        _ => None,
    };
    match customer {
        Some(customer) => {
            req.extensions_mut().insert(customer);
            next.run(req).await
        }
        None => error_json(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "send one x-api-key header with a key this service issued",
        ),
    }
}

async fn me(Extension(customer): Extension<Customer>) -> Json<serde_json::Value> {
    Json(json!({ "customer": customer.id, "plan": format!("{:?}", customer.plan) }))
}

async fn items() -> Json<serde_json::Value> {
    let items: Vec<_> = (1..=100)
        .map(|n| json!({ "id": n, "name": format!("item {n}") }))
        .collect();
    Json(json!({ "items": items }))
}
