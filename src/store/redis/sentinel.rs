//! The connection of a store made by [`RedisStore::sentinel`](super::RedisStore::sentinel): to
//! the primary that Redis Sentinel names, found again when it fails over.
//!
//! The sentinels are asked for the primary when the store is built, and again when:
//! - a call fails on the connection (refused, dropped), or is answered `READONLY` (the server
//!   is a replica now), `MASTERDOWN` or `LOADING`;
//! - a call is given up by the store's timeout while the primary has answered nothing for
//!   [`STALL_AFTER`] since a call was sent to it (a frozen or unreachable host keeps the
//!   connection open and never answers; a primary merely idle is not silent, so a client that
//!   cancels its request after a quiet second drops nothing);
//! - the sentinels, asked at most every [`RECHECK`] while calls come, name another primary by
//!   more votes than the one in use, or by a majority (a primary demoted while reachable, by
//!   `SENTINEL FAILOVER` or a partition that healed, answers as one until the sentinels make it
//!   a replica, seconds to minutes later).
//!
//! A primary is used only when more than half of the sentinels the store was given name it
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`, all asked at once; the same answer from one sentinel
//! reached by two URLs counts once, told apart by `SENTINEL MYID` from Redis 6.2 on, by address
//! before), so one sentinel decides alone only when it is the only one given, and two given
//! must agree. A stale sentinel (partitioned away during a failover, or restarted with an old
//! configuration) may name an old primary that restarted empty and answers as a primary for
//! seconds: decisions made on its empty state would admit what the fleet's real state denies.
//! A primary in use is dropped when another is named by more sentinels than it
//! ([`Tally::keeps`]). While no primary has a majority, calls are answered by the store's
//! failure policy.
//!
//! The old primary's connection is dropped at once, so calls are answered by the store's
//! failure policy without waiting, until a lookup finds a primary that says it is one (`ROLE`)
//! and runs a Redis recent enough. Lookups run on a task of their own (a lookup outlives the
//! call that started it, whose timeout is short), one at a time; while they find none, at
//! most every [`RETRY_MAX`], and only while calls come.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind as RedisKind,
    IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use self::tally::{Address, Tally, MAX_ID};
use super::{errors, version};
use crate::Error;

mod tally;

/// A call given up by the store's timeout starts a new lookup when the primary has answered
/// nothing for this long.
const STALL_AFTER: Duration = Duration::from_secs(1);

/// How often, at most, the sentinels are asked whether the primary calls go to is still the
/// one they name (only while calls come).
const RECHECK: Duration = Duration::from_secs(1);

/// The longest a sentinel may take to say which primary it names.
const RECHECK_BOUND: Duration = Duration::from_secs(1);

/// The first wait between lookups that find no primary; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(25);

/// The longest wait between lookups that find no primary.
const RETRY_MAX: Duration = Duration::from_millis(200);

/// The longest one lookup may take: the sentinels' answers, the primary's `ROLE`, the
/// connection and the version check.
const LOOKUP_BOUND: Duration = Duration::from_secs(5);

/// The connection to the primary of one master monitored by Redis Sentinel; clones share it.
#[derive(Clone)]
pub(crate) struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    /// The master's name, as in the sentinels' `sentinel monitor` lines.
    master: Box<str>,
    /// The sentinels' addresses (no credentials), for messages.
    sentinels: Box<str>,
    sentinel: tokio::sync::Mutex<Sentinel>,
    /// The sentinels, for the checks of which primary they name.
    sentinel_infos: Vec<ConnectionInfo>,
    /// The connection to each sentinel, with its id (`SENTINEL MYID`), kept from one time
    /// the sentinels are asked which primary they name to the next; `None` for one not reached.
    checkers: tokio::sync::Mutex<Vec<Option<(MultiplexedConnection, String)>>>,
    /// How to reach the primary: credentials, TLS, database.
    node: SentinelNodeConnectionInfo,
    /// The primary calls go to; `None` while a lookup is due or under way.
    primary: ArcSwapOption<Primary>,
    lookups: Mutex<Lookups>,
}

/// One primary, and when it last answered.
struct Primary {
    /// Tells this primary from the ones before it: a late failure on an old connection does
    /// not drop the new one.
    generation: u64,
    connection: MultiplexedConnection,
    /// Its host and port, as the sentinels name it.
    address: Option<Address>,
    /// When the connection was made.
    since: Instant,
    /// When the primary last answered, in ns after `since`.
    answered: AtomicU64,
    /// When the first call sent after that answer was sent, in ns after `since` (at most
    /// `answered` when every call sent has been answered since).
    asked: AtomicU64,
    /// When the sentinels are next asked whether they still name it, in ns after `since`.
    next_check: AtomicU64,
}

impl Primary {
    /// Notes an answer; whether the sentinels are due to be asked if they still name it.
    fn heard(&self) -> bool {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.answered.fetch_max(nanos, Ordering::Relaxed);
        let next = self.next_check.load(Ordering::Relaxed);
        let every = u64::try_from(RECHECK.as_nanos()).unwrap_or(u64::MAX);
        nanos >= next
            && self
                .next_check
                .compare_exchange(
                    next,
                    nanos.saturating_add(every),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Notes a call sent: the start of a silence, unless one is already running.
    fn asked(&self) {
        let asked = self.asked.load(Ordering::Relaxed);
        if asked <= self.answered.load(Ordering::Relaxed) {
            let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let _ = self.asked.compare_exchange(
                asked,
                nanos.max(asked.saturating_add(1)),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// How long the primary has answered nothing while asked: since the first call sent
    /// after its last answer. (An idle primary is not silent: nothing was asked of it.)
    fn silent_for(&self) -> Duration {
        let asked = self.asked.load(Ordering::Relaxed);
        if asked <= self.answered.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        self.since
            .elapsed()
            .saturating_sub(Duration::from_nanos(asked))
    }
}

/// The bookkeeping of lookups (touched only when a primary is dropped, missing or found).
struct Lookups {
    /// The generation of the last primary found.
    generation: u64,
    /// Whether a lookup is under way.
    running: bool,
    /// No lookup starts before this.
    not_before: Instant,
    /// The wait after the next lookup that finds no primary.
    retry: Duration,
    /// Why the last lookup found no primary, or why the last primary was dropped.
    last_error: String,
}

impl SentinelConnection {
    /// Asks the sentinels at `urls` for the primary of `master` and connects to it, checking
    /// its version. Errors name what was wrong: no URL, a URL that does not parse, no sentinel
    /// that answers, a server that is not a sentinel, a master name no sentinel monitors.
    pub(crate) async fn connect(
        urls: Vec<String>,
        master: &str,
        node: SentinelNodeConnectionInfo,
    ) -> Result<Self, Error> {
        if urls.is_empty() {
            return Err(Error::misconfigured(
                "RedisStore::sentinel: no sentinel URL given; pass the sentinels' addresses, \
                 e.g. [\"redis://10.0.0.1:26379\", \"redis://10.0.0.2:26379\"]",
            ));
        }
        let infos = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                url.as_str().into_connection_info().map_err(|e| {
                    Error::misconfigured(format!(
                        "RedisStore::sentinel: sentinel URL #{} {:?} is not a Redis URL ({e}); \
                         write it as redis://host:26379",
                        i + 1,
                        without_credentials(url)
                    ))
                })
            })
            .collect::<Result<Vec<ConnectionInfo>, Error>>()?;
        let addresses: Vec<String> = infos.iter().map(|info| info.addr().to_string()).collect();
        for (i, address) in addresses.iter().enumerate() {
            if let Some(j) = addresses[..i].iter().position(|a| a == address) {
                return Err(Error::misconfigured(format!(
                    "RedisStore::sentinel: sentinel URLs #{} and #{} both reach {address}; a \
                     primary is used when more than half of the sentinels name it, so list \
                     each sentinel once",
                    j + 1,
                    i + 1
                )));
            }
        }
        let sentinels = addresses.join(", ");
        let sentinel = Sentinel::build(infos.clone()).map_err(errors::connecting)?;
        let shared = Arc::new(Shared {
            master: master.into(),
            sentinels: sentinels.into(),
            sentinel: tokio::sync::Mutex::new(sentinel),
            sentinel_infos: infos.clone(),
            checkers: tokio::sync::Mutex::new(vec![None; infos.len()]),
            node,
            primary: ArcSwapOption::empty(),
            lookups: Mutex::new(Lookups {
                generation: 0,
                running: false,
                not_before: Instant::now(),
                retry: RETRY_MIN,
                last_error: String::new(),
            }),
        });
        let found = match tokio::time::timeout(LOOKUP_BOUND, shared.find()).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => return Err(shared.explain(error, &infos).await),
            Err(_) => {
                return Err(Error::timeout(format!(
                    "RedisStore::sentinel: the sentinels at {} named no primary of master {:?} \
                     within {LOOKUP_BOUND:?}",
                    shared.sentinels, shared.master
                )))
            }
        };
        shared.install(found);
        Ok(Self { shared })
    }

    /// The primary calls go to now, or the error that answers a call while there is none
    /// (and a lookup is started, if one may be).
    fn primary(&self) -> RedisResult<Arc<Primary>> {
        if let Some(primary) = self.shared.primary.load_full() {
            return Ok(primary);
        }
        Shared::look_up(&self.shared);
        let lookups = self.shared.lookups();
        let mut message = format!(
            "no primary of Redis Sentinel master {:?} is known; the sentinels at {} are asked",
            self.shared.master, self.shared.sentinels
        );
        if !lookups.last_error.is_empty() {
            message = format!("{message} (last: {})", lookups.last_error);
        }
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            message,
        )))
    }

    /// Runs `request` on the primary: a failure that says the primary is gone drops it and
    /// starts a lookup; so does a call given up (dropped unanswered) while the primary has
    /// been quiet for [`STALL_AFTER`].
    fn on_primary<'a, T, F>(
        &'a self,
        request: impl FnOnce(MultiplexedConnection) -> F + Send + 'a,
    ) -> RedisFuture<'a, T>
    where
        F: Future<Output = RedisResult<T>> + Send + 'a,
        T: Send + 'a,
    {
        Box::pin(async move {
            let primary = self.primary()?;
            primary.asked();
            let mut watch = Watch {
                shared: &self.shared,
                primary: &primary,
                answered: false,
            };
            let result = request(primary.connection.clone()).await;
            watch.answered(result.as_ref().err());
            result
        })
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.on_primary(
            move |mut connection| async move { connection.req_packed_command(cmd).await },
        )
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.on_primary(move |mut connection| async move {
            connection
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        self.shared
            .primary
            .load()
            .as_ref()
            .map_or(0, |primary| primary.connection.get_db())
    }
}

impl fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("master", &self.shared.master)
            .field("sentinels", &self.shared.sentinels)
            .finish_non_exhaustive()
    }
}

/// Watches one call on a primary: what its answer says of the primary, or, when the call is
/// dropped unanswered, how long the primary has been quiet.
struct Watch<'a> {
    shared: &'a Arc<Shared>,
    primary: &'a Arc<Primary>,
    answered: bool,
}

impl Watch<'_> {
    fn answered(&mut self, error: Option<&RedisError>) {
        self.answered = true;
        match error {
            Some(error) if primary_gone(error) => {
                Shared::drop_primary(self.shared, self.primary.generation, error.to_string());
            }
            // Any other answer, an error reply included, came from the primary.
            _ => {
                if self.primary.heard() {
                    Shared::recheck(self.shared, self.primary);
                }
            }
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let silent = self.primary.silent_for();
        if !self.answered && silent >= STALL_AFTER {
            let why = format!("the primary answered nothing for {silent:?} while asked");
            Shared::drop_primary(self.shared, self.primary.generation, why);
        }
    }
}

/// Whether `error` says that calls must go to another server: the connection failed, or the
/// server is no longer (or not yet) a primary that can decide.
fn primary_gone(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            RedisKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
            )
        )
}

impl Shared {
    fn lookups(&self) -> std::sync::MutexGuard<'_, Lookups> {
        self.lookups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the primary of `generation` (if it is still the one calls go to) and starts a
    /// lookup.
    fn drop_primary(this: &Arc<Self>, generation: u64, why: String) {
        let why = printable(&why);
        {
            let mut lookups = this.lookups();
            let current = this.primary.load();
            if current.as_ref().map(|p| p.generation) != Some(generation) {
                return;
            }
            this.primary.store(None);
            #[cfg(feature = "tracing")]
            tracing::warn!(
                master = &*this.master,
                "Redis Sentinel: the primary of {:?} failed ({why}); asking the sentinels at {} \
                 for the primary",
                this.master,
                this.sentinels
            );
            lookups.last_error = why;
            // The first lookup after a failure starts at once.
            lookups.not_before = Instant::now();
            lookups.retry = RETRY_MIN;
        }
        Self::look_up(this);
    }

    /// Asks the sentinels, on the runtime, whether they still name `primary`; drops it unless
    /// it may stay ([`Tally::keeps`]: a majority names it, or no other is named by more).
    fn recheck(this: &Arc<Self>, primary: &Arc<Primary>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, primary) = (Arc::clone(this), Arc::clone(primary));
        runtime.spawn(async move {
            let tally = shared.tally().await;
            if !tally.keeps(primary.address.as_ref()) {
                let why = format!("the sentinels no longer name it ({tally})");
                Shared::drop_primary(&shared, primary.generation, why);
            }
        });
    }

    /// Which primary each sentinel names (`SENTINEL GET-MASTER-ADDR-BY-NAME`), all asked at
    /// once, each for at most [`RECHECK_BOUND`], until one primary has a majority or every
    /// sentinel has answered or timed out. A sentinel is known by its id (`SENTINEL MYID`,
    /// asked once per connection; its address where it has none), so the same answer from one
    /// reached by two URLs counts once. Connections are kept for the next time unless they
    /// failed.
    async fn tally(&self) -> Tally {
        let mut kept = self.checkers.lock().await.clone();
        let mut asks = tokio::task::JoinSet::new();
        for (index, (info, cached)) in self.sentinel_infos.iter().zip(kept.clone()).enumerate() {
            let (info, master) = (info.clone(), self.master.clone());
            asks.spawn(async move {
                let ask = async {
                    let (mut connection, id) = match cached {
                        Some(cached) => cached,
                        None => sentinel_with_id(info).await?,
                    };
                    let named: RedisResult<Option<Address>> = redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(&*master)
                        .query_async(&mut connection)
                        .await;
                    match named {
                        Ok(named) => Ok((connection, id, Some(named))),
                        // An error reply: the sentinel answered, but gives no vote.
                        Err(e) if is_reply(&e) => Ok((connection, id, None)),
                        Err(e) => Err(e),
                    }
                };
                (index, tokio::time::timeout(RECHECK_BOUND, ask).await)
            });
        }
        let mut tally = Tally::of(self.sentinel_infos.len());
        while let Some(answer) = asks.join_next().await {
            let Ok((index, answer)) = answer else {
                continue;
            };
            let Some(slot) = kept.get_mut(index) else {
                continue;
            };
            match answer {
                Ok(Ok((connection, id, named))) => {
                    if let Some(named) = named {
                        tally.add(id.clone(), index, named);
                    }
                    *slot = Some((connection, id));
                }
                // Failed, or no answer in time: counts as not answering, and is reached anew.
                Ok(Err(_)) | Err(_) => *slot = None,
            }
            if tally.has_majority() {
                // The others cannot change the outcome; they keep their connections.
                break;
            }
        }
        *self.checkers.lock().await = kept;
        tally
    }

    /// Starts a lookup on the runtime, unless one runs or the last failed too recently.
    fn look_up(this: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut lookups = this.lookups();
            if lookups.running || Instant::now() < lookups.not_before {
                return;
            }
            lookups.running = true;
        }
        let running = Running(Arc::downgrade(this));
        let shared = Arc::clone(this);
        runtime.spawn(async move {
            let _running = running;
            let found = match tokio::time::timeout(LOOKUP_BOUND, shared.find()).await {
                Ok(found) => found.map_err(|missed| missed.to_string()),
                Err(_) => Err(format!("the lookup took longer than {LOOKUP_BOUND:?}")),
            };
            match found {
                Ok(found) => shared.install(found),
                Err(error) => {
                    let mut lookups = shared.lookups();
                    lookups.not_before = Instant::now() + lookups.retry;
                    lookups.retry = (lookups.retry * 2).min(RETRY_MAX);
                    lookups.last_error = printable(&error);
                }
            }
        });
    }

    /// Makes the connection found the primary calls go to.
    fn install(&self, (connection, address): (MultiplexedConnection, Option<Address>)) {
        let mut lookups = self.lookups();
        lookups.generation += 1;
        lookups.retry = RETRY_MIN;
        lookups.last_error.clear();
        self.primary.store(Some(Arc::new(Primary {
            generation: lookups.generation,
            connection,
            address,
            since: Instant::now(),
            answered: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            // The sentinels were just asked.
            next_check: AtomicU64::new(u64::try_from(RECHECK.as_nanos()).unwrap_or(u64::MAX)),
        })));
        #[cfg(feature = "tracing")]
        tracing::info!(
            master = &*self.master,
            generation = lookups.generation,
            "Redis Sentinel: deciding on the primary of {:?}",
            self.master
        );
    }

    /// Asks the sentinels for the primary, connects to it and checks its version; the
    /// connection and the primary's host and port.
    async fn find(&self) -> Result<(MultiplexedConnection, Option<Address>), Missed> {
        let tally = self.tally().await;
        let Some((named, voters)) = tally.majority() else {
            // Why none: the first sentinel (in the order given) whose primary answers as one
            // says best what is wrong (not a sentinel, an unknown master, none reachable).
            let mut sentinel = self.sentinel.lock().await;
            sentinel
                .async_master_for(&self.master, Some(&self.node))
                .await
                .map_err(Missed::Sentinels)?;
            return Err(Missed::NoMajority(tally.to_string()));
        };
        let client = self.primary_named_by(&voters, named).await?;
        // The store bounds each call with its own timeout, so the connection sets none.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Missed::Primary(errors::connecting(e)))?;
        let info: RedisResult<String> = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await;
        match info {
            Ok(info) => {
                if let Some(found) = version::parse(&info) {
                    version::require(found).map_err(|message| {
                        Missed::Primary(Error::misconfigured(format!(
                            "the primary of Redis Sentinel master {:?}: {message}",
                            self.master
                        )))
                    })?;
                }
            }
            // Refused by the server (INFO renamed away): nothing to tell from.
            Err(e) if matches!(e.kind(), RedisKind::Server(_)) => {}
            Err(e) => return Err(Missed::Primary(errors::connecting(e))),
        }
        Ok((connection, address(&client)))
    }

    /// A client of `named`, the primary a majority of the sentinels name, from the first of
    /// those (`voters`: places in the list given) whose primary is still `named` and answers
    /// as one: made as the sentinel client makes it (credentials, TLS, database from the
    /// store's settings).
    async fn primary_named_by(&self, voters: &[usize], named: &Address) -> Result<Client, Missed> {
        let mut last = None;
        for info in voters
            .iter()
            .filter_map(|&place| self.sentinel_infos.get(place))
        {
            let mut sentinel = Sentinel::build(vec![info.clone()]).map_err(Missed::Sentinels)?;
            let asked = sentinel.async_master_for(&self.master, Some(&self.node));
            match tokio::time::timeout(RECHECK_BOUND, asked).await {
                Ok(Ok(client)) if address(&client).as_ref() == Some(named) => return Ok(client),
                Ok(Ok(_)) => {}
                Ok(Err(error)) => last = Some(error),
                Err(_) => {
                    last = Some(RedisError::from((
                        RedisKind::Io,
                        "a sentinel took too long to give the primary",
                        format!("more than {RECHECK_BOUND:?}"),
                    )));
                }
            }
        }
        Err(Missed::Sentinels(last.unwrap_or_else(|| {
            RedisError::from((
                RedisKind::MasterNameNotFoundBySentinel,
                "the primary a majority of the sentinels named changed while it was looked up",
                format!("{}:{}", named.0, named.1),
            ))
        })))
    }

    /// The error of a store that found no primary when built, saying what was wrong.
    async fn explain(&self, missed: Missed, sentinels: &[ConnectionInfo]) -> Error {
        let (master, at) = (&self.master, &self.sentinels);
        let error = match missed {
            Missed::Primary(error) => {
                let message = format!(
                    "RedisStore::sentinel: the primary that the sentinels at {at} name for \
                     master {master:?}: {error}"
                );
                return Error::new(error.kind(), message);
            }
            Missed::NoMajority(tally) => {
                return Error::unreachable(format!(
                    "RedisStore::sentinel: no majority of the sentinels at {at} names one \
                     primary of master {master:?} ({tally}); a primary is used when more than \
                     half of the sentinels given name it: try again once they agree, and check \
                     that each sentinel listed monitors this master"
                ));
            }
            Missed::Sentinels(error) => error,
        };
        match error.kind() {
            RedisKind::MasterNameNotFoundBySentinel => {
                let monitored = monitored(sentinels).await;
                if monitored.is_empty() || monitored.iter().any(|name| **name == **master) {
                    Error::unreachable(format!(
                        "RedisStore::sentinel: the sentinels at {at} name no primary of master \
                         {master:?} that answers as one (it is down, or a failover is under \
                         way); try again once the sentinels agree on a primary"
                    ))
                } else {
                    Error::misconfigured(format!(
                        "RedisStore::sentinel: no sentinel at {at} monitors a master named \
                         {master:?} (they monitor {monitored:?}); pass the name of a `sentinel \
                         monitor <name> ...` line of their configuration"
                    ))
                }
            }
            RedisKind::InvalidClientConfig => Error::misconfigured(format!(
                "RedisStore::sentinel: a server at {at} is not a Redis Sentinel ({error}); pass \
                 the sentinels' addresses (port 26379 by default), not those of the Redis \
                 servers"
            )),
            _ => {
                let kind = errors::kind(&error);
                Error::new(
                    kind,
                    format!(
                        "RedisStore::sentinel: the sentinels at {at} named no primary of \
                         master {master:?} that could be reached ({error}); check the \
                         addresses, that redis-sentinel runs there, and that the primary it \
                         names is reachable from here"
                    ),
                )
            }
        }
    }
}

/// The host and port `client` connects to, as the sentinels name it; `None` for a socket.
fn address(client: &Client) -> Option<Address> {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

/// Connects to the sentinel at `info` and asks its id (`SENTINEL MYID`; its address when it
/// does not know the command, before Redis 6.2, or answers more than [`MAX_ID`] bytes).
async fn sentinel_with_id(info: ConnectionInfo) -> RedisResult<(MultiplexedConnection, String)> {
    let address = info.addr().to_string();
    let mut connection = Client::open(info)?
        .get_multiplexed_async_connection()
        .await?;
    let id: RedisResult<String> = redis::cmd("SENTINEL")
        .arg("MYID")
        .query_async(&mut connection)
        .await;
    match id {
        Ok(id) if id.len() <= MAX_ID => Ok((connection, id)),
        Ok(_) => Ok((connection, address)),
        Err(e) if is_reply(&e) => Ok((connection, address)),
        Err(e) => Err(e),
    }
}

/// Whether `error` is a server's error reply: the connection still works.
fn is_reply(error: &RedisError) -> bool {
    matches!(error.kind(), RedisKind::Server(_) | RedisKind::Extension)
}

/// The longest reason kept for a call's error and the log (what sentinels and servers answer
/// goes into it).
const MAX_REASON: usize = 512;

/// `text` as it goes into a call's error or the log: control characters escaped, at most
/// [`MAX_REASON`] characters (then `...`). Sentinels and servers write part of it.
fn printable(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == MAX_REASON {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a lookup found no primary.
enum Missed {
    /// The sentinels named none: none answered, or none knows the master, or the one they
    /// name does not answer as a primary (`ROLE`).
    Sentinels(RedisError),
    /// The primary they named could not be used: no connection, or too old a Redis.
    Primary(Error),
    /// No primary is named by more than half of the sentinels: what each named.
    NoMajority(String),
}

impl fmt::Display for Missed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sentinels(error) => write!(f, "the sentinels named no primary: {error}"),
            Self::Primary(error) => write!(f, "{error}"),
            Self::NoMajority(tally) => {
                write!(f, "no majority of the sentinels names one primary: {tally}")
            }
        }
    }
}

/// The names of the masters the sentinels at `sentinels` monitor, from the first that
/// answers `SENTINEL MASTERS`; empty when none does.
async fn monitored(sentinels: &[ConnectionInfo]) -> Vec<String> {
    for info in sentinels {
        let ask = async {
            let client = Client::open(info.clone())?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("MASTERS")
                .query_async::<Vec<std::collections::HashMap<String, String>>>(&mut connection)
                .await
        };
        if let Ok(Ok(masters)) = tokio::time::timeout(Duration::from_secs(2), ask).await {
            let mut names: Vec<String> = masters
                .into_iter()
                .filter_map(|mut m| m.remove("name"))
                .collect();
            names.sort();
            return names;
        }
    }
    Vec::new()
}

/// `url` with everything between `://` and the last `@` replaced by `***`: the user and
/// password, whatever they hold (a password may hold `@` or `/`); more is hidden, never less,
/// when the rest of the URL has an `@`.
fn without_credentials(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    match url[start..].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_owned(),
    }
}

/// Marks the lookup as over when its task ends, however it ends (its runtime may shut down).
struct Running(Weak<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared.lookups().running = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_printable_and_bounded() {
        assert_eq!(printable("a\r\nERR x"), "a\\r\\nERR x");
        let long = "é".repeat(MAX_REASON + 10);
        let kept = printable(&long);
        assert_eq!(kept.chars().count(), MAX_REASON + 3);
        assert!(kept.ends_with("..."));
        assert_eq!(printable("plain"), "plain");
    }

    #[test]
    fn credentials_are_kept_out_of_messages() {
        assert_eq!(
            without_credentials("redis://user:secret@10.0.0.1:26379/"),
            "redis://***@10.0.0.1:26379/"
        );
        assert_eq!(
            without_credentials("redis://:secret@host"),
            "redis://***@host"
        );
        assert_eq!(
            without_credentials("redis://10.0.0.1:26379"),
            "redis://10.0.0.1:26379"
        );
        assert_eq!(without_credentials("nonsense"), "nonsense");
        // A password holding `@` or `/` (a URL that does not parse) stays hidden whole.
        assert_eq!(
            without_credentials("redis://u:p@ss/w@rd@10.0.0.1:notaport/"),
            "redis://***@10.0.0.1:notaport/"
        );
    }

    #[test]
    fn failures_that_mean_another_primary() {
        let gone =
            |kind: ServerErrorKind| primary_gone(&RedisError::from((RedisKind::Server(kind), "x")));
        assert!(gone(ServerErrorKind::ReadOnly));
        assert!(gone(ServerErrorKind::MasterDown));
        assert!(gone(ServerErrorKind::BusyLoading));
        assert!(!gone(ServerErrorKind::NoScript));
        assert!(!gone(ServerErrorKind::ResponseError));
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(primary_gone(&dropped));
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(primary_gone(&refused));
    }
}
