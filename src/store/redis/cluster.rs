//! The connection to a Redis Cluster, and how it follows a failover the client misses.
//!
//! The redis-rs cluster client learns that a master's slots moved when a node answers `MOVED`
//! or a connection to it drops. A master that stops answering while its connections stay open
//! (a frozen process or machine, a network that drops packets) gives it neither: the client
//! keeps sending that master's calls to it after the cluster has promoted its replica, and
//! they time out until the application restarts. So a store made by
//! [`RedisStore::cluster`](super::RedisStore::cluster) reads the slot map (`CLUSTER SLOTS`)
//! when it connects, and knows each master's health apart ([`healths`](super::healths)): the
//! calls for a master's keys find it down (unreachable, or timeouts in a row), and its probe,
//! while it does not serve, reads the slot map through the store's connection; when the
//! masters changed (a replica promoted), it connects again (to the masters it just read, so a
//! frozen node costs nothing more) and sends every later call through the new connection.
//! A master that answers its probe while the connection does not reach it yet (redis-rs tries
//! a lost node again at most once a second) has the probe connect again before calls go back
//! to it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, RedisResult, Value};

use super::connection::lock;
use super::health::{answered, Master};
use super::healths::{NodeMap, Nodes};

/// The longest a probe waits for a new connection.
const CONNECT_BOUND: Duration = Duration::from_secs(5);

/// How long connecting waits for the first seed to answer `CLUSTER SLOTS`.
const SLOTS_BOUND: Duration = Duration::from_millis(500);

/// A Redis Cluster connection that a master's probe may replace after a failover. Clones
/// share it.
#[derive(Clone)]
pub(crate) struct Cluster {
    current: Arc<ArcSwap<ClusterConnection>>,
    /// What the masters' probes share; `None` for a connection the caller made.
    link: Option<Arc<Link>>,
}

/// A cluster client with the store's settings, over the nodes given.
pub(crate) type MakeClient = fn(Vec<ConnectionInfo>) -> RedisResult<ClusterClient>;

impl Cluster {
    /// `connection` as it is: nothing replaces it.
    pub(crate) fn unwatched(connection: ClusterConnection) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(connection)),
            link: None,
        }
    }

    /// A connection through `seeds` (a client from `make`), with the masters of the slot map
    /// read from the seeds, each watched by its health.
    pub(crate) async fn watched(seeds: Vec<ConnectionInfo>, make: MakeClient) -> RedisResult<Self> {
        let connection = make(seeds.clone())?.get_async_connection().await?;
        let known = first(seeds.iter().cloned().map(ask), SLOTS_BOUND).await;
        let current = Arc::new(ArcSwap::from_pointee(connection));
        let link = Arc::new(Link {
            seeds,
            make,
            current: Arc::clone(&current),
            nodes: Nodes::default(),
            known: Mutex::new(None),
        });
        link.follow(known);
        Ok(Self {
            current,
            link: Some(link),
        })
    }

    /// The database of the connection in use.
    pub(crate) fn db(&self) -> i64 {
        self.current.load().get_db()
    }

    /// What the store knows of each master, when the connection is watched.
    pub(crate) fn nodes(&self) -> Option<Nodes> {
        self.link.as_ref().map(|link| Arc::clone(&link.nodes))
    }

    /// The connection in use.
    pub(crate) fn current(&self) -> ClusterConnection {
        ClusterConnection::clone(&self.current.load())
    }
}

/// What the masters' probes share: how to connect again (to the masters read, with the seeds'
/// settings; else through the seeds), the connection they replace, and the store's map of the
/// masters, which follows each slot map connected with.
struct Link {
    seeds: Vec<ConnectionInfo>,
    make: MakeClient,
    current: Arc<ArcSwap<ClusterConnection>>,
    nodes: Nodes,
    /// The masters of the last slot map connected with.
    known: Mutex<Option<Masters>>,
}

impl Link {
    /// The masters connected with are `masters`: the store's map follows them, keeping what
    /// it knows of the masters it still lists (none when the seeds are not plain TCP
    /// addresses).
    fn follow(self: &Arc<Self>, masters: Option<Masters>) {
        let seed = self.seeds.first();
        let ranges = masters
            .iter()
            .flatten()
            .filter_map(|(first, last, host, port)| {
                let node = Node {
                    address: format!("{host}:{port}"),
                    info: at(seed?, host, *port)?,
                    host: host.clone(),
                    port: *port,
                    link: Arc::downgrade(self),
                };
                Some((*first, *last, Box::new(node) as Box<dyn Master>))
            });
        let map = NodeMap::new(ranges, &self.nodes.load());
        self.nodes.store(Arc::new(map));
        *lock(&self.known) = masters;
    }

    /// Connects again, to `masters`, and sends every later call through the new connection;
    /// whether it did.
    async fn reconnect(self: &Arc<Self>, masters: Masters) -> bool {
        let Some(fresh) = self.to(&masters).await else {
            return false;
        };
        self.current.store(Arc::new(fresh));
        self.follow(Some(masters));
        true
    }

    /// A new connection: through the masters just read, each once, with the first seed's
    /// settings (a frozen seed costs nothing; none when the seed is not a plain TCP address),
    /// else through the seeds.
    async fn to(&self, masters: &Masters) -> Option<ClusterConnection> {
        let seed = self.seeds.first();
        let masters_only = masters
            .iter()
            .enumerate()
            .filter(|&(i, (_, _, host, port))| {
                !masters[..i]
                    .iter()
                    .any(|(_, _, h, p)| (h, p) == (host, port))
            })
            .filter_map(|(_, (_, _, host, port))| at(seed?, host, *port))
            .collect();
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

/// `seed`'s settings at `host:port`, when `seed` is a plain TCP address.
fn at(seed: &ConnectionInfo, host: &str, port: u16) -> Option<ConnectionInfo> {
    let ConnectionAddr::Tcp(..) = seed.addr() else {
        return None;
    };
    Some(
        seed.clone()
            .set_addr(ConnectionAddr::Tcp(host.to_owned(), port)),
    )
}

/// A master of the slot map, as its probe asks it: `CLUSTER INFO` through the store's
/// connection or one of its own, and a new connection when the master serves again.
struct Node {
    /// `host:port`.
    address: String,
    host: String,
    port: u16,
    /// The seeds' settings at the master's address.
    info: ConnectionInfo,
    link: Weak<Link>,
}

impl Master for Node {
    fn address(&self) -> &str {
        &self.address
    }

    /// `CLUSTER INFO` through the store's connection; else over a connection of its own, and
    /// when the master serves its slots there, a new connection for the store. While the
    /// master does not, each probe reads the slot map from the other masters through the
    /// store's connection: a replica promoted in its place is connected to, its slots' keys
    /// decided there, within a probe of the promotion.
    fn probe(&self, timeout: Duration) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let Some(link) = self.link.upgrade() else {
                return false;
            };
            let mut connection = ClusterConnection::clone(&link.current.load());
            let to_node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: self.host.clone(),
                port: self.port,
            });
            let routed = connection.route_command(cluster("INFO"), to_node);
            if tokio::time::timeout(timeout, routed)
                .await
                .is_ok_and(serving)
            {
                return true;
            }
            let own = async {
                let client = redis::Client::open(self.info.clone())?;
                let mut own = client.get_multiplexed_async_connection().await?;
                cluster("INFO").query_async(&mut own).await
            };
            let serves = tokio::time::timeout(timeout, own).await.is_ok_and(serving);
            let known = lock(&link.known).clone();
            if !serves {
                // The slot map from the other masters (and a node at random), through the
                // store's connection.
                let others = known.iter().flatten().filter_map(|(_, _, host, port)| {
                    let other = *host != self.host || *port != self.port;
                    let host = host.clone();
                    other.then_some(SingleNodeRoutingInfo::ByAddress { host, port: *port })
                });
                let asks = others.chain([SingleNodeRoutingInfo::Random]).map(|to| {
                    let mut connection = connection.clone();
                    async move {
                        let to = RoutingInfo::SingleNode(to);
                        connection.route_command(cluster("SLOTS"), to).await
                    }
                });
                let seen = first(asks, timeout).await;
                if let Some(seen) = seen.filter(|seen| known.as_ref() != Some(seen)) {
                    link.reconnect(seen).await;
                }
                return false;
            }
            match known {
                Some(masters) => link.reconnect(masters).await,
                None => false,
            }
        })
    }
}

/// `CLUSTER <sub>`.
fn cluster(sub: &str) -> Cmd {
    redis::cmd("CLUSTER").arg(sub).clone()
}

/// Whether a master's reply to `CLUSTER INFO` says it serves its slots (`cluster_state:ok`: a
/// master refuses every key for 2 s after it restarts, and while it holds the cluster
/// failed); an error it answers (no permission to ask) is an answer, as to `PING`.
fn serving(reply: RedisResult<Value>) -> bool {
    match reply {
        Ok(info) => redis::from_redis_value::<String>(info)
            .is_ok_and(|info| info.contains("cluster_state:ok")),
        Err(error) => answered(Err(error)),
    }
}

/// Each slot range and its master's host and port, as `CLUSTER SLOTS` lists them, in order.
type Masters = Vec<(i64, i64, String, u16)>;

/// The masters, from the first of `asks` (each a node's `CLUSTER SLOTS` reply) to answer with
/// a slot map within `bound`: all asked at once, so a frozen node holds up nothing; `None`
/// when none does.
async fn first<F>(asks: impl IntoIterator<Item = F>, bound: Duration) -> Option<Masters>
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
async fn ask(node: ConnectionInfo) -> RedisResult<Value> {
    let client = redis::Client::open(node)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    cluster("SLOTS").query_async(&mut connection).await
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
            let host = super::reply::text(master.first()?)?;
            let Value::Int(port) = master.get(1)? else {
                return None;
            };
            Some((*first, *last, host, u16::try_from(*port).ok()?))
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
                (0, 5460, "127.0.0.1".to_owned(), 7000),
                (5461, 10922, "127.0.0.1".to_owned(), 7001),
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

    #[test]
    fn a_slot_map_with_a_port_out_of_range_reads_as_none() {
        // Not a map to connect with: no port of a node is past 65535 or negative.
        for port in [65_536, -1] {
            let reply = Value::Array(vec![range(0, 5460, 7000), range(5461, 10922, port)]);
            assert_eq!(parse(&reply), None, "port {port}");
        }
    }
}
