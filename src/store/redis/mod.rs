//! [`RedisStore`]: limits that hold across every server, through Redis, Redis Sentinel or Redis
//! Cluster.
//!
//! Each check is one round trip: a Lua script (run by `EVALSHA`, loaded again after a
//! `NOSCRIPT`) reads the key's state, decides with the same integer math as the in-memory
//! algorithms, and writes the new state back, atomically. Time comes from Redis (`TIME`), so
//! every server decides on one clock. Every write sets a TTL: the time until the key's state
//! is fresh again, and past it at most two of the quota's spans (its period, or a burst's
//! time), more the more of its quota the key used and a whole span while it is at its limit.
//! No idle key stays in Redis, and under `maxmemory-policy volatile-ttl` a full Redis evicts
//! a flood of keys that each used little before a client at its limit. Connecting warns once
//! of a `maxmemory` under a policy that can evict a limited client (`allkeys-*`,
//! `volatile-lru`, `volatile-lfu`, `volatile-random`); set `volatile-ttl` or `noeviction`.
//!
//! Redis 5.0 or newer is required (the scripts read `TIME` before they write, which older
//! servers refuse); [`connect`](RedisStore::connect), [`sentinel`](RedisStore::sentinel) and
//! [`cluster`](RedisStore::cluster) read the version once and refuse an older server with a
//! message that names it (behind Sentinel, each primary is checked before calls go to it).
//!
//! Keys are `tollgate:{<key>}:<policy>:<algorithm>.<fingerprint>` (tiers add `:<n>`): the
//! braces are a hash tag, so a key's tiers live in one Redis Cluster slot and one script
//! updates them together. The client's key is written as `ip:<address>`, `n:<integer>`,
//! `s:<bytes>` (every byte outside printable ASCII, the space and `%{}(),` escaped as `%XX`, so
//! no client byte can end the hash tag and `redis-cli --scan` shows names legibly),
//! `h:<hex SHA-256>` for keys longer than [`Key::MAX_LEN`](crate::Key::MAX_LEN), and a tuple's
//! parts so written as `t(<part>,<part>)`, e.g. `t(s:/login,ip:192.0.2.1)`. Distinct keys
//! always get distinct names. [`RedisTable::redis_keys`] tells a key's names.
//!
//! A limit on requests in flight ([`InFlightLayer`](crate::InFlightLayer))
//! keeps each key's slots as leases with an expiry, under
//! `<prefix>:{<key>}:<policy>:in_flight.<limit>:l` (the leases) and `...:n` (the slots they
//! hold); see [`lease_ttl`](crate::InFlightLayer::lease_ttl) for how leases are taken,
//! renewed and given back.
//!
//! Policies are identified by name, algorithm and parameters: limiters on every server with
//! the same configuration share one limit, and two limiters never read each other's state
//! (a GCRA and a fixed window of one quota, or one name given to two different quotas, keep
//! apart; changing a quota in the configuration starts its keys afresh, while a live layer's
//! [`Handle::set_quotas`](crate::layer::Handle::set_quotas) carries usage over). An unnamed
//! quota is named by its text form
//! (`"60/min"`), so two layers with equal unnamed quotas and algorithms share one limit: give
//! them different names ([`Quota::named`](crate::Quota::named)) to keep them apart.
//!
//! A policy whose figures the algorithm's script cannot decide exactly (GCRA and the leaky
//! bucket: periods, bursts and waits up to 2^52 ns, about 52 days; the others up to 2^53 ns or
//! requests, about 104 days) is refused where the limiter or layer gets the store, with a
//! panic that names the figure, the bound and the fix (or, from
//! [`RateLimiter::try_with_store`](crate::RateLimiter::try_with_store), an error of kind
//! [`Misconfigured`](crate::ErrorKind::Misconfigured)).
//!
//! Errors say what kind of failure they are ([`Error::kind`](crate::Error::kind)): a call that
//! outlives the timeout is a [`Timeout`](crate::ErrorKind::Timeout); a refused or dropped
//! connection is [`Unreachable`](crate::ErrorKind::Unreachable); a reply or a state the store
//! cannot read, or a script error, is [`Protocol`](crate::ErrorKind::Protocol); a server older
//! than 5.0 or credentials it refuses are [`Misconfigured`](crate::ErrorKind::Misconfigured).
//!
//! Errors and logs never carry a client's key: they name the policy and the tier, not the key.
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
//! [`MemoryStore`](crate::store::MemoryStore), so each server keeps limiting on its own until
//! Redis answers again. Failures are logged as warnings (at most one every 10 s per policy)
//! and counted in `tollgate_store_failures_total{policy, on_failure}` (feature `metrics`). The
//! connection is re-established by itself after Redis restarts; behind Redis Sentinel
//! ([`sentinel`](RedisStore::sentinel)), calls go to the replica the sentinels promote when the
//! primary fails over, and the failure policy answers in between.
//!
//! Once the store knows Redis is down, it does not wait the timeout: every check is answered
//! by the failure policy at once, and a reset or block goes to the local fallback and returns
//! its error at once. Redis is down from the first call that finds it unreachable (connection
//! refused, reset or dropped, `LOADING`), or after 3 calls in a
//! row outlive the timeout with no answer between them; calls that waited together count
//! once, so a burst held up by one slow command is one timeout, and a Redis that answers
//! slowly, or answers errors (a script error, `OOM`), is not down. Meanwhile one task sends
//! `PING` every 200 ms (each bounded by the timeout), and calls go to Redis again from its
//! first answer: within 1 s of Redis answering again. The errors of those calls are of kind
//! [`Unreachable`](crate::ErrorKind::Unreachable) and say that the store answers from the
//! failure policy until Redis answers a probe. What the store knows is shared by all its
//! policies and clones. Behind Sentinel, a primary found unreachable is dropped and calls are
//! answered at once while the sentinels are asked, and go on with the new primary from the
//! lookup's end (see [`sentinel`](RedisStore::sentinel)); only a primary that stops answering
//! (3 timeouts) is probed so. A store made by
//! [`from_connection_manager`](RedisStore::from_connection_manager) is answered at once only
//! once a call finds Redis unreachable or 3 calls time out: a manager that retries
//! connecting holds calls up meanwhile ([`connect`](RedisStore::connect) makes one that does
//! not).
//!
//! On a Redis Cluster ([`cluster`](RedisStore::cluster)) the store knows each master apart,
//! from the slot map it reads at connect and after each failover: a master is down as above,
//! by the calls for the keys of its slots (a key's slot is that of its hash tag), and while it
//! is, those keys are answered by the failure policy at once, with an error that names the
//! master's address, while the other masters' keys go to Redis as before. Its probe asks the
//! master for `CLUSTER INFO` every 200 ms and brings its keys back when the master says
//! `cluster_state:ok`, within 1 s of it serving again (a restarted master refuses every key
//! for its first 2 s, though it answers `PING`); the probe connects again when the master serves but the store's
//! connection does not reach it yet. A layer's list of its tables and its live record follow
//! the same rule by their own key's slot: a table is listed once that key's master is up (its
//! checks go on meanwhile), a reset through the layer fails at once, and the live record is
//! not read (the quotas in force are kept). A store over a connection you made
//! ([`from_cluster_connection`](RedisStore::from_cluster_connection)), or with seeds over TLS
//! or a Unix socket, keeps no such knowledge: each call waits as before.
//!
//! # Hot keys: local leases
//!
//! With [`local_leases`](RedisStore::local_leases), a server that sees a key often takes a
//! slice of the key's budget in the call that decides one of its requests, and admits the next
//! ones from the slice with no round trip, while the fleet still admits only what the algorithm
//! admits (fixed and sliding windows and tiers of them; see [`Leases`]).
//!
//! # Failover
//!
//! On a Redis Cluster with replicas, a master that fails is replaced by its replica without
//! restarting the application. A store made by [`cluster`](RedisStore::cluster) learns the new
//! slot map by itself: from the failing calls when the master's connections close (a crash),
//! and, when they stay open and nothing answers (a frozen process or machine, packets
//! dropped), from the master's health: once its calls find it down (3 timeouts in a row),
//! its probe reads `CLUSTER SLOTS` from the other masters through the store's connection
//! every 200 ms, and when the masters changed it connects again. The scripts are loaded on
//! the new master after its first `NOSCRIPT`. Until the replica is promoted (about the
//! cluster's `cluster-node-timeout`, then an election), the failure policy answers the keys
//! of the failed master's slots, at once from the moment the store knows it down (see
//! [When Redis fails](self#when-redis-fails)), and the promoted replica, a master new to the
//! store, decides its slots' keys within a probe of the promotion (and a new connection).
//! With
//! `cluster-require-full-coverage yes` (Redis's default) the cluster itself refuses every key
//! from the moment it marks the master failed until the promotion (the other masters are then
//! known down too, until they say `cluster_state:ok` again); with `no` the other masters keep
//! deciding their keys throughout. A store over a connection you made
//! ([`from_cluster_connection`](RedisStore::from_cluster_connection)) reads no slot map: it
//! follows a crash, not a frozen master.
//!
//! Replication is asynchronous and the store does not wait for replicas (`WAIT` would add a
//! round trip to every decision): decisions the old master made and acknowledged but had not
//! yet sent to its replica are lost with it, and their keys get back what those decisions
//! took. A failover can thus over-admit, per key, up to what the key was admitted within the
//! replication lag before the failure (none in 15 failovers on loopback, measured in
//! BENCHMARKS.md).
//!
//! # Denials cost one round trip a second
//!
//! A denial is remembered locally until its `retry_after` and for at most
//! [`DENY_CACHE_HOLD`](RedisStore::DENY_CACHE_HOLD) (1 s) ([`deny_cache`](RedisStore::deny_cache)),
//! so a client that keeps knocking while it is limited costs each server one round trip per
//! key and per second. No request on another server can make a denial end sooner; a reset
//! or a refund through another server frees the client here within that second.
//!
//! # Costs settled after the response
//!
//! A charge ([`RateLimiter::settle`](crate::RateLimiter::settle) above the reservation) is
//! one script call, as a refund: every tier is charged, blocked or not, and a key past its
//! quota is in debt, denied on every server until the debt is paid back, its key kept in
//! Redis until then. A debt stops at the end of the clock (`u64::MAX` ns). The windows and the
//! hybrid carry no debt: a charge of them is answered with the key's standing, as in memory.
//! A charge forgets the denial its server remembers and ends its server's leases of the
//! table ([`Leases`]); while Redis fails it follows the [failure policy](OnFailure).
//!
//! # A layer's blocks and resets
//!
//! The tables of one layer ([`RateLimitLayer`](crate::RateLimitLayer), its per-key plans and
//! its bans) share one block per client, `<prefix>:{<key>}:<layer>:block` (the layer named by
//! the quotas it was built with), which every plan's script reads besides its own. Each
//! server lists the key names of the layer's tables it makes in `<prefix>:plans:<layer>` (a
//! set of at most 65 536 names, one call per table per server), and a reset through a
//! layer's [`Handle`](crate::layer::Handle) deletes the client's keys under each name listed,
//! in the client's slot: one `SMEMBERS` and one `DEL` per 512 keys on top of the reset.
//!
//! # Live quotas
//!
//! Quotas changed through a layer's [`Handle`](crate::layer::Handle) (the layer's own, or a
//! plan's) reach every server of the layer: each change is written to
//! `<prefix>:live:<layer>`, a small hash with no TTL holding the quotas in force and a version,
//! and every server reads the version every 250 ms (one `HGET` per layer and server, 4 calls
//! a second), the whole hash only when it moved, and applies what changed with the carry-over
//! of [`set_quotas`](crate::layer::Handle::set_quotas). A change is in force on every server
//! within 250 ms and three calls (its write, then each server's reads of the version and the
//! hash, each bounded by the [`timeout`](RedisStore::timeout): 400 ms with the default). A server started later reads the record before it decides its first
//! request (that request waits one call). The last change Redis records holds everywhere.
//! While Redis is down, each server keeps the quotas in force, and a change made meanwhile is
//! written once Redis answers. Servers whose layer was built with other quotas (another
//! release) keep theirs. The reading runs as one task per layer on the tokio runtime of its
//! first request (or handle call), and ends with the layer and its services.

mod algorithms;
mod bounds;
mod carry;
mod cluster;
mod connection;
mod deny_cache;
mod errors;
mod eviction;
mod failures;
mod fallback;
mod family;
mod future;
mod health;
mod healths;
mod keys;
mod leases;
mod live;
mod on_failure;
mod reply;
mod script;
mod sentinel;
mod slots;
mod table;
mod version;

pub use self::algorithms::{RedisAlgorithm, RedisTier};
pub use self::future::RedisFuture;
pub use self::leases::Leases;
pub(crate) use self::live::{LiveRecord, POLL_EVERY};
pub use self::on_failure::OnFailure;
pub use self::table::RedisTable;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::SentinelNodeConnectionInfo;

use self::cluster::Cluster;
pub(crate) use self::connection::Connection;

use super::{Store, Tie, Update};
use crate::{Decision, Error, Key};

/// Per-key state in Redis (single, behind Sentinel, or Redis Cluster), shared by every server
/// that uses it.
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
    leases: Option<Leases>,
    /// The layer whose tables this store makes, and which of them.
    tie: Option<Tie>,
    /// Whether the server was found recent enough: when the store connects, or on its first
    /// call when it was made over a connection of the caller's.
    version: Arc<AtomicBool>,
    /// Whether Redis answers, as calls found it: of the one Redis, or of each master of a
    /// Redis Cluster (see [When Redis fails](self#when-redis-fails)).
    health: healths::Healths,
}

impl RedisStore {
    /// The default [`timeout`](Self::timeout) of one call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

    /// How many denials a table remembers locally by default.
    pub const DEFAULT_DENY_CACHE: usize = 10_000;

    /// The longest a server answers a denial from its [`deny_cache`](Self::deny_cache)
    /// before asking Redis again: a reset through another server frees the client on this
    /// one within it, and a denied client that keeps knocking costs each server one round
    /// trip per key and per this long.
    pub const DENY_CACHE_HOLD: Duration = Duration::from_secs(1);

    /// The longest a server answers a blocked key from its deny cache: as any denial,
    /// [`DENY_CACHE_HOLD`](Self::DENY_CACHE_HOLD).
    pub const BLOCK_CACHE_HOLD: Duration = Self::DENY_CACHE_HOLD;

    /// Connects to one Redis server (`redis://host:port/db`, `rediss://` for TLS when
    /// redis-rs is built with it). The connection is multiplexed and comes back by itself
    /// after Redis restarts.
    ///
    /// # Errors
    ///
    /// When the URL is invalid, the server cannot be reached, or it runs a Redis older than
    /// 5.0 (the message names the version found and the minimum).
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = redis::Client::open(url).map_err(errors::connecting)?;
        // The store bounds each call with its own timeout, so the connection sets none. One
        // attempt per reconnection: a refused connection fails the call at once, and while
        // Redis is down the store's probe asks again every 200 ms.
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(errors::connecting)?;
        Self::from_connection_manager(manager).verified().await
    }

    /// Connects to a Redis Cluster through any of its nodes (the seeds; each may be a master
    /// or a replica). The store follows a failover by itself, also of a master that stops
    /// answering without closing its connections (see [Failover](self#failover)). A node that
    /// accepts a connection and then does not answer holds up connecting, and each attempt of
    /// a call on it, for at most 1 s; [`timeout`](Self::timeout) still bounds each call.
    ///
    /// # Errors
    ///
    /// When a URL is invalid, the cluster cannot be reached, or a master runs a Redis older
    /// than 5.0 (the message names the version found and the minimum).
    pub async fn cluster<I, U>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        let seeds = urls
            .into_iter()
            .map(|url| redis::IntoConnectionInfo::into_connection_info(url.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(errors::connecting)?;
        let connection = Cluster::watched(seeds, cluster_client)
            .await
            .map_err(errors::connecting)?;
        Self::new(Connection::Cluster(connection)).verified().await
    }

    /// Connects to the primary of the master named `master_name` (as in the sentinels'
    /// `sentinel monitor <name> ...` lines) through the Redis Sentinels at `sentinel_urls`
    /// (`redis://host:26379`; credentials for the sentinels go in these URLs).
    ///
    /// When the primary fails over, decisions go on on the replica the sentinels promote,
    /// without rebuilding the store: the sentinels are asked again after a call fails on the
    /// connection or is answered `READONLY` (the old primary came back as a replica),
    /// `MASTERDOWN` or `LOADING`, and after calls in a row time out with no answer between
    /// them, 3 of them or a second of them (a frozen or unreachable host). While calls come,
    /// the sentinels are also asked every second whether they still name the same primary:
    /// one demoted while reachable (`SENTINEL FAILOVER`, a partition that healed) answers as a
    /// primary until the sentinels reconfigure it, seconds to minutes later.
    ///
    /// **A primary is used only when more than half of the sentinels in `sentinel_urls` name
    /// it**, so list every sentinel, each once, and not behind a load balancer: a stale one
    /// (partitioned away during a failover, or restarted with an old configuration) may name
    /// an old primary that restarted empty and still answers as one, and decisions made on its
    /// empty state would admit clients past their limits. A sentinel reached by two URLs (an
    /// address and a host name) votes once, from Redis 6.2 on (`SENTINEL MYID`). One sentinel
    /// listed decides alone; two listed must both answer and agree, so list three or more. A
    /// primary in use is dropped when another is named by more sentinels than it. Until a
    /// majority names a primary that answers as one, every call is answered at once by the
    /// [failure policy](Self::on_failure). Lookups run one at a time, and while none finds a
    /// primary, at most every 200 ms. The scripts are loaded on a new primary by its first
    /// `NOSCRIPT`, and each primary's version is checked before calls go to it.
    ///
    /// Redis replicates asynchronously: decisions the old primary made in its last moments
    /// may not have reached the replica it is replaced by, so a failover can forgive a client
    /// those requests.
    ///
    /// The primary is reached with the sentinels' defaults (no password, no TLS, database
    /// 0); [`sentinel_with`](Self::sentinel_with) sets them.
    ///
    /// ```no_run
    /// use tollgate::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// let store = RedisStore::sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Each names what was wrong: no URL, one that does not parse, or two that reach the same
    /// address ([`Misconfigured`](crate::ErrorKind::Misconfigured)); no sentinel answers
    /// ([`Unreachable`](crate::ErrorKind::Unreachable)); a server that is not a sentinel, or
    /// a master name no sentinel monitors (the message lists those they do): `Misconfigured`;
    /// the sentinels know the master but name no primary that answers, or no primary is named
    /// by more than half of them (`Unreachable`, saying what each named); the primary runs a
    /// Redis older than 5.0 (`Misconfigured`, naming the version found and the minimum).
    pub async fn sentinel<I, U>(sentinel_urls: I, master_name: &str) -> Result<Self, Error>
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        Self::sentinel_with(
            sentinel_urls,
            master_name,
            SentinelNodeConnectionInfo::default(),
        )
        .await
    }

    /// [`sentinel`](Self::sentinel), reaching the primary (each primary the sentinels name)
    /// with `node`: its credentials, database and TLS (TLS needs one of redis-rs's TLS
    /// features).
    ///
    /// ```no_run
    /// use redis::sentinel::SentinelNodeConnectionInfo;
    /// use redis::RedisConnectionInfo;
    /// use tollgate::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tollgate::Error> {
    /// let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(
    ///     RedisConnectionInfo::default()
    ///         .set_db(2)
    ///         .set_username("limits")
    ///         .set_password("secret"),
    /// );
    /// let store = RedisStore::sentinel_with(["redis://10.0.0.1:26379"], "mymaster", node).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`sentinel`](Self::sentinel); and credentials the primary refuses
    /// ([`Misconfigured`](crate::ErrorKind::Misconfigured)).
    pub async fn sentinel_with<I, U>(
        sentinel_urls: I,
        master_name: &str,
        node: SentinelNodeConnectionInfo,
    ) -> Result<Self, Error>
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        let urls: Vec<String> = sentinel_urls
            .into_iter()
            .map(|u| u.as_ref().to_owned())
            .collect();
        let connection = sentinel::SentinelConnection::connect(urls, master_name, node).await?;
        Self::new(Connection::Sentinel(connection)).verified().await
    }

    /// A store over a connection manager you made. The server's version is checked on the
    /// first call (a Redis older than 5.0 answers every call with an error that names it).
    pub fn from_connection_manager(manager: ConnectionManager) -> Self {
        Self::new(Connection::Single(manager))
    }

    /// A store over a Redis Cluster connection you made. The masters' versions are checked on
    /// the first call (a Redis older than 5.0 answers every call with an error that names it).
    /// The connection is used as it is: it follows a failover as far as redis-rs does (a
    /// crashed master, not a frozen one; see [Failover](self#failover)), and the store keeps
    /// no knowledge of which master is down: each call for a lost master's keys waits the
    /// [`timeout`](Self::timeout) (see [When Redis fails](self#when-redis-fails)).
    pub fn from_cluster_connection(connection: ClusterConnection) -> Self {
        Self::new(Connection::Cluster(Cluster::unwatched(connection)))
    }

    /// Reads the server's version once (`INFO server`), and refuses a Redis older than 5.0;
    /// warns when its eviction policy can free a limited client (`CONFIG GET`, when allowed).
    async fn verified(self) -> Result<Self, Error> {
        // As long as the connection itself may take to come up, and then some.
        let bound = Duration::from_secs(5);
        let error = |_| {
            Error::timeout(format!(
                "Redis did not answer INFO within {bound:?} while connecting"
            ))
        };
        tokio::time::timeout(bound, version::check(&mut self.connection.clone(), ""))
            .await
            .map_err(error)??;
        self.version.store(true, Ordering::Release);
        eviction::check(&self.connection).await;
        Ok(self)
    }

    fn new(connection: Connection) -> Self {
        let health = match &connection {
            Connection::Cluster(cluster) => cluster
                .nodes()
                .map_or(healths::Healths::Unknown, healths::Healths::Masters),
            _ => healths::Healths::One(Arc::new(health::Health::new())),
        };
        Self {
            health,
            connection,
            prefix: "tollgate".into(),
            timeout: Self::DEFAULT_TIMEOUT,
            on_failure: OnFailure::default(),
            deny_cache: Self::DEFAULT_DENY_CACHE,
            caller_clock: false,
            leases: None,
            tie: None,
            version: Arc::default(),
        }
    }

    /// Starts every key with `prefix` instead of `tollgate`, to keep several applications
    /// apart in one Redis.
    ///
    /// # Panics
    ///
    /// When `prefix` holds `{` or `}`: Redis Cluster would take the prefix for the key's hash
    /// tag and put every client in one slot.
    #[must_use]
    #[track_caller]
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Self {
        let prefix = prefix.as_ref();
        match Self::key_prefix(prefix) {
            Ok(prefix) => self.prefix = prefix.into(),
            Err(why) => panic!("tollgate::RedisStore::prefix({prefix:?}): {why}"),
        }
        self
    }

    /// `prefix`, when it can begin the keys' names; else why not.
    pub(crate) fn key_prefix(prefix: &str) -> Result<&str, String> {
        let why = "a prefix that holds a brace would be read by Redis Cluster as the keys' hash \
                   tag (every client in one slot); choose a prefix without `{` or `}`";
        let fits = !prefix.contains(['{', '}']);
        fits.then_some(prefix).ok_or_else(|| why.into())
    }

    /// The longest one check waits for Redis (50 ms by default); after it the
    /// [failure policy](Self::on_failure) answers.
    ///
    /// # Panics
    ///
    /// When `timeout` is zero: every call would fail before Redis could answer.
    #[must_use]
    #[track_caller]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        assert!(
            !timeout.is_zero(),
            "tollgate::RedisStore::timeout({timeout:?}): a zero timeout fails every call before \
             Redis can answer; give a positive duration, such as Duration::from_millis(50) (the \
             default)"
        );
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
    /// `retry_after` and for at most [`DENY_CACHE_HOLD`](Self::DENY_CACHE_HOLD) (10 000 by
    /// default; 0 turns it off). Only requests of cost 1 are
    /// answered from it. The cache is sharded by key (a seeded hash), and a full shard evicts
    /// in constant time: an ended denial, else the one that ends first among a few; an evicted
    /// denial only costs its next check a round trip.
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

    /// Lets each server admit a hot key's requests from slices of the key's budget taken from
    /// Redis, so that one hot key costs Redis one call per slice rather than one per request,
    /// and the fleet still never admits more than the quota: see [`Leases`] for how slices are
    /// taken, which algorithms lease (the fixed and sliding windows, GCRA and the token bucket
    /// without `max_delay`, and tiers of them; the others are decided exactly, one call per
    /// request), and what a leased key's clients see.
    ///
    /// Off by default. Keys a server sees once in a while are decided exactly, as without
    /// leases.
    #[must_use]
    pub fn local_leases(mut self, leases: Leases) -> Self {
        self.leases = Some(leases);
        self
    }

    /// Makes the tables of `tie`'s layer (see [`family`]).
    pub(crate) fn tie(&mut self, tie: Tie) {
        self.tie = Some(tie);
    }

    /// The full Lua script that decides for algorithm `A`, as sent to Redis.
    pub fn script<A: RedisAlgorithm>() -> String {
        script::source::<A>()
    }
}

/// The client of [`RedisStore::cluster`] over `nodes`.
fn cluster_client(nodes: Vec<redis::ConnectionInfo>) -> redis::RedisResult<ClusterClient> {
    ClusterClient::builder(nodes)
        .connection_timeout(Duration::from_secs(1))
        // One attempt on one node: a node that stops answering with its connections open (a
        // frozen process) holds up connecting, and the client's own slot map refresh, only
        // this long. The store bounds each call with its own timeout, so nothing bounds an
        // attempt's retries as a whole.
        .response_timeout(Duration::from_secs(1))
        .overall_response_timeout(None)
        .build()
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.connection {
            Connection::Single(_) => "single",
            Connection::Cluster(_) => "cluster",
            Connection::Sentinel(_) => "sentinel",
        };
        f.debug_struct("RedisStore")
            .field("connection", &kind)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("on_failure", &self.on_failure)
            .field("deny_cache", &self.deny_cache)
            .field("caller_clock", &self.caller_clock)
            .field("leases", &self.leases)
            .finish()
    }
}

impl<A: RedisAlgorithm> Store<A> for RedisStore {
    type Table = RedisTable<A>;
    type Future = RedisFuture;

    /// # Errors
    ///
    /// When a figure of the policy is larger than the algorithm's script decides exactly
    /// (see the [module docs](self)), or a sliding log's limit is above 500: an error of kind
    /// [`Misconfigured`](crate::ErrorKind::Misconfigured) whose message names the figure, its
    /// value, the bound and how to bring it within.
    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> Result<RedisTable<A>, Error> {
        RedisTable::new(self, policy, shared, algorithm, None)
    }

    fn check(table: &RedisTable<A>, key: Key, now: u64, cost: u64) -> RedisFuture {
        table.run(key, now, cost, None)
    }

    fn refund(
        table: &RedisTable<A>,
        key: Key,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> RedisFuture {
        let receipts = admission.tiers().iter().map(Decision::receipt).collect();
        table.run(key, now, cost, Some(receipts))
    }

    /// One script call; see [Costs settled after the response](self#costs-settled-after-the-response).
    fn charge(table: &RedisTable<A>, key: Key, now: u64, cost: u64) -> RedisFuture {
        table.charge(key, now, cost)
    }

    /// A check of cost 0, never answered from the denials remembered here (a peek asks
    /// Redis).
    fn peek(table: &RedisTable<A>, key: Key, now: u64) -> RedisFuture {
        table.run(key, now, 0, None)
    }

    /// A table of the new quotas whose script, on each key's next check, first charges the key
    /// what it used under the old quotas ([`Algorithm::carried`](crate::algorithm::Algorithm::carried)
    /// tells the rule), for as long as the old states may live; see
    /// [`Handle::set_quotas`](crate::layer::Handle::set_quotas) for what servers that disagree
    /// get. Its keys are named by `policy`, the new quotas' name, as those of a server started
    /// with them (blocks kept under the old name are read too). A local fallback's table
    /// carries over too.
    ///
    /// # Errors
    ///
    /// When the new quotas are too large for the script, as when a limiter is built; when
    /// the policy still carries over from 8 earlier quotas.
    fn succeed(
        &self,
        policy: &str,
        previous: &RedisTable<A>,
        algorithm: &A,
        now: u64,
    ) -> Result<RedisTable<A>, Error> {
        // The previous table's `shared` stands.
        RedisTable::new(self, policy, false, algorithm, Some((previous, now)))
    }

    fn settle(&self, table: &RedisTable<A>, now: u64) -> RedisTable<A> {
        table.settle(now)
    }

    /// Deletes the key's state in every tier and its block in one script call, and forgets
    /// its denial on this server. Other servers may still answer a denial they remember
    /// ([`deny_cache`](RedisStore::deny_cache)) for at most
    /// [`DENY_CACHE_HOLD`](RedisStore::DENY_CACHE_HOLD).
    fn reset(table: &RedisTable<A>, key: Key, now: u64) -> Update {
        table.reset(key, now)
    }

    /// Writes the block's end beside the key's state (`<prefix>:{<key>}:<policy>:block`, in
    /// the key's Cluster slot) with a TTL to it; every check reads it in the same script call.
    fn block(table: &RedisTable<A>, key: Key, now: u64, duration: Duration) -> Update {
        table.block(key, now, duration)
    }

    /// Leases stop on the table but for calendar-aligned fixed windows: see [`Leases`].
    fn expect_refunds(table: &RedisTable<A>) {
        table.expect_refunds();
    }

    /// Leases stop on the table.
    fn decide_exactly(table: &RedisTable<A>) {
        table.decide_exactly();
    }

    /// Redis `TIME`, unless the store was built [`with_caller_clock`](RedisStore::with_caller_clock).
    fn own_clock(&self) -> bool {
        !self.caller_clock
    }
}
