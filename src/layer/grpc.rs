//! gRPC requests: which requests are answered the gRPC way, and the trailers-only answers
//! they get (`grpc-status`, a percent-encoded `grpc-message`).

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use percent_encoding::{AsciiSet, CONTROLS};

use super::text::Text;

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
pub(crate) static GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// gRPC status RESOURCE_EXHAUSTED.
pub(crate) const GRPC_RESOURCE_EXHAUSTED: &str = "8";

/// A request answered the gRPC way: HTTP 200, the outcome in `grpc-status`, and the content
/// type the client speaks.
#[derive(Debug, Clone)]
pub(crate) struct Grpc {
    content_type: HeaderValue,
}

impl Grpc {
    /// The gRPC form of `req`, if it has one and the layer answers it the gRPC way. gRPC is a
    /// `POST` with `application/grpc[+subtype]` over HTTP/2 (gRPC runs over nothing else),
    /// answered so when `grpc` is on; gRPC-Web is a `POST` with
    /// `application/grpc-web[-text][+subtype]` over any version, answered so only when `web`
    /// is on too. Anything else is plain HTTP: any other method (`GET`, `HEAD`, a lower-case
    /// `post`), `application/grpc` over HTTP/1.x, look-alike types. A client chooses the
    /// content type it sends: a gRPC answer is an HTTP 200, so one given to a request that is
    /// not gRPC would turn its denial into a 200 that defences watching for 429s never see.
    pub(crate) fn of<B>(req: &Request<B>, grpc: bool, web: bool) -> Option<Self> {
        if !grpc || req.method() != Method::POST {
            return None;
        }
        let value = req.headers().get(CONTENT_TYPE)?.as_bytes();
        // The media type, without parameters (`; charset=...`).
        let media = value.split(|&b| b == b';').next()?.trim_ascii();
        let rest = strip_prefix_ignore_case(media, b"application/grpc")?;
        let web_rest = strip_prefix_ignore_case(rest, b"-web-text")
            .or_else(|| strip_prefix_ignore_case(rest, b"-web"));
        if !web_rest.map_or(req.version() == Version::HTTP_2, |_| web) {
            return None;
        }
        // Nothing more, or `+` and a subtype (`proto`, `json`, ...).
        match web_rest.unwrap_or(rest) {
            [] => {}
            [b'+', subtype @ ..] if !subtype.is_empty() && subtype.iter().all(|&b| is_tchar(b)) => {
            }
            _ => return None,
        }
        // The common types, without allocating.
        let common = COMMON
            .iter()
            .find(|t| t.as_bytes().eq_ignore_ascii_case(media));
        let content_type = match common {
            Some(common) => HeaderValue::from_static(common),
            None => HeaderValue::from_bytes(&media.to_ascii_lowercase()).ok()?,
        };
        Some(Self { content_type })
    }
}

/// The gRPC content types answered without allocating.
const COMMON: [&str; 6] = [
    "application/grpc",
    "application/grpc+proto",
    "application/grpc-web",
    "application/grpc-web+proto",
    "application/grpc-web-text",
    "application/grpc-web-text+proto",
];

fn strip_prefix_ignore_case<'a>(bytes: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let (head, rest) = bytes.split_at_checked(prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then_some(rest)
}

/// A character of an HTTP token (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The gRPC status code (as its decimal text) for an HTTP status, after the HTTP mapping of
/// `google.rpc.Code`: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404
/// NOT_FOUND, 409 ABORTED, 412 FAILED_PRECONDITION, 416 OUT_OF_RANGE, 429 RESOURCE_EXHAUSTED,
/// 499 CANCELLED, 500 INTERNAL, 501 UNIMPLEMENTED, 502 and 503 UNAVAILABLE, 504
/// DEADLINE_EXCEEDED; any other status UNKNOWN.
pub(crate) fn grpc_code(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "3",
        401 => "16",
        403 => "7",
        404 => "5",
        409 => "10",
        412 => "9",
        416 => "11",
        429 => GRPC_RESOURCE_EXHAUSTED,
        499 => "1",
        500 => "13",
        501 => "12",
        502 | 503 => "14",
        504 => "4",
        _ => "2",
    }
}

/// A trailers-only gRPC response, not to be stored: HTTP 200 with the status in the headers
/// and no body, in the content type the request was sent in.
pub(crate) fn grpc_response(form: &Grpc, code: &'static str, message: &[u8]) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, form.content_type.clone());
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static(code));
    let mut encoded = Text::new();
    percent_encode(message, &mut encoded);
    if let Some(value) = encoded.to_header_value() {
        headers.insert(GRPC_MESSAGE.clone(), value);
    }
    response
}

/// What `grpc-message` percent-encodes besides the bytes past ASCII, which are always
/// encoded: the controls (`0x00..=0x1F`, `0x7F`) and `%` itself. Printable ASCII is kept.
const GRPC_MESSAGE_ENCODED: &AsciiSet = &CONTROLS.add(b'%');

/// Writes `message` percent-encoded as `grpc-message` must be: every byte outside `0x20..=0x7E`,
/// and `%` itself, as `%XX` (upper-case hex); the rest as it is.
fn percent_encode(message: &[u8], out: &mut Text) {
    for chunk in percent_encoding::percent_encode(message, GRPC_MESSAGE_ENCODED) {
        out.push(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of `grpc-message`, a byte at a time: every byte outside `0x20..=0x7E`, and `%`,
    /// as `%XX` in upper-case hex.
    fn encoded_by_hand(message: &[u8]) -> String {
        let mut out = String::new();
        for &byte in message {
            if (0x20..=0x7E).contains(&byte) && byte != b'%' {
                out.push(char::from(byte));
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
        out
    }

    fn encoded(message: &[u8]) -> String {
        let mut text = Text::new();
        percent_encode(message, &mut text);
        String::from_utf8(text.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn grpc_messages_encode_controls_percent_and_non_ascii() {
        assert_eq!(encoded(b"too many requests"), "too many requests");
        assert_eq!(encoded(b"50% off\r\n"), "50%25 off%0D%0A");
        assert_eq!(encoded(b"\x00\x1f\x7f\x80\xff ~"), "%00%1F%7F%80%FF ~");
        assert_eq!(encoded("caf\u{e9}".as_bytes()), "caf%C3%A9");
        assert_eq!(encoded(b""), "");
    }

    proptest::proptest! {
        #[test]
        fn grpc_messages_encode_as_by_hand(message in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            proptest::prop_assert_eq!(encoded(&message), encoded_by_hand(&message));
        }
    }
}
