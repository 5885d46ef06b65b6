use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::answer::Answer;
use super::body::ResponseBody;
use super::observe::Timer;
use super::response::Responder;
use super::settle::{Settlement, Usage};
use super::upgrade::{self, Held};
use crate::clock::Sleep;
use crate::limiter::{DecisionFuture, Hold};
use crate::{Decision, Error, Key};

/// Gives back what an allowed request took when its response does not count (`count_if`),
/// or settles its cost once its response body ends (`settle`).
pub(crate) struct Refund {
    pub(crate) key: Key,
    pub(crate) cost: u64,
    /// With `settle`, what the handler reports the true cost through.
    pub(crate) usage: Option<Usage>,
}

/// A request on its way through the layer, and what its decision is acted on with.
pub(crate) struct Ticket<B> {
    pub(crate) req: Request<B>,
    pub(crate) cost: u64,
    pub(crate) key_kind: &'static str,
    /// When the request was decided, on the limiter's clock.
    pub(crate) decided_at: u64,
    /// For an in-flight limit, the key whose slots the request holds once let through.
    pub(crate) hold: Option<Key>,
    /// The timer of the check.
    pub(crate) timer: Timer,
}

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit).
    #[project = ResponseFutureProj]
    pub struct ResponseFuture<F, S, B, R> {
        #[pin]
        state: State<F, S, B, R>,
        // Whether the inner response gets rate limit headers (not for unlimited requests).
        decision: Option<Decision>,
        // When the decision was made, on the limiter's clock: the headers report what is left
        // of its waits when the response leaves.
        decided_at: u64,
        // Set with `count_if` or `settle`, for a request that may have used up capacity.
        refund: Option<Refund>,
        // The slots an in-flight limit let the request take: handed to the response body,
        // and given back when that ends (or when this future is dropped first); or, for a
        // response that switches protocols, left to the handler's `InFlightSlot`.
        hold: Option<Held>,
        responder: Arc<Responder>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, B, R> {
        // Waiting for the store, holding nothing of the inner service's readiness.
        Checking {
            #[pin]
            check: DecisionFuture,
            // A clone of the inner service, not readied, and the request. Boxed, as is the
            // delayed state's content: only requests that wait pay for it, and the future
            // every request moves stays small.
            pending: Option<Box<(S, Ticket<B>)>>,
        },
        // Allowed after a delay (shaping, while `sleep` runs) or after a wait for the store:
        // then readying the inner service, as for a new request. `delayed` is a clone of the
        // inner service, not readied, and the request. Until the call it holds nothing of the
        // inner service's readiness, and dropping the future drops the request before the
        // inner service sees it.
        Readying { sleep: Option<Sleep>, delayed: Option<Box<(S, Request<B>)>> },
        // The inner service is answering.
        Inner { #[pin] future: F },
        // The response did not count (`count_if`): giving its capacity back.
        Refunding { #[pin] refund: DecisionFuture, response: Option<Response<R>> },
        // The layer answered itself.
        Answered { response: Option<Response<Answer>> },
    }
}

/// What a state holds until the future moves on, taken out.
fn taken<T>(slot: &mut Option<T>) -> T {
    slot.take()
        .unwrap_or_else(|| unreachable!("ResponseFuture polled after completion"))
}

/// Where a request goes once its check has answered `result`: on to the inner service at once,
/// after readying it, after a delay, or nowhere (the layer answers). The one path every request
/// takes, whether its store answered at once or later.
///
/// `inner` is `readied` when the store answered at once: `poll_ready` readied it for this
/// request. A request that does not call it now releases that readiness (a `ConcurrencyLimit`
/// permit, a `Buffer` slot) by putting a clone in its place: a delayed or refused request never
/// keeps others from the inner service. A request that waited for the store holds a clone, not
/// readied; like a delayed one, it readies its own clone before calling it.
#[allow(clippy::result_large_err)]
fn next<F, S, B, R>(
    responder: &Responder,
    result: Result<Decision, Error>,
    (inner, readied): (&mut S, bool),
    ticket: Ticket<B>,
) -> (State<F, S, B, R>, Option<Decision>, Option<Held>)
where
    S: Service<Request<B>, Future = F> + Clone,
{
    let Ticket {
        mut req,
        cost,
        key_kind,
        hold,
        timer,
        ..
    } = ticket;
    let limiter = &responder.limiter;
    responder.finish(timer);
    let admitted = responder.in_span(key_kind, || responder.admit(result, &mut req, key_kind));
    let decision = match admitted {
        Ok(decision) => decision,
        Err(response) => {
            if readied {
                *inner = inner.clone();
            }
            let response = Some(response);
            return (State::Answered { response }, None, None);
        }
    };
    // Taken before the inner service is called: a panic there drops it with the future. A
    // request that may switch protocols shares it with its handler.
    let hold = hold
        .and_then(|key| Hold::of(limiter, key, cost, &decision))
        .map(|hold| Held::of(hold, &mut req));
    // An in-flight limit's request that holds nothing (of cost 0, or let through by a dry
    // run) still has a slot for a handler that keeps it.
    if hold.is_none() && responder.in_flight {
        upgrade::pass_without_slot(&mut req);
    }
    // A request of cost 0 takes nothing, so it has no turn to wait for.
    let delay = responder.delay(&decision).filter(|_| cost > 0);
    if delay.is_none() && readied {
        let future = inner.call(req);
        return (State::Inner { future }, Some(decision), hold);
    }
    let waiting = inner.clone();
    if readied {
        *inner = waiting.clone();
    }
    let state = State::Readying {
        sleep: delay.map(|delay| limiter.sleep(delay)),
        delayed: Some(Box::new((waiting, req))),
    };
    (state, Some(decision), hold)
}

impl<F, S, B, R> ResponseFuture<F, S, B, R> {
    /// The future of a request whose check is `check`; `inner` is the readied inner service.
    /// When the check has answered already (a local store), the request goes on at once (see
    /// [`next`]). Else its readiness is released while the check waits (a clone takes its
    /// place), and the request waits with a clone of its own, readied once it is admitted.
    pub(crate) fn new(
        check: DecisionFuture,
        inner: &mut S,
        ticket: Ticket<B>,
        refund: Option<Refund>,
        responder: Arc<Responder>,
    ) -> Self
    where
        S: Service<Request<B>, Future = F> + Clone,
    {
        let decided_at = ticket.decided_at;
        let (state, decision, hold) = match check {
            DecisionFuture::Ready(Some(result)) => next(&responder, result, (inner, true), ticket),
            check => {
                // The readied service is dropped: what it holds (a permit) is free for others
                // while the store decides.
                let waiting = inner.clone();
                *inner = waiting.clone();
                let pending = Some(Box::new((waiting, ticket)));
                (State::Checking { check, pending }, None, None)
            }
        };
        Self {
            state,
            decision,
            decided_at,
            refund,
            hold,
            responder,
        }
    }

    /// The future of a request in `state` that the layer does not count.
    fn uncounted(state: State<F, S, B, R>, responder: Arc<Responder>) -> Self {
        Self {
            state,
            decision: None,
            decided_at: 0,
            refund: None,
            hold: None,
            responder,
        }
    }

    pub(crate) fn unlimited(future: F, responder: Arc<Responder>) -> Self {
        Self::uncounted(State::Inner { future }, responder)
    }

    pub(crate) fn answered(response: Response<Answer>, responder: Arc<Responder>) -> Self {
        let response = Some(response);
        Self::uncounted(State::Answered { response }, responder)
    }
}

impl<F, S, B, R, E> Future for ResponseFuture<F, S, B, R>
where
    F: Future<Output = Result<Response<R>, E>>,
    S: Service<Request<B>, Future = F, Response = Response<R>, Error = E> + Clone,
{
    type Output = Result<Response<ResponseBody<R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { check, pending } => {
                    let result = ready!(check.poll(cx));
                    let (mut inner, ticket) = *taken(pending);
                    let (state, decision, hold) =
                        next(this.responder, result, (&mut inner, false), ticket);
                    *this.decision = decision;
                    *this.hold = hold;
                    this.state.set(state);
                }
                StateProj::Readying { sleep, delayed } => {
                    if let Some(delay) = sleep {
                        ready!(Pin::new(delay).poll(cx));
                        *sleep = None;
                    }
                    let Some(waiting) = delayed else {
                        unreachable!("ResponseFuture polled after completion");
                    };
                    if let Err(error) = ready!(waiting.0.poll_ready(cx)) {
                        // Fails as the call would have: the request counts (no refund), and
                        // the in-flight slots it took are given back now.
                        *delayed = None;
                        *this.hold = None;
                        return Poll::Ready(Err(error));
                    }
                    let (mut inner, req) = *taken(delayed);
                    let future = inner.call(req);
                    this.state.set(State::Inner { future });
                }
                StateProj::Inner { future } => {
                    let response = ready!(future.poll(cx))?;
                    let Some(refund) = this.refund.take() else {
                        return Poll::Ready(Ok(this.finish(response)));
                    };
                    match this.counted(response, refund) {
                        Ok(response) => return Poll::Ready(Ok(response)),
                        Err(refunding) => this.state.set(refunding),
                    }
                }
                StateProj::Refunding { refund, response } => {
                    let result = ready!(refund.poll(cx));
                    let response = taken(response);
                    match result {
                        // The headers tell the client where it stands after the refund.
                        Ok(standing) => {
                            *this.decision = Some(standing);
                            *this.decided_at = this.responder.limiter.now();
                        }
                        Err(_error) => {
                            #[cfg(feature = "tracing")]
                            tracing::warn!(error = %_error, "rate limit refund failed");
                        }
                    }
                    return Poll::Ready(Ok(this.finish(response)));
                }
                StateProj::Answered { response } => {
                    return Poll::Ready(Ok(taken(response).map(ResponseBody::answer)));
                }
            }
        }
    }
}

impl<F, S, B, R> ResponseFutureProj<'_, F, S, B, R> {
    /// The inner service's response with the rate limit headers added; or, when it switches
    /// protocols while no one kept the slot it holds, the layer's refusal (see `InFlightSlot`).
    fn finish(&mut self, mut response: Response<R>) -> Response<ResponseBody<R>> {
        let hold = match self.hold.take().map(|h| h.answered(response.status())) {
            None => None,
            Some(Ok(hold)) => hold,
            // A dry run never changes an answer: the connection goes uncounted (logged).
            Some(Err(unkept)) if self.responder.settings.dry_run => {
                unkept.let_through();
                None
            }
            Some(Err(unkept)) => return unkept.answer().map(ResponseBody::full),
        };
        if let Some(decision) = self.decision {
            let decided_at = Some(*self.decided_at);
            self.responder
                .add_headers(response.headers_mut(), decision, decided_at);
        }
        response.map(|body| ResponseBody::held(body, hold))
    }

    /// The response of a request with `count_if` or `settle`: finished, with its settlement
    /// in the body (made when that ends); or, when it does not count, the state that gives
    /// its cost back first. Out of line: most requests have neither.
    #[inline(never)]
    #[allow(clippy::result_large_err)]
    fn counted(
        &mut self,
        response: Response<R>,
        refund: Refund,
    ) -> Result<Response<ResponseBody<R>>, State<F, S, B, R>> {
        // Only a request let through takes capacity: not one that passed by a dry run.
        let Some(admission) = self.decision.as_ref().filter(|d| d.allowed) else {
            return Ok(self.finish(response));
        };
        let (counts, response) = self.responder.counts(response);
        let limiter = &self.responder.limiter;
        if !counts && refund.cost > 0 {
            let refund = limiter.refund(refund.key, admission, refund.cost);
            let response = Some(response);
            return Err(State::Refunding { refund, response });
        }
        // A response that counts settles its cost when its body ends.
        let settlement = refund.usage.filter(|_| counts).map(|usage| Settlement {
            limiter: limiter.clone(),
            key: refund.key,
            admission: admission.clone(),
            reserved: refund.cost,
            usage,
        });
        let mut response = self.finish(response);
        if let Some(settlement) = settlement {
            response.body_mut().settles(settlement);
        }
        Ok(response)
    }
}
