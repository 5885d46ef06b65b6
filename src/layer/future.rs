use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::response::{Admission, Responder};
use crate::body::ResponseBody;
use crate::{Decision, Error};

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit).
    pub struct ResponseFuture<F, CF, S, B> {
        #[pin]
        state: State<F, CF, S, B>,
        // Whether the inner response gets rate limit headers (not for unlimited requests).
        decision: Option<Decision>,
        responder: Arc<Responder>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, CF, S, B> {
        // Waiting for the store; then the readied inner service is called with the request.
        Checking { #[pin] check: CF, pending: Option<(S, Request<B>)> },
        // The inner service is answering.
        Inner { #[pin] future: F },
        // The layer answered itself.
        Answered { response: Option<Response<Bytes>> },
    }
}

impl<F, CF, S, B> ResponseFuture<F, CF, S, B> {
    pub(crate) fn checking(
        check: CF,
        inner: S,
        req: Request<B>,
        responder: Arc<Responder>,
    ) -> Self {
        let state = State::Checking {
            check,
            pending: Some((inner, req)),
        };
        Self {
            state,
            decision: None,
            responder,
        }
    }

    pub(crate) fn allowed(future: F, decision: Decision, responder: Arc<Responder>) -> Self {
        Self {
            state: State::Inner { future },
            decision: Some(decision),
            responder,
        }
    }

    pub(crate) fn unlimited(future: F, responder: Arc<Responder>) -> Self {
        Self {
            state: State::Inner { future },
            decision: None,
            responder,
        }
    }

    pub(crate) fn answered(response: Response<Bytes>, responder: Arc<Responder>) -> Self {
        Self {
            state: State::Answered {
                response: Some(response),
            },
            decision: None,
            responder,
        }
    }
}

impl<F, CF, S, B, ResBody, E> Future for ResponseFuture<F, CF, S, B>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    CF: Future<Output = Result<Decision, Error>>,
    S: Service<Request<B>, Future = F, Response = Response<ResBody>, Error = E>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { check, pending } => {
                    let result = ready!(check.poll(cx));
                    let Some((mut inner, mut req)) = pending.take() else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    let next = match this.responder.admit(result, &mut req) {
                        Admission::Allowed(decision) => {
                            *this.decision = Some(decision);
                            State::Inner {
                                future: inner.call(req),
                            }
                        }
                        Admission::Answered(response) => State::Answered {
                            response: Some(response),
                        },
                    };
                    this.state.set(next);
                }
                StateProj::Inner { future } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(decision) = this.decision {
                        this.responder.add_headers(response.headers_mut(), decision);
                    }
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
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
