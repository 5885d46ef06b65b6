//! An app limited to 5 requests a minute per client IP, with admin routes that look at, reset
//! and block one client and change the quota while it serves (a live layer's `Handle`).
//!
//! Run it with `ADMIN_TOKEN=$(openssl rand -hex 32) cargo run --example admin` (the token must
//! be 32 to 256 characters; set `PORT` to use another port than 3000), then, with the same
//! token in `$ADMIN_TOKEN`:
//!
//! ```text
//! for i in $(seq 1 6); do curl -s -w ' %{http_code}\n' http://127.0.0.1:3000/; done
//! curl -s -H "authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3000/admin/clients/127.0.0.1
//! curl -s -X POST -H "authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3000/admin/clients/127.0.0.1/reset
//! curl -s -X POST -H "authorization: Bearer $ADMIN_TOKEN" 'http://127.0.0.1:3000/admin/clients/127.0.0.1/block/60'
//! curl -s -X PUT -H "authorization: Bearer $ADMIN_TOKEN" http://127.0.0.1:3000/admin/quota/100
//! ```
//!
//! The 6th request is refused with 429; after the reset the client has 5 again; after the block
//! every request is refused for 60 s (`Retry-After` counts down); after the quota change every
//! client has 100 a minute, less what it used in the current minute.
//!
//! The admin routes are the app's most sensitive ones, so:
//! - they take a bearer token compared in constant time, and the process refuses to start
//!   without a long one;
//! - failed attempts are limited to 5 per 15 minutes per client IP (so the token cannot be
//!   guessed), and every admin request to 60 a minute;
//! - what they take is bounded: an IP address, a block of at most 30 days, a quota of 1 to
//!   1 000 000 a minute.
//!
//! The app is served directly (the key is the peer's address). Behind a reverse proxy, key both
//! limits with `ClientIp` and build the admin routes' keys with `ClientIp::key_for`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use tollgate::key::PeerIp;
use tollgate::layer::Handle;
use tollgate::{Quota, RateLimitLayer};

/// The quota every client starts with.
const PER_MINUTE: u64 = 5;
/// The longest block the admin routes accept.
const MAX_BLOCK: Duration = Duration::from_secs(30 * 24 * 3600);
/// The largest quota the admin routes accept, per minute.
const MAX_PER_MINUTE: u64 = 1_000_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let token = std::env::var("ADMIN_TOKEN").map_err(|_| {
        "set ADMIN_TOKEN to the admin routes' secret, 32 to 256 characters: \
         ADMIN_TOKEN=$(openssl rand -hex 32) cargo run --example admin"
    })?;
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };
    let app = app(&token)?;

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!(
        "tollgate admin example on http://{addr}/ ({PER_MINUTE} requests a minute per client IP)"
    );
    println!("  for i in $(seq 1 6); do curl -s -w ' %{{http_code}}\\n' http://{addr}/; done");
    println!(
        "  curl -s -H \"authorization: Bearer $ADMIN_TOKEN\" http://{addr}/admin/clients/127.0.0.1"
    );
    println!("  curl -s -X POST -H \"authorization: Bearer $ADMIN_TOKEN\" http://{addr}/admin/clients/127.0.0.1/reset");
    println!("  curl -s -X POST -H \"authorization: Bearer $ADMIN_TOKEN\" 'http://{addr}/admin/clients/127.0.0.1/block/60'");
    println!(
        "  curl -s -X PUT -H \"authorization: Bearer $ADMIN_TOKEN\" http://{addr}/admin/quota/100"
    );
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

/// What the admin routes share: the public limit's handle and the token.
#[derive(Clone)]
struct Admin {
    handle: Handle,
    token: Arc<str>,
}

/// The app: `/` behind the public limit, `/admin/...` behind the token. Serve it with connect
/// info (both limits key on the client IP).
///
/// # Errors
///
/// When `token` is shorter than 32 or longer than 256 characters.
pub fn app(token: &str) -> Result<Router, String> {
    if !(32..=256).contains(&token.len()) {
        return Err(format!(
            "ADMIN_TOKEN has {} characters; give 32 to 256 (ADMIN_TOKEN=$(openssl rand -hex 32))",
            token.len()
        ));
    }
    let public = RateLimitLayer::gcra(Quota::per_minute(PER_MINUTE).named("public"));
    let admin = Admin {
        handle: public.handle(),
        token: token.into(),
    };

    // Failed attempts at the token, per client IP; a right token costs nothing here.
    let guesses =
        RateLimitLayer::gcra(Quota::new(5, Duration::from_secs(15 * 60)).named("admin-auth"))
            .count_if(|response| response.status == StatusCode::UNAUTHORIZED);
    let admin_rate = RateLimitLayer::gcra(Quota::per_minute(60).named("admin"));
    let admin_routes = Router::new()
        .route("/clients/{ip}", get(peek))
        .route("/clients/{ip}/reset", post(reset))
        .route("/clients/{ip}/block/{seconds}", post(block))
        .route("/quota", get(quota))
        .route("/quota/{per_minute}", put(set_quota))
        .route_layer(middleware::from_fn_with_state(admin.clone(), authorize))
        .route_layer(guesses)
        .route_layer(admin_rate)
        .with_state(admin);

    Ok(Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route_layer(public)
        .nest("/admin", admin_routes))
}

/// Lets through requests with the admin token (`Authorization: Bearer <token>`); 401 for the
/// others.
async fn authorize(
    State(admin): State<Admin>,
    headers: HeaderMap,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.as_bytes(), admin.token.as_bytes()) => next.run(request).await,
        _ => (StatusCode::UNAUTHORIZED, "admin token required\n").into_response(),
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The client at `ip`, as the public limit keys it, or 400.
fn client(ip: &str) -> Result<tollgate::Key, (StatusCode, String)> {
    let ip: IpAddr = ip.parse().map_err(|_| {
        (
            StatusCode::BAD_REQUEST,
            "give a client IP address, such as 192.0.2.7 or 2001:db8::1\n".to_owned(),
        )
    })?;
    Ok(PeerIp.key_for(ip))
}

/// A store error, as the admin sees it (the key is not repeated).
fn failed(error: tollgate::Error) -> (StatusCode, String) {
    (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n"))
}

/// `GET /admin/clients/{ip}`: the client's standing under the public limit, consuming nothing.
async fn peek(
    State(admin): State<Admin>,
    Path(ip): Path<String>,
) -> Result<String, (StatusCode, String)> {
    let standing = admin.handle.peek(client(&ip)?).await.map_err(failed)?;
    // A peek is a request of cost 0: `remaining` says how many more would pass now, and
    // `reset_after` when the client is fully fresh again (the end of a block included).
    Ok(format!(
        "remaining={} blocked={} reset_after={}s\n",
        standing.remaining,
        standing.is_blocked(),
        standing.reset_after.as_secs_f64().ceil(),
    ))
}

/// `POST /admin/clients/{ip}/reset`: the client is fresh again, and no longer blocked.
async fn reset(
    State(admin): State<Admin>,
    Path(ip): Path<String>,
) -> Result<&'static str, (StatusCode, String)> {
    admin.handle.reset(client(&ip)?).await.map_err(failed)?;
    Ok("reset\n")
}

/// `POST /admin/clients/{ip}/block/{seconds}`: every request of the client refused for that
/// many seconds (1 to 30 days).
async fn block(
    State(admin): State<Admin>,
    Path((ip, seconds)): Path<(String, u64)>,
) -> Result<String, (StatusCode, String)> {
    let key = client(&ip)?;
    let duration = Duration::from_secs(seconds);
    if seconds == 0 || duration > MAX_BLOCK {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "seconds={seconds}: block for 1 to {} seconds\n",
                MAX_BLOCK.as_secs()
            ),
        ));
    }
    admin.handle.block(key, duration).await.map_err(failed)?;
    Ok(format!("blocked for {seconds}s\n"))
}

/// `GET /admin/quota`: the quota in force.
async fn quota(State(admin): State<Admin>) -> String {
    let quotas: Vec<String> = admin.handle.quotas().iter().map(Quota::to_string).collect();
    format!("{}\n", quotas.join(", "))
}

/// `PUT /admin/quota/{per_minute}`: every client's quota, at once; what each used this minute
/// still counts.
async fn set_quota(
    State(admin): State<Admin>,
    Path(per_minute): Path<u64>,
) -> Result<String, (StatusCode, String)> {
    if !(1..=MAX_PER_MINUTE).contains(&per_minute) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("per_minute={per_minute}: give 1 to {MAX_PER_MINUTE}\n"),
        ));
    }
    let quota = Quota::per_minute(per_minute).named("public");
    admin
        .handle
        .set_quotas(quota)
        .map_err(|error| (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")))?;
    Ok(format!("{per_minute} a minute\n"))
}
