//! Helpers shared by test binaries that drive the layer synchronously on the memory path.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use tollgate::key::PeerAddr;
use tower::Service;

pub fn request(peer: Option<&str>) -> Request<String> {
    let mut req = Request::new(String::new());
    if let Some(peer) = peer {
        req.extensions_mut()
            .insert(PeerAddr(peer.parse::<SocketAddr>().unwrap()));
    }
    req
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

pub fn hello(
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future = impl Send>
       + Clone {
    tower::service_fn(|_req: Request<String>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(String::from("hi"))))
    })
}
