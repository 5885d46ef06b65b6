use std::borrow::Cow;
use std::fmt;

use http::{HeaderValue, StatusCode};

/// A request whose key could not be found. The layer answers it with [`status`](Self::status)
/// and the error's message, and logs the message; the request is never let through unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    status: StatusCode,
    message: Cow<'static, str>,
    /// The authentication challenge of a 401, sent as `WWW-Authenticate`.
    challenge: Option<HeaderValue>,
}

impl KeyError {
    /// An error answered with `status` and `message` (a short plain-text explanation).
    ///
    /// A 4xx status says the client is at fault (a missing header): the layer logs it at debug
    /// level. A 5xx says the server is misconfigured: logged at error level the first time each
    /// kind (status and message) is seen. gRPC requests get the gRPC code of `status`
    /// (`INVALID_ARGUMENT` for 400, `UNAUTHENTICATED` for 401, `INTERNAL` for 500, ...) with the
    /// message in `grpc-message`. The message is logged: keep the request's bytes (its key) out
    /// of it. A 401 names the authentication scheme it wants in a challenge
    /// ([`with_challenge`](Self::with_challenge)), as HTTP requires.
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            message: message.into(),
            challenge: None,
        }
    }

    /// The same error, whose HTTP answer carries `challenge` in `WWW-Authenticate`, such as
    /// `Bearer` or `Bearer realm="api"` (RFC 6750 §3): a 401 must name the scheme the client
    /// should authenticate with (RFC 9110 §11.6.1). [`BearerToken`](super::BearerToken)'s 401
    /// carries `Bearer`. A gRPC answer carries none (`UNAUTHENTICATED` is not an HTTP 401); an
    /// [`on_key_error`](crate::RateLimitLayer::on_key_error) response that keeps the 401 gets it
    /// unless it has its own.
    ///
    /// ```
    /// use http::{HeaderValue, StatusCode};
    /// use tollgate::key::KeyError;
    ///
    /// let error = KeyError::new(StatusCode::UNAUTHORIZED, "missing session token")
    ///     .with_challenge(HeaderValue::from_static(r#"Bearer realm="api""#));
    /// assert_eq!(error.challenge().unwrap(), r#"Bearer realm="api""#);
    /// ```
    #[must_use]
    pub fn with_challenge(mut self, challenge: HeaderValue) -> Self {
        self.challenge = Some(challenge);
        self
    }

    /// The challenge the HTTP answer carries in `WWW-Authenticate`, if any.
    pub fn challenge(&self) -> Option<&HeaderValue> {
        self.challenge.as_ref()
    }

    /// The server did not record the peer address: a misconfiguration, answered with 500. The
    /// message says how to fix each server.
    pub fn missing_peer_addr() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "tollgate: the request carries no peer address, so it cannot be rate limited by client IP. \
             With axum (tollgate feature `axum`), serve the app with \
             `app.into_make_service_with_connect_info::<SocketAddr>()`; in a test without a server \
             (`oneshot`), add `.layer(MockConnectInfo(addr))` after (outside) the rate limit layer. \
             With tonic, enable tollgate's feature `tonic` and serve over TCP with `Server::builder()` \
             (`serve`, or `serve_with_incoming` over a `TcpIncoming`), with or without TLS: tollgate reads \
             `TcpConnectInfo` and, over TLS, `TlsConnectInfo<TcpConnectInfo>`; a custom incoming stream \
             must implement `Connected` with one of them. With plain hyper, insert \
             `tollgate::key::PeerAddr` into the request extensions.",
        )
    }

    /// The status the layer answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The explanation sent in the response body and the log.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KeyError {}
