//! [`RedisStore`]: limits that hold across every server, through Redis or Redis Cluster.
//!
//! Each check is one round trip: a Lua script (run by `EVALSHA`, loaded again after a
//! `NOSCRIPT`) reads the key's state, decides with the same integer math as the in-memory
//! algorithms, and writes the new state back, atomically. Time comes from Redis (`TIME`), so
//! every server decides on one clock. Every write sets a TTL equal to the time until the key's
//! state is fresh again, so no idle key stays in Redis.
//!
//! Keys are `tollgate:{<key>}:<policy>` (tiers add `:<n>`): the braces are a hash tag, so a
//! key's tiers live in one Redis Cluster slot and one script updates them together. The
//! client's key is written as `ip:<address>`, `n:<integer>`, `s:<bytes>` (binary-safe) or
//! `h:<hex SHA-256>` for keys longer than [`Key::MAX_LEN`](crate::Key::MAX_LEN).
//!
//! Policies are identified by name in Redis: limiters on every server with the same quota name
//! and algorithm share one limit. Two different limits in one application need different names
//! ([`Quota::named`](crate::Quota::named)); an unnamed quota is named by its text form
//! (`"60/min"`).
//!
//! ```no_run
//! use tollgate::store::RedisStore;
//! use tollgate::{Quota, RateLimiter};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), tollgate::Error> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! let limiter = RateLimiter::gcra(Quota::per_minute(60).named("api")).with_store(store);
//! let decision = limiter.check("user-1").await?;
//! assert!(decision.allowed);
//! # Ok(())
//! # }
//! ```
//!
//! # When Redis fails
//!
//! Each call waits at most [`timeout`](RedisStore::timeout) (50 ms by default). A call that
//! fails or times out is answered by the failure policy ([`OnFailure`]): by default a local
//! [`MemoryStore`], so each server keeps limiting on its own until
//! Redis answers again. Failures are logged as warnings (at most one every 10 s per policy)
//! and counted in `tollgate_store_failures_total{policy, on_failure}` (feature `metrics`). The
//! connection is re-established by itself after Redis restarts.
//!
//! # Denials cost no round trip
//!
//! A denial is remembered locally until its `retry_after`
//! ([`deny_cache`](RedisStore::deny_cache)), so a client that keeps knocking while it is
//! limited is answered without asking Redis. This is exact across servers: no request on
//! another server can make a denial end sooner.

mod algorithms;
mod deny_cache;
mod table;

pub use self::algorithms::{RedisAlgorithm, RedisTier};
pub use self::table::{RedisFuture, RedisTable};

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use super::{MemoryState, MemoryStore, Store};
use crate::{Error, Key};

/// What a check does when Redis fails or does not answer within the timeout.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum OnFailure {
    /// Allow the request (fail open): availability before the limit.
    Open,
    /// Answer with an error (fail closed): the layer answers `503 Service Unavailable`
    /// (gRPC `UNAVAILABLE`) without calling the service.
    Closed,
    /// Decide in this local store (the default, with a new [`MemoryStore`]): each server
    /// limits on its own until Redis answers again.
    Local(MemoryStore),
}

impl Default for OnFailure {
    fn default() -> Self {
        Self::Local(MemoryStore::new())
    }
}

#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Per-key state in Redis or Redis Cluster, shared by every server that uses it.
///
/// See the [module docs](self) for how keys, time and failures are handled. Clones share the
/// connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    prefix: Box<str>,
    timeout: Duration,
    on_failure: OnFailure,
    deny_cache: usize,
    caller_clock: bool,
}

impl RedisStore {
    /// The default [`timeout`](Self::timeout) of one call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

    /// How many denials a table remembers locally by default.
    pub const DEFAULT_DENY_CACHE: usize = 10_000;

    /// Connects to one Redis server (`redis://host:port/db`, `rediss://` for TLS when
    /// redis-rs is built with it). The connection is multiplexed and comes back by itself
    /// after Redis restarts.
    ///
    /// # Errors
    ///
    /// When the URL is invalid or the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = redis::Client::open(url).map_err(Error::store)?;
        // The store bounds each call with its own timeout, so the connection sets none.
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(Error::store)?;
        Ok(Self::from_connection_manager(manager))
    }

    /// Connects to a Redis Cluster through any of its nodes.
    ///
    /// # Errors
    ///
    /// When a URL is invalid or the cluster cannot be reached.
    pub async fn cluster<I, U>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        let client = ClusterClient::builder(urls)
            .connection_timeout(Duration::from_secs(1))
            // The store bounds each call with its own timeout; this only backs it up.
            .response_timeout(Duration::from_secs(3600))
            .build()
            .map_err(Error::store)?;
        let connection = client.get_async_connection().await.map_err(Error::store)?;
        Ok(Self::from_cluster_connection(connection))
    }

    /// A store over a connection manager you made.
    pub fn from_connection_manager(manager: ConnectionManager) -> Self {
        Self::new(Connection::Single(manager))
    }

    /// A store over a Redis Cluster connection you made.
    pub fn from_cluster_connection(connection: ClusterConnection) -> Self {
        Self::new(Connection::Cluster(connection))
    }

    fn new(connection: Connection) -> Self {
        Self {
            connection,
            prefix: "tollgate".into(),
            timeout: Self::DEFAULT_TIMEOUT,
            on_failure: OnFailure::default(),
            deny_cache: Self::DEFAULT_DENY_CACHE,
            caller_clock: false,
        }
    }

    /// Starts every key with `prefix` instead of `tollgate`, to keep several applications
    /// apart in one Redis.
    #[must_use]
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Self {
        self.prefix = prefix.as_ref().into();
        self
    }

    /// The longest one check waits for Redis (50 ms by default); after it the
    /// [failure policy](Self::on_failure) answers.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What a check answers when Redis fails or times out.
    #[must_use]
    pub fn on_failure(mut self, on_failure: OnFailure) -> Self {
        self.on_failure = on_failure;
        self
    }

    /// Remembers at most `capacity` denials per policy locally, each until its
    /// `retry_after` (10 000 by default; 0 turns it off). Only requests of cost 1 are
    /// answered from it.
    #[must_use]
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = capacity;
        self
    }

    /// Decides on the limiter's clock instead of Redis `TIME`: for tests and simulations that
    /// move time by hand ([`ManualClock`](crate::clock::ManualClock)). In production every
    /// server must decide on one clock, which is what Redis `TIME` gives; leave this off.
    #[must_use]
    pub fn with_caller_clock(mut self) -> Self {
        self.caller_clock = true;
        self
    }

    /// The full Lua script that decides for algorithm `A`, as sent to Redis.
    pub fn script<A: RedisAlgorithm>() -> String {
        table::script_source::<A>()
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.connection {
            Connection::Single(_) => "single",
            Connection::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisStore")
            .field("connection", &kind)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("on_failure", &self.on_failure)
            .field("deny_cache", &self.deny_cache)
            .field("caller_clock", &self.caller_clock)
            .finish()
    }
}

impl<A: RedisAlgorithm> Store<A> for RedisStore
where
    A::State: MemoryState,
{
    type Table = RedisTable<A>;
    type Future = RedisFuture;

    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> RedisTable<A> {
        RedisTable::new(self, policy, shared, algorithm)
    }

    fn check(table: &RedisTable<A>, key: Key, now: u64, cost: u64) -> RedisFuture {
        table.run(key, now, cost, false)
    }

    fn refund(table: &RedisTable<A>, key: Key, now: u64, cost: u64) -> RedisFuture {
        table.run(key, now, cost, true)
    }
}
