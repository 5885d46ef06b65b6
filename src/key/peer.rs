use std::net::{IpAddr, SocketAddr};

use http::Request;

use super::{Key, KeyError, KeyExtractor};

/// The address of the connection's peer, for servers that are not axum or tonic.
///
/// axum's `ConnectInfo<SocketAddr>` and tonic's `TcpConnectInfo` are read directly (features
/// `axum` and `tonic`). A plain hyper server inserts this into each request's extensions
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
/// Reads, in order, [`PeerAddr`], axum's `ConnectInfo<SocketAddr>` and tonic's
/// `TcpConnectInfo` from the request extensions. IPv4-mapped IPv6 addresses
/// (`::ffff:192.0.2.1`) count as the IPv4 address, so a dual-stack listener cannot give one
/// client two keys.
///
/// Without any of them the request cannot be keyed: the layer answers 500 and logs how to fix
/// the server (serve the app with `into_make_service_with_connect_info::<SocketAddr>()`), rather
/// than letting the request through unlimited.
///
/// Behind a reverse proxy every request comes from the proxy: use `ClientIp` with the proxy's
/// address instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

impl PeerIp {
    /// The peer's IP, if the server recorded it.
    pub fn peer_ip<B>(req: &Request<B>) -> Option<IpAddr> {
        peer_addr(req).map(|addr| addr.ip().to_canonical())
    }
}

fn peer_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
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
    #[cfg(feature = "tonic")]
    if let Some(addr) = ext
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr);
    }
    None
}

impl KeyExtractor for PeerIp {
    #[inline]
    fn extract<B>(&self, req: &Request<B>) -> Result<Option<Key>, KeyError> {
        match Self::peer_ip(req) {
            Some(ip) => Ok(Some(Key::from(ip))),
            None => Err(KeyError::missing_peer_addr()),
        }
    }
}
