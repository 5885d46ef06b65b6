//! The answers the layer writes itself (denials, a missing key, a failed store), in plain
//! HTTP or gRPC.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::grpc::{grpc_response, Grpc};

/// The layer's own answer, not to be stored: for a gRPC request (`grpc`), trailers-only with
/// the gRPC status `code` and `message`; else `status` with `message` as a line of plain text.
pub(crate) fn own_answer(
    status: StatusCode,
    grpc: Option<&Grpc>,
    code: &'static str,
    message: &[u8],
) -> Response<Bytes> {
    if let Some(form) = grpc {
        return grpc_response(form, code, message);
    }
    // One allocation of the exact size, which `Bytes` keeps.
    let mut body = Vec::with_capacity(message.len() + 1);
    body.extend_from_slice(message);
    body.push(b'\n');
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    // Room for the fields a denial gets (content type, `Cache-Control`, `Retry-After`, the
    // rate limit fields of any style) in one allocation.
    let mut headers = HeaderMap::with_capacity(8);
    let text = HeaderValue::from_static("text/plain; charset=utf-8");
    headers.insert(CONTENT_TYPE, text);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    *response.headers_mut() = headers;
    response
}

/// Marks an answer the layer writes as one no cache may keep: a denial, a key error or a store
/// error is about one client at one moment, and a cache keyed by URL would hand it to others.
/// A `Cache-Control` the answer has (from `on_limited` or `on_key_error`) is kept.
pub(crate) fn not_to_be_stored(headers: &mut HeaderMap) {
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}
