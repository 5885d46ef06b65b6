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
//!
//! Instructions instead of time, which a busy machine does not disturb: with
//! `LAYER_COUNT=<variant>:<n>` (variant `bare`, `allowed`, `allowed-no-headers`, `denied`,
//! `settled` (a settling layer, each request's reservation given back), `settled-charge` (each
//! charged one more), `in-flight` (a slot taken and given back per request) or
//! `in-flight-denied`)
//! the binary only serves `n` requests to that variant and exits, for `perf stat`:
//!
//! ```text
//! LAYER_COUNT=allowed:1000000 perf stat -e instructions:u target/release/deps/layer-<hash>
//! ```
//!
//! The difference between a variant's count and `bare`'s, over `n`, is the layer's instructions
//! per request.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{criterion_group, Criterion, Throughput};
use http::{Request, Response};
use tollgate::key::PeerAddr;
use tollgate::{HeaderStyle, InFlightLayer, Quota, RateLimitLayer, Usage};
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

/// An inner service that reports each request's true cost as `actual`, for a settling layer.
fn reporting(
    actual: u64,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    service_fn(move |req: Request<String>| {
        if let Some(usage) = req.extensions().get::<Usage>() {
            usage.set(actual);
        }
        async { Ok::<_, Infallible>(Response::new(String::new())) }
    })
}

/// Allows every request for the length of any run: 10^9 at once, refilled 10^9 a second.
fn open() -> Quota {
    Quota::new(1_000_000_000, Duration::from_secs(1))
}

/// Serves `n` requests to one variant, for instruction counts (see the module docs).
fn count(spec: &str) {
    let (variant, n) = spec
        .split_once(':')
        .and_then(|(v, n)| Some((v, n.parse::<u64>().ok()?)))
        .expect("LAYER_COUNT is <variant>:<n>");
    fn run<S>(mut svc: S, n: u64)
    where
        S: Service<Request<String>>,
        S::Error: std::fmt::Debug,
    {
        for _ in 0..n {
            black_box(respond(&mut svc, request()));
        }
    }
    match variant {
        "bare" => run(inner(), n),
        "allowed" => run(RateLimitLayer::gcra(open()).layer(inner()), n),
        "allowed-no-headers" => run(
            RateLimitLayer::gcra(open())
                .headers(HeaderStyle::None)
                .layer(inner()),
            n,
        ),
        "denied" => run(RateLimitLayer::gcra(Quota::per_day(1)).layer(inner()), n),
        "settled" => run(settled(0), n),
        "settled-charge" => run(settled(2), n),
        "in-flight" => run(InFlightLayer::new(1).layer(inner()), n),
        "in-flight-denied" => {
            let mut svc = InFlightLayer::new(1).layer(inner());
            let _held = respond(&mut svc, request());
            run(svc, n)
        }
        other => panic!("no variant {other:?}"),
    }
}

/// A settling layer whose requests reserve 1 and report `actual`: given back (0) or charged
/// (2) when the response is dropped.
fn settled(
    actual: u64,
) -> impl Service<Request<String>, Response = Response<impl Sized>, Error = Infallible> {
    RateLimitLayer::gcra(open())
        .settle()
        .layer(reporting(actual))
}

fn layer_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("layer");
    group.throughput(Throughput::Elements(1));

    let mut bare = inner();
    group.bench_function("bare", |b| {
        b.iter(|| black_box(respond(&mut bare, request())))
    });

    let mut allowed = RateLimitLayer::gcra(open()).layer(inner());
    group.bench_function("allowed", |b| {
        b.iter(|| {
            let response = respond(&mut allowed, request());
            assert_eq!(response.status(), 200);
            black_box(response)
        })
    });

    let mut quiet = RateLimitLayer::gcra(open())
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

    // The allowance of a settling layer, and its settlement when the response is dropped.
    for (name, actual) in [("allowed-settled", 0), ("allowed-settled-charge", 2)] {
        let mut svc = settled(actual);
        group.bench_function(name, |b| b.iter(|| black_box(respond(&mut svc, request()))));
    }

    // One slot: each request takes it and gives it back when its response is dropped.
    let mut in_flight = InFlightLayer::new(1).layer(inner());
    group.bench_function("in-flight", |b| {
        b.iter(|| {
            let response = respond(&mut in_flight, request());
            assert_eq!(response.status(), 200);
            black_box(response)
        })
    });

    // The slot held by a response kept aside: every request is refused.
    let mut busy = InFlightLayer::new(1).layer(inner());
    let _held = respond(&mut busy, request());
    group.bench_function("in-flight-denied", |b| {
        b.iter(|| {
            let response = respond(&mut busy, request());
            assert_eq!(response.status(), 429);
            black_box(response)
        })
    });
    group.finish();
}

criterion_group!(benches, layer_cost);

fn main() {
    if let Ok(spec) = std::env::var("LAYER_COUNT") {
        return count(&spec);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
