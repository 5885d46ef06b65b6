//! Rate limits read from a configuration file: `examples/limits.toml` holds a global limit per
//! client IP, a login limit and an API-key limit on `/api`, and this server applies each to its
//! routes. Change the file, not the code, to tune them.
//!
//! Run it with:
//!
//! ```text
//! cargo run --example config --features serde
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example config --features serde,redis
//! ```
//!
//! then try `curl -i http://127.0.0.1:3000/`, `curl -i -X POST http://127.0.0.1:3000/login` (the
//! sixth attempt in 15 minutes gets a 503), and `curl -i -H 'x-api-key: k1'
//! http://127.0.0.1:3000/api/items` (a request without the header gets a 400).

use std::net::SocketAddr;

use axum::routing::{get, post};
use axum::Router;
use tollgate::config::Limits;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits.toml");
    let mut limits: Limits = toml::from_str(&std::fs::read_to_string(path)?)?;
    if let Ok(url) = std::env::var("REDIS_URL") {
        limits.store.url = Some(url);
        // `max_keys` bounds the local fallback used while Redis is down.
    }
    // Connects the store, then builds every limit; an error names the field and value.
    let mut layers = limits.layers().await?;
    let mut take = |name: &str| {
        layers
            .remove(name)
            .ok_or(format!("no [limits.{name}] in {path}"))
    };
    let (global, login, api) = (take("global")?, take("login")?, take("api")?);

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/login", post(|| async { "welcome\n" }).route_layer(login))
        .nest(
            "/api",
            Router::new()
                .route("/items", get(|| async { "[]\n" }))
                .layer(api),
        )
        .layer(global);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The global and login limits key by peer IP, which axum records only when asked to.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
