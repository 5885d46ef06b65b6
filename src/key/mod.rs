//! Keys: what a limit is counted against, and how the layer finds it in a request.
//!
//! A [`KeyExtractor`] reads a request and returns the [`Key`] to count it against, `None` for a
//! request that is not limited, or a [`KeyError`] that the layer answers itself. The default is
//! [`PeerIp`], the address of the connection's peer; [`Global`] counts every request against one
//! shared key.
//!
//! ```
//! use std::net::SocketAddr;
//! use tollgate::key::{KeyExtractor, PeerAddr, PeerIp};
//! use tollgate::Key;
//!
//! let mut req = http::Request::new(());
//! assert!(PeerIp.extract(&req).is_err()); // the server did not record the peer
//!
//! let peer: SocketAddr = "[::ffff:192.0.2.1]:4000".parse().unwrap();
//! req.extensions_mut().insert(PeerAddr(peer));
//! let key = PeerIp.extract(&req).unwrap().unwrap();
//! assert_eq!(key, Key::from("192.0.2.1".parse::<std::net::IpAddr>().unwrap()));
//! ```

mod peer;
mod value;

use std::fmt;

use http::{Request, StatusCode};

pub use self::peer::{PeerAddr, PeerIp};
pub use self::value::Key;

/// Finds the key a request is counted against.
pub trait KeyExtractor: Clone + Send + Sync + 'static {
    /// The request's key; `Ok(None)` when the request is not limited at all.
    fn extract<B>(&self, req: &Request<B>) -> Result<Option<Key>, KeyError>;
}

/// Every request counts against one shared key: a limit for the whole service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    #[inline]
    fn extract<B>(&self, _req: &Request<B>) -> Result<Option<Key>, KeyError> {
        Ok(Some(Key::from(0u64)))
    }
}

/// A request whose key could not be found. The layer answers it with [`status`](Self::status)
/// and the error's message, and logs the message; the request is never let through unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    status: StatusCode,
    message: &'static str,
}

impl KeyError {
    /// An error answered with `status` and `message` (a short plain-text explanation).
    pub const fn new(status: StatusCode, message: &'static str) -> Self {
        Self { status, message }
    }

    /// The server did not record the peer address: a misconfiguration, answered with 500.
    pub const fn missing_peer_addr() -> Self {
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
    pub fn message(&self) -> &'static str {
        self.message
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for KeyError {}
