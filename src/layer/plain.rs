//! The answers the layer writes to a missing key and to a failed store, in plain HTTP or gRPC,
//! and the plain-text form they share with denials.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::grpc::{grpc_code, grpc_response, Grpc, GRPC_UNAVAILABLE};
use crate::key::KeyError;
use crate::Error;

/// The body of the answer when the store failed to decide.
const UNAVAILABLE: &str = "Rate limiting is unavailable; try again shortly.\n";

/// The answer to a request whose key could not be found: the error's status and message, or
/// for gRPC the status code of that HTTP status.
/// A gRPC answer names no HTTP authentication scheme: it is no HTTP 401.
pub(crate) fn key_error(error: &KeyError, grpc: Option<Grpc>) -> Response<Bytes> {
    match grpc {
        Some(form) => grpc_response(&form, grpc_code(error.status()), error.message().as_bytes()),
        None => {
            let body = Bytes::from(format!("{}\n", error.message()));
            let mut response = plain(error.status(), body);
            if let Some(challenge) = error.challenge() {
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, challenge.clone());
            }
            response
        }
    }
}

/// The answer when the store failed to decide.
pub(crate) fn store_error(_error: &Error, grpc: Option<Grpc>) -> Response<Bytes> {
    match grpc {
        Some(form) => grpc_response(&form, GRPC_UNAVAILABLE, UNAVAILABLE.trim_end().as_bytes()),
        None => {
            let body = Bytes::from_static(UNAVAILABLE.as_bytes());
            plain(StatusCode::SERVICE_UNAVAILABLE, body)
        }
    }
}

/// Marks an answer the layer writes as one no cache may keep: a denial, a key error or a store
/// error is about one client at one moment, and a cache keyed by URL would hand it to others.
/// A `Cache-Control` the answer has (from `on_limited` or `on_key_error`) is kept.
pub(crate) fn not_to_be_stored(headers: &mut HeaderMap) {
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

/// A plain-text response, not to be stored; `body` ends with a newline.
pub(crate) fn plain(status: StatusCode, body: Bytes) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    // Room for the fields a denial gets (content type, `Cache-Control`, `Retry-After`, the
    // rate limit fields of any style) in one allocation.
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    *response.headers_mut() = headers;
    response
}
