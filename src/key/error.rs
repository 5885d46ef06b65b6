use std::borrow::Cow;
use std::fmt;

use http::StatusCode;

/// A request whose key could not be found. The layer answers it with [`status`](Self::status)
/// and the error's message, and logs the message; the request is never let through unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    status: StatusCode,
    message: Cow<'static, str>,
}

impl KeyError {
    /// An error answered with `status` and `message` (a short plain-text explanation).
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// The server did not record the peer address: a misconfiguration, answered with 500.
    pub fn missing_peer_addr() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "tollgate: the request carries no peer address, so it cannot be rate limited by client IP. \
             With axum, serve the app with `app.into_make_service_with_connect_info::<SocketAddr>()`; \
             with tonic, use `Server::builder()` over TCP; with plain hyper, insert \
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
