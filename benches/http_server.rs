//! The server half of the HTTP load benchmark: the same axum hello-world, bare or behind a rate
//! limit, for `wrk` to load. Run the whole benchmark with `benches/http.sh`, which builds this
//! target, starts it once per variant and round, and checks what it answered.
//!
//! ```text
//! http_server <variant> [port]     variants: bare, bare-429, tollgate-allowed,
//!                                   tollgate-allowed-no-headers, tollgate-denied,
//!                                   governor-allowed, governor-denied
//! ```
//!
//! - `bare`: the handler alone.
//! - `bare-429`: a handler that answers every request as tollgate denies one (the same status,
//!   headers and body, as fixed values): what a denial of that size costs without a limiter.
//! - `tollgate-*`: behind `RateLimitLayer::gcra(quota)`: the default key (the peer IP), the
//!   memory store, the default headers (`RateLimit` and `RateLimit-Policy` on every response,
//!   `Retry-After` and a short text body on a denial).
//! - `governor-*`: behind tower_governor's `GovernorLayer` keyed by the peer IP
//!   (`PeerIpKeyExtractor`, the default), with its default responses: nothing added to an
//!   allowed one; `x-ratelimit-after`, `retry-after` and a short text body on a denial.
//! - `tollgate-allowed-no-headers`: `tollgate-allowed` with `HeaderStyle::None`, which shows
//!   what writing the rate limit headers costs.
//! - `*-allowed`: a quota so large nothing is ever denied (10⁹ a second, bursts of 10⁹).
//! - `*-denied`: one request an hour: the first request from an IP is allowed, every later one
//!   is denied.
//!
//! The server listens on 127.0.0.1 only and runs on one thread (a current-thread tokio
//! runtime), so on a two-core machine it has one core and `wrk` the other. Every response goes
//! through one counter per status (an atomic increment, for every variant alike); on SIGTERM
//! or Ctrl-C the server prints the counts, one `status <code> <count>` line each, and exits.
//! Started without a variant (as `cargo bench` and `cargo test --benches` run it), it prints
//! how to run the benchmark and exits.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tollgate::{Quota, RateLimitLayer};
use tower::util::MapResponseLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const VARIANTS: [&str; 7] = [
    "bare",
    "bare-429",
    "tollgate-allowed",
    "tollgate-allowed-no-headers",
    "tollgate-denied",
    "governor-allowed",
    "governor-denied",
];

/// Responses by status code.
static STATUSES: [AtomicU64; 600] = [const { AtomicU64::new(0) }; 600];

fn count_status(response: Response) -> Response {
    if let Some(count) = STATUSES.get(usize::from(response.status().as_u16())) {
        count.fetch_add(1, Ordering::Relaxed);
    }
    response
}

async fn hello() -> &'static str {
    "Hello, World!"
}

/// Answers every request with the same status, headers and body as tollgate's denial under
/// `Quota::per_hour(1)` (fixed values): what a denial of that size costs without tollgate.
async fn denial() -> impl IntoResponse {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::RETRY_AFTER, "3600"),
            (HeaderName::from_static("ratelimit"), r#""1/h";r=0;t=3600"#),
            (
                HeaderName::from_static("ratelimit-policy"),
                r#""1/h";q=1;w=3600"#,
            ),
        ],
        "Too many requests: retry in 3600 seconds.\n",
    )
}

/// The app for one variant, the status counter outermost.
fn app(variant: &str) -> Result<Router, String> {
    let hello = Router::new().route("/", get(hello));
    let limited = match variant {
        "bare" => hello,
        "bare-429" => Router::new().route("/", get(denial)),
        "tollgate-allowed" => hello.layer(RateLimitLayer::gcra(
            Quota::per_second(1_000_000_000).with_burst(1_000_000_000),
        )),
        "tollgate-allowed-no-headers" => hello.layer(
            RateLimitLayer::gcra(Quota::per_second(1_000_000_000).with_burst(1_000_000_000))
                .headers(tollgate::HeaderStyle::None),
        ),
        "tollgate-denied" => hello.layer(RateLimitLayer::gcra(Quota::per_hour(1))),
        "governor-allowed" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(1_000_000_000)
                .finish()
                .ok_or("tower_governor refused the allowing quota")?;
            hello.layer(GovernorLayer::new(config))
        }
        "governor-denied" => {
            let config = GovernorConfigBuilder::default()
                .period(Duration::from_secs(3600))
                .burst_size(1)
                .finish()
                .ok_or("tower_governor refused the denying quota")?;
            hello.layer(GovernorLayer::new(config))
        }
        other => return Err(format!("unknown variant {other:?}; one of {VARIANTS:?}")),
    };
    Ok(limited.layer(MapResponseLayer::new(
        count_status as fn(Response) -> Response,
    )))
}

async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(variant) = args.next().filter(|a| !a.starts_with('-')) else {
        eprintln!("http_server: run the HTTP load benchmark with `benches/http.sh`");
        eprintln!("usage: http_server <variant> [port], variants: {VARIANTS:?}");
        return Ok(());
    };
    let port: u16 = match args.next() {
        Some(port) => port.parse().map_err(|e| format!("port {port:?}: {e}"))?,
        None => 3000,
    };
    let app = app(&variant)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("http_server: {variant} on http://{addr}/");
        // Both limits key on the peer IP, which axum records only with connect info; bare gets
        // it too, so every variant does the same work outside the limit.
        let serve = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        );
        tokio::select! {
            served = serve => served?,
            () = shutdown() => {}
        }
        Ok::<_, std::io::Error>(())
    })?;
    for (status, count) in STATUSES.iter().enumerate() {
        let count = count.load(Ordering::Relaxed);
        if count > 0 {
            println!("status {status} {count}");
        }
    }
    Ok(())
}
