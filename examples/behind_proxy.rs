//! Behind a reverse proxy: the key is the client address the trusted proxy reports in
//! `X-Forwarded-For`, and a client cannot pick its own key by sending that header itself.
//!
//! The server trusts `127.0.0.1` as its proxy, so `curl` run on this machine plays the proxy
//! and the `X-Forwarded-For` header it sends plays what a real proxy would append. Each client
//! may make 3 requests a minute.
//!
//! Run it with `cargo run --example behind_proxy` (set `PORT` to use another port than 3000),
//! then, from another terminal:
//!
//! ```text
//! # Client 203.0.113.1 behind the proxy, spoofing a different leftmost entry each time: the
//! # spoofed entries are ignored, so the 4th request is denied.
//! for spoof in 1.1.1.1 2.2.2.2 3.3.3.3 4.4.4.4; do
//!   curl -s -w ' %{http_code}\n' -H "X-Forwarded-For: $spoof, 203.0.113.1" http://127.0.0.1:3000/
//! done
//! # Another client behind the same proxy has its own budget.
//! curl -s -w ' %{http_code}\n' -H 'X-Forwarded-For: 203.0.113.2' http://127.0.0.1:3000/
//! ```
//!
//! The server prints the same commands with its address when it starts.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::routing::get;
use axum::{Extension, Router};
use tollgate::key::ClientIp;
use tollgate::{Decision, Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };

    // The one line this example is about: trust X-Forwarded-For only from the proxy's address.
    // In production this is your load balancer's network, such as "10.0.0.0/8".
    let client_ip = ClientIp::trusting(["127.0.0.1"])?;
    let quota = Quota::new(3, Duration::from_secs(60));

    let app = Router::new()
        .route("/", get(hello))
        .layer(RateLimitLayer::gcra(quota).key(client_ip.clone()))
        .with_state(client_ip);

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    let url = format!("http://{addr}/");
    println!("tollgate behind_proxy on {url}, trusting 127.0.0.1 as the proxy; 3 requests a minute per client.");
    println!();
    println!("A client spoofing the leftmost X-Forwarded-For entry is still one client (the 4th is 429):");
    println!("  for spoof in 1.1.1.1 2.2.2.2 3.3.3.3 4.4.4.4; do curl -s -w ' %{{http_code}}\\n' -H \"X-Forwarded-For: $spoof, 203.0.113.1\" {url}; done");
    println!("Another client behind the same proxy has its own budget:");
    println!("  curl -s -w ' %{{http_code}}\\n' -H 'X-Forwarded-For: 203.0.113.2' {url}");
    println!("Press Ctrl-C to stop.\n");

    // The peer address, which ClientIp checks against the trusted proxies, comes from
    // ConnectInfo: serve with connect info.
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

/// Tells the client which address it was counted as, and how many requests it has left.
async fn hello(
    State(client_ip): State<ClientIp>,
    Extension(decision): Extension<Decision>,
    req: Request,
) -> String {
    let client = client_ip
        .client_addr(&req)
        .map_or_else(|| "?".to_owned(), |ip| ip.to_string());
    let xff = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    println!(
        "X-Forwarded-For: {xff:<30} -> counted as {client}, {} left",
        decision.remaining
    );
    format!("counted as {client}; requests left: {}", decision.remaining)
}
