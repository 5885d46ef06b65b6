//! A live layer under test: an axum app keyed by the `x-api-key` header on a manual clock, its
//! handle, and requests sent through it in-process.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::layer::Handle;
use tollgate::RateLimitLayer;
use tower::ServiceExt;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// `layer` keyed by the `x-api-key` header on `clock`: its handle and the app it limits.
pub fn live(layer: RateLimitLayer, clock: &ManualClock) -> (Handle, Router) {
    let layer = layer.key(Header::new("x-api-key")).clock(clock.clone());
    let handle = layer.handle();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    (handle, app)
}

/// A request of `key` through `app`.
pub fn send(rt: &tokio::runtime::Runtime, app: &Router, key: &str) -> Response<Body> {
    let request = Request::get("/")
        .header("x-api-key", key)
        .body(Body::empty())
        .unwrap();
    rt.block_on(app.clone().oneshot(request)).unwrap()
}

/// Whether a request of `key` passes.
pub fn passes(rt: &tokio::runtime::Runtime, app: &Router, key: &str) -> bool {
    send(rt, app, key).status() == StatusCode::OK
}

/// Drives a memory store's future, which is ready at once.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the memory store answers at once"),
    }
}
