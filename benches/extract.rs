//! The cost of finding a request's key, per extractor.
//!
//! Run with `cargo bench --bench extract`. Each benchmark extracts the key of one prepared
//! request (the request is built once, outside the measurement):
//!
//! - `peer_ip`: [`PeerIp`], the default key.
//! - `client_ip/xff_20`: [`ClientIp`] trusting `10.0.0.0/8` and `192.0.2.0/24`, from a
//!   trusted peer, on a 20-entry `X-Forwarded-For` whose rightmost 3 entries are trusted proxies.
//! - `client_ip/forwarded_20`: the same list as 20 RFC 7239 `Forwarded` elements with quoted
//!   IPv6 and port forms and extra parameters.
//! - `client_ip/xff_untrusted_peer`: the same 20-entry header from a peer that is not trusted
//!   (the header is not read).
//! - `client_ip/xff_64kib_junk`: a 64 KiB `X-Forwarded-For` of junk from a trusted peer, the
//!   worst an attacker behind the proxy can send (one scan of the header, eight bytes at a
//!   time); `client_ip/forwarded_64kib_junk` the same as a `Forwarded` header (one scan, a
//!   byte at a time, since quoted strings must be followed).
//! - `other/*`: [`Header`] (a 32-byte API key), [`BearerToken`], [`Header`] with a 200-byte
//!   value (hashed to a digest), and the tuple `(Route, PeerIp)`.

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{criterion_group, criterion_main, Criterion};
use http::Request;
use tollgate::key::{
    BearerToken, ClientIp, ForwardedHeader, Header, KeyExtractor, PeerAddr, PeerIp, RequestHead,
    Route,
};

const TRUSTED_PEER: &str = "10.0.0.2:41000";
const UNTRUSTED_PEER: &str = "198.51.100.4:41000";

fn request(peer: &str, header: &str, value: &str) -> Request<()> {
    let mut req = Request::builder()
        .header("user-agent", "bench")
        .header("accept", "*/*")
        .header(header, value)
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr(peer.parse::<SocketAddr>().unwrap()));
    req
}

/// 17 client-side entries (the leftmost could be anything), then 3 trusted proxies.
fn hops() -> Vec<String> {
    let mut hops: Vec<String> = (0..17)
        .map(|i| {
            if i % 3 == 0 {
                format!("2001:db8:{i}::1")
            } else {
                format!("203.0.113.{i}")
            }
        })
        .collect();
    hops.extend(["192.0.2.10", "10.1.0.1", "10.0.0.1"].map(String::from));
    hops
}

fn xff() -> String {
    hops().join(", ")
}

fn forwarded() -> String {
    hops()
        .iter()
        .map(|hop| {
            if hop.contains(':') {
                format!("for=\"[{hop}]:4711\";proto=https")
            } else {
                format!("for={hop};by=10.0.0.1;proto=https")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn bench(c: &mut Criterion) {
    let client_ip = ClientIp::trusting(["10.0.0.0/8", "192.0.2.0/24"]).unwrap();
    let forwarded_ip = client_ip.clone().header(ForwardedHeader::Forwarded);

    let plain = request(TRUSTED_PEER, "x-request-id", "1");
    c.bench_function("peer_ip", |b| {
        b.iter(|| PeerIp.extract(RequestHead::new(black_box(&plain))).unwrap())
    });

    let mut group = c.benchmark_group("client_ip");
    let req = request(TRUSTED_PEER, "x-forwarded-for", &xff());
    assert_eq!(
        client_ip.client_addr(&req),
        Some("203.0.113.16".parse().unwrap())
    );
    group.bench_function("xff_20", |b| {
        b.iter(|| {
            client_ip
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });

    let req = request(TRUSTED_PEER, "forwarded", &forwarded());
    assert_eq!(
        forwarded_ip.client_addr(&req),
        Some("203.0.113.16".parse().unwrap())
    );
    group.bench_function("forwarded_20", |b| {
        b.iter(|| {
            forwarded_ip
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });

    let req = request(UNTRUSTED_PEER, "x-forwarded-for", &xff());
    group.bench_function("xff_untrusted_peer", |b| {
        b.iter(|| {
            client_ip
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });

    let junk = "x".repeat(64 * 1024);
    let req = request(TRUSTED_PEER, "x-forwarded-for", &junk);
    group.bench_function("xff_64kib_junk", |b| {
        b.iter(|| {
            client_ip
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });
    let req = request(TRUSTED_PEER, "forwarded", &junk);
    group.bench_function("forwarded_64kib_junk", |b| {
        b.iter(|| {
            forwarded_ip
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("other");
    let api_key = Header::new("x-api-key");
    let req = request(
        TRUSTED_PEER,
        "x-api-key",
        "k_0123456789abcdef0123456789abcd",
    );
    group.bench_function("header", |b| {
        b.iter(|| api_key.extract(RequestHead::new(black_box(&req))).unwrap())
    });
    let req = request(
        TRUSTED_PEER,
        "authorization",
        "Bearer k_0123456789abcdef0123456789abcd",
    );
    group.bench_function("bearer_token", |b| {
        b.iter(|| {
            BearerToken
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });
    let req = request(TRUSTED_PEER, "x-api-key", &"k".repeat(200));
    group.bench_function("header_200b_hashed", |b| {
        b.iter(|| api_key.extract(RequestHead::new(black_box(&req))).unwrap())
    });
    let mut req = request(TRUSTED_PEER, "x-request-id", "1");
    *req.uri_mut() = "/users/42/orders".parse().unwrap();
    group.bench_function("route_and_peer_ip", |b| {
        b.iter(|| {
            (Route, PeerIp)
                .extract(RequestHead::new(black_box(&req)))
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
