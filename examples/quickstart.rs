//! The quick start: an axum server that limits each client IP, in memory.
//!
//! Run it with `cargo run --example quickstart` (set `PORT` to use another port than 3000),
//! then send it more requests than the quota allows, for example:
//!
//! ```text
//! for i in $(seq 1 7); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//! ```
//!
//! Each client IP may make 5 requests at once, then one every 2 seconds (5 per 10 s). The
//! server prints each decision; clients see it in the `RateLimit` headers, and denied requests
//! get `429 Too Many Requests` with `Retry-After`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use tollgate::{Decision, Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };
    let quota = Quota::new(5, Duration::from_secs(10));

    let app = Router::new()
        .route("/", get(hello))
        // Per client IP, in memory: the one line this example is about.
        .layer(RateLimitLayer::gcra(quota.clone()))
        .layer(middleware::from_fn(log_decision));

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!("tollgate quickstart on http://{addr}/");
    println!(
        "Each client IP may make {} requests at once, then one every {:?} ({quota}).",
        quota.burst(),
        quota.emission_interval()
    );
    println!("Try it from another terminal:");
    println!("  for i in $(seq 1 7); do curl -s -i http://{addr}/ | grep -Ei '^(HTTP|ratelimit|retry-after)'; done");
    println!("Press Ctrl-C to stop.\n");

    // The default key is the peer IP, which axum records only when served with connect info.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// The handler sees the limiter's decision in the request extensions.
async fn hello(Extension(decision): Extension<Decision>) -> String {
    format!("Hello! Requests left right now: {}\n", decision.remaining)
}

/// Prints each request's outcome, read from the response the rate limit layer produced.
async fn log_decision(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let response = next.run(req).await;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    if response.status().is_success() {
        println!("{} allowed  RateLimit: {}", peer.ip(), header("ratelimit"));
    } else {
        println!(
            "{} {}  Retry-After: {}s  RateLimit: {}",
            peer.ip(),
            response.status(),
            header("retry-after"),
            header("ratelimit")
        );
    }
    response
}
