//! Property tests for `ClientIp`: arbitrary header bytes never panic and never mint a key, and
//! on well-formed lists the walk agrees with a plain reference model.

use std::net::{IpAddr, SocketAddr};

use http::{HeaderValue, Request};
use proptest::prelude::*;
use tollgate::key::{ClientIp, ForwardedHeader, KeyExtractor, PeerAddr, RequestHead};
use tollgate::Key;

const TRUSTED_PEER: &str = "10.0.0.2";
const UNTRUSTED_PEER: &str = "198.51.100.4";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn headers() -> [ForwardedHeader; 4] {
    [
        ForwardedHeader::XForwardedFor,
        ForwardedHeader::Forwarded,
        ForwardedHeader::XRealIp,
        ForwardedHeader::single("cf-connecting-ip"),
    ]
}

/// Trusts 10.0.0.0/8 and 2001:db8::/32; every IPv6 address is its own key.
fn extractor(header: ForwardedHeader) -> ClientIp {
    ClientIp::trusting(["10.0.0.0/8", "2001:db8::/32"])
        .unwrap()
        .header(header)
        .ipv6_prefix(128)
}

/// Bytes a header value may hold: a byte it may not is replaced with a space.
/// `bytes` as a header may carry them: control bytes (which a header value cannot hold) as
/// spaces.
fn sendable(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .map(|&b| {
            if (b >= 0x20 && b != 0x7f) || b == b'\t' {
                b
            } else {
                b' '
            }
        })
        .collect()
}

fn header_value(bytes: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(&sendable(bytes)).unwrap()
}

fn request(peer: &str, header: &ForwardedHeader, lines: &[Vec<u8>]) -> Request<()> {
    let mut req = Request::new(());
    for line in lines {
        req.headers_mut().append(header.name(), header_value(line));
    }
    req.extensions_mut()
        .insert(PeerAddr(SocketAddr::new(ip(peer), 41_000)));
    req
}

/// Every address that appears whole in `lines`, between the delimiters of either header syntax,
/// with an optional IPv4 port or IPv6 zone id: a deliberately loose superset of what a parser
/// could accept.
fn addresses_in(lines: &[Vec<u8>]) -> Vec<IpAddr> {
    let mut found = Vec::new();
    for line in lines {
        // What was sent: a NUL after an address went out as a space, which ends it.
        let sent = sendable(line);
        let text = String::from_utf8_lossy(&sent);
        for token in text.split([',', ';', '=', '"', '[', ']', ' ', '\t']) {
            let unzoned = token.split('%').next().unwrap_or(token);
            let unported = token.rsplit_once(':').map_or(token, |(host, _)| host);
            for candidate in [token, unzoned, unported] {
                if let Ok(addr) = candidate.parse::<IpAddr>() {
                    found.push(addr.to_canonical());
                }
            }
        }
    }
    found
}

/// Header bytes: anything at all, or text made of the pieces forwarding headers are made of.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"10.0.0.1".to_vec()),
        Just(b"10.9.9.9:80".to_vec()),
        Just(b"203.0.113.9".to_vec()),
        Just(b"203.0.113.10:4711".to_vec()),
        Just(b"2001:db8::1".to_vec()),
        Just(b"[2001:db8::2]:443".to_vec()),
        Just(b"2a00:1450::5".to_vec()),
        Just(b"[2a00:1450::6]".to_vec()),
        Just(b"fe80::7%eth0".to_vec()),
        Just(b"::ffff:203.0.113.11".to_vec()),
        Just(b"unknown".to_vec()),
        Just(b"_hidden".to_vec()),
        Just(b"for=".to_vec()),
        Just(b"For=".to_vec()),
        Just(b"proto=https".to_vec()),
        Just(b",".to_vec()),
        Just(b", ".to_vec()),
        Just(b";".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b":".to_vec()),
        Just(b"%".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop_oneof![
        3 => prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat()),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

fn header_lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(header_bytes(), 0..4)
}

proptest! {
    #[test]
    fn any_header_text_gives_the_peer_or_an_address_written_in_it(lines in header_lines()) {
        for header in headers() {
            let client_ip = extractor(header.clone());
            let req = request(TRUSTED_PEER, &header, &lines);
            let key = client_ip.extract(RequestHead::new(&req)).unwrap().unwrap();
            let got = key.as_ip().unwrap();
            let allowed = addresses_in(&lines);
            prop_assert!(
                got == ip(TRUSTED_PEER) || allowed.contains(&got),
                "{header:?} {:?} -> {got}", lines.iter().map(|l| String::from_utf8_lossy(l)).collect::<Vec<_>>()
            );

            // From an untrusted peer the headers are never read.
            let req = request(UNTRUSTED_PEER, &header, &lines);
            prop_assert_eq!(
                client_ip.extract(RequestHead::new(&req)).unwrap(),
                Some(Key::from(ip(UNTRUSTED_PEER)))
            );

            // Trusted hops, same rule: the peer or an address written in the header.
            for hops in [1, 2, 5] {
                let key = ClientIp::trusted_hops(hops)
                    .header(header.clone())
                    .ipv6_prefix(128)
                    .extract(RequestHead::new(&request(TRUSTED_PEER, &header, &lines)))
                    .unwrap()
                    .unwrap();
                let got = key.as_ip().unwrap();
                prop_assert!(got == ip(TRUSTED_PEER) || allowed.contains(&got));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn up_to_64_kib_of_arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..=64 * 1024),
        split in any::<prop::sample::Index>(),
    ) {
        // Once as one line, once cut into two lines anywhere.
        let cut = split.index(bytes.len() + 1);
        let forms = [vec![bytes.clone()], vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()]];
        for lines in forms {
            for header in headers() {
                let req = request(TRUSTED_PEER, &header, &lines);
                let got = extractor(header.clone()).extract(RequestHead::new(&req)).unwrap().unwrap();
                let got = got.as_ip().unwrap();
                prop_assert!(got == ip(TRUSTED_PEER) || addresses_in(&lines).contains(&got));
                let _ = ClientIp::trusted_hops(3).header(header).extract(RequestHead::new(&req)).unwrap();
            }
        }
    }
}

/// One entry of a well-formed list, for the reference model.
#[derive(Debug, Clone)]
enum Hop {
    Addr(IpAddr),
    Unknown,
}

fn hop() -> impl Strategy<Value = Hop> {
    prop_oneof![
        4 => prop_oneof![
            (0u8..4).prop_map(|i| IpAddr::from([10, 0, 0, i])),
            (0u8..4).prop_map(|i| IpAddr::from([203, 0, 113, i])),
            (0u16..3).prop_map(|i| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, i])),
            (0u16..3).prop_map(|i| IpAddr::from([0x2a00, 0x1450, 0, 0, 0, 0, 0, i])),
        ]
        .prop_map(Hop::Addr),
        1 => Just(Hop::Unknown),
    ]
}

/// The documented walk, written plainly over a `Vec`.
fn reference(peer: IpAddr, hops: &[Hop]) -> IpAddr {
    let trusted = |ip: &IpAddr| match ip {
        IpAddr::V4(v4) => v4.octets()[0] == 10,
        IpAddr::V6(v6) => v6.segments()[..2] == [0x2001, 0xdb8],
    };
    let mut reporter = peer;
    for hop in hops.iter().rev().take(ClientIp::MAX_ENTRIES) {
        match hop {
            Hop::Unknown => return reporter,
            Hop::Addr(ip) if !trusted(ip) => return *ip,
            Hop::Addr(ip) => reporter = *ip,
        }
    }
    reporter
}

/// Formats `hop` as an `X-Forwarded-For` entry (`style` picks a port and spacing) or a
/// `Forwarded` element (`style` also picks quoting, case and other parameters).
fn format_hop(hop: &Hop, forwarded: bool, style: u8) -> String {
    let node = match (hop, style & 1 == 1) {
        (Hop::Unknown, _) => {
            if style & 2 == 0 {
                "unknown".into()
            } else {
                "_hidden".into()
            }
        }
        (Hop::Addr(IpAddr::V4(v4)), false) => v4.to_string(),
        (Hop::Addr(IpAddr::V4(v4)), true) => format!("{v4}:4711"),
        (Hop::Addr(IpAddr::V6(v6)), false) if !forwarded => v6.to_string(),
        (Hop::Addr(IpAddr::V6(v6)), _) => format!("[{v6}]:4711"),
    };
    if !forwarded {
        return if style & 4 == 0 {
            node
        } else {
            format!(" {node} ")
        };
    }
    let name = ["for", "For", "FOR"][usize::from(style >> 3) % 3];
    let pair = if style & 2 == 0 && matches!(hop, Hop::Addr(IpAddr::V4(_))) && style & 1 == 0 {
        format!("{name}={node}")
    } else {
        format!("{name}=\"{node}\"")
    };
    match style >> 5 {
        0 => pair,
        1 => format!("{pair};proto=https"),
        2 => format!("by=\"[2001:db8::9]\";{pair}"),
        _ => format!("host=\"a,b;c\";{pair};proto=http"),
    }
}

proptest! {
    #[test]
    fn well_formed_lists_follow_the_reference_walk(
        hops in prop::collection::vec((hop(), any::<u8>()), 0..40),
        lines in 1usize..4,
        peer_trusted in any::<bool>(),
    ) {
        let peer = if peer_trusted { TRUSTED_PEER } else { UNTRUSTED_PEER };
        let expected = if peer_trusted {
            let plain: Vec<Hop> = hops.iter().map(|(hop, _)| hop.clone()).collect();
            reference(ip(peer), &plain)
        } else {
            ip(peer)
        };
        for (header, forwarded) in [(ForwardedHeader::XForwardedFor, false), (ForwardedHeader::Forwarded, true)] {
            let entries: Vec<String> =
                hops.iter().map(|(hop, style)| format_hop(hop, forwarded, *style)).collect();
            // Spread the list over `lines` header lines.
            let per_line = entries.len().div_ceil(lines).max(1);
            let lines: Vec<Vec<u8>> =
                entries.chunks(per_line).map(|chunk| chunk.join(",").into_bytes()).collect();
            let req = request(peer, &header, &lines);
            let got = extractor(header.clone()).extract(RequestHead::new(&req)).unwrap().unwrap();
            prop_assert_eq!(got, Key::from(expected), "{:?}", lines.iter().map(|l| String::from_utf8_lossy(l)).collect::<Vec<_>>());
        }
    }
}
