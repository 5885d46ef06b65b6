//! The tower middleware: [`RateLimitLayer`] and the [`RateLimit`] service it makes.
//!
//! For each request the middleware finds a key (by default the client's IP), asks its limiter
//! for a [`Decision`](crate::Decision), and then either calls the inner service or answers
//! itself:
//!
//! - **Allowed**: the request goes on with the `Decision` in its extensions (handlers may read
//!   it; behind several layers it is the most restrictive one, and
//!   [`Decisions`](crate::Decisions) holds every layer's), and the response gets the IETF
//!   `RateLimit-Policy` and `RateLimit` headers (each stacked layer adds its items), such as
//!   `RateLimit-Policy: "60/min";q=60;w=60` and `RateLimit: "60/min";r=59;t=1`. Other styles
//!   (draft 7, draft 6, GitHub's `X-RateLimit-*`, none) are a [`HeaderStyle`] away, and
//!   [`HeaderPlacement`] limits them to allowed or denied responses.
//! - **Denied**: `429 Too Many Requests` with `Retry-After` in whole seconds, rounded up (never
//!   `0` for a wait under a second), the same rate limit headers, and a short plain-text body.
//!   A gRPC request (a `POST` with `content-type: application/grpc*` over HTTP/2; gRPC-Web
//!   only with [`grpc_web`](RateLimitLayer::grpc_web)) gets a trailers-only response with
//!   `grpc-status: 8` (RESOURCE_EXHAUSTED) and `grpc-retry-pushback-ms` instead, since gRPC
//!   clients read a bare 429 as UNAVAILABLE. Every answer the layer writes itself carries
//!   `Cache-Control: no-store`.
//! - **No key**: with the default key, a server that does not record peer addresses gets a
//!   500 whose body and log line say how to fix it; requests are never let through unlimited.
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use tollgate::{Quota, RateLimitLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::gcra(Quota::per_minute(60)));
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let server = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>());
//! # tokio::spawn(async move { server.await });
//! # let mut stream = tokio::net::TcpStream::connect(addr).await?;
//! # use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! # stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await?;
//! # let mut text = String::new();
//! # stream.read_to_string(&mut text).await?;
//! # assert!(text.starts_with("HTTP/1.1 200"), "{text}");
//! # assert!(text.contains("ratelimit: \"60/min\";r=59;t=1"), "{text}");
//! # Ok(())
//! # }
//! ```
//!
//! [`InFlightLayer`] limits requests in progress instead of a rate: an allowed request holds a
//! slot of its key until its response body ends or is dropped, and a refused one is answered
//! as above but with no `Retry-After` (no wait is known).
//!
//! # The inner service's readiness
//!
//! `poll_ready` asks the inner service, as tower middleware does: the layer only knows a
//! request's key, and so its fate, once the request is in `call`. So a request the layer will
//! refuse also waits until the inner service is ready, like any other; the layer then answers
//! it without calling the inner service, and gives back what readiness held (a
//! `ConcurrencyLimit` permit, a `Buffer` slot) at once. To answer refusals without waiting
//! for a busy inner service, put tower's `LoadShed` between the two: the layer then refuses
//! over-limit requests at once, and requests it allows are shed while the inner service is
//! busy. (In axum, `Router::layer` puts a `Route` in between, which is always ready: the
//! readiness of a limit layered inside it is taken when the request is called.)
//!
//! A request that waits in the layer holds nothing of the inner service. One held back by
//! shaping (the leaky bucket, [`max_delay`](RateLimitLayer::max_delay)) gives back the
//! readiness `poll_ready` took as soon as it is put to wait, and readies the inner service
//! again once its turn comes, waiting there like a new request: one client's queue of
//! delayed requests never keeps other clients from a concurrency limit. So does a request
//! waiting for a remote store's answer (a round trip to Redis): a stalled Redis never keeps
//! the inner service from other requests. Once admitted, the request readies the inner service
//! again, waiting there like a new request, then calls it; an error from that `poll_ready`
//! comes out of its response future, and the request counts as one whose call failed. A
//! request the store decides at once (the memory store, a denial in Redis's deny cache, a
//! local lease) goes on with the readiness `poll_ready` took, as described above.
//!
//! Layers of this crate work with any tower service whose responses are `http::Response`:
//! axum's `Router::layer` and `route_layer`, tonic's `Server::builder().layer`, and
//! `tower::ServiceBuilder` over a hyper service.

mod answer;
mod body;
mod future;
mod grpc;
mod handle;
mod headers;
mod in_flight;
#[allow(clippy::module_inception)]
mod layer;
mod observe;
mod response;
mod service;
mod settle;
mod shared;
mod text;
mod upgrade;

pub use self::answer::{AnswerBody, BoxError};
pub use self::body::ResponseBody;
pub use self::future::ResponseFuture;
pub use self::handle::Handle;
pub use self::headers::{HeaderPlacement, HeaderStyle};
pub use self::in_flight::InFlightLayer;
pub use self::layer::RateLimitLayer;
pub use self::response::problem_details;
pub use self::service::RateLimit;
pub use self::settle::Usage;
pub use self::upgrade::InFlightSlot;
pub use crate::limiter::{Ban, LayerStore, Plan};
