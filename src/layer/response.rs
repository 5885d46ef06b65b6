//! The answers the layer writes itself; the rate limit headers are written by `headers`.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};

use super::headers::{HeaderWriter, Headers};
use crate::key::KeyError;
use crate::{Decision, Error, Quota};

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// gRPC status RESOURCE_EXHAUSTED.
const GRPC_RESOURCE_EXHAUSTED: &str = "8";
/// gRPC status UNAVAILABLE.
const GRPC_UNAVAILABLE: &str = "14";
/// gRPC status INTERNAL.
const GRPC_INTERNAL: &str = "13";

/// Whole seconds, rounded up: a client told to wait 0 s for a 300 ms wait would retry at once.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn ceil_millis(d: Duration) -> u64 {
    let ms = d.as_millis() + u128::from(d.as_nanos() % 1_000_000 > 0);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// Whether the request is gRPC, whose clients read errors from `grpc-status`, not HTTP status.
pub(crate) fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// What the layer does with a request once its check is done.
pub(crate) enum Admission {
    /// The request goes on to the inner service.
    Allowed(Decision),
    /// The layer answers the request itself.
    Answered(Response<Bytes>),
}

/// Answers for one policy: the rate limit headers in the layer's style, and denials.
#[derive(Debug)]
pub(crate) struct Responder {
    /// The policy name, for logs.
    policy: Box<str>,
    headers: HeaderWriter,
}

impl Responder {
    pub(crate) fn new(quota: &Quota, policy: &str, headers: Headers) -> Self {
        Self {
            policy: policy.into(),
            headers: HeaderWriter::new([(quota, policy)], headers),
        }
    }

    /// The header settings this responder was made with.
    pub(crate) fn headers(&self) -> Headers {
        self.headers.headers()
    }

    /// Acts on a check's result: an allowed request gets the decision in its extensions and
    /// goes on; any other gets the layer's own answer.
    pub(crate) fn admit<B>(
        &self,
        result: Result<Decision, Error>,
        req: &mut Request<B>,
    ) -> Admission {
        match result {
            Ok(decision) if decision.allowed => {
                req.extensions_mut().insert(decision);
                Admission::Allowed(decision)
            }
            Ok(decision) => {
                #[cfg(feature = "tracing")]
                tracing::debug!(
                    policy = &*self.policy,
                    retry_after_ms = decision.retry_after.map(ceil_millis),
                    "request rate limited"
                );
                Admission::Answered(self.limited(&decision, is_grpc(req)))
            }
            Err(error) => {
                #[cfg(feature = "tracing")]
                tracing::error!(policy = &*self.policy, %error, "rate limit check failed");
                #[cfg(not(feature = "tracing"))]
                let _ = &self.policy;
                Admission::Answered(store_error(&error, is_grpc(req)))
            }
        }
    }

    /// Adds the rate limit fields describing `decision`, if the layer's placement wants them
    /// on this response.
    pub(crate) fn add_headers(&self, headers: &mut HeaderMap, decision: &Decision) {
        if self.headers.covers(decision) {
            self.headers.write(std::slice::from_ref(decision), headers);
        }
    }

    /// The answer to a denied request: 429 with `Retry-After`, or a gRPC RESOURCE_EXHAUSTED.
    pub(crate) fn limited(&self, decision: &Decision, grpc: bool) -> Response<Bytes> {
        let message = match decision.retry_after {
            Some(wait) => {
                let secs = ceil_secs(wait);
                let unit = if secs == 1 { "second" } else { "seconds" };
                format!("Too many requests: retry in {secs} {unit}.")
            }
            None => "Request too large: it costs more than the rate limit ever allows.".to_owned(),
        };
        let mut response = if grpc {
            grpc_response(GRPC_RESOURCE_EXHAUSTED, &message)
        } else {
            plain(StatusCode::TOO_MANY_REQUESTS, message)
        };
        let headers = response.headers_mut();
        match (decision.retry_after, grpc) {
            (Some(wait), false) => {
                headers.insert(RETRY_AFTER, HeaderValue::from(ceil_secs(wait)));
            }
            (Some(wait), true) => {
                headers.insert(GRPC_PUSHBACK.clone(), HeaderValue::from(ceil_millis(wait)));
            }
            // A negative pushback tells gRPC clients not to retry.
            (None, true) => {
                headers.insert(GRPC_PUSHBACK.clone(), HeaderValue::from_static("-1"));
            }
            (None, false) => {}
        }
        self.add_headers(headers, decision);
        response
    }
}

/// The answer to a request whose key could not be found.
pub(crate) fn key_error(error: &KeyError, grpc: bool) -> Response<Bytes> {
    if grpc {
        grpc_response(GRPC_INTERNAL, error.message())
    } else {
        plain(error.status(), error.message().to_owned())
    }
}

/// The answer when the store failed to decide.
pub(crate) fn store_error(_error: &Error, grpc: bool) -> Response<Bytes> {
    let message = "Rate limiting is unavailable; try again shortly.";
    if grpc {
        grpc_response(GRPC_UNAVAILABLE, message)
    } else {
        plain(StatusCode::SERVICE_UNAVAILABLE, message.to_owned())
    }
}

fn plain(status: StatusCode, mut message: String) -> Response<Bytes> {
    message.push('\n');
    let mut response = Response::new(Bytes::from(message));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A trailers-only gRPC response: HTTP 200 with the status in the headers and no body.
fn grpc_response(code: &'static str, message: &str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static(code));
    // Messages are ASCII without '%', so they need no percent-encoding.
    if let Ok(value) = HeaderValue::try_from(message) {
        headers.insert(GRPC_MESSAGE.clone(), value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ceil_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ceil_millis(Duration::from_millis(3)), 3);
    }
}
