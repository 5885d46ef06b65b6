//! The Redis keys the store writes: distinct client keys never share a Redis key, and the Redis
//! Cluster hash tag (the bytes between the first `{` and the first `}` after it) is exactly the
//! encoded client key, whatever bytes the client sends, in printable ASCII. The oracle below
//! encodes keys as the store documents it, and reads every name back, written apart from the
//! store: a name that reads back to one key only is never shared by two.

use crate::support::redis as server;

use std::collections::HashMap;
use std::net::IpAddr;

use http::Request;
use proptest::prelude::*;
use tollgate::key::{KeyError, KeyExtractor, RequestHead};
use tollgate::store::RedisStore;
use tollgate::{Key, Quota, RateLimiter};

/// A key as the client gave it; a pair is the key of a tuple of two extractors (a pair inside
/// a pair: a nested tuple).
#[derive(Debug, Clone)]
enum Input {
    Ip(IpAddr),
    Int(u64),
    Bytes(Vec<u8>),
    Pair(Box<Input>, Box<Input>),
}

/// What a Redis name stands for, as read back by [`parse`]: two inputs read back alike are
/// one key.
#[derive(Debug, Clone, PartialEq)]
enum Parsed {
    Ip(IpAddr),
    Int(u64),
    Bytes(Vec<u8>),
    Digest([u8; 32]),
    Tuple(Vec<Parsed>),
    TupleDigest([u8; 32]),
}

impl Input {
    fn key(&self) -> Key {
        match self {
            Input::Ip(ip) => Key::from(*ip),
            Input::Int(n) => Key::from(*n),
            Input::Bytes(b) => Key::from(&b[..]),
            Input::Pair(a, b) => {
                let (a, b) = (a.key(), b.key());
                let fa = move |_: RequestHead<'_>| Ok::<_, KeyError>(Some(a.clone()));
                let fb = move |_: RequestHead<'_>| Ok::<_, KeyError>(Some(b.clone()));
                (fa, fb)
                    .extract(RequestHead::new(&Request::new(())))
                    .expect("a pair of keys")
                    .expect("a pair of keys")
            }
        }
    }

    /// The key as the oracle reads it: a long byte string or tuple by its digest.
    fn parsed(&self) -> Parsed {
        let digest = || self.key().as_digest().copied();
        match self {
            Input::Ip(ip) => Parsed::Ip(*ip),
            Input::Int(n) => Parsed::Int(*n),
            Input::Bytes(_) | Input::Pair(..) if digest().is_some() => match self {
                Input::Pair(..) => Parsed::TupleDigest(digest().expect("a digest")),
                _ => Parsed::Digest(digest().expect("a digest")),
            },
            Input::Bytes(b) => Parsed::Bytes(b.clone()),
            Input::Pair(a, b) => Parsed::Tuple(vec![a.parsed(), b.parsed()]),
        }
    }

    /// The documented encoding: `ip:`, `n:`, `s:` with every byte but printable ASCII, the
    /// space and `%{}(),` written `%XX`, `h:` and the hex SHA-256 of a byte string longer than
    /// `Key::MAX_LEN`, a tuple `t(<a>,<b>)`, or `th:` and its digest when its encoding is long.
    fn encoded(&self) -> Vec<u8> {
        let hex = |digest: [u8; 32]| {
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        match (self, self.parsed()) {
            (_, Parsed::Digest(d)) => format!("h:{}", hex(d)).into_bytes(),
            (_, Parsed::TupleDigest(d)) => format!("th:{}", hex(d)).into_bytes(),
            (Input::Ip(ip), _) => format!("ip:{ip}").into_bytes(),
            (Input::Int(n), _) => format!("n:{n}").into_bytes(),
            (Input::Bytes(b), _) => {
                let mut out = b"s:".to_vec();
                for &c in b {
                    if (0x21..0x7f).contains(&c) && !b"%{}(),".contains(&c) {
                        out.push(c);
                    } else {
                        out.extend_from_slice(format!("%{c:02X}").as_bytes());
                    }
                }
                out
            }
            (Input::Pair(a, b), _) => {
                let mut out = b"t(".to_vec();
                out.extend(a.encoded());
                out.push(b',');
                out.extend(b.encoded());
                out.push(b')');
                out
            }
        }
    }
}

/// Reads a client key's name back, written apart from the store: a name that reads back
/// stands for one key only, so distinct keys never share a name.
fn parse(name: &[u8]) -> Option<Parsed> {
    let (parsed, rest) = parse_part(name)?;
    rest.is_empty().then_some(parsed)
}

fn parse_part(name: &[u8]) -> Option<(Parsed, &[u8])> {
    // A part ends at the first `,` or `)` (never inside a part's text but a tuple's).
    let end = |s: &[u8]| {
        s.iter()
            .position(|&b| b == b',' || b == b')')
            .unwrap_or(s.len())
    };
    let digest = |s: &[u8]| -> Option<[u8; 32]> {
        let text = std::str::from_utf8(s).ok()?;
        let bytes: Option<Vec<u8>> = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
            .collect();
        bytes?.try_into().ok()
    };
    if let Some(mut rest) = name.strip_prefix(b"t(") {
        let mut parts = Vec::new();
        loop {
            let (part, after) = parse_part(rest)?;
            parts.push(part);
            match after.split_first()? {
                (b',', after) => rest = after,
                (b')', after) => return Some((Parsed::Tuple(parts), after)),
                _ => return None,
            }
        }
    }
    let (text, rest) = name.split_at(end(name));
    let parsed = if let Some(hex) = text.strip_prefix(b"th:") {
        Parsed::TupleDigest(digest(hex)?)
    } else if let Some(hex) = text.strip_prefix(b"h:") {
        Parsed::Digest(digest(hex)?)
    } else if let Some(ip) = text.strip_prefix(b"ip:") {
        Parsed::Ip(std::str::from_utf8(ip).ok()?.parse().ok()?)
    } else if let Some(n) = text.strip_prefix(b"n:") {
        Parsed::Int(std::str::from_utf8(n).ok()?.parse().ok()?)
    } else if let Some(escaped) = text.strip_prefix(b"s:") {
        let mut bytes = Vec::new();
        let mut i = 0;
        while i < escaped.len() {
            if escaped[i] == b'%' {
                let hex = std::str::from_utf8(escaped.get(i + 1..i + 3)?).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                bytes.push(escaped[i]);
                i += 1;
            }
        }
        Parsed::Bytes(bytes)
    } else {
        return None;
    };
    Some((parsed, rest))
}

fn input() -> impl Strategy<Value = Input> {
    // Bytes rich in the bytes that could end or fake a tag, an escape or a tuple's part.
    let byte = prop_oneof![
        3 => prop::sample::select(b"{}%7BD25:(),ts ".to_vec()),
        1 => any::<u8>(),
    ];
    let leaf = prop_oneof![
        any::<IpAddr>().prop_map(Input::Ip),
        any::<u64>().prop_map(Input::Int),
        prop::collection::vec(byte.clone(), 0..=Key::MAX_LEN).prop_map(Input::Bytes),
        prop::collection::vec(byte, Key::MAX_LEN + 1..200).prop_map(Input::Bytes),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        (inner.clone(), inner).prop_map(|(a, b)| Input::Pair(Box::new(a), Box::new(b)))
    })
}

/// Redis Cluster's hash tag: between the first `{` and the first `}` after it, when not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

fn every_client_key_is_its_own_and_fills_the_hash_tag_exactly() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = server::runtime();
    let store = rt.block_on(async { server::closed(&server.url()).await });
    let single = RateLimiter::gcra(Quota::per_minute(10).named("a{b}c")).with_store(store.clone());
    let tiered = RateLimiter::sliding_window([Quota::per_second(2), Quota::per_hour(100)])
        .with_store(store.prefix("app"));
    proptest!(ProptestConfig::with_cases(2000), |(inputs in prop::collection::vec(input(), 1..20))| {
        let mut seen: HashMap<Vec<u8>, Key> = HashMap::new();
        for input in &inputs {
            let key = input.key();
            for keys in [single.table().redis_keys(&key), tiered.table().redis_keys(&key)] {
                for redis_key in keys {
                    let tag = hash_tag(&redis_key);
                    prop_assert_eq!(tag, Some(&input.encoded()[..]));
                    prop_assert!(redis_key.iter().all(u8::is_ascii_graphic), "{:?}", redis_key);
                    prop_assert_eq!(tag.and_then(parse), Some(input.parsed()));
                    if let Some(other) = seen.insert(redis_key, key.clone()) {
                        prop_assert_eq!(&other, &key, "two client keys share one Redis key");
                    }
                }
            }
        }
    });
}

fn a_long_key_is_stored_by_its_digest_never_its_bytes() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = server::runtime();
    rt.block_on(async {
        let store = RedisStore::connect(&server.url()).await.unwrap();
        let limiter = RateLimiter::gcra(Quota::per_minute(10).named("long")).with_store(store);
        let secret = format!("Bearer {}", "s3cr3t".repeat(20));
        let key = Key::from(secret.as_str());
        let names = limiter.table().redis_keys(&key);
        let digest: String = key
            .as_digest()
            .expect("a long key has a digest")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(names.len(), 1);
        let name = String::from_utf8(names[0].clone()).unwrap();
        assert!(
            name.starts_with(&format!("tollgate:{{h:{digest}}}:long:gcra.")),
            "{name}"
        );
        assert!(!name.contains("s3cr3t"), "{name}");
        // And the state lives there.
        assert!(limiter.check(key).await.unwrap().allowed);
        let exists = server::command(server.port, &format!("EXISTS {name}"));
        assert_eq!(exists.as_deref(), Some(":1\r\n"));
    });
}

fn a_prefix_with_a_brace_is_refused() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = server::runtime();
    let store = rt.block_on(async { RedisStore::connect(&server.url()).await.unwrap() });
    for prefix in ["app{1}", "}", "{"] {
        let store = store.clone();
        let panic =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || store.prefix(prefix)))
                .unwrap_err();
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("holds a brace"), "{message}");
        assert!(message.contains(&format!("{prefix:?}")), "{message}");
    }
    // A prefix without braces is kept.
    let store = store.prefix("app:v2");
    let limiter = RateLimiter::gcra(Quota::per_minute(1).named("p")).with_store(store);
    let names = limiter.table().redis_keys(&Key::from(1u64));
    assert!(names[0].starts_with(b"app:v2:{n:1}:p:gcra."));
}

/// Through a real layer keyed on a route and a header of any bytes: `redis-cli --scan` lists
/// every name in printable ASCII, a tuple by its parts.
fn an_operator_reads_the_names_redis_cli_lists() {
    use tollgate::key::{Header, Route};
    use tollgate::RateLimitLayer;
    use tower::{Layer, ServiceExt};

    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = server::runtime();
    rt.block_on(async {
        let store = server::closed(&server.url()).await;
        let layer = RateLimitLayer::gcra(Quota::per_minute(10).named("api"))
            .key((Route, Header::new("x-key")))
            .store(store);
        let svc = layer.layer(crate::support::services::ok());
        for value in [&b"alice"[..], b"b\xffo b,(x)", b"%7B"] {
            let request = Request::builder()
                .uri("/login")
                .header(
                    "x-key",
                    http::HeaderValue::from_bytes(value).expect("a header value"),
                )
                .body(String::new())
                .expect("a request");
            let response = svc.clone().oneshot(request).await.expect("an answer");
            assert_eq!(response.status(), http::StatusCode::OK);
        }
    });
    let listed = server::cli(server.port, &["--scan", "--pattern", "tollgate:*"]);
    let mut names: Vec<&str> = listed.lines().filter(|n| n.contains(":api:")).collect();
    names.sort_unstable();
    assert_eq!(names.len(), 3, "{listed}");
    assert!(
        names
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_graphic())),
        "{names:?}"
    );
    let tags: Vec<&str> = names
        .iter()
        .filter_map(|n| hash_tag(n.as_bytes()))
        .map(|t| std::str::from_utf8(t).expect("ASCII"))
        .collect();
    assert_eq!(
        tags,
        [
            "t(s:/login,s:%257B)",
            "t(s:/login,s:alice)",
            "t(s:/login,s:b%FFo%20b%2C%28x%29)",
        ]
    );
}

/// IPv6 clients are named by their /64 network (the default grouping), alone and in a tuple:
/// the exact names an upgrade must keep, or every IPv6 client's state would start afresh.
fn ipv6_clients_are_named_by_their_network() {
    use tollgate::key::{PeerAddr, PeerIp, Route};
    use tollgate::RateLimitLayer;
    use tower::{Layer, ServiceExt};

    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = server::runtime();
    rt.block_on(async {
        let store = server::closed(&server.url()).await;
        let alone = RateLimitLayer::gcra(Quota::per_minute(10).named("v6"))
            .store(store.clone())
            .layer(crate::support::services::ok());
        let paired = RateLimitLayer::gcra(Quota::per_minute(10).named("v6pair"))
            .key((Route, PeerIp::default()))
            .store(store)
            .layer(crate::support::services::ok());
        for peer in [
            "[2001:db8:1:2:aaaa::1]:4000",
            "[2001:db8:1:2:ffff:1:2:3]:4001",
        ] {
            for svc in [&alone, &paired] {
                let mut request = Request::builder()
                    .uri("/login")
                    .body(String::new())
                    .expect("a request");
                let peer = peer.parse().expect("a socket address");
                request.extensions_mut().insert(PeerAddr(peer));
                let response = svc.clone().oneshot(request).await.expect("an answer");
                assert_eq!(response.status(), http::StatusCode::OK);
            }
        }
    });
    let listed = server::cli(server.port, &["--scan", "--pattern", "tollgate:*"]);
    let mut tags: Vec<&str> = listed
        .lines()
        .filter(|n| n.contains(":v6"))
        .filter_map(|n| hash_tag(n.as_bytes()))
        .map(|t| std::str::from_utf8(t).expect("ASCII"))
        .collect();
    tags.sort_unstable();
    assert_eq!(
        tags,
        ["ip:2001:db8:1:2::", "t(s:/login,ip:2001:db8:1:2::)"],
        "{listed}"
    );
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "every_client_key_is_its_own_and_fills_the_hash_tag_exactly",
            every_client_key_is_its_own_and_fills_the_hash_tag_exactly,
        ),
        server::needs_redis(
            "a_long_key_is_stored_by_its_digest_never_its_bytes",
            a_long_key_is_stored_by_its_digest_never_its_bytes,
        ),
        server::needs_redis(
            "an_operator_reads_the_names_redis_cli_lists",
            an_operator_reads_the_names_redis_cli_lists,
        ),
        server::needs_redis(
            "ipv6_clients_are_named_by_their_network",
            ipv6_clients_are_named_by_their_network,
        ),
        server::needs_redis(
            "a_prefix_with_a_brace_is_refused",
            a_prefix_with_a_brace_is_refused,
        ),
    ]
}
