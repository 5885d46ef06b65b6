use std::net::{IpAddr, SocketAddr};

use super::cidr::group_v6;
use super::{Key, KeyError, KeyExtractor, RequestHead};

/// The address of the connection's peer, for servers that are not axum or tonic.
///
/// axum's `ConnectInfo<SocketAddr>` (and, in tests, `MockConnectInfo<SocketAddr>`) and tonic's
/// `TcpConnectInfo` (or, over TLS, `TlsConnectInfo<TcpConnectInfo>`) are read directly
/// (features `axum` and `tonic`). A plain hyper server inserts this into each request's extensions
/// before the rate limit layer sees it:
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::key::PeerAddr;
///
/// let peer: SocketAddr = "192.0.2.1:50000".parse().unwrap();
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr(peer));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The key is the IP address of the connection's peer. The default key.
///
/// Reads, in order, [`PeerAddr`], axum's `ConnectInfo<SocketAddr>` (feature `axum`), axum's
/// `MockConnectInfo<SocketAddr>` (feature `axum`, for tests: read only without a real
/// `ConnectInfo`, as axum's own extractor does), and tonic's `TcpConnectInfo` or, over TLS,
/// `TlsConnectInfo<TcpConnectInfo>` (feature `tonic`) from the request extensions. These are
/// extensions, which only the server's code can insert: no header or byte a client sends reaches
/// them. IPv4-mapped IPv6 addresses
/// (`::ffff:192.0.2.1`) count as the IPv4 address, so a dual-stack listener cannot give one
/// client two keys; so do addresses that carry an IPv4 client's (NAT64's `64:ff9b::/96`, 6to4's
/// `2002::/16`, Teredo's `2001::/32`), so that clients behind a translator do not share one key
/// and a 6to4 holder does not get a /48 of them. An address of the local-use NAT64 prefix
/// (`64:ff9b:1::/48`) is its own key. Other IPv6 addresses are grouped by their first 64 bits
/// ([`ipv6_prefix`](Self::ipv6_prefix)): a subscriber commonly holds a whole `/64` and could
/// otherwise take a fresh address, and a fresh budget, for every request.
///
/// Without any of them the request cannot be keyed: the layer answers 500 and logs how to fix
/// the server (see [`KeyError::missing_peer_addr`]), rather than letting the request through
/// unlimited.
///
/// Behind a reverse proxy every request comes from the proxy: use
/// [`ClientIp`](super::ClientIp) with the proxy's address instead.
///
/// `PeerIp` is both the type and a constant of it with the default settings, so
/// `.key(PeerIp)` and `.key(PeerIp.ipv6_prefix(56))` both read naturally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

/// The peer IP with the default settings (IPv6 grouped by `/64`).
#[allow(non_upper_case_globals)]
pub const PeerIp: PeerIp = PeerIp { ipv6_prefix: 64 };

/// `bits`, when it can group IPv6 clients; else why not.
pub(crate) fn ipv6_prefix(bits: u8) -> Result<u8, String> {
    let why = "the IPv6 prefix is 1 to 128 bits (64 is usual)";
    let fits = (1..=128).contains(&bits);
    fits.then_some(bits).ok_or_else(|| why.into())
}

/// The key of the client at `ip`, its IPv6 address grouped by `prefix`; an error when the
/// server did not record the peer address.
#[inline]
pub(super) fn ip_key(ip: Option<IpAddr>, prefix: u8) -> Result<Option<Key>, KeyError> {
    let ip = ip.ok_or_else(KeyError::missing_peer_addr)?;
    Ok(Some(Key::from(group_v6(ip, prefix))))
}

impl Default for PeerIp {
    fn default() -> Self {
        PeerIp
    }
}

impl PeerIp {
    /// Groups IPv6 peers by their first `bits` bits (default 64); 128 keys each address on its
    /// own.
    ///
    /// # Panics
    ///
    /// If `bits` is 0 (every IPv6 client would share one key) or more than 128.
    #[must_use]
    #[track_caller]
    pub fn ipv6_prefix(self, bits: u8) -> Self {
        match ipv6_prefix(bits) {
            Ok(bits) => Self { ipv6_prefix: bits },
            Err(why) => panic!("PeerIp::ipv6_prefix({bits}): {why}"),
        }
    }

    /// The key this extractor makes for a client at `ip`: what a live layer's
    /// [`Handle`](crate::layer::Handle) takes to peek at, reset or block that client (an
    /// IPv6 address grouped by its prefix, one that carries an IPv4 address read as IPv4).
    ///
    /// ```
    /// use tollgate::key::PeerIp;
    /// use tollgate::Key;
    ///
    /// let ip = "2001:db8::1".parse().unwrap();
    /// let same = "2001:db8::ffff".parse().unwrap();
    /// assert_eq!(PeerIp.key_for(ip), PeerIp.key_for(same)); // one /64
    /// let v4 = std::net::Ipv4Addr::new(192, 0, 2, 7);
    /// assert_eq!(PeerIp.key_for(v4.to_ipv6_mapped().into()), Key::from(v4));
    /// ```
    #[inline]
    pub fn key_for(&self, ip: IpAddr) -> Key {
        Key::from(group_v6(ip, self.ipv6_prefix))
    }

    /// The peer's IP, if the server recorded it.
    pub fn peer_ip<'a>(req: impl Into<RequestHead<'a>>) -> Option<IpAddr> {
        peer_addr(req.into()).map(|addr| addr.ip().to_canonical())
    }
}

/// Says once per process, at warn level, that `MockConnectInfo` supplies the peer address: in a
/// test that is the point, but left in a server that is served without connect info it would
/// give every client the same address (and, with `ClientIp` trusting it, let forwarded headers
/// choose the key).
#[cfg(feature = "axum")]
fn warn_mock_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            "the rate limit key reads the peer address from axum's MockConnectInfo, a stand-in \
             for tests; serve with into_make_service_with_connect_info::<SocketAddr>() in \
             production"
        );
    }
}

fn peer_addr(req: RequestHead<'_>) -> Option<SocketAddr> {
    let ext = req.extensions();
    if let Some(PeerAddr(addr)) = ext.get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        ext.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    // axum's stand-in for tests, read only when the server recorded no real peer, as axum's own
    // `ConnectInfo` extractor does. An extension is put there by code (`Router::layer`), never
    // by a client, so it cannot let a client choose its key.
    #[cfg(feature = "axum")]
    if let Some(axum::extract::connect_info::MockConnectInfo(addr)) =
        ext.get::<axum::extract::connect_info::MockConnectInfo<SocketAddr>>()
    {
        warn_mock_once();
        return Some(*addr);
    }
    #[cfg(feature = "tonic")]
    {
        use tonic::transport::server::{Connected, TcpConnectInfo};
        // `TlsConnectInfo<TcpConnectInfo>`: what tonic records when its server has a TLS config.
        type TlsConnectInfo =
            <tokio_rustls::server::TlsStream<tokio::net::TcpStream> as Connected>::ConnectInfo;
        let tcp = ext
            .get::<TcpConnectInfo>()
            .or_else(|| ext.get::<TlsConnectInfo>().map(|tls| tls.get_ref()));
        if let Some(addr) = tcp.and_then(TcpConnectInfo::remote_addr) {
            return Some(addr);
        }
    }
    None
}

impl KeyExtractor for PeerIp {
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        ip_key(Self::peer_ip(req), self.ipv6_prefix)
    }

    /// The peer's address, whole.
    fn client_ip(&self, req: RequestHead<'_>) -> Option<IpAddr> {
        Self::peer_ip(req)
    }
}
