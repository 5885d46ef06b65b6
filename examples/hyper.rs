//! Any tower service: a plain hyper 1 server (no axum) that limits each client IP, in memory.
//!
//! Run it with `cargo run --example hyper` (set `PORT` to use another port than 3000), then
//! send it more requests than the quota allows, for example:
//!
//! ```text
//! for i in $(seq 1 4); do curl -s -i http://127.0.0.1:3000/ | grep -Ei '^(HTTP|ratelimit|retry-after)'; done
//! ```
//!
//! Each client IP may make 2 requests at once, then one every 500 ms (2 per second); denied
//! requests get `429 Too Many Requests` with `Retry-After: 1`.
//!
//! The rate limit layer is ordinary tower middleware, so the service is built with
//! `tower::ServiceBuilder` and handed to hyper through `hyper_util`'s `TowerToHyperService`.
//! The one thing a hand-rolled server must do is tell the layer who the client is: hyper
//! does not put the peer address in the request, so each connection inserts it as
//! `tollgate::key::PeerAddr` into every request it reads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tollgate::key::PeerAddr;
use tollgate::{Decision, Quota, RateLimitLayer};
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };
    let quota = Quota::per_second(2);

    // Per client IP, in memory. Built once: every connection serves a clone of this service,
    // and the clones share one limiter, so a client cannot reset its budget by reconnecting.
    let limited = ServiceBuilder::new()
        .layer(RateLimitLayer::gcra(quota.clone()))
        .service_fn(hello);

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!("tollgate on a plain hyper server at http://{addr}/");
    println!(
        "Each client IP may make {} requests at once, then one every {:?} ({quota}).",
        quota.burst(),
        quota.emission_interval()
    );
    println!("Try it from another terminal:");
    println!("  for i in $(seq 1 4); do curl -s -i http://{addr}/ | grep -Ei '^(HTTP|ratelimit|retry-after)'; done");
    println!("Press Ctrl-C to stop.\n");

    let graceful = GracefulShutdown::new();
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    continue;
                }
            },
            _ = &mut ctrl_c => break,
        };

        // This connection's service: record the peer for the rate limit layer, print the
        // outcome, then the shared limited service.
        let service = ServiceBuilder::new()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(PeerAddr(peer));
                req
            })
            .map_response(move |response: Response<_>| {
                log_outcome(peer, &response);
                response
            })
            .service(limited.clone());

        let connection = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("connection from {peer}: {e}");
            }
        });
    }

    // Let requests in flight finish, but do not wait for idle keep-alive clients forever.
    println!("\nShutting down.");
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(5)) => {
            eprintln!("gave up waiting for open connections");
        }
    }
    Ok(())
}

/// The handler: any `Request -> Response` function. It sees the limiter's decision in the
/// request extensions, and runs only for allowed requests.
async fn hello(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let remaining = req
        .extensions()
        .get::<Decision>()
        .map_or(0, |decision| decision.remaining);
    let body = format!("Hello! Requests left right now: {remaining}\n");
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(response)
}

/// Prints each request's outcome, read from the response the rate limit layer produced.
fn log_outcome<B>(peer: SocketAddr, response: &Response<B>) {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
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
}
