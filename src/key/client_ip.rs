//! [`ClientIp`]: the client's address behind trusted reverse proxies.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderMap;

use super::cidr::{group_v6, IpNet, NetSet, ParseIpNetError};
use super::forwarded::{Entries, Entry, ForwardedHeader};
use super::IpList;
use super::{Key, KeyError, KeyExtractor, PeerIp, RequestHead};

/// The key is the client's IP address as reported by trusted reverse proxies, which a client
/// cannot choose by sending its own forwarding headers.
///
/// Behind a proxy every connection comes from the proxy, so [`PeerIp`](struct@crate::key::PeerIp) would put all clients
/// in one bucket. The proxy reports the address it received each request from in a header
/// (`X-Forwarded-For` by default, see [`ForwardedHeader`]), but a client can send that header
/// too. `ClientIp` reads it only from proxies you name, and only the part those proxies wrote:
///
/// - [`ClientIp::trusting`]: headers are read only when the connection's peer is in the given
///   networks; from any other peer the key is the peer's address and every header is ignored.
///   The list is walked **from the right** (the entry the nearest proxy added), skipping
///   addresses inside the trusted networks; the first address that is not trusted is the
///   client. Entries to its left were written by the client and are never read.
/// - [`ClientIp::trusted_hops`]: every connection comes through exactly `n` proxies, and the
///   client is the `n`-th address from the right.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::key::{ClientIp, KeyExtractor, PeerAddr, RequestHead};
/// use tollgate::Key;
///
/// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap();
/// let request = |peer: &str, xff: &str| {
///     let mut req = http::Request::builder()
///         .header("x-forwarded-for", xff)
///         .body(())
///         .unwrap();
///     req.extensions_mut().insert(PeerAddr(peer.parse::<SocketAddr>().unwrap()));
///     req
/// };
/// let key = |ip: &str| Some(Key::from(ip.parse::<IpAddr>().unwrap()));
///
/// // Through the proxy 10.0.0.2: the spoofed leftmost entry is ignored.
/// let req = request("10.0.0.2:5000", "6.6.6.6, 203.0.113.9, 10.0.0.1");
/// assert_eq!(client_ip.extract(RequestHead::new(&req)).unwrap(), key("203.0.113.9"));
///
/// // Straight from a client: the header is ignored.
/// let req = request("198.51.100.4:5000", "203.0.113.9");
/// assert_eq!(client_ip.extract(RequestHead::new(&req)).unwrap(), key("198.51.100.4"));
/// ```
///
/// # Which header
///
/// Exactly one header is read: the one set with [`header`](Self::header), `X-Forwarded-For`
/// unless changed. Configure the header your proxy writes. Reading several would let a client
/// send the one the proxy does not overwrite and choose its own key.
///
/// # Malformed input
///
/// A key is never made from text that is not a well-formed address. While walking from the
/// right:
///
/// - an empty list element (`a,,b`) is skipped, as HTTP list syntax requires;
/// - `unknown`, an obfuscated identifier (`_hidden`), or anything that is not an address (bad
///   syntax, a quoted or escaped `X-Forwarded-For` entry, a `Forwarded` element without exactly
///   one `for`, non-UTF-8 bytes, an entry over 100 bytes) **stops the walk**: the key is the
///   address of the hop to its right, the last trusted proxy, which reported it (the peer when
///   it is the rightmost entry);
/// - a header that is missing or holds only empty elements: the key is the peer's address;
/// - every examined entry trusted: the key is the leftmost of them;
/// - a one-address header ([`ForwardedHeader::XRealIp`], [`ForwardedHeader::single`]) that
///   holds anything but one address, or appears on several lines: the key is the peer's address.
///
/// Addresses may carry a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`) and IPv6 zone ids
/// (`fe80::1%eth0`, dropped). Extraction never fails on header content and never panics.
///
/// # Bounded work
///
/// At most [`MAX_ENTRIES`](Self::MAX_ENTRIES) entries are examined from the right (empty ones
/// included; with [`trusted_hops`](Self::trusted_hops), at least `n`). If that many are
/// examined and all are trusted, the key is the leftmost examined. The headers are parsed in
/// place, from the right, without allocating: the cost is linear in the bytes of the entries
/// examined, whatever the header's length (a 64 KiB header costs one scan at most).
///
/// # Keys
///
/// The key is the client's address as an IP [`Key`]. IPv4-mapped IPv6 addresses
/// (`::ffff:192.0.2.1`) count as IPv4, and so do addresses that carry an IPv4 client's (NAT64,
/// 6to4, Teredo: see [`PeerIp`](struct@super::PeerIp)). Other IPv6 addresses are cut to a
/// prefix, `/64` by default:
/// see [`ipv6_prefix`](Self::ipv6_prefix).
#[derive(Debug, Clone)]
pub struct ClientIp {
    trust: Trust,
    header: ForwardedHeader,
    ipv6_prefix: u8,
}

#[derive(Debug, Clone)]
enum Trust {
    Proxies(Arc<NetSet>),
    Hops(usize),
}

/// `n` proxies in front of the server, when that is at least one; else why not.
pub(crate) fn trusted_hops(n: usize) -> Result<usize, String> {
    let why = "with no proxy in front of the server, key by the peer (PeerIp, the key \
               \"peer_ip\" in configuration); trusted hops count the proxies every request \
               comes through";
    (n > 0).then_some(n).ok_or_else(|| why.into())
}

impl ClientIp {
    /// At most this many forwarding entries are examined, from the right (32). Real chains have
    /// a handful of proxies; the cap bounds the work an attacker's long header can cause.
    pub const MAX_ENTRIES: usize = 32;

    /// The default IPv6 prefix a client's address is cut to (64 bits); see
    /// [`ipv6_prefix`](Self::ipv6_prefix).
    pub const DEFAULT_IPV6_PREFIX: u8 = 64;

    /// Trusts forwarding headers only from peers inside `proxies`: networks in CIDR notation
    /// (`10.0.0.0/8`, `2001:db8::/32`) or single addresses (`192.0.2.7`), as parsed by
    /// [`IpNet`] (host bits past the prefix are rejected, not masked).
    ///
    /// List every proxy that can forward to this server, and the proxies in front of them if
    /// they append to the header too: the client is the rightmost address not in the list.
    /// An empty list trusts no one, and `ClientIp` then keys by the peer like [`PeerIp`](struct@crate::key::PeerIp).
    ///
    /// ```
    /// use tollgate::key::ClientIp;
    ///
    /// let key = ClientIp::trusting(["10.0.0.0/8", "192.0.2.7", "fd00::/8"])?;
    /// let err = ClientIp::trusting(["10.0.0.0/8", "10.0.0.300"]).unwrap_err();
    /// assert!(err.to_string().contains("\"10.0.0.300\""));
    /// # Ok::<(), tollgate::key::ParseIpNetError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The first entry that is not an address or network; the error names it.
    pub fn trusting<I>(proxies: I) -> Result<Self, ParseIpNetError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let list = IpList::new(proxies)?;
        Ok(Self::new(Trust::Proxies(list.nets)))
    }

    /// [`trusting`](Self::trusting) with networks already parsed.
    pub fn trusting_networks(proxies: impl IntoIterator<Item = IpNet>) -> Self {
        Self::new(Trust::Proxies(Arc::new(proxies.into_iter().collect())))
    }

    /// Every connection comes through exactly `n` proxies (the peer is the last of them): the
    /// client is the `n`-th address from the right of the forwarded list (`n = 1`: the
    /// rightmost).
    ///
    /// Use this only when the server cannot be reached except through that chain: the peer is
    /// not checked, so a client that connects directly picks its own key. Prefer
    /// [`trusting`](Self::trusting) when the proxies' addresses are known.
    ///
    /// A list with fewer than `n` addresses did not come through the expected chain: the key
    /// is then the peer's address. A one-address header ([`ForwardedHeader::XRealIp`],
    /// [`ForwardedHeader::single`]) holds the address the proxy that set it saw, whatever `n`.
    ///
    /// # Panics
    ///
    /// If `n` is 0: with no proxy in front, use [`PeerIp`](struct@crate::key::PeerIp).
    pub fn trusted_hops(n: usize) -> Self {
        match trusted_hops(n) {
            Ok(n) => Self::new(Trust::Hops(n)),
            Err(why) => panic!("ClientIp::trusted_hops({n}): {why}"),
        }
    }

    fn new(trust: Trust) -> Self {
        Self {
            trust,
            header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: Self::DEFAULT_IPV6_PREFIX,
        }
    }

    /// Reads the client address from `header` instead of `X-Forwarded-For`. Only this one
    /// header is read; see [`ForwardedHeader`].
    #[must_use]
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Cuts IPv6 client addresses to their first `bits` bits before they become the key
    /// (default [`DEFAULT_IPV6_PREFIX`](Self::DEFAULT_IPV6_PREFIX), 64), so that all addresses
    /// of one network share one limit. IPv4 addresses are used whole.
    ///
    /// An ISP commonly gives each subscriber a whole `/64` (or more), and the subscriber's
    /// hosts pick any address in it, often a new one every few hours (privacy extensions).
    /// Keyed by full address, one host could rotate through 2⁶⁴ addresses and never be
    /// limited. `128` keys every address separately; `48` or `56` group a whole site.
    ///
    /// ```
    /// use tollgate::key::ClientIp;
    ///
    /// let key = ClientIp::trusting(["10.0.0.0/8"])?.ipv6_prefix(56);
    /// # Ok::<(), tollgate::key::ParseIpNetError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If `bits` is 0 (every IPv6 client would share one key) or more than 128.
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        match super::peer::ipv6_prefix(bits) {
            Ok(bits) => self.ipv6_prefix = bits,
            Err(why) => panic!("ClientIp::ipv6_prefix({bits}): {why}"),
        }
        self
    }

    /// The key this extractor makes for a client at `ip` (the address it would find in the
    /// headers): what a live layer's [`Handle`](crate::layer::Handle) takes to peek at, reset
    /// or block that client. An IPv6 address is grouped by [`ipv6_prefix`](Self::ipv6_prefix),
    /// one that carries an IPv4 address read as IPv4.
    #[inline]
    pub fn key_for(&self, ip: IpAddr) -> Key {
        Key::from(group_v6(ip, self.ipv6_prefix))
    }

    /// The client's address for `req`, before the IPv6 prefix is applied; `None` when the
    /// server did not record the peer address.
    pub fn client_addr<'a>(&self, req: impl Into<RequestHead<'a>>) -> Option<IpAddr> {
        let req = req.into();
        PeerIp::peer_ip(req).map(|peer| self.client(peer, req.headers()))
    }

    /// The client behind `peer`: walking the header from the right, the first address that
    /// is not a trusted proxy's, or the `n`-th of `n` hops; the reporter of an entry that is
    /// no address (the last trusted hop); the leftmost of addresses all trusted; the peer for
    /// a list shorter than its hops.
    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let (proxies, hops, examined) = match &self.trust {
            Trust::Proxies(proxies) if !proxies.contains(peer) => return peer,
            Trust::Proxies(proxies) => (Some(proxies), usize::MAX, Self::MAX_ENTRIES),
            Trust::Hops(n) => {
                let n = if self.header.is_list() { *n } else { 1 };
                (None, n, n.max(Self::MAX_ENTRIES))
            }
        };
        // The last trusted hop: the one that reported the entry looked at next.
        let mut reporter = peer;
        let mut seen = 0;
        for entry in Entries::new(headers, &self.header).take(examined) {
            let ip = match entry {
                Entry::Empty => continue,
                Entry::Opaque => return reporter,
                Entry::Addr(ip) => ip.to_canonical(),
            };
            seen += 1;
            if seen == hops || proxies.is_some_and(|proxies| !proxies.contains(ip)) {
                return ip;
            }
            reporter = ip;
        }
        if proxies.is_some() {
            reporter
        } else {
            peer
        }
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        super::peer::ip_key(self.client_addr(req), self.ipv6_prefix)
    }

    /// The client's address, whole: [`client_addr`](ClientIp::client_addr).
    fn client_ip(&self, req: RequestHead<'_>) -> Option<IpAddr> {
        self.client_addr(req)
    }
}
