//! Plans by API key: one layer, a quota per customer plan, picked from the `x-api-key` header.
//!
//! Run it with `cargo run --example api_keys` (set `PORT` to use another port than 3000). Keys
//! starting with `pro_` get the pro plan (20 per minute), other keys the free plan (5 per
//! minute), and requests without a key are limited per client IP on the free plan. Each
//! response names its plan in the `RateLimit-Policy` and `RateLimit` headers.
//!
//! In a real service the key would be checked (by an authentication layer in front of this one)
//! before it is trusted to pick a plan: a client can send any header it likes.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tollgate::key::{Header, KeyExtractor, PeerIp, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };
    let free = Quota::per_minute(5).named("free");
    let pro = Quota::per_minute(20).named("pro");

    let plans = RateLimitLayer::gcra(free.clone())
        // The API key when there is one, the client IP otherwise.
        .key(Header::new("x-api-key").or(PeerIp))
        .quota_for(move |key: &Key, _head: RequestHead<'_>| {
            let is_pro = key.as_bytes().is_some_and(|k| k.starts_with(b"pro_"));
            if is_pro {
                pro.clone()
            } else {
                free.clone()
            }
        });
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(plans);

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    let show = "grep -Ei '^(HTTP|ratelimit|retry-after)'";
    println!("tollgate api_keys example on http://{addr}/");
    println!("  free plan:  for i in $(seq 1 6); do curl -s -i -H 'x-api-key: free_alice' http://{addr}/ | {show}; done");
    println!("  pro plan:   for i in $(seq 1 6); do curl -s -i -H 'x-api-key: pro_bob' http://{addr}/ | {show}; done");
    println!("  no key:     curl -s -i http://{addr}/ | {show}");
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
