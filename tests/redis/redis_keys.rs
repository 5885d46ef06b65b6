//! The Redis keys the store writes: distinct client keys never share a Redis key, and the Redis
//! Cluster hash tag (the bytes between the first `{` and the first `}` after it) is exactly the
//! encoded client key, whatever bytes the client sends. The oracle below encodes keys as the
//! store documents it, written apart from the store.

use crate::support::redis as server;

use std::collections::HashMap;
use std::net::IpAddr;

use proptest::prelude::*;
use tollgate::store::RedisStore;
use tollgate::{Key, Quota, RateLimiter};

/// A key as the client gave it.
#[derive(Debug, Clone)]
enum Input {
    Ip(IpAddr),
    Int(u64),
    Bytes(Vec<u8>),
}

impl Input {
    fn key(&self) -> Key {
        match self {
            Input::Ip(ip) => Key::from(*ip),
            Input::Int(n) => Key::from(*n),
            Input::Bytes(b) => Key::from(&b[..]),
        }
    }

    /// The documented encoding: `ip:`, `n:`, `s:` with `%`, `{`, `}` escaped, or `h:` and the
    /// hex SHA-256 of a byte string longer than `Key::MAX_LEN`.
    fn encoded(&self) -> Vec<u8> {
        match self {
            Input::Ip(ip) => format!("ip:{ip}").into_bytes(),
            Input::Int(n) => format!("n:{n}").into_bytes(),
            Input::Bytes(b) if b.len() > Key::MAX_LEN => {
                let digest = Key::from(&b[..]).as_digest().copied().expect("a digest");
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                format!("h:{hex}").into_bytes()
            }
            Input::Bytes(b) => {
                let mut out = b"s:".to_vec();
                for &c in b {
                    match c {
                        b'%' => out.extend_from_slice(b"%25"),
                        b'{' => out.extend_from_slice(b"%7B"),
                        b'}' => out.extend_from_slice(b"%7D"),
                        c => out.push(c),
                    }
                }
                out
            }
        }
    }
}

fn input() -> impl Strategy<Value = Input> {
    // Bytes rich in braces and percent signs, the bytes that could end or fake a tag.
    let byte = prop_oneof![
        3 => prop::sample::select(vec![b'{', b'}', b'%', b'7', b'B', b'D', b'2', b'5', b':']),
        1 => any::<u8>(),
    ];
    prop_oneof![
        any::<IpAddr>().prop_map(Input::Ip),
        any::<u64>().prop_map(Input::Int),
        prop::collection::vec(byte.clone(), 0..=Key::MAX_LEN).prop_map(Input::Bytes),
        prop::collection::vec(byte, Key::MAX_LEN + 1..200).prop_map(Input::Bytes),
    ]
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
                    prop_assert_eq!(hash_tag(&redis_key), Some(&input.encoded()[..]));
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
            "a_prefix_with_a_brace_is_refused",
            a_prefix_with_a_brace_is_refused,
        ),
    ]
}
