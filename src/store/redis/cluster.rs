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
//!
//! The slot map read at connect, and each one the watch connects again with, also tells the
//! store which master serves each slot, and what it knows of each ([`healths`](super::healths)).
//! A master known down is not called: its probe's failures have the watch read the slot map
//! instead, until it answers or a replica is promoted in its place. A master that answers its
//! probe while the connection does not reach it yet (redis-rs tries a lost node again at most
//! once a second) has the probe connect again before calls go back to it.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::mpsc;

use super::errors;
use super::health::{answered, Master};
use super::healths::{NodeMap, Nodes};
use super::slot_map::{masters, parse, Masters};
use crate::ErrorKind;

/// The longest the watch, or a probe, waits for a new connection.
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
    /// What the watch and the masters' probes share; `None` when nothing watches.
    link: Option<Arc<Link>>,
}

/// A cluster client with the store's settings, over the nodes given.
pub(crate) type MakeClient = fn(Vec<ConnectionInfo>) -> RedisResult<ClusterClient>;

impl Cluster {
    /// `connection` as it is: nothing replaces it.
    pub(crate) fn unwatched(connection: ClusterConnection) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(connection)),
            failed: None,
            link: None,
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
        let link = Arc::new(Link {
            seeds,
            make,
            current: Arc::downgrade(&current),
            nodes: Nodes::default(),
            failed: failed.clone(),
            known: Mutex::new(None),
        });
        link.follow(known);
        tokio::spawn(watch(Arc::downgrade(&link), failures));
        Ok(Self {
            current,
            failed: Some(failed),
            link: Some(link),
        })
    }

    /// What the store knows of each master, when the connection is watched.
    pub(crate) fn nodes(&self) -> Option<Nodes> {
        self.link.as_ref().map(|link| Arc::clone(&link.nodes))
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

/// What the watch and the masters' probes share: how to connect again (to the masters read,
/// with the seeds' settings; else through the seeds), the connection they replace, and the
/// store's map of the masters, which follows each slot map connected with.
struct Link {
    seeds: Vec<ConnectionInfo>,
    make: MakeClient,
    current: Weak<ArcSwap<ClusterConnection>>,
    nodes: Nodes,
    failed: mpsc::Sender<()>,
    /// The masters of the last slot map connected with.
    known: Mutex<Option<Masters>>,
}

impl Link {
    fn known(&self) -> Option<Masters> {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The masters connected with are `masters`: the store's map follows them, keeping what
    /// it knows of the masters it still lists (none when the seeds are not plain TCP
    /// addresses).
    fn follow(self: &Arc<Self>, masters: Option<Masters>) {
        let seed = self.seeds.first();
        let ranges = masters
            .iter()
            .flatten()
            .filter_map(|(first, last, host, port)| {
                let info = at(seed?, host, *port)?;
                let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
                    return None;
                };
                let node = Node {
                    address: format!("{host}:{port}"),
                    host,
                    port,
                    info,
                    link: Arc::downgrade(self),
                };
                Some((*first, *last, Box::new(node) as Box<dyn Master>))
            });
        let map = NodeMap::new(ranges, &self.nodes.load());
        self.nodes.store(Arc::new(map));
        *self.known.lock().unwrap_or_else(PoisonError::into_inner) = masters;
    }

    /// Connects again, to `masters`, and sends every later call through the new connection;
    /// whether it did.
    async fn reconnect(self: &Arc<Self>, masters: Masters) -> bool {
        let Some(fresh) = self.to(&masters).await else {
            return false;
        };
        let Some(current) = self.current.upgrade() else {
            return false;
        };
        current.store(Arc::new(fresh));
        self.follow(Some(masters));
        true
    }

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

/// A master of the slot map, as its probe asks it.
struct Node {
    /// `host:port`.
    address: String,
    host: String,
    port: u16,
    /// The seeds' settings at the master's address.
    info: ConnectionInfo,
    link: Weak<Link>,
}

/// Its address only: the settings hold credentials.
impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Master for Node {
    fn address(&self) -> &str {
        &self.address
    }

    /// `CLUSTER INFO` through the store's connection; else over a connection of its own, and
    /// when the master serves its slots there, a new connection for the store. While the
    /// master does not, each probe reads the slot map through the store's connection (and the
    /// watch is told): a replica promoted in its place is connected to, its slots' keys
    /// decided there, within a probe of the promotion.
    fn probe(
        &self,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let Some(link) = self.link.upgrade() else {
                return false;
            };
            let Some(current) = link.current.upgrade() else {
                return false;
            };
            let mut connection = ClusterConnection::clone(&current.load());
            drop(current);
            let to_node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: self.host.clone(),
                port: self.port,
            });
            let routed = connection.route_command(cluster_info(), to_node);
            if tokio::time::timeout(timeout, routed)
                .await
                .is_ok_and(serving)
            {
                return true;
            }
            let own = async {
                let client = redis::Client::open(self.info.clone())?;
                let mut own = client.get_multiplexed_async_connection().await?;
                cluster_info().query_async(&mut own).await
            };
            if !tokio::time::timeout(timeout, own).await.is_ok_and(serving) {
                // Full: a round is due already. Closed: nothing watches any more.
                let _ = link.failed.try_send(());
                let slots = connection.route_command(
                    redis::cmd("CLUSTER").arg("SLOTS").clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                );
                let seen = tokio::time::timeout(timeout, slots).await;
                if let Some(seen) = seen.ok().and_then(Result::ok).and_then(|r| parse(&r)) {
                    if link.known().as_ref() != Some(&seen) {
                        link.reconnect(seen).await;
                    }
                }
                return false;
            }
            match link.known() {
                Some(masters) => link.reconnect(masters).await,
                None => false,
            }
        })
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

fn cluster_info() -> Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("INFO");
    cmd
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

/// The watch: after each failure (at most one round every [`ROUND_GAP`]), reads the masters
/// from the cluster, and when they are not the ones the connection was made with, replaces it
/// with a new connection (and the store's map of the masters with theirs). Ends when every
/// [`Cluster`] of the link is gone.
async fn watch(link: Weak<Link>, mut failures: mpsc::Receiver<()>) {
    while failures.recv().await.is_some() {
        let Some(link) = link.upgrade() else {
            return;
        };
        if link.current.strong_count() == 0 {
            return;
        }
        let known = link.known();
        let seen = masters(&link.nodes(known.as_ref())).await;
        if let Some(seen) = seen.filter(|seen| known.as_ref() != Some(seen)) {
            if link.reconnect(seen).await {
                #[cfg(feature = "tracing")]
                tracing::info!(
                    "Redis Cluster: the masters changed while calls failed (a failover); \
                     the rate limit store connected again"
                );
            }
        }
        drop(link);
        tokio::time::sleep(ROUND_GAP).await;
        while failures.try_recv().is_ok() {}
    }
}
