//! The slot map of a Redis Cluster as `CLUSTER SLOTS` tells it: each slot range and its
//! master, read from the first of several nodes to answer.

use std::future::Future;
use std::time::Duration;

use redis::{ConnectionInfo, RedisResult, Value};

/// Each slot range and its master's address, as `CLUSTER SLOTS` lists them, in order.
pub(crate) type Masters = Vec<(i64, i64, Vec<u8>, i64)>;

/// The masters, from the first of `asks` (each a node's `CLUSTER SLOTS` reply) to answer with
/// a slot map within `bound`: all asked at once, so a frozen node holds up nothing; `None`
/// when none does.
pub(crate) async fn first<F>(asks: impl IntoIterator<Item = F>, bound: Duration) -> Option<Masters>
where
    F: Future<Output = RedisResult<Value>> + Send + 'static,
{
    let mut asks: tokio::task::JoinSet<_> = asks.into_iter().collect();
    let first = async {
        while let Some(answer) = asks.join_next().await {
            if let Some(masters) = answer.ok().and_then(Result::ok).and_then(|r| parse(&r)) {
                return Some(masters);
            }
        }
        None
    };
    // Dropping the set stops the asks still under way.
    tokio::time::timeout(bound, first).await.ok().flatten()
}

/// `node`'s `CLUSTER SLOTS`, over a connection of its own.
pub(crate) async fn ask(node: ConnectionInfo) -> RedisResult<Value> {
    let client = redis::Client::open(node)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    slots().query_async(&mut connection).await
}

/// `CLUSTER SLOTS`.
pub(crate) fn slots() -> redis::Cmd {
    redis::cmd("CLUSTER").arg("SLOTS").clone()
}

/// The masters in a `CLUSTER SLOTS` reply: for each range, its first and last slot and its
/// master's host and port (the first node listed), sorted.
pub(crate) fn parse(reply: &Value) -> Option<Masters> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut masters = ranges
        .iter()
        .map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Value::Int(first), Value::Int(last), Value::Array(master)) =
                (fields.first()?, fields.get(1)?, fields.get(2)?)
            else {
                return None;
            };
            let host = super::reply::text(master.first()?)?.into_bytes();
            let Value::Int(port) = master.get(1)? else {
                return None;
            };
            Some((*first, *last, host, *port))
        })
        .collect::<Option<Masters>>()?;
    masters.sort();
    Some(masters)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: i64, last: i64, port: i64) -> Value {
        let node = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"0123abcd".to_vec()),
            ])
        };
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            node(port),
            node(port + 1000),
        ])
    }

    #[test]
    fn the_masters_of_a_slot_map_are_read_in_slot_order() {
        let reply = Value::Array(vec![range(5461, 10922, 7001), range(0, 5460, 7000)]);
        assert_eq!(
            parse(&reply),
            Some(vec![
                (0, 5460, b"127.0.0.1".to_vec(), 7000),
                (5461, 10922, b"127.0.0.1".to_vec(), 7001),
            ])
        );
        // A replica promoted in a master's place is a change.
        let promoted = Value::Array(vec![range(0, 5460, 8000), range(5461, 10922, 7001)]);
        assert_ne!(parse(&reply), parse(&promoted));
    }

    #[test]
    fn a_reply_that_is_not_a_slot_map_reads_as_none() {
        assert_eq!(parse(&Value::Nil), None);
        assert_eq!(parse(&Value::Array(vec![Value::Int(1)])), None);
        let no_port = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(1),
            Value::Array(vec![Value::BulkString(b"h".to_vec())]),
        ])]);
        assert_eq!(parse(&no_port), None);
    }
}
