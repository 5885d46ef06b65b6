//! Inner services for the layer to wrap.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tollgate::Decision;
use tower::Service;

/// A handler that answers 200 with an empty body (which allocates nothing).
pub fn ok(
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + Sync
       + 'static {
    tower::service_fn(|_req: Request<String>| {
        ready(Ok::<_, Infallible>(Response::new(String::new())))
    })
}

/// A service that must be readied before each call, like tower's `Buffer` or a connection
/// pool: its clones start unready. It counts its calls and answers with the `remaining` of the
/// `Decision` it found in the request (`Some(1)`, or `None`).
pub struct Strict {
    ready: bool,
    calls: Arc<AtomicUsize>,
}

impl Strict {
    /// An unready service counting its calls in `calls`.
    pub fn new(calls: &Arc<AtomicUsize>) -> Self {
        Self {
            ready: false,
            calls: calls.clone(),
        }
    }
}

impl Clone for Strict {
    fn clone(&self) -> Self {
        Self {
            ready: false,
            calls: self.calls.clone(),
        }
    }
}

impl Service<Request<Full<Bytes>>> for Strict {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        assert!(self.ready, "called without poll_ready");
        self.ready = false;
        self.calls.fetch_add(1, Ordering::SeqCst);
        let remaining = req.extensions().get::<Decision>().map(|d| d.remaining);
        ready(Ok(Response::new(Full::from(format!("{remaining:?}")))))
    }
}
