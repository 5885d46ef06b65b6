//! The connection of a store made by [`RedisStore::sentinel`](super::RedisStore::sentinel): to
//! the primary that Redis Sentinel names, found again when it fails over.
//!
//! The sentinels are asked for the primary when the store is built, and again when:
//! - a call fails on the connection (refused, dropped), or is answered `READONLY` (the server
//!   is a replica now), `MASTERDOWN` or `LOADING`;
//! - the store's health finds the primary silent: 3 calls in a row outlive the store's timeout
//!   with no answer between them (fewer when their timeouts add up to a second: one, with a
//!   timeout of a second or more), or a probe is not answered (a frozen or unreachable host
//!   keeps the connection open and never answers; a call its client cancels tells nothing,
//!   so a client cannot make the store drop its primary);
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
//! ([`Tally::keeps`](tally::Tally::keeps)). While no primary has a majority, calls are answered by the store's
//! failure policy.
//!
//! The old primary's connection is dropped at once, so calls are answered by the store's
//! failure policy without waiting, until a lookup finds a primary that says it is one (`ROLE`)
//! and runs a Redis recent enough. Lookups run on a task of their own (a lookup outlives the
//! call that started it, whose timeout is short), one at a time; while they find none, at
//! most every [`RETRY_MAX`], and only while calls come.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::SentinelNodeConnectionInfo;
use redis::{
    ConnectionInfo, ErrorKind as RedisKind, IntoConnectionInfo, RedisError, RedisFuture,
    RedisResult, ServerErrorKind,
};

use self::explain::{printable, without_credentials};
use self::tally::Address;
use super::connection::lock;
use crate::Error;

mod explain;
mod lookup;
mod tally;

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
    /// Held by the lookup under way.
    running: Arc<tokio::sync::Mutex<()>>,
}

/// One primary, and when the sentinels are next asked whether they still name it.
struct Primary {
    /// Tells this primary from the ones before it: a late failure on an old connection does
    /// not drop the new one.
    generation: u64,
    connection: MultiplexedConnection,
    /// Its host and port, as the sentinels name it.
    address: Option<Address>,
    next_check: Mutex<Instant>,
}

impl Primary {
    /// Notes an answer; whether the sentinels are due to be asked if they still name it.
    fn heard(&self) -> bool {
        let mut next_check = lock(&self.next_check);
        let now = Instant::now();
        let due = now >= *next_check;
        if due {
            *next_check = now + RECHECK;
        }
        due
    }
}

/// The bookkeeping of lookups (touched only when a primary is dropped, missing or found).
struct Lookups {
    /// The generation of the last primary found.
    generation: u64,
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
        let shared = Arc::new(Shared {
            master: master.into(),
            sentinels: sentinels.into(),
            checkers: tokio::sync::Mutex::new(vec![None; infos.len()]),
            sentinel_infos: infos,
            node,
            primary: ArcSwapOption::empty(),
            running: Arc::default(),
            lookups: Mutex::new(Lookups {
                generation: 0,
                not_before: Instant::now(),
                retry: RETRY_MIN,
                last_error: String::new(),
            }),
        });
        let found = match tokio::time::timeout(LOOKUP_BOUND, shared.find()).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => return Err(shared.explain(error).await),
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

    /// The database of the primary in use (0 while there is none).
    pub(crate) fn db(&self) -> i64 {
        let primary = self.shared.primary.load();
        primary
            .as_ref()
            .map_or(0, |primary| primary.connection.get_db())
    }

    /// The primary calls go to now, or the error that answers a call while there is none
    /// (and a lookup is started, if one may be).
    fn primary(&self) -> RedisResult<Arc<Primary>> {
        if let Some(primary) = self.shared.primary.load_full() {
            return Ok(primary);
        }
        Shared::look_up(&self.shared);
        let lookups = lock(&self.shared.lookups);
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

    /// Calls found the primary silent (`why`): it is dropped and a lookup starts.
    pub(crate) fn stalled(&self, why: &str) {
        if let Some(primary) = self.shared.primary.load_full() {
            Shared::drop_primary(&self.shared, primary.generation, why.to_owned());
        }
    }

    /// Runs `request` on the primary: a failure that says the primary is gone drops it and
    /// starts a lookup.
    pub(crate) fn on_primary<'a, T, F>(
        &'a self,
        request: impl FnOnce(MultiplexedConnection) -> F + Send + 'a,
    ) -> RedisFuture<'a, T>
    where
        F: Future<Output = RedisResult<T>> + Send + 'a,
        T: Send + 'a,
    {
        Box::pin(async move {
            let (shared, primary) = (&self.shared, self.primary()?);
            let result = request(primary.connection.clone()).await;
            match result.as_ref() {
                Err(error) if primary_gone(error) => {
                    Shared::drop_primary(shared, primary.generation, error.to_string());
                }
                // Any other answer, an error reply included, came from the primary.
                _ if primary.heard() => Shared::recheck(shared, &primary),
                _ => {}
            }
            result
        })
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

#[cfg(test)]
mod tests {
    use super::*;

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
