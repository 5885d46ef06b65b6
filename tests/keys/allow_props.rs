//! The layer's allow list checks the client's own address, whole: never the network its key
//! stands for (IPv6 keys are grouped by prefix). A client is unlimited iff its address is in the
//! list, whatever the prefix and the list, by the peer (`PeerIp`) and behind a trusted proxy
//! (`ClientIp`).

use crate::support::drive;
use crate::support::services;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::Request;
use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::key::{ClientIp, IpList, PeerAddr, PeerIp};
use tollgate::{Quota, RateLimitLayer};
use tower::Layer;

use drive::send;
use services::ok;

/// A network as bits and prefix length, in a `width`-bit address space.
#[derive(Debug, Clone, Copy)]
struct Net {
    bits: u128,
    len: u32,
}

/// The oracle: whether `addr` is in `net`, by comparing the top `len` bits.
fn in_net(addr: u128, net: Net, width: u32) -> bool {
    net.len == 0 || (addr ^ net.bits) >> (width - net.len) == 0
}

fn text(bits: u128, v6: bool) -> String {
    if v6 {
        Ipv6Addr::from(bits).to_string()
    } else {
        Ipv4Addr::from(bits as u32).to_string()
    }
}

/// The low `k` bits set.
fn low(k: u32) -> u128 {
    match k {
        0 => 0,
        128.. => u128::MAX,
        k => (1 << k) - 1,
    }
}

/// A list of networks near `base`, and a client near `base`: each network is `base` with some
/// low bits flipped and cut to its prefix, the client `base` with other low bits flipped, so
/// that clients fall inside and outside the list in about equal measure.
fn case() -> impl Strategy<Value = (bool, u8, Vec<Net>, u128)> {
    (any::<bool>(), 1u8..=128, any::<u128>()).prop_flat_map(|(v6, prefix, base)| {
        let width: u32 = if v6 { 128 } else { 32 };
        let base = base & low(width);
        let net = (0..=width, any::<u128>(), 0..=width).prop_map(move |(len, noise, flip)| Net {
            bits: (base ^ (noise & low(flip))) & low(width) & !low(width - len),
            len,
        });
        let client =
            (any::<u128>(), 0..=width).prop_map(move |(noise, flip)| base ^ (noise & low(flip)));
        (
            Just(v6),
            Just(prefix),
            proptest::collection::vec(net, 1..4),
            client,
        )
    })
}

fn list(nets: &[Net], v6: bool) -> IpList {
    IpList::new(
        nets.iter()
            .map(|net| format!("{}/{}", text(net.bits, v6), net.len)),
    )
    .unwrap()
}

fn from_peer(peer: IpAddr, xff: Option<IpAddr>) -> Request<String> {
    let mut builder = Request::builder();
    if let Some(client) = xff {
        builder = builder.header("x-forwarded-for", client.to_string());
    }
    let mut req = builder.body(String::new()).unwrap();
    req.extensions_mut()
        .insert(PeerAddr(SocketAddr::new(peer, 4000)));
    req
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_client_is_unlimited_iff_its_own_address_is_listed((v6, prefix, nets, client) in case()) {
        let width = if v6 { 128 } else { 32 };
        let expected = nets.iter().any(|&net| in_net(client, net, width));
        let client: IpAddr = text(client, v6).parse().unwrap();
        let allowed = list(&nets, v6);

        let quota = || Quota::per_minute(1_000_000);
        let mut by_peer = RateLimitLayer::gcra(quota())
            .clock(ManualClock::new())
            .key(PeerIp.ipv6_prefix(prefix))
            .allow(allowed.clone())
            .layer(ok());
        let response = send(&mut by_peer, from_peer(client, None));
        let unlimited = response.headers().get("ratelimit").is_none();
        prop_assert_eq!(unlimited, expected, "by peer {} /{} in {:?}", client, prefix, nets);

        // Behind a trusted proxy that reports the client.
        let mut by_client = RateLimitLayer::gcra(quota())
            .clock(ManualClock::new())
            .key(ClientIp::trusting(["127.0.0.0/8"]).unwrap().ipv6_prefix(prefix))
            .allow(allowed)
            .layer(ok());
        let proxy = IpAddr::from([127, 0, 0, 1]);
        let response = send(&mut by_client, from_peer(proxy, Some(client)));
        let unlimited = response.headers().get("ratelimit").is_none();
        prop_assert_eq!(unlimited, expected, "behind a proxy {} /{} in {:?}", client, prefix, nets);
    }
}

#[test]
fn one_allowed_host_does_not_allow_its_network() {
    // With the default /64 grouping, 2001:db8::/126 is four hosts, not the /64.
    let allowed = IpList::new(["2001:db8::/126"]).unwrap();
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .allow(allowed.clone())
        .layer(ok());
    let listed: IpAddr = "2001:db8::3".parse().unwrap();
    let neighbour: IpAddr = "2001:db8::4".parse().unwrap();
    for _ in 0..3 {
        let response = send(&mut svc, from_peer(listed, None));
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("ratelimit").is_none());
    }
    assert_eq!(send(&mut svc, from_peer(neighbour, None)).status(), 200);
    assert_eq!(send(&mut svc, from_peer(neighbour, None)).status(), 429);

    // With a /48 grouping, allowing a /64 leaves the rest of the /48 limited.
    let allowed = IpList::new(["2001:db8:0:1::/64"]).unwrap();
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(PeerIp.ipv6_prefix(48))
        .allow(allowed)
        .layer(ok());
    let listed: IpAddr = "2001:db8:0:1::9".parse().unwrap();
    let neighbour: IpAddr = "2001:db8:0:2::9".parse().unwrap();
    assert_eq!(send(&mut svc, from_peer(listed, None)).status(), 200);
    assert_eq!(send(&mut svc, from_peer(listed, None)).status(), 200);
    assert_eq!(send(&mut svc, from_peer(neighbour, None)).status(), 200);
    assert_eq!(send(&mut svc, from_peer(neighbour, None)).status(), 429);
}
