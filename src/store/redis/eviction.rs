//! The eviction policy, read once when a store connects.
//!
//! A client that can mint keys (a header it chooses, an IPv6 `/64` of its own) writes one key
//! per request. Once Redis reaches its `maxmemory`, a policy that evicts by recency, frequency
//! or at random may evict a client at its limit, which then starts afresh. Under
//! `volatile-ttl` the keys that expire first go first, and every state is kept longer the more
//! of its quota it used (see [`RedisStore`](super::RedisStore), "Running Redis"); under
//! `noeviction` a full Redis refuses writes, and the store admits nothing. The store warns
//! once, at connect, when `maxmemory` is set under any other policy. A Redis that refuses
//! `CONFIG` (managed services often do) is taken as it is.

use std::time::Duration;

use redis::Value;

use super::reply::collect_texts;
use super::Connection;

/// The policies under which Redis may evict a limited client's state before the states of
/// keys that used less.
const FREEING: &[&str] = &[
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
];

/// How long connecting waits for `CONFIG GET` at most.
const BOUND: Duration = Duration::from_secs(1);

/// Reads `maxmemory` and `maxmemory-policy` (from the node the connection reaches; on a
/// cluster, one node) and warns when the policy can free a limited client. Says nothing when
/// Redis refuses `CONFIG` or does not answer in time (logged at debug).
pub(crate) async fn check(connection: &Connection) {
    let get = redis::cmd("CONFIG").arg("GET").arg("maxmemory*").clone();
    match tokio::time::timeout(BOUND, connection.query::<Value>(&get)).await {
        Ok(Ok(reply)) => {
            if let Some((policy, bytes)) = freeing(&settings(&reply)) {
                warn(policy, bytes);
            }
        }
        Ok(Err(_error)) => {
            #[cfg(feature = "tracing")]
            tracing::debug!(error = %_error, "CONFIG GET maxmemory* refused; the eviction policy is not checked");
        }
        Err(_) => {
            #[cfg(feature = "tracing")]
            tracing::debug!("CONFIG GET maxmemory* not answered within {BOUND:?}; the eviction policy is not checked");
        }
    }
}

fn warn(policy: &str, bytes: u64) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        policy,
        maxmemory = bytes,
        "Redis evicts keys at its maxmemory ({bytes} bytes) under maxmemory-policy {policy}, \
         which can evict a client at its rate limit and give it a fresh budget; run \
         `CONFIG SET maxmemory-policy volatile-ttl` (keys that used more of their quota \
         outlive those that used less) or `noeviction` (a full Redis admits nothing), and set \
         it in redis.conf"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (policy, bytes);
}

/// The policy and `maxmemory` of the first node in `settings` (the texts of a `CONFIG GET`
/// reply: names each followed by its value, one node's after another's) whose `maxmemory` is
/// set and whose policy can free a limited client.
fn freeing(settings: &[String]) -> Option<(&str, u64)> {
    // Each node's settings begin again with its own names.
    let mut bytes: Option<u64> = None;
    let mut policy: Option<&str> = None;
    for pair in settings.windows(2) {
        match pair[0].as_str() {
            "maxmemory" => bytes = pair[1].parse().ok(),
            "maxmemory-policy" => policy = Some(&pair[1]),
            _ => continue,
        }
        if let (Some(b), Some(p)) = (bytes, policy) {
            if b > 0 && FREEING.contains(&p) {
                return Some((p, b));
            }
            (bytes, policy) = (None, None);
        }
    }
    None
}

/// The texts of a `CONFIG GET` reply: a flat array (RESP2) or a map (RESP3), or one such reply
/// per node (under its address).
fn settings(reply: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_texts(reply, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn reply(pairs: &[(&str, &str)]) -> Value {
        Value::Array(pairs.iter().flat_map(|(n, v)| [bulk(n), bulk(v)]).collect())
    }

    #[test]
    fn policies_that_evict_by_recency_frequency_or_chance_are_named() {
        for policy in FREEING {
            let r = reply(&[("maxmemory", "4194304"), ("maxmemory-policy", policy)]);
            assert_eq!(freeing(&settings(&r)), Some((*policy, 4_194_304)));
        }
        for policy in ["volatile-ttl", "noeviction"] {
            let r = reply(&[("maxmemory", "4194304"), ("maxmemory-policy", policy)]);
            assert_eq!(freeing(&settings(&r)), None, "{policy}");
        }
        // Without maxmemory nothing is evicted.
        let r = reply(&[
            ("maxmemory-policy", "allkeys-lru"),
            ("maxmemory-samples", "5"),
            ("maxmemory", "0"),
        ]);
        assert_eq!(freeing(&settings(&r)), None);
    }

    #[test]
    fn resp3_maps_and_replies_per_node_are_read() {
        let map = Value::Map(vec![
            (bulk("maxmemory-policy"), bulk("allkeys-lfu")),
            (bulk("maxmemory"), bulk("100")),
        ]);
        assert_eq!(freeing(&settings(&map)), Some(("allkeys-lfu", 100)));
        let nodes = Value::Map(vec![
            (
                bulk("127.0.0.1:7000"),
                reply(&[("maxmemory", "0"), ("maxmemory-policy", "allkeys-lru")]),
            ),
            (
                bulk("127.0.0.1:7001"),
                reply(&[("maxmemory", "64"), ("maxmemory-policy", "volatile-lru")]),
            ),
        ]);
        assert_eq!(freeing(&settings(&nodes)), Some(("volatile-lru", 64)));
        assert_eq!(freeing(&settings(&Value::Nil)), None);
    }
}
