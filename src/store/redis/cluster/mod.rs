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

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, RedisResult};

use super::healths::Nodes;
use super::slot_map::{ask, first, Masters};

mod link;
mod node;

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
            current: Arc::downgrade(&current),
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
    current: Weak<ArcSwap<ClusterConnection>>,
    nodes: Nodes,
    /// The masters of the last slot map connected with.
    known: Mutex<Option<Masters>>,
}
