//! The bodies of the responses the layer sends itself: its own short ones, and those of
//! `on_limited` and `on_key_error`.

use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Empty, Full};

/// The error of a response body that went through the layer: the inner service's body error,
/// or the error of a body made by `on_limited` or `on_key_error`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a response the layer answers with (sent as a [`ResponseBody`](super::ResponseBody)).
#[derive(Debug)]
pub(crate) enum Answer {
    /// A complete body (the layer's own answers, and bodies that are bytes already); empty
    /// once sent.
    Full(Bytes),
    /// Any other body, such as axum's. In a `Mutex` only so that the response body stays `Sync`
    /// whatever the body is; it is reached through `get_mut`, never locked while polled.
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

/// `AnswerBody` for each type, `$make` turning a value into an [`Answer`].
macro_rules! answer_bodies {
    ($make:expr => $([$($g:tt)*] $ty:ty),* $(,)?) => {$(
        impl<$($g)*> sealed::Sealed for $ty {}
        impl<$($g)*> AnswerBody for $ty {
            fn into_answer(self) -> AnswerToken {
                AnswerToken($make(self))
            }
        }
    )*};
}

answer_bodies!(Answer::Full => [] Bytes);
answer_bodies!(|bytes| Answer::Full(Bytes::from(bytes)) =>
    [] Vec<u8>, [] String, [] &'static str, [] &'static [u8], [] Box<[u8]>,
    [] bytes::BytesMut,
);
answer_bodies!(|_| Answer::Full(Bytes::new()) => [] Empty<Bytes>);
answer_bodies!(Answer::body =>
    [] Full<Bytes>,
    [E: Into<BoxError> + 'static] UnsyncBoxBody<Bytes, E>,
    [E: Into<BoxError> + 'static] BoxBody<Bytes, E>,
);
#[cfg(feature = "axum")]
answer_bodies!(Answer::body => [] axum::body::Body);

/// `response` with its body made an [`Answer`].
pub(crate) fn answer<T: AnswerBody>(response: http::Response<T>) -> http::Response<Answer> {
    response.map(|body| body.into_answer().0)
}
