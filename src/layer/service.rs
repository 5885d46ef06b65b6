use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::ResponseBody;
use super::future::{Refund, ResponseFuture, Ticket};
use super::observe;
use super::settle::Usage;
use super::shared::Shared;
use super::upgrade;
use crate::key::RequestHead;

/// The rate limit middleware: made by [`RateLimitLayer`](super::RateLimitLayer).
///
/// Denied requests are answered by the middleware and never reach the inner service; its
/// error type passes through unchanged, so axum needs no `HandleErrorLayer`.
///
/// `poll_ready` is the inner service's: callers wait while it is busy, whatever their key, as
/// with any tower middleware (the key is only known in `call`). A request the store decides at
/// once goes on with that readiness, or gives it back if refused or delayed. A request whose
/// check waits for the store gives it back while it waits and readies the inner service again
/// once admitted, so an admitted request may wait there a second time, behind later ones;
/// waiting for Redis, it holds nothing others need.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
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

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("policy", &self.shared.active.load().limiter.policy())
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body,
    ResBody::Data: From<Bytes>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, ReqBody, ResBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        let responder = shared.active.load_full();
        let key = match shared.key.extract(RequestHead::new(&req)) {
            Ok(Some(key)) => key,
            Ok(None) => {
                if responder.in_flight {
                    upgrade::pass_without_slot(&mut req);
                }
                return ResponseFuture::unlimited(self.inner.call(req), responder);
            }
            Err(error) => {
                log_key_error(&error);
                // Answered here: the readiness `poll_ready` took (a permit) is given back.
                self.inner = self.inner.clone();
                return ResponseFuture::answered(responder.key_error(&error, &req), responder);
            }
        };
        let plan = shared.per_key.as_ref();
        let (responder, own) = match plan.map(|p| p.policy(&key, RequestHead::new(&req))) {
            Some(Ok(Some(policy))) => (policy.responder.clone(), false),
            Some(Ok(None)) | None => (responder, true),
            // A plan the store refuses: refused as by a store that fails closed.
            Some(Err(error)) => {
                self.inner = self.inner.clone();
                return ResponseFuture::answered(responder.store_error(&error, &req), responder);
            }
        };
        let limiter = &responder.limiter;
        let cost = shared.cost(&key, RequestHead::new(&req));
        // With `settle`, the handler reports the true cost through the request's `Usage`.
        let usage = responder.settings.settle.then(|| {
            // A charge goes to the layer's quotas in force when it is made.
            // Inside another settling layer, what the handler reports reaches both.
            let outer = req.extensions().get::<Usage>().cloned();
            let usage = Usage::new(&self.shared, own, outer);
            req.extensions_mut().insert(usage.clone());
            usage
        });
        // With `count_if`, a request whose response does not count gives back what it took;
        // with `settle`, one whose response counts settles its cost when its body ends.
        let refund =
            ((responder.settings.count_if.is_some() && cost > 0) || usage.is_some()).then(|| {
                Refund {
                    key: key.clone(),
                    cost,
                    usage,
                }
            });
        observe::trace_key(&key);
        let key_kind = key.kind();
        // An in-flight limit: the key of the slots the request will hold, to give them back.
        let hold = (responder.in_flight && cost > 0).then(|| key.clone());
        let timer = responder.start();
        let now = limiter.now();
        let check = responder.in_span(key_kind, || limiter.check(key, now, cost));
        let ticket = Ticket {
            req,
            cost,
            key_kind,
            decided_at: now,
            hold,
            timer,
        };
        ResponseFuture::new(check, &mut self.inner, ticket, refund, responder)
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
