use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::observe::Timer;
use super::response::{Admission, Responder};
use crate::body::ResponseBody;
use crate::clock::Sleep;
use crate::{Decision, Error};

/// Gives back the capacity an allowed request took, when its response does not count
/// (`count_if`): made before the request is decided, called after its response.
pub(crate) type Refund<CF> = Box<dyn FnOnce() -> CF + Send>;

/// A request waiting for its check: the readied inner service and what the check's answer is
/// logged and timed with.
pub(crate) struct Pending<S, B> {
    pub(crate) inner: S,
    pub(crate) req: Request<B>,
    pub(crate) key_kind: &'static str,
    pub(crate) timer: Timer,
    /// Starts the wait of a decision with a delay, on the limiter's clock.
    pub(crate) sleep: Box<dyn FnOnce(std::time::Duration) -> Sleep + Send>,
}

/// A request allowed after a delay: the readied inner service and the request, held until the
/// delay is over.
pub(crate) struct Delayed<S, B> {
    pub(crate) inner: S,
    pub(crate) req: Request<B>,
}

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit).
    #[project = ResponseFutureProj]
    pub struct ResponseFuture<F, CF, S, B, R> {
        #[pin]
        state: State<F, CF, S, B, R>,
        // Whether the inner response gets rate limit headers (not for unlimited requests).
        decision: Option<Decision>,
        // Set with `count_if`, for a request that used up capacity.
        refund: Option<Refund<CF>>,
        responder: Arc<Responder>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, CF, S, B, R> {
        // Waiting for the store; then the readied inner service is called with the request.
        Checking { #[pin] check: CF, pending: Option<Pending<S, B>> },
        // Allowed after a delay (shaping): waiting for the request's turn. Dropping the future
        // here drops the request before the inner service sees it.
        Delaying { #[pin] sleep: Sleep, delayed: Option<Delayed<S, B>> },
        // The inner service is answering.
        Inner { #[pin] future: F },
        // The response did not count (`count_if`): giving its capacity back.
        Refunding { #[pin] refund: CF, response: Option<Response<R>> },
        // The layer answered itself.
        Answered { response: Option<Response<Bytes>> },
    }
}

impl<F, CF, S, B, R> ResponseFuture<F, CF, S, B, R> {
    pub(crate) fn checking(
        check: CF,
        pending: Pending<S, B>,
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
            refund,
            responder,
        }
    }

    pub(crate) fn allowed(
        future: F,
        decision: Decision,
        refund: Option<Refund<CF>>,
        responder: Arc<Responder>,
    ) -> Self {
        // A request that only passed because of a dry run took no capacity to give back.
        let refund = refund.filter(|_| decision.allowed);
        Self {
            state: State::Inner { future },
            decision: Some(decision),
            refund,
            responder,
        }
    }

    /// A request allowed after `sleep`: then the readied inner service is called with it.
    pub(crate) fn delayed(
        sleep: Sleep,
        delayed: Delayed<S, B>,
        decision: Decision,
        refund: Option<Refund<CF>>,
        responder: Arc<Responder>,
    ) -> Self {
        Self {
            state: State::Delaying {
                sleep,
                delayed: Some(delayed),
            },
            decision: Some(decision),
            refund,
            responder,
        }
    }

    pub(crate) fn unlimited(future: F, responder: Arc<Responder>) -> Self {
        Self {
            state: State::Inner { future },
            decision: None,
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
            refund: None,
            responder,
        }
    }
}

impl<F, CF, S, B, R, E> Future for ResponseFuture<F, CF, S, B, R>
where
    F: Future<Output = Result<Response<R>, E>>,
    CF: Future<Output = Result<Decision, Error>>,
    S: Service<Request<B>, Future = F, Response = Response<R>, Error = E>,
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
                        mut req,
                        key_kind,
                        timer,
                        sleep,
                    }) = pending.take()
                    else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    this.responder.observer().finish(timer);
                    let responder = &**this.responder;
                    let admission = responder
                        .observer()
                        .in_span(key_kind, || responder.admit(result, &mut req, key_kind));
                    let next = match admission {
                        Admission::Allowed(decision) => {
                            if !decision.allowed {
                                *this.refund = None;
                            }
                            let delay = this.responder.delay(&decision);
                            *this.decision = Some(decision);
                            match delay {
                                Some(delay) => State::Delaying {
                                    sleep: sleep(delay),
                                    delayed: Some(Delayed { inner, req }),
                                },
                                None => State::Inner {
                                    future: inner.call(req),
                                },
                            }
                        }
                        Admission::Answered(response) => State::Answered {
                            response: Some(response),
                        },
                    };
                    this.state.set(next);
                }
                StateProj::Delaying { sleep, delayed } => {
                    ready!(sleep.poll(cx));
                    let Some(Delayed { mut inner, req }) = delayed.take() else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    this.state.set(State::Inner {
                        future: inner.call(req),
                    });
                }
                StateProj::Inner { future } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(refund) = this.refund.take() {
                        let (counts, unchanged) = this.responder.counts(response);
                        response = unchanged;
                        if !counts {
                            let refund = refund();
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
                        Ok(standing) => *this.decision = Some(standing),
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
            self.responder.add_headers(response.headers_mut(), decision);
        }
        response.map(ResponseBody::inner)
    }
}
