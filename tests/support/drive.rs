//! Futures driven by hand, without a runtime: the memory path is ready at once, and time moves
//! by a `ManualClock`, not by a runtime's timer.
#![allow(dead_code)]

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use http::Request;
use tower::Service;

/// Polls `fut` once, with a waker that does nothing: the clock, not a runtime, moves time.
pub fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(Waker::noop()))
}

/// The output of `fut`, which must be ready at once (the memory store's futures are).
pub fn ready_now<F: Future>(fut: F) -> F::Output {
    match pin!(fut).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the memory store answers at once"),
    }
}

/// Drives one request through `svc`: with the memory store and a ready handler, every future
/// is ready at once.
pub fn send<S: Service<Request<String>>>(svc: &mut S, req: Request<String>) -> S::Response
where
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    match pin!(svc.call(req)).poll(&mut cx) {
        Poll::Ready(result) => result.unwrap(),
        Poll::Pending => panic!("the memory path is ready at once"),
    }
}
