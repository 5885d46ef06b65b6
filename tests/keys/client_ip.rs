//! `ClientIp`: keys from trusted proxies' forwarding headers, never from what a client sends.

use crate::support::request;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::clock::ManualClock;
use tollgate::key::{ClientIp, ForwardedHeader, IpNet, KeyExtractor, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::ServiceExt;
use tower_layer::Layer;

use request::Req;

const XFF: &str = "x-forwarded-for";
const FORWARDED: &str = "forwarded";
const X_REAL_IP: &str = "x-real-ip";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn key(text: &str) -> Key {
    Key::from(ip(text))
}

/// A request from `peer` (an IP address) with `headers`, each `(name, value)` one header line.
fn request(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
    Req::new()
        .headers(headers)
        .peer(SocketAddr::new(ip(peer), 41_000))
        .build()
}

#[track_caller]
fn extract(extractor: &ClientIp, req: &Request<()>) -> Key {
    extractor.extract(RequestHead::new(req)).unwrap().unwrap()
}

/// `extractor`'s key for a request from `peer` with one `header` line.
#[track_caller]
fn key_for(extractor: &ClientIp, peer: &str, header: &str, value: &str) -> Key {
    extract(extractor, &request(peer, &[(header, value)]))
}

fn proxy() -> ClientIp {
    ClientIp::trusting(["10.0.0.0/8", "192.0.2.7"]).unwrap()
}

#[test]
fn an_untrusted_peer_is_the_key_whatever_it_sends() {
    let extractors = [
        proxy(),
        proxy().header(ForwardedHeader::Forwarded),
        proxy().header(ForwardedHeader::XRealIp),
        proxy().header(ForwardedHeader::single("CF-Connecting-IP")),
    ];
    for extractor in &extractors {
        for i in 0..50 {
            let spoofed = format!("203.0.113.{i}");
            let req = request(
                "198.51.100.4",
                &[
                    (XFF, &format!("{spoofed}, 10.0.0.1")),
                    (FORWARDED, &format!("for={spoofed};proto=https")),
                    (X_REAL_IP, &spoofed),
                    ("cf-connecting-ip", &spoofed),
                ],
            );
            assert_eq!(
                extract(extractor, &req),
                key("198.51.100.4"),
                "{extractor:?}"
            );
        }
        assert_eq!(
            extract(extractor, &request("198.51.100.4", &[])),
            key("198.51.100.4")
        );
    }
}

#[test]
fn behind_a_trusted_proxy_the_rightmost_untrusted_entry_is_the_client() {
    let client_ip = proxy();
    // The leftmost entry is whatever the client sent; the proxy appended the address it saw.
    for spoofed in ["6.6.6.6", "1.1.1.1", "10.0.0.1", "garbage", "unknown"] {
        let xff = format!("{spoofed}, 203.0.113.9");
        assert_eq!(
            key_for(&client_ip, "10.1.1.1", XFF, &xff),
            key("203.0.113.9")
        );
    }
    // Trusted hops on the right are skipped, by network or single address.
    assert_eq!(
        key_for(
            &client_ip,
            "10.1.1.1",
            XFF,
            "6.6.6.6, 203.0.113.9, 192.0.2.7, 10.9.9.9"
        ),
        key("203.0.113.9")
    );
    // Distinct clients, distinct keys.
    let a = key_for(&client_ip, "10.1.1.1", XFF, "203.0.113.9");
    let b = key_for(&client_ip, "10.1.1.1", XFF, "203.0.113.10");
    assert_ne!(a, b);
    assert_eq!(a, key("203.0.113.9"));
    assert_eq!(b, key("203.0.113.10"));
    // The single trusted address is a proxy too.
    assert_eq!(
        key_for(&client_ip, "192.0.2.7", XFF, "203.0.113.9"),
        key("203.0.113.9")
    );
    // An address next to it is not.
    assert_eq!(
        key_for(&client_ip, "192.0.2.8", XFF, "203.0.113.9"),
        key("192.0.2.8")
    );
}

#[test]
fn x_forwarded_for_lines_are_one_list_in_order() {
    let client_ip = proxy();
    let req = request(
        "10.0.0.2",
        &[(XFF, "6.6.6.6, 203.0.113.9"), (XFF, "10.0.0.1"), (XFF, " ")],
    );
    assert_eq!(extract(&client_ip, &req), key("203.0.113.9"));
    let req = request("10.0.0.2", &[(XFF, "203.0.113.9"), (XFF, "198.51.100.1")]);
    assert_eq!(extract(&client_ip, &req), key("198.51.100.1"));
    // Ports and whitespace around entries.
    let req = request("10.0.0.2", &[(XFF, "203.0.113.9:4711 ,\t10.0.0.1:80")]);
    assert_eq!(extract(&client_ip, &req), key("203.0.113.9"));
}

#[test]
fn every_entry_trusted_or_none_at_all() {
    let client_ip = proxy();
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, "10.0.0.3, 192.0.2.7, 10.0.0.4"),
        key("10.0.0.3")
    );
    assert_eq!(
        extract(&client_ip, &request("10.0.0.2", &[])),
        key("10.0.0.2")
    );
    assert_eq!(key_for(&client_ip, "10.0.0.2", XFF, ""), key("10.0.0.2"));
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, " , ,"),
        key("10.0.0.2")
    );
}

#[test]
fn malformed_entries_stop_the_walk_at_the_proxy_that_reported_them() {
    let client_ip = proxy();
    for bad in [
        "unknown",
        "_hidden",
        "not-an-ip",
        "203.0.113.9.1",
        "\"203.0.113.9\"",
        "203.0.113.9:99999",
        "[203.0.113.9]",
    ] {
        // Reported by the peer itself: the peer is the key.
        let xff = format!("198.51.100.1, {bad}");
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", XFF, &xff),
            key("10.0.0.2"),
            "{bad}"
        );
        // Reported by the trusted hop 10.0.0.1: that hop is the key.
        let xff = format!("198.51.100.1, {bad}, 10.0.0.1");
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", XFF, &xff),
            key("10.0.0.1"),
            "{bad}"
        );
    }
    // Non-UTF-8 bytes are malformed too.
    let mut req = request("10.0.0.2", &[]);
    req.headers_mut().insert(
        XFF,
        http::HeaderValue::from_bytes(b"198.51.100.1, \xff\xfe, 10.0.0.1").unwrap(),
    );
    assert_eq!(extract(&client_ip, &req), key("10.0.0.1"));
}

#[test]
fn forwarded_rfc_7239() {
    let client_ip = proxy().header(ForwardedHeader::Forwarded);
    let cases = [
        // Plain, then the proxy's element on the right.
        ("for=6.6.6.6, for=203.0.113.9", "203.0.113.9"),
        // Quoted, with a port.
        ("for=\"203.0.113.9:4711\"", "203.0.113.9"),
        // Bracketed IPv6 with a port; mixed case parameter names.
        ("For=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::"),
        ("FOR=\"[2001:db8:cafe::17]\";proto=https", "2001:db8:cafe::"),
        // Several pairs, in any order, and a trusted element on the right.
        (
            "for=6.6.6.6;proto=http, proto=https;for=203.0.113.9;by=10.0.0.2, for=10.0.0.1;by=10.0.0.2",
            "203.0.113.9",
        ),
        // A separator inside a quoted string does not split.
        ("for=203.0.113.9;host=\"a,b;c\"", "203.0.113.9"),
        // `unknown` and obfuscated nodes: the hop that reported them.
        ("for=203.0.113.9, for=unknown", "10.0.0.2"),
        ("for=203.0.113.9, for=\"_hidden\", for=10.0.0.1", "10.0.0.1"),
        ("for=203.0.113.9, for=_SEVKISEK:4711, for=10.0.0.1", "10.0.0.1"),
        // An element without `for`, or with two, is malformed.
        ("for=203.0.113.9, proto=https", "10.0.0.2"),
        ("for=203.0.113.9;for=198.51.100.1", "10.0.0.2"),
        // An unterminated quote on the left does not hide the proxy's element.
        ("for=\"6.6.6.6, for=203.0.113.9", "203.0.113.9"),
        // All trusted: the leftmost.
        ("for=10.0.0.5, for=10.0.0.1", "10.0.0.5"),
    ];
    for (header, expected) in cases {
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", FORWARDED, header),
            key(expected),
            "{header}"
        );
    }
    // Several lines are one list.
    let req = request(
        "10.0.0.2",
        &[(FORWARDED, "for=6.6.6.6"), (FORWARDED, "for=203.0.113.9")],
    );
    assert_eq!(extract(&client_ip, &req), key("203.0.113.9"));
    // Only the chosen header is read.
    let req = request(
        "10.0.0.2",
        &[(FORWARDED, "for=203.0.113.9"), (XFF, "198.51.100.1")],
    );
    assert_eq!(extract(&client_ip, &req), key("203.0.113.9"));
    assert_eq!(extract(&proxy(), &req), key("198.51.100.1"));
}

/// A quoted `for=` node over 100 bytes (padding inside the quotes counted) is no address: the
/// walk stops at the proxy that reported it, as for any malformed entry; within 100 bytes the
/// padding is trimmed.
#[test]
fn a_quoted_node_over_100_bytes_is_malformed() {
    let client_ip = proxy().header(ForwardedHeader::Forwarded);
    let padded = |pad: usize| {
        let pad = " ".repeat(pad);
        format!("for=\"{pad}203.0.113.9{pad}\"")
    };
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", FORWARDED, &padded(40)),
        key("203.0.113.9")
    );
    for pad in [45, 60, 200] {
        let header = padded(pad);
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", FORWARDED, &header),
            key("10.0.0.2"),
            "{header}"
        );
    }
}

#[test]
fn one_address_headers() {
    for (header, name) in [
        (ForwardedHeader::XRealIp, X_REAL_IP),
        (ForwardedHeader::single("True-Client-IP"), "true-client-ip"),
    ] {
        let client_ip = proxy().header(header);
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", name, "203.0.113.9"),
            key("203.0.113.9")
        );
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", name, "[2001:db8::1]:443"),
            key("2001:db8::")
        );
        // A list or garbage is malformed: the proxy's own address.
        for bad in ["203.0.113.9, 198.51.100.1", "unknown", "x", ""] {
            assert_eq!(key_for(&client_ip, "10.0.0.2", name, bad), key("10.0.0.2"));
        }
        // Two lines: the value was added to, not set.
        let req = request("10.0.0.2", &[(name, "6.6.6.6"), (name, "203.0.113.9")]);
        assert_eq!(extract(&client_ip, &req), key("10.0.0.2"));
        // Only this header is read.
        let req = request("10.0.0.2", &[(XFF, "203.0.113.9")]);
        assert_eq!(extract(&client_ip, &req), key("10.0.0.2"));
    }
}

#[test]
fn trusted_hops() {
    let one = ClientIp::trusted_hops(1);
    let two = ClientIp::trusted_hops(2);
    let xff = "6.6.6.6, 203.0.113.9, 198.51.100.1";
    assert_eq!(key_for(&one, "192.0.2.1", XFF, xff), key("198.51.100.1"));
    assert_eq!(key_for(&two, "192.0.2.1", XFF, xff), key("203.0.113.9"));
    // Whatever the peer: trusted_hops does not check it.
    assert_eq!(key_for(&two, "10.0.0.1", XFF, xff), key("203.0.113.9"));
    // Fewer entries than hops: not the expected chain, so the peer.
    assert_eq!(
        key_for(&two, "192.0.2.1", XFF, "198.51.100.1"),
        key("192.0.2.1")
    );
    assert_eq!(extract(&one, &request("192.0.2.1", &[])), key("192.0.2.1"));
    // Empty elements are not hops; lines are one list.
    let req = request(
        "192.0.2.1",
        &[(XFF, "203.0.113.9,"), (XFF, ", 198.51.100.1")],
    );
    assert_eq!(extract(&two, &req), key("203.0.113.9"));
    // A malformed entry: the hop that reported it.
    assert_eq!(
        key_for(&two, "192.0.2.1", XFF, "203.0.113.9, unknown"),
        key("192.0.2.1")
    );
    assert_eq!(
        key_for(
            &ClientIp::trusted_hops(3),
            "192.0.2.1",
            XFF,
            "6.6.6.6, junk, 198.51.100.1"
        ),
        key("198.51.100.1")
    );
    // Forwarded elements are hops too.
    let fwd = two.clone().header(ForwardedHeader::Forwarded);
    assert_eq!(
        key_for(
            &fwd,
            "192.0.2.1",
            FORWARDED,
            "for=6.6.6.6, for=203.0.113.9, for=198.51.100.1"
        ),
        key("203.0.113.9")
    );
    // A one-address header is the address whatever the hops.
    let real = two.header(ForwardedHeader::XRealIp);
    assert_eq!(
        key_for(&real, "192.0.2.1", X_REAL_IP, "203.0.113.9"),
        key("203.0.113.9")
    );
}

#[test]
#[should_panic(expected = "ClientIp::trusted_hops(0)")]
fn zero_hops_panics() {
    let _ = ClientIp::trusted_hops(0);
}

#[test]
fn ipv6_clients_are_grouped_by_prefix() {
    let client_ip = proxy();
    let a = key_for(&client_ip, "10.0.0.2", XFF, "2001:db8:1:2::a");
    let b = key_for(
        &client_ip,
        "10.0.0.2",
        XFF,
        "2001:db8:1:2:ffff:ffff:ffff:ffff",
    );
    let c = key_for(&client_ip, "10.0.0.2", XFF, "2001:db8:1:3::a");
    assert_eq!(a, b);
    assert_eq!(a, key("2001:db8:1:2::"));
    assert_ne!(a, c);
    // An untrusted IPv6 peer is grouped the same way.
    assert_eq!(
        extract(&client_ip, &request("2001:db8:1:2::77", &[])),
        key("2001:db8:1:2::")
    );

    let exact = proxy().ipv6_prefix(128);
    let a = key_for(&exact, "10.0.0.2", XFF, "2001:db8:1:2::a");
    let b = key_for(&exact, "10.0.0.2", XFF, "2001:db8:1:2::b");
    assert_ne!(a, b);
    assert_eq!(a, key("2001:db8:1:2::a"));

    let site = proxy().ipv6_prefix(48);
    assert_eq!(
        key_for(&site, "10.0.0.2", XFF, "2001:db8:1:2::a"),
        key_for(&site, "10.0.0.2", XFF, "2001:db8:1:ffff::b"),
    );
    // IPv4 is never cut.
    assert_eq!(
        key_for(&site, "10.0.0.2", XFF, "203.0.113.9"),
        key("203.0.113.9")
    );
    // Zone ids are dropped.
    assert_eq!(
        key_for(&exact, "10.0.0.2", XFF, "fe80::1%eth0"),
        key("fe80::1")
    );
}

#[test]
#[should_panic(expected = "ClientIp::ipv6_prefix(0)")]
fn a_zero_ipv6_prefix_panics() {
    let _ = proxy().ipv6_prefix(0);
}

#[test]
#[should_panic(expected = "ClientIp::ipv6_prefix(129)")]
fn an_ipv6_prefix_over_128_panics() {
    let _ = proxy().ipv6_prefix(129);
}

#[test]
fn ipv4_mapped_addresses_are_ipv4() {
    let client_ip = proxy();
    // In the header...
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, "::ffff:203.0.113.9"),
        key("203.0.113.9")
    );
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, "[::ffff:203.0.113.9]:80"),
        key("203.0.113.9")
    );
    // ...for trust: a mapped proxy entry is still the trusted proxy...
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, "203.0.113.9, ::ffff:10.0.0.1"),
        key("203.0.113.9")
    );
    // ...and for the peer (a dual-stack listener).
    assert_eq!(
        key_for(&client_ip, "::ffff:10.0.0.2", XFF, "203.0.113.9"),
        key("203.0.113.9")
    );
    assert_eq!(
        extract(&client_ip, &request("::ffff:198.51.100.4", &[])),
        key("198.51.100.4")
    );
}

#[test]
fn invalid_networks_are_errors_naming_the_value() {
    for bad in [
        "10.0.0.0/33",
        "10.0.0.300",
        "proxy.internal",
        "10.1.2.3/8",
        "::/129",
        "",
    ] {
        let err = ClientIp::trusting(["10.0.0.0/8", bad]).unwrap_err();
        assert_eq!(err.value(), bad);
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
    assert_eq!(
        ClientIp::trusting(["10.1.2.3/8"]).unwrap_err().to_string(),
        "invalid IP network \"10.1.2.3/8\": bits are set after the prefix; \
         write 10.0.0.0/8 for the network or 10.1.2.3/32 for the one address"
    );
    // Owned strings and parsed networks work too.
    assert!(ClientIp::trusting(vec![String::from("2001:db8::/32")]).is_ok());
    let nets: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let client_ip = ClientIp::trusting_networks(nets);
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, "203.0.113.9"),
        key("203.0.113.9")
    );
}

#[test]
fn no_peer_address_is_an_error() {
    let req = Request::builder()
        .header(XFF, "203.0.113.9")
        .body(())
        .unwrap();
    let err = proxy().extract(RequestHead::new(&req)).unwrap_err();
    assert_eq!(err.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(ClientIp::trusted_hops(1).client_addr(&req), None);
}

#[test]
fn a_long_header_examines_at_most_32_entries() {
    let client_ip = proxy();
    // 40 trusted hops: the walk gives up after 32, at the leftmost of those it examined.
    let hops: Vec<String> = (1..=40).map(|i| format!("10.0.0.{i}")).collect();
    let xff = format!("203.0.113.9, {}", hops.join(", "));
    assert_eq!(
        key_for(&client_ip, "10.0.0.200", XFF, &xff),
        key("10.0.0.9")
    );
    // A 64 KiB header of junk: the proxy's address.
    let junk = "x".repeat(64 * 1024);
    assert_eq!(key_for(&client_ip, "10.0.0.2", XFF, &junk), key("10.0.0.2"));
    let xff = format!("{}, 203.0.113.9", ",".repeat(64 * 1024));
    assert_eq!(
        key_for(&client_ip, "10.0.0.2", XFF, &xff),
        key("203.0.113.9")
    );
}

/// Through the layer: a client alone cannot escape the limit by rotating `X-Forwarded-For`,
/// and clients behind the trusted proxy each get their own budget.
#[tokio::test]
async fn through_the_layer() {
    let layer = RateLimitLayer::gcra(Quota::per_minute(2))
        .key(ClientIp::trusting(["10.0.0.0/8"]).unwrap())
        .clock(ManualClock::new());
    let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    }));
    let status = |peer: &'static str, xff: String| {
        let svc = svc.clone();
        async move {
            svc.oneshot(request(peer, &[(XFF, &xff)]))
                .await
                .unwrap()
                .status()
        }
    };

    // An untrusted client rotates the header: the third request is still denied.
    for (i, expected) in [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ]
    .into_iter()
    .enumerate()
    {
        let xff = format!("203.0.113.{i}");
        assert_eq!(status("198.51.100.4", xff).await, expected, "request {i}");
    }

    // Behind the proxy, two clients have two budgets, whatever they put on the left.
    for client in ["203.0.113.1", "203.0.113.2"] {
        for (i, expected) in [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
        ]
        .into_iter()
        .enumerate()
        {
            let xff = format!("6.6.6.{i}, {client}");
            assert_eq!(status("10.0.0.2", xff).await, expected, "{client} #{i}");
        }
    }
}

/// Addresses that carry an IPv4 client's address (NAT64, 6to4, Teredo) are keyed by that
/// address: behind a NAT64 every IPv4 client would otherwise share the translator's /64, and
/// a 6to4 holder would have 65 536 /64s of its own.
#[test]
fn translated_addresses_are_keyed_by_the_ipv4_client_they_carry() {
    let client_ip = proxy();
    let peer_ip = tollgate::key::PeerIp;
    let cases = [
        // NAT64, the well-known prefix (RFC 6052): the IPv4 address in the last 32 bits.
        ("64:ff9b::203.0.113.9", "203.0.113.9"),
        ("64:ff9b::cb00:7109", "203.0.113.9"),
        // 6to4 (RFC 3056): 2002:V4ADDR::/48, whatever the subnet and host.
        ("2002:cb00:7109::1", "203.0.113.9"),
        ("2002:cb00:7109:ffff:1:2:3:4", "203.0.113.9"),
        // Teredo (RFC 4380): the client's public address, inverted, in the last 32 bits.
        ("2001:0:4136:e378:8000:63bf:34ff:8ef6", "203.0.113.9"),
    ];
    for (v6, v4) in cases {
        assert_eq!(
            key_for(&client_ip, "10.0.0.2", XFF, v6),
            key(v4),
            "{v6} via a proxy"
        );
        assert_eq!(
            extract(&client_ip, &request(v6, &[])),
            key(v4),
            "{v6} as the peer"
        );
        assert_eq!(peer_ip.key_for(ip(v6)), key(v4), "PeerIp::key_for({v6})");
        let req = request(v6, &[]);
        let extracted = peer_ip.extract(RequestHead::new(&req)).unwrap().unwrap();
        assert_eq!(extracted, key(v4), "PeerIp on {v6}");
    }
    // Two IPv4 clients behind one NAT64 are two keys, not one /64.
    assert_ne!(
        peer_ip.key_for(ip("64:ff9b::203.0.113.9")),
        peer_ip.key_for(ip("64:ff9b::203.0.113.10"))
    );
    // The local-use NAT64 prefix (RFC 8215) holds the IPv4 address where the operator's prefix
    // length puts it: each address is its own key, so clients never share one and each IPv4
    // client (one translated address) has one.
    let local = ["64:ff9b:1:2::203.0.113.9", "64:ff9b:1:2::203.0.113.10"];
    assert_ne!(peer_ip.key_for(ip(local[0])), peer_ip.key_for(ip(local[1])));
    assert_eq!(peer_ip.key_for(ip(local[0])), key(local[0]));
    assert_ne!(
        key_for(&client_ip, "10.0.0.2", XFF, local[0]),
        key_for(&client_ip, "10.0.0.2", XFF, local[1])
    );
    // Other IPv6 addresses keep their /64.
    assert_eq!(
        peer_ip.key_for(ip("2001:db8:1:2::9")),
        key("2001:db8:1:2::")
    );
}

/// Through the layer: two IPv4 clients behind one NAT64 each get their own budget, and one
/// 6to4 holder cannot mint budgets by changing its /64.
#[tokio::test]
async fn behind_a_nat64_each_ipv4_client_has_its_own_budget() {
    let layer = RateLimitLayer::gcra(Quota::per_minute(1)).clock(ManualClock::new());
    let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
    }));
    let status = |peer: &'static str| {
        let svc = svc.clone();
        async move { svc.oneshot(request(peer, &[])).await.unwrap().status() }
    };
    assert_eq!(status("64:ff9b::203.0.113.9").await, StatusCode::OK);
    assert_eq!(status("64:ff9b::203.0.113.10").await, StatusCode::OK);
    assert_eq!(
        status("64:ff9b::203.0.113.9").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status("2002:c633:6401:1::1").await, StatusCode::OK);
    assert_eq!(
        status("2002:c633:6401:2::1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status("198.51.100.1").await, StatusCode::TOO_MANY_REQUESTS);
}
