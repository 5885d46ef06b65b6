//! One limit across servers: two instances of an axum app, on two ports, share a limit per
//! client IP through Redis.
//!
//! Start Redis (`redis-server`, or set `REDIS_URL`), then run
//! `cargo run --example redis --features redis` and, from another terminal, alternate between
//! the two instances:
//!
//! ```text
//! for i in $(seq 1 4); do
//!   curl -s -o /dev/null -w '3001: %{http_code}\n' http://127.0.0.1:3001/
//!   curl -s -o /dev/null -w '3002: %{http_code}\n' http://127.0.0.1:3002/
//! done
//! ```
//!
//! Each client IP may make 5 requests a minute in all, wherever they land: the sixth is
//! refused whichever instance answers it. The state is visible in Redis:
//! `redis-cli --scan --pattern 'tollgate:*'` lists the keys (`tollgate:{ip:127.0.0.1}:demo:gcra.<fingerprint>`),
//! and `redis-cli pttl` on one shows how long it lives.
//! Set `PORTS` (e.g. `PORTS=4001,4002`) to use other ports.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tollgate::store::RedisStore;
use tollgate::{Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let ports = std::env::var("PORTS").unwrap_or_else(|_| "3001,3002".into());
    let ports = ports
        .split(',')
        .map(|p| p.trim().parse::<u16>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("PORTS={ports:?} must be ports separated by commas: {e}"))?;
    // Two instances in one process here; on a fleet each server connects the same way.
    let mut servers = Vec::new();
    for port in ports {
        let store = RedisStore::connect(&url)
            .await
            .map_err(|e| format!("cannot reach Redis at {url}: {e} (set REDIS_URL)"))?;
        // Named, so that every instance counts against the same limit.
        let quota = Quota::per_minute(5).named("demo");
        let app = Router::new()
            .route(
                "/",
                get(move || async move { format!("Hello from the instance on port {port}\n") }),
            )
            .layer(RateLimitLayer::gcra(quota).store(store));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e} (set PORTS)"))?;
        println!("instance on http://{addr}/");
        servers.push(tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
        }));
    }
    println!("Both share 5 requests a minute per client IP through {url}. Try:");
    println!("  for i in $(seq 1 4); do curl -s -o /dev/null -w '3001: %{{http_code}}\\n' http://127.0.0.1:3001/; curl -s -o /dev/null -w '3002: %{{http_code}}\\n' http://127.0.0.1:3002/; done");
    println!("Press Ctrl-C to stop.\n");
    for server in servers {
        server.await??;
    }
    Ok(())
}
