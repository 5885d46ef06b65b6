//! The layer's own cost per request on the memory store: a `RateLimit` around an inner service
//! that answers at once, called and polled to its response, against the inner service alone.
//!
//! Run with `cargo bench --bench layer`. Groups:
//! - `layer/bare`: the inner service alone (the request is built in the loop, as for the others).
//! - `layer/allowed`: GCRA on the peer IP, every request allowed, default headers.
//! - `layer/allowed-no-headers`: the same with `HeaderStyle::None`.
//! - `layer/denied`: every request denied (the 429 with its headers and body).
//!
//! The layer's cost per request is the difference between a group and `bare`. Each variant uses
//! the system clock, as a server does.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::{Request, Response};
use tollgate::key::PeerAddr;
use tollgate::{HeaderStyle, Quota, RateLimitLayer};
use tower::{service_fn, Layer, Service};

/// A request from 192.0.2.1, as a server records its peer.
fn request() -> Request<String> {
    let mut req = Request::new(String::new());
    let peer: SocketAddr = ([192, 0, 2, 1], 4000).into();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

/// Readies `svc`, calls it and polls its future, which must be ready at once.
fn respond<S>(svc: &mut S, req: Request<String>) -> S::Response
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => panic!("the service was not ready"),
    }
    let mut future = pin!(svc.call(req));
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(response)) => response,
        _ => panic!("the response was not ready"),
    }
}

fn inner() -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone
{
    service_fn(|_req: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

fn layer_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("layer");
    group.throughput(Throughput::Elements(1));

    let mut bare = inner();
    group.bench_function("bare", |b| {
        b.iter(|| black_box(respond(&mut bare, request())))
    });

    // Allows every request for the length of any run: 10^9 at once, refilled 10^9 a second.
    let open = Quota::new(1_000_000_000, Duration::from_secs(1));
    let mut allowed = RateLimitLayer::gcra(open.clone()).layer(inner());
    group.bench_function("allowed", |b| {
        b.iter(|| {
            let response = respond(&mut allowed, request());
            assert_eq!(response.status(), 200);
            black_box(response)
        })
    });

    let mut quiet = RateLimitLayer::gcra(open)
        .headers(HeaderStyle::None)
        .layer(inner());
    group.bench_function("allowed-no-headers", |b| {
        b.iter(|| black_box(respond(&mut quiet, request())))
    });

    // One request a day: the first passes, every later one is denied.
    let mut denied = RateLimitLayer::gcra(Quota::per_day(1)).layer(inner());
    let _ = respond(&mut denied, request());
    group.bench_function("denied", |b| {
        b.iter(|| {
            let response = respond(&mut denied, request());
            assert_eq!(response.status(), 429);
            black_box(response)
        })
    });
    group.finish();
}

criterion_group!(benches, layer_cost);
criterion_main!(benches);
