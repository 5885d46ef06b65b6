//! [`ResponseBody`]: the body of a response that passed through the rate limit layer.

use std::mem;
use std::pin::Pin;
use std::sync::PoisonError;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::answer::{Answer, BoxError};
use super::settle::Settlement;
use super::upgrade::Held;

pin_project! {
    /// Either the inner service's body, or the body of a response the layer made itself (a
    /// 429, a 500 for a misconfigured server, or the response of `on_limited` or
    /// `on_key_error`).
    ///
    /// Its error is a [`BoxError`]: the inner body's error, boxed only when it happens, or the
    /// error of a body from `on_limited` or `on_key_error`.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        // The slots of an in-flight limit the request holds: given back when the body ends,
        // or with it when it is dropped.
        hold: Keep,
    }
}

/// What a body keeps until it ends or is dropped: the slots of an in-flight limit, or the
/// settlement of a request's cost (`settle`: made then). A layer is one or the other.
enum Keep {
    Nothing,
    Slots(#[allow(dead_code)] Held),
    Settlement(#[allow(dead_code)] Box<Settlement>),
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Answer { answer: Answer },
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body, unchanged.
    pub fn inner(body: B) -> Self {
        Self::held(body, None)
    }

    /// The inner service's body, holding `hold` until it ends or is dropped.
    pub(crate) fn held(body: B, hold: Option<Held>) -> Self {
        let kind = Kind::Inner { body };
        let hold = hold.map_or(Keep::Nothing, Keep::Slots);
        Self { kind, hold }
    }

    /// The same body, settling `settlement` when it ends or is dropped. A layer that settles
    /// holds no slots: a body that does (or the layer's own answer) settles at once.
    pub(crate) fn settles(&mut self, settlement: Settlement) {
        if let (Kind::Inner { .. }, Keep::Nothing) = (&self.kind, &self.hold) {
            self.hold = Keep::Settlement(Box::new(settlement));
        }
    }

    /// A complete body of `data`.
    pub fn full(data: impl Into<Bytes>) -> Self {
        Self::answer(Answer::Full(data.into()))
    }

    /// The body of an answer the layer made.
    pub(crate) fn answer(answer: Answer) -> Self {
        let kind = Kind::Answer { answer };
        Self {
            kind,
            hold: Keep::Nothing,
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Inner { mut body } => {
                let frame = body.as_mut().poll_frame(cx);
                // The body is over (its end, or an error): the slots it held come back now,
                // not when whoever sent it gets round to dropping it.
                let over = match &frame {
                    Poll::Ready(None | Some(Err(_))) => true,
                    Poll::Ready(Some(Ok(_))) => {
                        !matches!(this.hold, Keep::Nothing) && body.is_end_stream()
                    }
                    Poll::Pending => false,
                };
                if over {
                    *this.hold = Keep::Nothing;
                }
                frame.map_err(Into::into)
            }
            KindProj::Answer { answer } => match answer {
                Answer::Full(data) if data.is_empty() => Poll::Ready(None),
                Answer::Full(data) => Poll::Ready(Some(Ok(Frame::data(mem::take(data).into())))),
                Answer::Body(body) => {
                    let body = body.get_mut().unwrap_or_else(PoisonError::into_inner);
                    Pin::new(body)
                        .poll_frame(cx)
                        .map_ok(|frame| frame.map_data(Into::into))
                }
            },
        }
    }

    // Only `&self` methods (hints) lock an answer's boxed body; the lock is never held across
    // a poll.
    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Answer { answer } => match answer {
                Answer::Full(data) => data.is_empty(),
                Answer::Body(body) => body.try_lock().is_ok_and(|body| body.is_end_stream()),
            },
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Answer { answer } => match answer {
                Answer::Full(data) => SizeHint::with_exact(data.len() as u64),
                Answer::Body(body) => body
                    .try_lock()
                    .map_or_else(|_| SizeHint::default(), |body| body.size_hint()),
            },
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("ResponseBody::Inner"),
            Kind::Answer { answer } => f.debug_tuple("ResponseBody").field(answer).finish(),
        }
    }
}
