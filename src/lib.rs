//! Rate limiting for tower services: axum, tonic and hyper.
//!
//! `tollgate` limits each client (by IP, API key, header, ...) with an exact algorithm,
//! answers the requests it denies itself (`429` with `Retry-After`, or gRPC
//! `RESOURCE_EXHAUSTED`), and tells every client where it stands with the IETF `RateLimit`
//! headers.
//!
//! # Quick start
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use tollgate::{Quota, RateLimitLayer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let app = Router::new()
//!         .route("/", get(|| async { "hello" }))
//!         .layer(RateLimitLayer::gcra(Quota::per_minute(60))); // per client IP, in memory
//!
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     // The default key is the peer IP, which axum records only when asked to:
//!     axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//!     Ok(())
//! }
//! ```
//!
//! Without HTTP, a [`RateLimiter`] decides for any key:
//!
//! ```
//! use tollgate::{Quota, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tollgate::Error> {
//! let limiter = RateLimiter::gcra("2/s".parse::<Quota>().unwrap());
//! assert!(limiter.check("job-42").await?.allowed);
//! assert!(limiter.check("job-42").await?.allowed);
//! assert!(!limiter.check("job-42").await?.allowed);
//! # Ok(())
//! # }
//! ```
//!
//! # Testing your limits
//!
//! A limited router is tested without a server: axum's `MockConnectInfo`, layered outside the
//! rate limit layer, stands in for the peer address a server records (it is read only when
//! there is no real `ConnectInfo`), and a [`ManualClock`](clock::ManualClock) moves time by hand.
//!
//! ```
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use axum::{extract::connect_info::MockConnectInfo, http::StatusCode, routing::get, Router};
//! use tollgate::{clock::ManualClock, Quota, RateLimitLayer};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let clock = ManualClock::new();
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::gcra(Quota::per_minute(1)).clock(clock.clone()))
//!     .layer(MockConnectInfo(SocketAddr::from(([192, 0, 2, 1], 4000))));
//! let get = || axum::http::Request::get("/").body(axum::body::Body::empty()).unwrap();
//!
//! assert_eq!(app.clone().oneshot(get()).await.unwrap().status(), StatusCode::OK);
//! let denied = app.clone().oneshot(get()).await.unwrap();
//! assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(denied.headers()["retry-after"], "60");
//! clock.advance(Duration::from_secs(60));
//! assert_eq!(app.oneshot(get()).await.unwrap().status(), StatusCode::OK);
//! # }
//! ```
//!
//! The guide's [recipes](guide::recipes) show the common shapes of an app (layers in a struct,
//! limits per route group, plans, JSON answers, keys in the body), and `examples/production.rs`
//! a complete app with all of them, tested over TCP.
//!
//! # The guide
//!
//! The [`guide`] holds the long form, chapter by chapter: [algorithms](guide::algorithms) and
//! quotas, [keys](guide::keys) and the client IP behind proxies, what clients see
//! ([responses](guide::responses)), [recipes](guide::recipes), [testing](guide::testing),
//! [operating](guide::operating) limits, [Redis](guide::redis) across a fleet, and
//! [configuration files](guide::config).
//!
//! # Operating limits
//!
//! - A layer's [`Handle`](layer::Handle) ([`RateLimitLayer::handle`]) changes its quotas
//!   while it serves, each client keeping what it used
//!   ([`set_quotas`](layer::Handle::set_quotas)), and looks at, resets and blocks one client
//!   under the layer and every per-key plan ([`peek`](layer::Handle::peek),
//!   [`reset`](layer::Handle::reset), [`block`](layer::Handle::block)); `examples/admin.rs`
//!   serves them as admin routes.
//! - [`RateLimitLayer::ban`] blocks repeat offenders for a while.
//! - [`InFlightLayer`] limits the requests of a key in progress at once; an
//!   upgraded connection (a WebSocket) holds its slot through an [`InFlightSlot`].
//! - [`RateLimitLayer::aligned`] puts fixed windows on the calendar (a day from midnight UTC).
//! - Outside a layer, [`RateLimiter::peek`], [`RateLimiter::reset`] and
//!   [`RateLimiter::block`] do the same for one limiter.
//!
//! # How it is built
//!
//! A request flows one way: request → [`key`] → [`RateLimiter`] ([`algorithm`] + [`store`] +
//! [`clock`]) → [`Decision`] → response. Algorithms are pure functions over integer
//! nanoseconds; stores apply them atomically; clocks are swappable, so tests move time by hand
//! with [`ManualClock`](clock::ManualClock) and are exact.
//!
//! [`RateLimiter<A, St, C>`](RateLimiter) is typed; the middleware holds its limiter and key
//! extractor as objects, so [`RateLimitLayer`] is one type whatever its algorithm, key, store and
//! clock (keep layers in a `Vec`, pick them at run time, or build them from a file with `config`
//! under the `serde` feature), and the service is [`RateLimit<S>`](RateLimit). Failures carry an
//! [`ErrorKind`] ([`Error::kind`]).
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `axum` | yes | the peer IP from axum's `ConnectInfo<SocketAddr>` (and `MockConnectInfo` in tests); axum's `Body` in [`on_limited`](RateLimitLayer::on_limited) and [`on_key_error`](RateLimitLayer::on_key_error) answers |
//! | `tracing` | yes | logs for misconfigured servers, denials and store failures |
//! | `tonic` | no | the peer IP from tonic's `TcpConnectInfo`, and `TlsConnectInfo<TcpConnectInfo>` over TLS |
//! | `serde` | no | `Serialize`/`Deserialize` for [`Quota`], as its text form (`"100/min"`), and `config`: layers from configuration files |
//! | `redis` | no | `store::RedisStore`: one limit across servers through Redis, Redis Sentinel or Redis Cluster |
//! | `metrics` | no | `tollgate_decisions_total{policy, outcome}` (allowed, delayed, denied, dry_run_denied, key_error, store_error), `tollgate_bans_total{policy, outcome}` (banned, dry_run_banned), `tollgate_store_latency_seconds{policy}` and, with `redis`, `tollgate_store_failures_total{policy, on_failure}` through the `metrics` crate |
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
pub mod clock;
#[cfg(feature = "serde")]
pub mod config;
mod decision;
mod error;
pub mod guide;
pub mod key;
pub mod layer;
mod limiter;
mod quota;
pub mod store;

pub use self::decision::{Decision, Decisions};
pub use self::error::{Error, ErrorKind};
pub use self::key::Key;
pub use self::layer::{
    HeaderPlacement, HeaderStyle, InFlightLayer, InFlightSlot, RateLimit, RateLimitLayer, Usage,
};
pub use self::limiter::RateLimiter;
pub use self::quota::{ParseQuotaError, Quota};
