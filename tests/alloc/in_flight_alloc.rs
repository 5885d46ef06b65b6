//! What an in-flight limit allocates per request in memory: taking a slot and giving it back
//! (the response dropped) allocates nothing beyond what any allowance does (the decision in
//! the extensions, the header map, `RateLimit`), whether the key stays in the table (another
//! request holds a slot) or leaves it and comes back.

use crate::support::counting_alloc;
use crate::support::services;

use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use http::{Request, StatusCode};
use tollgate::key::PeerAddr;
use tollgate::InFlightLayer;
use tower::{Layer, Service};

use counting_alloc::allocations_in;
use services::ok;

/// With the `metrics` feature, each decision also builds the labels of two instruments.
const METRICS: u64 = if cfg!(feature = "metrics") { 2 } else { 0 };

fn request() -> Request<String> {
    let mut req = Request::new(String::new());
    let peer: SocketAddr = ([192, 0, 2, 1], 4000).into();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

fn respond<S>(svc: &mut S, req: Request<String>) -> S::Response
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    let mut future = pin!(svc.call(req));
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(response) => response.expect("the service failed"),
        Poll::Pending => panic!("the response was not ready at once"),
    }
}

/// The most allocations of one request, its response dropped (its slot given back), over 100
/// counted rounds after 100 uncounted ones.
fn most_per_request<S>(svc: &mut S, expected: StatusCode) -> u64
where
    S: Service<Request<String>, Response = http::Response<tollgate::layer::ResponseBody<String>>>,
    S::Error: std::fmt::Debug,
{
    for _ in 0..100 {
        black_box(respond(svc, request()));
    }
    let mut most = 0;
    for _ in 0..100 {
        let req = request();
        let (n, status) = allocations_in(|| {
            let response = respond(svc, req);
            let status = response.status();
            drop(black_box(response));
            status
        });
        assert_eq!(status, expected);
        most = most.max(n);
    }
    most
}

#[test]
fn a_slot_taken_and_given_back_allocates_nothing_of_its_own() {
    // The key stays: another request holds a slot all along.
    let mut svc = InFlightLayer::new(2).layer(ok());
    let held = respond(&mut svc, request());
    assert_eq!(held.status(), StatusCode::OK);
    let n = most_per_request(&mut svc, StatusCode::OK);
    assert!(
        n <= 4 + METRICS,
        "{n} allocations, expected at most {}",
        4 + METRICS
    );

    // The key leaves the table with each response and comes back with the next request.
    let mut svc = InFlightLayer::new(1).layer(ok());
    let n = most_per_request(&mut svc, StatusCode::OK);
    assert!(
        n <= 4 + METRICS,
        "{n} allocations, expected at most {}",
        4 + METRICS
    );
}

#[test]
fn a_refusal_allocates_as_any_denial() {
    let mut svc = InFlightLayer::new(1).layer(ok());
    let held = respond(&mut svc, request());
    assert_eq!(held.status(), StatusCode::OK);
    let n = most_per_request(&mut svc, StatusCode::TOO_MANY_REQUESTS);
    // The header map, the body and `RateLimit` (no `Retry-After`).
    assert!(
        n <= 4 + METRICS,
        "{n} allocations, expected at most {}",
        4 + METRICS
    );
}
