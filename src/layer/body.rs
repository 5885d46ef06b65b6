//! [`ResponseBody`]: the body of a response that passed through the rate limit layer.

use std::pin::Pin;
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
        hold: Option<Held>,
        // The settlement of the request's cost (`settle`): made when the body ends, or when
        // it is dropped first.
        settlement: Option<Box<Settlement>>,
    }
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
        Self::held(body, None, None)
    }

    /// The inner service's body, holding `hold` and `settlement` until it ends or is dropped.
    pub(crate) fn held(body: B, hold: Option<Held>, settlement: Option<Settlement>) -> Self {
        let kind = Kind::Inner { body };
        let settlement = settlement.map(Box::new);
        Self {
            kind,
            hold,
            settlement,
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
            hold: None,
            settlement: None,
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
                        (this.hold.is_some() || this.settlement.is_some()) && body.is_end_stream()
                    }
                    Poll::Pending => false,
                };
                if over {
                    *this.hold = None;
                    *this.settlement = None;
                }
                frame.map_err(Into::into)
            }
            KindProj::Answer { answer } => Pin::new(answer)
                .poll_frame(cx)
                .map_ok(|frame| frame.map_data(Into::into)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Answer { answer } => answer.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Answer { answer } => answer.size_hint(),
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
