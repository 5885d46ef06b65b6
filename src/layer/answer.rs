//! The bodies of the responses the layer sends itself: its own short ones, and those of
//! `on_limited` and `on_key_error`.

use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;

/// The error of a response body that went through the layer: the inner service's body error,
/// or the error of a body made by `on_limited` or `on_key_error`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a response the layer answers with.
pub(crate) enum Answer {
    /// A complete body (the layer's own answers, and bodies that are bytes already).
    Full(Bytes),
    /// Any other body, such as axum's. In a `Mutex` only so that the response body stays `Sync`
    /// whatever the body is; it is reached through `get_mut`, never locked.
    Body(Mutex<UnsyncBoxBody<Bytes, BoxError>>),
}

impl Answer {
    fn body<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Self::Body(Mutex::new(body.map_err(Into::into).boxed_unsync()))
    }
}

impl From<Bytes> for Answer {
    fn from(bytes: Bytes) -> Self {
        Self::Full(bytes)
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full(bytes) => f.debug_tuple("Full").field(bytes).finish(),
            Self::Body(_) => f.write_str("Body"),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A body that [`on_limited`](super::RateLimitLayer::on_limited) and
/// [`on_key_error`](super::RateLimitLayer::on_key_error) may put in their responses:
///
/// - bytes: `Bytes`, `Vec<u8>`, `String`, `&'static str`, `&'static [u8]`, `Box<[u8]>`,
///   `BytesMut`;
/// - axum's `Body` (feature `axum`), so what an axum handler returns works:
///   `(StatusCode::TOO_MANY_REQUESTS, Json(..)).into_response()`;
/// - `http_body_util`'s `Full<Bytes>`, `Empty<Bytes>`, `BoxBody` and `UnsyncBoxBody`: any
///   other `http_body::Body` with `Bytes` data becomes one with `BodyExt::boxed_unsync`.
///
/// Bytes are sent as they are; other bodies are boxed once per answer.
pub trait AnswerBody: sealed::Sealed + Send + 'static {
    #[doc(hidden)]
    fn into_answer(self) -> AnswerToken;
}

/// What [`AnswerBody::into_answer`] makes; the layer's own business.
#[doc(hidden)]
#[derive(Debug)]
pub struct AnswerToken(pub(crate) Answer);

macro_rules! bytes_bodies {
    ($($ty:ty),*) => {$(
        impl sealed::Sealed for $ty {}
        impl AnswerBody for $ty {
            fn into_answer(self) -> AnswerToken {
                AnswerToken(Answer::Full(Bytes::from(self)))
            }
        }
    )*};
}

bytes_bodies!(
    Bytes,
    Vec<u8>,
    String,
    &'static str,
    &'static [u8],
    Box<[u8]>,
    bytes::BytesMut
);

impl sealed::Sealed for http_body_util::Full<Bytes> {}
impl AnswerBody for http_body_util::Full<Bytes> {
    fn into_answer(self) -> AnswerToken {
        AnswerToken(Answer::body(self))
    }
}

impl sealed::Sealed for http_body_util::Empty<Bytes> {}
impl AnswerBody for http_body_util::Empty<Bytes> {
    fn into_answer(self) -> AnswerToken {
        AnswerToken(Answer::Full(Bytes::new()))
    }
}

impl<E: Into<BoxError> + 'static> sealed::Sealed for UnsyncBoxBody<Bytes, E> {}
impl<E: Into<BoxError> + 'static> AnswerBody for UnsyncBoxBody<Bytes, E> {
    fn into_answer(self) -> AnswerToken {
        AnswerToken(Answer::body(self))
    }
}

impl<E: Into<BoxError> + 'static> sealed::Sealed
    for http_body_util::combinators::BoxBody<Bytes, E>
{
}
impl<E: Into<BoxError> + 'static> AnswerBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn into_answer(self) -> AnswerToken {
        AnswerToken(Answer::body(self))
    }
}

#[cfg(feature = "axum")]
impl sealed::Sealed for axum::body::Body {}
#[cfg(feature = "axum")]
impl AnswerBody for axum::body::Body {
    fn into_answer(self) -> AnswerToken {
        AnswerToken(Answer::body(self))
    }
}

/// `response` with its body made an [`Answer`].
pub(crate) fn answer<T: AnswerBody>(response: http::Response<T>) -> http::Response<Answer> {
    response.map(|body| body.into_answer().0)
}
