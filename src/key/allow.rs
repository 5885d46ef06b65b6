use std::net::IpAddr;
use std::sync::Arc;

use super::cidr::NetSet;
use super::{IpNet, Key, KeyError, KeyExtractor, ParseIpNetError, RequestHead};

/// A list of IP addresses and networks, such as the clients a layer leaves unlimited.
///
/// ```
/// use tollgate::key::IpList;
///
/// let office = IpList::new(["203.0.113.0/24", "2001:db8:beef::/48", "192.0.2.7"])?;
/// assert!(office.contains("203.0.113.40".parse().unwrap()));
/// assert!(office.contains("::ffff:192.0.2.7".parse().unwrap())); // IPv4-mapped counts as IPv4
/// assert!(!office.contains("192.0.2.8".parse().unwrap()));
///
/// let err = IpList::new(["10.0.0.0/33"]).unwrap_err();
/// assert!(err.to_string().contains("10.0.0.0/33"));
/// # Ok::<(), tollgate::key::ParseIpNetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct IpList {
    pub(super) nets: Arc<NetSet>,
}

impl IpList {
    /// Parses addresses (`192.0.2.7`, `2001:db8::1`) and networks (`10.0.0.0/8`).
    ///
    /// # Errors
    ///
    /// The first entry that is not an address or network; the error names it.
    pub fn new<I>(entries: I) -> Result<Self, ParseIpNetError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let nets = entries
            .into_iter()
            .map(|entry| entry.as_ref().parse::<IpNet>())
            .collect::<Result<NetSet, _>>()?;
        Ok(Self {
            nets: Arc::new(nets),
        })
    }

    /// Whether `ip` is in the list.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.nets.contains(ip.to_canonical())
    }
}

/// Leaves clients whose own IP address is in an [`IpList`] unlimited, and keys the rest with an
/// inner extractor: made by the layer's `allow`.
///
/// The address checked is the client's own, whole, as the inner extractor reports it
/// ([`KeyExtractor::client_ip`]): the peer's with [`PeerIp`](struct@super::PeerIp), the
/// client's behind trusted proxies with [`ClientIp`](super::ClientIp), whatever IPv6 prefix
/// groups their keys. Allowing `2001:db8::7` leaves that one host unlimited, not the `/64` its
/// key stands for. With `or`, the address of the extractor that finds the key is checked; an
/// extractor that reports no address (an API key, a tuple) is checked by its key, which is
/// never on the list unless it is itself an IP address.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::key::{IpList, PeerAddr};
/// use tollgate::{Quota, RateLimitLayer};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::gcra(Quota::per_minute(1)).allow(IpList::new(["2001:db8::7"])?);
/// let svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// let from = |peer: &str| {
///     let mut req = http::Request::new(());
///     req.extensions_mut().insert(PeerAddr(peer.parse::<SocketAddr>().unwrap()));
///     req
/// };
/// // The listed host is unlimited; its neighbour in the same /64 (one key) is not.
/// for _ in 0..3 {
///     assert_eq!(svc.clone().oneshot(from("[2001:db8::7]:1")).await?.status(), 200);
/// }
/// assert_eq!(svc.clone().oneshot(from("[2001:db8::8]:1")).await?.status(), 200);
/// assert_eq!(svc.clone().oneshot(from("[2001:db8::8]:1")).await?.status(), 429);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Allow<K> {
    inner: K,
    list: IpList,
}

impl<K> Allow<K> {
    pub(crate) fn new(inner: K, list: IpList) -> Self {
        Self { inner, list }
    }
}

impl<K: KeyExtractor> KeyExtractor for Allow<K> {
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        let listed = |ip: Option<IpAddr>| ip.is_some_and(|ip| self.list.contains(ip));
        let ip = self.inner.client_ip(req);
        if listed(ip) {
            return Ok(None);
        }
        let key = self.inner.extract(req)?;
        // An extractor that reports no address is checked by its key.
        if ip.is_none() && listed(key.as_ref().and_then(Key::as_ip)) {
            return Ok(None);
        }
        Ok(key)
    }

    fn client_ip(&self, req: RequestHead<'_>) -> Option<IpAddr> {
        self.inner.client_ip(req)
    }
}
