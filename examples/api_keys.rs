//! Plans by API key: one layer, a quota per customer plan, picked from the `x-api-key` header.
//!
//! Run it with `cargo run --example api_keys` (set `PORT` to use another port than 3000). The
//! key `pro_7Qx2` is Bob's, on the pro plan (20 per minute); `free_9Lk4` is Alice's, on the free
//! plan (5 per minute). Requests without a key, or with a key this service never issued, are
//! limited per client IP on the free plan. Each response names its plan in the
//! `RateLimit-Policy` and `RateLimit` headers.
//!
//! The limit is counted against the customer a key belongs to, found in the table of issued
//! keys, never against the header's text: a client can send any header it likes, and keyed on
//! the text, each invented key (`pro_1`, `pro_2`, ...) would start a fresh budget, on the plan
//! its prefix claims.

use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tollgate::key::{from_fn, KeyError, KeyExtractor, PeerIp, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};

/// The API keys this service issued: key, customer, plan. A real service keeps them in its
/// database (hashed) and looks them up there.
const ISSUED: &[(&str, &str, Plan)] = &[
    ("free_9Lk4", "alice", Plan::Free),
    ("pro_7Qx2", "bob", Plan::Pro),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Free,
    Pro,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    let show = "grep -Ei '^(HTTP|ratelimit|retry-after)'";
    println!("tollgate api_keys example on http://{addr}/");
    println!("  free plan:    for i in $(seq 1 6); do curl -s -i -H 'x-api-key: free_9Lk4' http://{addr}/ | {show}; done");
    println!("  pro plan:     for i in $(seq 1 6); do curl -s -i -H 'x-api-key: pro_7Qx2' http://{addr}/ | {show}; done");
    println!("  invented key: curl -s -i -H 'x-api-key: pro_mine' http://{addr}/ | {show}   # per IP, free plan");
    println!("Press Ctrl-C to stop.");

    axum::serve(
        listener,
        app().into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// The service behind its per-plan limits. Serve it with connect info: clients without an
/// issued key are limited by IP.
pub fn app() -> Router {
    let free = Quota::per_minute(5).named("free");
    let pro = Quota::per_minute(20).named("pro");

    // The customer an issued key belongs to; any other request is keyed by the client IP.
    let issued = from_fn(|head: RequestHead<'_>| match customer(head) {
        Some((name, _)) => Ok(Some(Key::from(name))),
        None => Err(KeyError::new(
            StatusCode::UNAUTHORIZED,
            "no API key this service issued",
        )),
    });
    let plans = RateLimitLayer::gcra(free.clone())
        .key(issued.or(PeerIp))
        .quota_for(move |key: &Key, _head: RequestHead<'_>| {
            // Byte keys are customers' names; addresses are IP keys, never equal to a name.
            let plan = ISSUED
                .iter()
                .find(|(_, name, _)| key.as_bytes() == Some(name.as_bytes()))
                .map(|&(_, _, plan)| plan);
            match plan {
                Some(Plan::Pro) => pro.clone(),
                _ => free.clone(),
            }
        });
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(plans)
}

/// The customer and plan of the request's API key: exactly one `x-api-key` header holding a key
/// from [`ISSUED`]; `None` for anything else.
fn customer(head: RequestHead<'_>) -> Option<(&'static str, Plan)> {
    let mut values = head.headers().get_all("x-api-key").iter();
    let value = match (values.next(), values.next()) {
        (Some(value), None) => value.as_bytes(),
        _ => return None,
    };
    ISSUED
        .iter()
        .find(|(key, _, _)| key.as_bytes() == value)
        .map(|&(_, name, plan)| (name, plan))
}
