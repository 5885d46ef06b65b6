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
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, RedisFuture, RedisResult};
use tokio::sync::mpsc;

use self::link::watch;
use super::connection::OnDrop;
use super::errors;
use super::healths::Nodes;
use super::slot_map::{masters, Masters};
use crate::ErrorKind;

mod link;
mod node;

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

    /// The database of the connection in use.
    pub(crate) fn db(&self) -> i64 {
        self.current.load().get_db()
    }

    /// What the store knows of each master, when the connection is watched.
    pub(crate) fn nodes(&self) -> Option<Nodes> {
        self.link.as_ref().map(|link| Arc::clone(&link.nodes))
    }

    /// Runs `request` on the connection in use, telling the watch how it ended: a call that
    /// could not reach Redis, or one dropped before its end after waiting [`ABANDONED_AFTER`]
    /// or more (abandoned at the store's timeout), starts a round.
    pub(crate) fn on_current<'a, T, F>(
        &'a self,
        request: impl FnOnce(ClusterConnection) -> F + Send + 'a,
    ) -> RedisFuture<'a, T>
    where
        F: Future<Output = RedisResult<T>> + Send + 'a,
        T: Send + 'a,
    {
        // Full: a round is due already. Closed: nothing watches any more.
        let tell = move || {
            if let Some(failed) = &self.failed {
                let _ = failed.try_send(());
            }
        };
        let sent = Instant::now();
        let abandoned = OnDrop::new(move || {
            if sent.elapsed() >= ABANDONED_AFTER {
                tell();
            }
        });
        let connection = ClusterConnection::clone(&self.current.load());
        Box::pin(async move {
            let reply = request(connection).await;
            abandoned.defuse();
            if reply.as_ref().is_err_and(|error| {
                matches!(
                    errors::kind(error),
                    ErrorKind::Unreachable | ErrorKind::Timeout
                )
            }) {
                tell();
            }
            reply
        })
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
