use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::config::Config;
use super::future::{Pending, Refund, ResponseFuture};
use super::observe;
use super::response;
use crate::algorithm::{Algorithm, Gcra};
use crate::body::ResponseBody;
use crate::clock::{Clock, SystemClock};
use crate::key::{KeyExtractor, PeerIp, RequestHead};
use crate::store::{MemoryStore, Store};

/// The rate limit middleware: made by [`RateLimitLayer`](super::RateLimitLayer).
///
/// Denied requests are answered by the middleware and never reach the inner service; its
/// error type passes through unchanged, so axum needs no `HandleErrorLayer`.
pub struct RateLimit<S, A = Gcra, K = PeerIp, St = MemoryStore, C = SystemClock>
where
    A: Algorithm,
    St: Store<A>,
{
    inner: S,
    config: Arc<Config<A, K, St, C>>,
}

impl<S, A: Algorithm, K, St: Store<A>, C> RateLimit<S, A, K, St, C> {
    pub(crate) fn new(inner: S, config: Arc<Config<A, K, St, C>>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the middleware.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, A: Algorithm, K, St: Store<A>, C> Clone for RateLimit<S, A, K, St, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: std::fmt::Debug, A: Algorithm, K, St: Store<A>, C> std::fmt::Debug
    for RateLimit<S, A, K, St, C>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("policy", &self.config.limiter.policy())
            .finish_non_exhaustive()
    }
}

impl<S, A, K, St, C, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, A, K, St, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body,
    ResBody::Data: From<Bytes>,
    A: Algorithm,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, St::Future, S, ReqBody, ResBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let config = &*self.config;
        let responder = config.responder.clone();
        let key = match config.key.extract(&req) {
            Ok(Some(key)) => key,
            Ok(None) => return ResponseFuture::unlimited(self.inner.call(req), responder),
            Err(error) => {
                config.responder.observer().count("key_error");
                log_key_error(&error);
                // Answered here: the readiness `poll_ready` took (a permit) is given back.
                self.inner = self.inner.clone();
                return ResponseFuture::answered(
                    response::key_error(&error, config.responder.grpc(&req)),
                    responder,
                );
            }
        };
        let policy = match &config.per_key {
            Some(per_key) => {
                let head = RequestHead::new(&req);
                match per_key.policy(&key, head, &config.limiter, config.responder.settings()) {
                    Ok(policy) => policy,
                    // A plan the store refuses: refused as by a store that fails closed.
                    Err(error) => {
                        config.responder.observer().count("store_error");
                        self.inner = self.inner.clone();
                        let grpc = config.responder.grpc(&req);
                        return ResponseFuture::answered(
                            response::store_error(&error, grpc),
                            responder,
                        );
                    }
                }
            }
            None => None,
        };
        let (limiter, responder) = match &policy {
            Some(policy) => (&policy.limiter, policy.responder.clone()),
            None => (&config.limiter, responder),
        };
        let cost = config.cost(&key, RequestHead::new(&req));
        // With `count_if`, a request whose response does not count gives back what it took.
        let refund: Option<Refund<St::Future>> = (responder.counts_some() && cost > 0).then(|| {
            let (limiter, key) = (limiter.clone(), key.clone());
            Box::new(move |admission: &crate::Decision| limiter.refund(key, admission, cost))
                as Refund<St::Future>
        });
        observe::trace_key(&key);
        let key_kind = key.kind();
        let observer = responder.observer();
        let timer = observer.start();
        let now = limiter.clock().now_nanos();
        let mut check = observer.in_span(key_kind, || limiter.check_n_at(key, now, cost));
        // A local store decides at once: then the inner service, readied by `poll_ready`, is
        // called right here (or, for a request that is delayed or refused, released). A remote
        // store's check goes on in the response future, which takes the readied service and
        // leaves a clone here.
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut check).poll(&mut cx) {
            Poll::Ready(result) => {
                observer.finish(timer);
                let clock = limiter.clock();
                ResponseFuture::decided(
                    result,
                    (&mut self.inner, req, cost, key_kind),
                    now,
                    |delay| clock.sleep(delay),
                    refund,
                    responder,
                )
            }
            Poll::Pending => {
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let clock = limiter.clock().clone();
                let pending = Pending {
                    inner,
                    req,
                    cost,
                    key_kind,
                    timer,
                    sleep: Box::new(move |delay| clock.sleep(delay)),
                };
                ResponseFuture::checking(check, pending, now, refund, responder)
            }
        }
    }
}

/// Logs a key error. One the client caused (a 4xx: a missing or malformed header) is its own
/// mistake and is logged at debug level. One the server causes (a 5xx, such as no peer address
/// recorded) fails every request alike: it is logged at error level the first time each kind
/// is seen (kinds told apart by status and message), then at debug level, so that a flood of
/// requests does not flood the log while a second misconfiguration still shows. The message
/// names the server's settings, never the request's key.
fn log_key_error(error: &crate::key::KeyError) {
    let first = error.status().is_server_error() && first_of_kind(error);
    #[cfg(feature = "tracing")]
    if first {
        tracing::error!(status = error.status().as_u16(), "{error}");
    } else {
        tracing::debug!(status = error.status().as_u16(), "{error}");
    }
    #[cfg(not(feature = "tracing"))]
    if first {
        eprintln!("{error}");
    }
}

/// Whether `error` is the first of its kind (status and message) this process has seen. At most
/// [`KINDS`] kinds are remembered; later ones count as seen.
fn first_of_kind(error: &crate::key::KeyError) -> bool {
    use std::hash::{Hash, Hasher};
    use std::sync::atomic::AtomicU64;

    const KINDS: usize = 64;
    static SEEN: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (error.status().as_u16(), error.message()).hash(&mut hasher);
    // 0 marks a free slot.
    let kind = hasher.finish().max(1);
    for slot in &SEEN {
        match slot.compare_exchange(0, kind, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) if seen == kind => return false,
            Err(_) => {}
        }
    }
    false
}
