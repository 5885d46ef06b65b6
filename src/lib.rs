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
//! | `axum` | yes | the peer IP from axum's `ConnectInfo<SocketAddr>` |
//! | `tracing` | yes | logs for misconfigured servers, denials and store failures |
//! | `tonic` | no | the peer IP from tonic's `TcpConnectInfo`, and `TlsConnectInfo<TcpConnectInfo>` over TLS |
//! | `serde` | no | `Serialize`/`Deserialize` for [`Quota`], as its text form (`"100/min"`), and `config`: layers from configuration files |
//! | `redis` | no | `store::RedisStore`: one limit across servers through Redis or Redis Cluster |
//! | `metrics` | no | `tollgate_decisions_total{policy, outcome}` and `tollgate_store_latency_seconds{policy}` through the `metrics` crate |
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
pub mod clock;
#[cfg(feature = "serde")]
pub mod config;
mod decision;
mod error;
pub mod key;
pub mod layer;
mod limiter;
mod quota;
pub mod store;

pub use self::decision::{Decision, Decisions};
pub use self::error::{Error, ErrorKind};
pub use self::key::Key;
pub use self::layer::{HeaderPlacement, HeaderStyle, RateLimit, RateLimitLayer};
pub use self::limiter::RateLimiter;
pub use self::quota::{ParseQuotaError, Quota};
