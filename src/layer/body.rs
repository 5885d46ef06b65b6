//! [`ResponseBody`]: the body of a response that passed through the rate limit layer.

use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::Mutex;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use pin_project_lite::pin_project;

use super::answer::{Answer, BoxError};
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
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
        Boxed { body: Mutex<UnsyncBoxBody<Bytes, BoxError>> },
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body, unchanged.
    pub fn inner(body: B) -> Self {
        Self::held(body, None)
    }

    /// The inner service's body, holding `hold` until it ends or is dropped.
    pub(crate) fn held(body: B, hold: Option<Held>) -> Self {
        Self {
            kind: Kind::Inner { body },
            hold,
        }
    }

    /// A complete body of `data`.
    pub fn full(data: impl Into<Bytes>) -> Self {
        let data: Bytes = data.into();
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            hold: None,
        }
    }

    /// The body of an answer the layer made.
    pub(crate) fn answer(answer: Answer) -> Self {
        match answer {
            Answer::Full(data) => Self::full(data),
            Answer::Body(body) => Self {
                kind: Kind::Boxed { body },
                hold: None,
            },
        }
    }
}

/// The boxed body, reached without locking (the lock only keeps the body `Sync`).
fn unlocked(
    body: &mut Mutex<UnsyncBoxBody<Bytes, BoxError>>,
) -> &mut UnsyncBoxBody<Bytes, BoxError> {
    body.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unlocked_ref(
    body: &Mutex<UnsyncBoxBody<Bytes, BoxError>>,
) -> Option<std::sync::MutexGuard<'_, UnsyncBoxBody<Bytes, BoxError>>> {
    // Only `&self` methods (hints) get here; the lock is never held across a poll.
    body.try_lock().ok()
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
                if this.hold.is_some() {
                    let over = match &frame {
                        Poll::Ready(None | Some(Err(_))) => true,
                        Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                        Poll::Pending => false,
                    };
                    if over {
                        *this.hold = None;
                    }
                }
                frame.map_err(Into::into)
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d.into())))),
            KindProj::Boxed { body } => Pin::new(unlocked(body))
                .poll_frame(cx)
                .map_ok(|frame| frame.map_data(Into::into)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
            Kind::Boxed { body } => unlocked_ref(body).is_some_and(|body| body.is_end_stream()),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Boxed { body } => {
                unlocked_ref(body).map_or_else(SizeHint::default, |body| body.size_hint())
            }
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("ResponseBody::Inner"),
            Kind::Full { data } => f.debug_tuple("ResponseBody::Full").field(data).finish(),
            Kind::Boxed { .. } => f.write_str("ResponseBody::Boxed"),
        }
    }
}
