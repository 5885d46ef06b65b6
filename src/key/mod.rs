//! Keys: what a limit is counted against, and how the layer finds it in a request.
//!
//! A [`KeyExtractor`] reads a request and returns the [`Key`] to count it against, `None` for a
//! request that is not limited, or a [`KeyError`] that the layer answers itself.
//!
//! | extractor | key |
//! | --- | --- |
//! | [`PeerIp`](struct@crate::key::PeerIp) (default) | the connection's peer address, IPv6 grouped by `/64` |
//! | [`ClientIp`] | the client's address behind your trusted proxies, from the one forwarding header they set |
//! | [`Header`] | one header's value, such as an API key |
//! | [`BearerToken`] | the token of `Authorization: Bearer` |
//! | [`Route`], [`Method`] | the matched route or the method; in tuples, a budget per route |
//! | [`Global`] | one key for every request |
//! | a tuple `(A, B)` (up to four parts) | all parts together, such as `(Route, PeerIp)`; never equal to a plain key |
//! | a closure over a [`RequestHead`], or [`from_fn`] | your own |
//!
//! [`KeyExtractor::or`] falls back to a second extractor when the first finds no key; the
//! layer's `skip` and `allow` (an [`IpList`]) leave some requests unlimited.
//!
//! ```
//! use std::net::SocketAddr;
//! use tollgate::key::{KeyExtractor, PeerAddr, PeerIp, RequestHead};
//! use tollgate::Key;
//!
//! let mut req = http::Request::new(());
//! assert!(PeerIp.extract(RequestHead::new(&req)).is_err()); // the server did not record the peer
//!
//! let peer: SocketAddr = "[::ffff:192.0.2.1]:4000".parse().unwrap();
//! req.extensions_mut().insert(PeerAddr(peer));
//! let key = PeerIp.extract(RequestHead::new(&req)).unwrap().unwrap();
//! assert_eq!(key, Key::from("192.0.2.1".parse::<std::net::IpAddr>().unwrap()));
//! ```

mod allow;
mod cidr;
mod client_ip;
mod combine;
mod error;
mod forwarded;
mod head;
mod header;
mod peer;
mod route;
mod value;

pub use self::allow::{Allow, IpList};
pub use self::cidr::{IpNet, ParseIpNetError};
#[cfg(feature = "serde")]
pub(crate) use self::client_ip::trusted_hops;
pub use self::client_ip::ClientIp;
#[cfg(feature = "serde")]
pub(crate) use self::combine::DynTuple;
pub use self::combine::{Or, Skip};
pub use self::error::KeyError;
pub use self::forwarded::ForwardedHeader;
pub use self::head::{from_fn, FromFn, RequestHead};
#[cfg(feature = "serde")]
pub(crate) use self::header::header_name;
pub use self::header::{BearerToken, Header};
#[cfg(feature = "serde")]
pub(crate) use self::peer::ipv6_prefix;
pub use self::peer::{PeerAddr, PeerIp};
pub use self::route::{Method, Route};
pub use self::value::Key;

/// Finds the key a request is counted against.
///
/// Implemented by the extractors of this module, by tuples of extractors (whose keys are
/// combined into one, such as route and client IP), and by closures over a [`RequestHead`]:
///
/// ```
/// use tollgate::key::{KeyError, KeyExtractor, RequestHead};
/// use tollgate::Key;
///
/// // Limit by tenant, from a header set by an authenticating proxy; health checks are free.
/// let tenant = |head: RequestHead<'_>| -> Result<Option<Key>, KeyError> {
///     if head.uri().path() == "/healthz" {
///         return Ok(None);
///     }
///     Ok(head.headers().get("x-tenant").map(|v| Key::from(v.as_bytes())))
/// };
/// let req = http::Request::builder().header("x-tenant", "acme").body(()).unwrap();
/// assert_eq!(tenant.extract(RequestHead::new(&req)).unwrap(), Some(Key::from("acme")));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The request's key; `Ok(None)` when the request is not limited at all. `req` is the
    /// request without its body ([`RequestHead::new`] makes it from a request).
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError>;

    /// The client's own IP address, whole (before an IPv6 prefix groups it into a network),
    /// when this extractor keys `req` by the client's address: [`PeerIp`](struct@PeerIp) and [`ClientIp`] do.
    /// `None` (the default) otherwise. The layer's `allow` list ([`Allow`]) is checked against
    /// this address, so that allowing one host never allows its whole network.
    fn client_ip(&self, _req: RequestHead<'_>) -> Option<std::net::IpAddr> {
        None
    }

    /// Uses `other` when this extractor cannot find a key (returns an error): for example an
    /// API key for clients that send one, and the client IP for the rest.
    ///
    /// The key is the one the branch found, unchanged: the same value found by either branch
    /// is the same key, so a client that can present one credential two ways still has one
    /// budget, and `quota_for` or an allow list sees the key itself. Kinds never meet: an IP
    /// address from `other` is never the key of a string from `self`. When both branches find
    /// byte strings from different namespaces (a verified user id, and a session id the client
    /// picks), make the fallback a tuple: a tuple's key never equals a plain key, so a client
    /// cannot send another client's user id as its session id to spend that client's budget.
    ///
    /// ```
    /// use tollgate::key::{Global, Header, KeyExtractor, RequestHead};
    /// use tollgate::Key;
    ///
    /// let key = Header::new("x-user").or((Header::new("x-session"), Global));
    /// let user = http::Request::builder().header("x-user", "42").body(()).unwrap();
    /// let session = http::Request::builder().header("x-session", "42").body(()).unwrap();
    /// assert_eq!(key.extract(RequestHead::new(&user)).unwrap(), Some(Key::from("42")));
    /// assert_ne!(
    ///     key.extract(RequestHead::new(&session)).unwrap(),
    ///     key.extract(RequestHead::new(&user)).unwrap()
    /// );
    /// ```
    fn or<O: KeyExtractor>(self, other: O) -> Or<Self, O>
    where
        Self: Sized,
    {
        Or {
            first: self,
            second: other,
        }
    }
}

/// Every request counts against one shared key: a limit for the whole service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    #[inline]
    fn extract(&self, _req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        Ok(Some(Key::from(0u64)))
    }
}
