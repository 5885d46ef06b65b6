//! The connection to a Redis Cluster, and the watch that follows a failover the client misses.
//!
//! The redis-rs cluster client learns that a master's slots moved when a node answers `MOVED`
//! or a connection to it drops. A master that stops answering while its connections stay open
//! (a frozen process or machine, a network that drops packets) gives it neither: the client
//! keeps sending that master's calls to it after the cluster has promoted its replica, and
//! they time out until the application restarts. So the connection of a store made by
//! [`RedisStore::cluster`](super::RedisStore::cluster) is watched: when a call fails to reach
//! Redis or is abandoned at the store's timeout, a task asks the cluster for its slot map
//! (`CLUSTER SLOTS`), and when the masters changed since the connection was made, it connects
//! again (to the masters it just read, so a frozen node costs nothing more) and sends every
//! later call through the new connection.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::mpsc;

use super::errors;
use crate::ErrorKind;

/// How long the watch waits for the first node to answer `CLUSTER SLOTS`.
const ASK_BOUND: Duration = Duration::from_millis(500);
/// The longest the watch waits for a new connection.
const CONNECT_BOUND: Duration = Duration::from_secs(5);
/// How long a call must have waited when it is dropped unfinished for the watch to take it for
/// a failure (abandoned at the store's timeout), rather than for a request its client gave up.
const ABANDONED_AFTER: Duration = Duration::from_millis(10);
/// The least time from one round of the watch to the next: failures seen meanwhile are about
/// the slot map the round read.
const ROUND_GAP: Duration = Duration::from_secs(1);

/// A Redis Cluster connection that a watch may replace after a failover. Clones share it.
#[derive(Clone)]
pub(crate) struct Cluster {
    current: Arc<ArcSwap<ClusterConnection>>,
    /// Tells the watch that a call did not reach Redis; `None` when nothing watches (a
    /// connection the caller made).
    failed: Option<mpsc::Sender<()>>,
}

/// Each slot range and its master's address, as `CLUSTER SLOTS` lists them, in order.
type Masters = Vec<(i64, i64, Vec<u8>, i64)>;

/// A cluster client with the store's settings, over the nodes given.
pub(crate) type MakeClient = fn(Vec<ConnectionInfo>) -> RedisResult<ClusterClient>;

impl Cluster {
    /// `connection` as it is: nothing replaces it.
    pub(crate) fn unwatched(connection: ClusterConnection) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(connection)),
            failed: None,
        }
    }

    /// A connection through `seeds` (a client from `make`), watched by a task that connects
    /// again after a failover. The task ends when the last clone is dropped.
    pub(crate) async fn watched(seeds: Vec<ConnectionInfo>, make: MakeClient) -> RedisResult<Self> {
        let connection = make(seeds.clone())?.get_async_connection().await?;
        let known = masters(&seeds).await;
        let current = Arc::new(ArcSwap::from_pointee(connection));
        // One pending failure is enough to start a round.
        let (failed, failures) = mpsc::channel(1);
        let again = Reconnect { seeds, make };
        tokio::spawn(watch(Arc::downgrade(&current), again, known, failures));
        Ok(Self {
            current,
            failed: Some(failed),
        })
    }

    fn connection(&self) -> (ClusterConnection, Outcome<'_>) {
        let connection = ClusterConnection::clone(&self.current.load());
        let outcome = Outcome {
            failed: self.failed.as_ref(),
            sent: Instant::now(),
            ended: false,
        };
        (connection, outcome)
    }
}

impl ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let (mut connection, mut outcome) = self.connection();
        Box::pin(async move {
            let reply = connection.req_packed_command(cmd).await;
            outcome.ended(&reply);
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let (mut connection, mut outcome) = self.connection();
        Box::pin(async move {
            let replies = connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            outcome.ended(&replies);
            replies
        })
    }

    fn get_db(&self) -> i64 {
        self.current.load().get_db()
    }
}

/// How one call ended, for the watch: a call dropped before its end after waiting
/// [`ABANDONED_AFTER`] or more (abandoned at the store's timeout), or one that could not reach
/// Redis, starts a round.
struct Outcome<'a> {
    failed: Option<&'a mpsc::Sender<()>>,
    sent: Instant,
    ended: bool,
}

impl Outcome<'_> {
    fn ended<T>(&mut self, reply: &RedisResult<T>) {
        self.ended = true;
        if let Err(error) = reply {
            if matches!(
                errors::kind(error),
                ErrorKind::Unreachable | ErrorKind::Timeout
            ) {
                self.tell();
            }
        }
    }

    fn tell(&self) {
        if let Some(failed) = self.failed {
            // Full: a round is due already. Closed: nothing watches any more.
            let _ = failed.try_send(());
        }
    }
}

impl Drop for Outcome<'_> {
    fn drop(&mut self) {
        if !self.ended && self.sent.elapsed() >= ABANDONED_AFTER {
            self.tell();
        }
    }
}

/// How the watch connects again: to the masters it read, with the seeds' settings; else
/// through the seeds.
struct Reconnect {
    seeds: Vec<ConnectionInfo>,
    make: MakeClient,
}

impl Reconnect {
    /// The nodes of `masters` with the first seed's settings, each once; `None` when the seed
    /// is not a plain TCP address (TLS, a Unix socket).
    fn at_masters(&self, masters: &Masters) -> Option<Vec<ConnectionInfo>> {
        let seed = self.seeds.first()?;
        let mut nodes = Vec::new();
        for (_, _, host, port) in masters {
            add(&mut nodes, at(seed, host, *port)?);
        }
        Some(nodes)
    }

    /// Whom to ask for the slot map: the `known` masters and the seeds, each once.
    fn nodes(&self, known: Option<&Masters>) -> Vec<ConnectionInfo> {
        let mut nodes = known
            .and_then(|known| self.at_masters(known))
            .unwrap_or_default();
        for seed in &self.seeds {
            add(&mut nodes, seed.clone());
        }
        nodes
    }

    /// A new connection: through the masters just read (a frozen seed costs nothing), else
    /// through the seeds.
    async fn to(&self, masters: &Masters) -> Option<ClusterConnection> {
        let masters_only = self.at_masters(masters).unwrap_or_default();
        for nodes in [masters_only, self.seeds.clone()] {
            if nodes.is_empty() {
                continue;
            }
            let Ok(client) = (self.make)(nodes) else {
                continue;
            };
            if let Ok(Ok(connection)) =
                tokio::time::timeout(CONNECT_BOUND, client.get_async_connection()).await
            {
                return Some(connection);
            }
        }
        None
    }
}

/// Adds `node` to `nodes` unless an address equal to its is there.
fn add(nodes: &mut Vec<ConnectionInfo>, node: ConnectionInfo) {
    let address = node.addr().to_string();
    if !nodes.iter().any(|n| n.addr().to_string() == address) {
        nodes.push(node);
    }
}

/// `seed`'s settings at `host:port`, when `seed` is a plain TCP address.
fn at(seed: &ConnectionInfo, host: &[u8], port: i64) -> Option<ConnectionInfo> {
    let ConnectionAddr::Tcp(..) = seed.addr() else {
        return None;
    };
    let host = String::from_utf8(host.to_vec()).ok()?;
    let port = u16::try_from(port).ok()?;
    Some(seed.clone().set_addr(ConnectionAddr::Tcp(host, port)))
}

/// The watch: after each failure (at most one round every [`ROUND_GAP`]), reads the masters
/// from the cluster, and when they are not the ones `current` was made with, replaces it with
/// a new connection. Ends when every [`Cluster`] of `current` is gone.
async fn watch(
    current: Weak<ArcSwap<ClusterConnection>>,
    again: Reconnect,
    mut known: Option<Masters>,
    mut failures: mpsc::Receiver<()>,
) {
    while failures.recv().await.is_some() {
        if current.strong_count() == 0 {
            return;
        }
        let seen = masters(&again.nodes(known.as_ref())).await;
        if let Some(seen) = seen.filter(|seen| known.as_ref() != Some(seen)) {
            if let Some(fresh) = again.to(&seen).await {
                let Some(current) = current.upgrade() else {
                    return;
                };
                current.store(Arc::new(fresh));
                #[cfg(feature = "tracing")]
                tracing::info!(
                    "Redis Cluster: the masters changed while calls failed (a failover); \
                     the rate limit store connected again"
                );
                known = Some(seen);
            }
        }
        tokio::time::sleep(ROUND_GAP).await;
        while failures.try_recv().is_ok() {}
    }
}

/// The masters, from the first of `nodes` to answer `CLUSTER SLOTS` (all asked at once,
/// each over a connection of its own, so a frozen node or a stalled client holds up nothing)
/// within [`ASK_BOUND`]; `None` when none does.
async fn masters(nodes: &[ConnectionInfo]) -> Option<Masters> {
    let mut asks = tokio::task::JoinSet::new();
    for node in nodes {
        asks.spawn(ask(node.clone()));
    }
    let first = async {
        while let Some(answer) = asks.join_next().await {
            if let Ok(Some(masters)) = answer {
                return Some(masters);
            }
        }
        None
    };
    // Dropping the set stops the asks still under way.
    tokio::time::timeout(ASK_BOUND, first).await.ok().flatten()
}

/// `node`'s `CLUSTER SLOTS`, read.
async fn ask(node: ConnectionInfo) -> Option<Masters> {
    let client = redis::Client::open(node).ok()?;
    let mut connection = client.get_multiplexed_async_connection().await.ok()?;
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut connection)
        .await
        .ok()?;
    parse(&reply)
}

/// The masters in a `CLUSTER SLOTS` reply: for each range, its first and last slot and its
/// master's host and port (the first node listed), sorted.
fn parse(reply: &Value) -> Option<Masters> {
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
            let host = match master.first()? {
                Value::BulkString(host) => host.clone(),
                Value::SimpleString(host) => host.clone().into_bytes(),
                _ => return None,
            };
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
