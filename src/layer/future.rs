use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::observe::Timer;
use super::response::{Admission, Responder};
use crate::body::ResponseBody;
use crate::clock::Sleep;
use crate::{Decision, Error};

/// Gives back what an allowed request's admission (the decision passed in) took, when its
/// response does not count (`count_if`): made before the request is decided, called after its
/// response.
pub(crate) type Refund<CF> = Box<dyn FnOnce(&Decision) -> CF + Send>;

/// A request waiting for its check: the readied inner service and what the check's answer is
/// acted on, logged and timed with.
pub(crate) struct Pending<S, B> {
    pub(crate) inner: S,
    pub(crate) req: Request<B>,
    pub(crate) cost: u64,
    pub(crate) key_kind: &'static str,
    pub(crate) timer: Timer,
    /// Starts the wait of a decision with a delay, on the limiter's clock.
    pub(crate) sleep: Box<dyn FnOnce(Duration) -> Sleep + Send>,
}

/// A request allowed after a delay: a clone of the inner service, not readied, and the
/// request. The service is readied once the delay is over.
pub(crate) struct Delayed<S, B> {
    inner: S,
    req: Request<B>,
}

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit).
    #[project = ResponseFutureProj]
    pub struct ResponseFuture<F, CF, S, B, R> {
        #[pin]
        state: State<F, CF, S, B, R>,
        // Whether the inner response gets rate limit headers (not for unlimited requests).
        decision: Option<Decision>,
        // When the decision was made, on the limiter's clock: the headers report what is left
        // of its waits when the response leaves.
        decided_at: u64,
        // Set with `count_if`, for a request that used up capacity.
        refund: Option<Refund<CF>>,
        responder: Arc<Responder>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, CF, S, B, R> {
        // Waiting for the store, holding the readied inner service.
        Checking { #[pin] check: CF, pending: Option<Pending<S, B>> },
        // Allowed after a delay (shaping): waiting for the request's turn, holding nothing of
        // the inner service's readiness. Dropping the future here drops the request before the
        // inner service sees it.
        Delaying { #[pin] sleep: Sleep, delayed: Option<Delayed<S, B>> },
        // The delay is over: readying the inner service, as for a new request.
        Readying { delayed: Option<Delayed<S, B>> },
        // The inner service is answering.
        Inner { #[pin] future: F },
        // The response did not count (`count_if`): giving its capacity back.
        Refunding { #[pin] refund: CF, response: Option<Response<R>> },
        // The layer answered itself.
        Answered { response: Option<Response<Bytes>> },
    }
}

/// Where a request goes once its check has answered `result`: on to `inner` (readied by
/// `poll_ready`) at once, after a delay, or nowhere (the layer answers). The one path every
/// request takes, whether its store answered at once or later.
///
/// A request that does not call `inner` now releases the readiness `inner` holds (a
/// `ConcurrencyLimit` permit, a `Buffer` slot) by putting a clone in its place: a delayed or
/// refused request never keeps others from the inner service. A delayed request readies its
/// own clone once its delay is over.
fn after_check<F, CF, S, B, R>(
    responder: &Responder,
    result: Result<Decision, Error>,
    pending: (&mut S, Request<B>, u64, &'static str),
    sleep: impl FnOnce(Duration) -> Sleep,
) -> (State<F, CF, S, B, R>, Option<Decision>)
where
    S: Service<Request<B>, Future = F> + Clone,
{
    let (inner, mut req, cost, key_kind) = pending;
    let admission = responder
        .observer()
        .in_span(key_kind, || responder.admit(result, &mut req, key_kind));
    match admission {
        Admission::Allowed(decision) => {
            // A request of cost 0 takes nothing, so it has no turn to wait for.
            match responder.delay(&decision).filter(|_| cost > 0) {
                None => {
                    let future = inner.call(req);
                    (State::Inner { future }, Some(decision))
                }
                Some(delay) => {
                    let waiting = inner.clone();
                    *inner = waiting.clone();
                    let state = State::Delaying {
                        sleep: sleep(delay),
                        delayed: Some(Delayed {
                            inner: waiting,
                            req,
                        }),
                    };
                    (state, Some(decision))
                }
            }
        }
        Admission::Answered(response) => {
            *inner = inner.clone();
            let state = State::Answered {
                response: Some(response),
            };
            (state, None)
        }
    }
}

impl<F, CF, S, B, R> ResponseFuture<F, CF, S, B, R> {
    pub(crate) fn checking(
        check: CF,
        pending: Pending<S, B>,
        decided_at: u64,
        refund: Option<Refund<CF>>,
        responder: Arc<Responder>,
    ) -> Self {
        let state = State::Checking {
            check,
            pending: Some(pending),
        };
        Self {
            state,
            decision: None,
            decided_at,
            refund,
            responder,
        }
    }

    /// A request whose check has answered `result` (see [`after_check`]); `inner` is readied,
    /// and `cost` is the request's.
    pub(crate) fn decided(
        result: Result<Decision, Error>,
        pending: (&mut S, Request<B>, u64, &'static str),
        decided_at: u64,
        sleep: impl FnOnce(Duration) -> Sleep,
        refund: Option<Refund<CF>>,
        responder: Arc<Responder>,
    ) -> Self
    where
        S: Service<Request<B>, Future = F> + Clone,
    {
        let (state, decision) = after_check(&responder, result, pending, sleep);
        Self {
            refund: refund_for(refund, decision.as_ref()),
            state,
            decision,
            decided_at,
            responder,
        }
    }

    pub(crate) fn unlimited(future: F, responder: Arc<Responder>) -> Self {
        Self {
            state: State::Inner { future },
            decision: None,
            decided_at: 0,
            refund: None,
            responder,
        }
    }

    pub(crate) fn answered(response: Response<Bytes>, responder: Arc<Responder>) -> Self {
        let state = State::Answered {
            response: Some(response),
        };
        Self {
            state,
            decision: None,
            decided_at: 0,
            refund: None,
            responder,
        }
    }
}

/// The refund of a request that `decision` let through, if it took capacity: not one the
/// layer answered, nor one that only passed because of a dry run.
fn refund_for<CF>(refund: Option<Refund<CF>>, decision: Option<&Decision>) -> Option<Refund<CF>> {
    refund.filter(|_| decision.is_some_and(|d| d.allowed))
}

impl<F, CF, S, B, R, E> Future for ResponseFuture<F, CF, S, B, R>
where
    F: Future<Output = Result<Response<R>, E>>,
    CF: Future<Output = Result<Decision, Error>>,
    S: Service<Request<B>, Future = F, Response = Response<R>, Error = E> + Clone,
{
    type Output = Result<Response<ResponseBody<R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { check, pending } => {
                    let result = ready!(check.poll(cx));
                    let Some(Pending {
                        mut inner,
                        req,
                        cost,
                        key_kind,
                        timer,
                        sleep,
                    }) = pending.take()
                    else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    this.responder.observer().finish(timer);
                    let (next, decision) = after_check(
                        this.responder,
                        result,
                        (&mut inner, req, cost, key_kind),
                        sleep,
                    );
                    *this.refund = refund_for(this.refund.take(), decision.as_ref());
                    *this.decision = decision;
                    // Drops the readied service if it was not called.
                    this.state.set(next);
                }
                StateProj::Delaying { sleep, delayed } => {
                    ready!(sleep.poll(cx));
                    let delayed = delayed.take();
                    this.state.set(State::Readying { delayed });
                }
                StateProj::Readying { delayed } => {
                    let Some(waiting) = delayed else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    ready!(waiting.inner.poll_ready(cx))?;
                    let Some(Delayed { mut inner, req }) = delayed.take() else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    this.state.set(State::Inner {
                        future: inner.call(req),
                    });
                }
                StateProj::Inner { future } => {
                    let mut response = ready!(future.poll(cx))?;
                    let refund = this.refund.take().zip(this.decision.as_ref());
                    if let Some((refund, admission)) = refund {
                        let (counts, unchanged) = this.responder.counts(response);
                        response = unchanged;
                        if !counts {
                            let refund = refund(admission);
                            this.state.set(State::Refunding {
                                refund,
                                response: Some(response),
                            });
                            continue;
                        }
                    }
                    return Poll::Ready(Ok(this.finish(response)));
                }
                StateProj::Refunding { refund, response } => {
                    let result = ready!(refund.poll(cx));
                    let Some(response) = response.take() else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    match result {
                        // The headers tell the client where it stands after the refund.
                        Ok(standing) => {
                            *this.decision = Some(standing);
                            *this.decided_at = this.responder.now();
                        }
                        Err(_error) => {
                            #[cfg(feature = "tracing")]
                            tracing::warn!(error = %_error, "rate limit refund failed");
                        }
                    }
                    return Poll::Ready(Ok(this.finish(response)));
                }
                StateProj::Answered { response } => {
                    let Some(response) = response.take() else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    return Poll::Ready(Ok(response.map(ResponseBody::full)));
                }
            }
        }
    }
}

impl<F, CF, S, B, R> ResponseFutureProj<'_, F, CF, S, B, R> {
    /// The inner service's response with the rate limit headers added.
    fn finish(&mut self, mut response: Response<R>) -> Response<ResponseBody<R>> {
        if let Some(decision) = self.decision {
            self.responder
                .add_headers_since(response.headers_mut(), decision, *self.decided_at);
        }
        response.map(ResponseBody::inner)
    }
}
