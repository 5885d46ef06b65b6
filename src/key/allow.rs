use std::net::IpAddr;
use std::sync::Arc;

use http::Request;

use super::cidr::NetSet;
use super::{ConfigError, IpNet, Key, KeyError, KeyExtractor};

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
/// # Ok::<(), tollgate::key::ConfigError>(())
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
    pub fn new<I>(entries: I) -> Result<Self, ConfigError>
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

/// Leaves requests whose key is an IP address in an [`IpList`] unlimited, and keys the rest with
/// an inner extractor: made by the layer's `allow`.
///
/// The address checked is the key itself: the peer's address with [`PeerIp`](struct@super::PeerIp), the
/// client's behind trusted proxies with [`ClientIp`](super::ClientIp). Keys that are not IP
/// addresses (API keys, say) are never on the list. With an IPv6 prefix set on the extractor the
/// key is the masked address, so list whole networks rather than single IPv6 hosts.
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
    fn extract<B>(&self, req: &Request<B>) -> Result<Option<Key>, KeyError> {
        let key = self.inner.extract(req)?;
        match key.as_ref().and_then(Key::as_ip) {
            Some(ip) if self.list.contains(ip) => Ok(None),
            _ => Ok(key),
        }
    }
}
