//! Per-route limits: each route its own quota, with one shared store, using axum's
//! `route_layer`.
//!
//! Run it with `cargo run --example per_route` (set `PORT` to use another port than 3000).
//! `/search` allows each client IP 10 requests per minute and `/upload` 2 per minute; the two
//! budgets are separate even though both layers keep their state in one `MemoryStore`, because
//! each quota has its own name.

use std::net::SocketAddr;

use axum::routing::{get, post};
use axum::Router;
use tollgate::store::MemoryStore;
use tollgate::{Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };
    let store = MemoryStore::new();
    let search = RateLimitLayer::gcra(Quota::per_minute(10).named("search")).store(store.clone());
    let upload = RateLimitLayer::gcra(Quota::per_minute(2).named("upload")).store(store);

    let app = Router::new()
        .merge(
            Router::new()
                .route("/search", get(|| async { "results\n" }))
                .route_layer(search),
        )
        .merge(
            Router::new()
                .route("/upload", post(|| async { "stored\n" }))
                .route_layer(upload),
        );

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!("tollgate per_route example on http://{addr}/");
    println!("  for i in $(seq 1 3); do curl -s -o /dev/null -w 'upload %{{http_code}}\\n' -X POST http://{addr}/upload; done");
    println!("  curl -s -i http://{addr}/search | grep -i '^ratelimit'   # search still has its own budget");
    println!("Press Ctrl-C to stop.");

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
