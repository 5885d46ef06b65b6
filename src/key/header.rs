use http::header::AUTHORIZATION;
use http::{HeaderName, HeaderValue, StatusCode};

use super::{Key, KeyError, KeyExtractor, RequestHead};

/// The key is the value of one request header, such as an API key.
///
/// A request without the header, or with it more than once, cannot be keyed and is answered
/// `400 Bad Request`; use [`or`](KeyExtractor::or) to fall back to another key instead, such as
/// the client IP. The key is the value as sent, whatever its length (your HTTP server bounds
/// the size of a request's headers); stores keep the SHA-256 digest of a value longer than
/// [`Key::MAX_LEN`], so a client cannot use long values to exhaust memory.
///
/// A header is chosen by the client: one that sends a new value with each request starts a new
/// budget each time. Key on a header only once something has checked it (an authentication
/// layer in front of the limiter), or combine it with the client IP.
///
/// ```
/// use tollgate::key::{Header, KeyExtractor, PeerIp, RequestHead};
/// use tollgate::Key;
///
/// let api_key = Header::new("x-api-key");
/// let req = http::Request::builder().header("x-api-key", "k-123").body(()).unwrap();
/// assert_eq!(api_key.extract(RequestHead::new(&req)).unwrap(), Some(Key::from("k-123")));
///
/// let missing = http::Request::new(());
/// assert_eq!(api_key.extract(RequestHead::new(&missing)).unwrap_err().status(), 400);
///
/// // Clients without an API key are limited by IP instead:
/// let key = Header::new("x-api-key").or(PeerIp);
/// # let _ = key;
/// ```
#[derive(Debug, Clone)]
pub struct Header {
    name: HeaderName,
}

/// `name` as a header name, or why it is not one.
pub(crate) fn header_name(name: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(name).map_err(|_| {
        "not a valid header name: use letters, digits and `-`, such as \"x-api-key\"".into()
    })
}

impl Header {
    /// Keys requests on the header `name` (case-insensitive).
    ///
    /// # Panics
    ///
    /// When `name` is not a valid header name.
    #[track_caller]
    pub fn new(name: &str) -> Self {
        match header_name(name) {
            Ok(name) => Self { name },
            Err(why) => panic!("tollgate::key::Header::new({name:?}): {why}"),
        }
    }
}

impl KeyExtractor for Header {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        let mut values = req.headers().get_all(&self.name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => Ok(Some(Key::from(value.as_bytes()))),
            (None, _) => Err(KeyError::new(
                StatusCode::BAD_REQUEST,
                format!("missing header `{}`", self.name),
            )),
            (Some(_), Some(_)) => Err(KeyError::new(
                StatusCode::BAD_REQUEST,
                format!("header `{}` must be sent once", self.name),
            )),
        }
    }
}

/// The key is the token of an `Authorization: Bearer <token>` header.
///
/// A request without a bearer token (no `Authorization` header, another scheme, an empty token,
/// or the header twice) is answered `401 Unauthorized` with `WWW-Authenticate: Bearer` (RFC
/// 6750 §3); use [`or`](KeyExtractor::or) to fall back to another key. The same caution as for [`Header`]
/// applies: tokens are chosen by clients until something has verified them.
///
/// ```
/// use tollgate::key::{BearerToken, KeyExtractor, RequestHead};
/// use tollgate::Key;
///
/// let req = http::Request::builder().header("authorization", "Bearer abc.def").body(()).unwrap();
/// assert_eq!(BearerToken.extract(RequestHead::new(&req)).unwrap(), Some(Key::from("abc.def")));
///
/// let missing = http::Request::new(());
/// let error = BearerToken.extract(RequestHead::new(&missing)).unwrap_err();
/// assert_eq!(error.status(), 401);
/// assert_eq!(error.challenge().unwrap(), "Bearer");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct BearerToken;

impl KeyExtractor for BearerToken {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        let mut values = req.headers().get_all(AUTHORIZATION).iter();
        let once = values.next().filter(|_| values.next().is_none());
        let missing = || {
            let error = KeyError::new(StatusCode::UNAUTHORIZED, "missing bearer token");
            error.with_challenge(HeaderValue::from_static("Bearer"))
        };
        let token = once.and_then(|value| bearer(value.as_bytes()));
        Ok(Some(Key::from(token.ok_or_else(missing)?)))
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive, RFC 9110 §11.1), if non-empty.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || !rest.starts_with(b" ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bEaReR   abc  "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearerabc"), None);
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b""), None);
    }

    #[test]
    fn header_once_and_only_once() {
        let h = Header::new("X-Api-Key");
        let req = Request::builder()
            .header("x-api-key", "a")
            .header("x-api-key", "b")
            .body(())
            .unwrap();
        assert_eq!(
            h.extract(RequestHead::new(&req)).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let req = Request::builder()
            .header("x-api-key", "a")
            .body(())
            .unwrap();
        assert_eq!(
            h.extract(RequestHead::new(&req)).unwrap(),
            Some(Key::from("a"))
        );
    }
}
