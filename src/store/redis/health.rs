//! What a store knows of whether Redis answers: shared by every table and clone of a store on
//! one server or behind Sentinel, and kept for each master of a Redis Cluster
//! ([`healths`](super::healths)), so that while Redis (or the master of a key's slot) is down
//! each call is answered by the failure policy at once rather than after the timeout.
//!
//! Redis is down from the moment a call finds it unreachable (connection refused, reset or
//! dropped; `LOADING`; but for behind Sentinel, whose connection answers at once by itself
//! while it looks for a primary), or when [`TIMEOUTS_DOWN`] calls in a row
//! outlive the timeout with no answer between them. Calls that were waiting together count
//! once: a timeout counts only for a call sent after the last counted one fired, so a burst of
//! calls held up by one slow command is one timeout, and Redis is down only after about
//! [`TIMEOUTS_DOWN`] timeouts of silence, however many calls come. An answer of any kind
//! (a decision, a script error, `OOM`) is an answer and ends the count.
//!
//! While Redis is down, one task sends `PING` (bounded by the timeout) every [`PROBE_EVERY`],
//! and the first answer brings calls back to Redis; no task runs while Redis is up. A Redis
//! Cluster master is probed as its [`Master`] says (its probe follows a failover). Behind
//! Sentinel, timeouts that mark Redis down (or fewer when they add up to [`STALL_AFTER`]),
//! and each probe left unanswered, also drop the primary and have the sentinels asked again:
//! this is how a frozen primary is left.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::connection::{lock, spawn};
use super::{errors, Connection};
use crate::clock::saturating_nanos;
use crate::{Error, ErrorKind};

/// How many timeouts in a row, with no answer between them, mark Redis down.
pub(crate) const TIMEOUTS_DOWN: u32 = 3;

/// Behind Sentinel, how long calls in a row find the primary silent before it is dropped,
/// when that is fewer than [`TIMEOUTS_DOWN`] timeouts (a long timeout).
const STALL_AFTER: Duration = Duration::from_secs(1);

/// How often a store that knows Redis is down asks it again (`PING`).
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(200);

/// Whether Redis answers, as a store's calls found it.
pub(crate) struct Health {
    /// The origin of the times below.
    epoch: Instant,
    /// Whether Redis is down (and a probe runs).
    down: AtomicBool,
    /// When Redis was last found up again, in ns after `epoch`: a failure of a call sent
    /// before it is old news.
    up_since: AtomicU64,
    /// When Redis last answered a call, in ns after `epoch`.
    answered: AtomicU64,
    /// When the last timeout that counted fired, in ns after `epoch`.
    counted: AtomicU64,
    /// Timeouts counted since the last answer.
    streak: AtomicU32,
    /// The message of the errors of calls answered while Redis is down, saying why it was
    /// last found down (no client's key: errors are redacted before).
    reason: Mutex<Arc<str>>,
    /// The Redis Cluster master this is the health of; `None` for a whole Redis.
    master: Option<Box<dyn Master>>,
}

/// A Redis Cluster master, as the probe of its health asks it.
pub(crate) trait Master: Send + Sync {
    /// Its address, `host:port`.
    fn address(&self) -> &str;

    /// One probe, each of its calls bounded by `timeout`: whether the master answers `PING`
    /// and the store's connection reaches it (made again when the master answers but the
    /// connection does not reach it yet).
    fn probe(&self, timeout: Duration) -> Pin<Box<dyn Future<Output = bool> + Send + '_>>;
}

impl Health {
    /// What a store knows of Redis, at first up.
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            down: AtomicBool::new(false),
            up_since: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            counted: AtomicU64::new(0),
            streak: AtomicU32::new(0),
            reason: Mutex::new(Arc::from("")),
            master: None,
        }
    }

    /// What a store knows of the Redis Cluster master `master`, at first up.
    pub(crate) fn of_master(master: Box<dyn Master>) -> Self {
        Self {
            master: Some(master),
            ..Self::new()
        }
    }

    /// The Redis Cluster master this is the health of.
    pub(crate) fn master(&self) -> Option<&dyn Master> {
        self.master.as_deref()
    }

    /// Now, in ns after the epoch: when a call is sent.
    pub(crate) fn now(&self) -> u64 {
        saturating_nanos(self.epoch.elapsed())
    }

    /// Whether the store knows Redis is down.
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// The error of a call answered while Redis is down: its message made once, when Redis
    /// was found down, and shared.
    pub(crate) fn error(&self) -> Error {
        let message = Arc::clone(&lock(&self.reason));
        Error::unreachable(Down(message))
    }

    /// What the errors of calls answered while Redis is down say, found down for `reason`.
    fn message(&self, reason: &str) -> Arc<str> {
        match &self.master {
            None => format!(
                "Redis is down ({reason}); answering from the failure policy until Redis \
                 answers a probe (PING every {PROBE_EVERY:?})"
            ),
            Some(master) => format!(
                "the Redis Cluster master at {} is down ({reason}); answering its slots' keys \
                 from the failure policy until that node answers a probe (every \
                 {PROBE_EVERY:?})",
                master.address()
            ),
        }
        .into()
    }

    /// Takes note of how a call sent at `sent` (from [`now`](Self::now)) ended: an answer, a
    /// timeout, or Redis unreachable. A store found down starts probing Redis over
    /// `connection`, each probe bounded by `timeout`.
    ///
    /// Behind Sentinel, a call that finds the primary unreachable does not mark Redis down
    /// (only timeouts do): the connection drops an unreachable primary at once, answers every
    /// call at once while the sentinels are asked, and goes on with the new primary from the
    /// call after the lookup, sooner than a probe would.
    pub(crate) fn observe<T>(
        self: &Arc<Self>,
        result: &Result<T, Error>,
        sent: u64,
        connection: &Connection,
        timeout: Duration,
    ) {
        let behind_sentinel = matches!(connection, Connection::Sentinel(_));
        match result {
            Err(error) if error.kind() == ErrorKind::Unreachable && !behind_sentinel => {
                let reason = std::error::Error::source(error)
                    .map_or_else(|| error.to_string(), ToString::to_string);
                self.fell(sent, reason, connection, timeout);
            }
            Err(error) if error.kind() == ErrorKind::Timeout => {
                self.timed_out(sent, connection, timeout);
            }
            // Unreachable behind Sentinel: neither an answer nor a timeout.
            Err(error) if error.kind() == ErrorKind::Unreachable => {}
            _ => {
                self.answered.fetch_max(self.now(), Ordering::Relaxed);
                self.streak.store(0, Ordering::Relaxed);
            }
        }
    }

    /// A call sent at `sent` outlived the timeout: counted unless it was waiting beside one
    /// counted already, or Redis answered since it was sent.
    fn timed_out(self: &Arc<Self>, sent: u64, connection: &Connection, timeout: Duration) {
        let counted = self.counted.load(Ordering::Relaxed);
        if sent < counted
            || sent < self.answered.load(Ordering::Relaxed)
            || sent < self.up_since.load(Ordering::Relaxed)
        {
            return;
        }
        let now = self.now();
        if self
            .counted
            .compare_exchange(counted, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let streak = self.streak.fetch_add(1, Ordering::Relaxed) + 1;
        let down = streak >= TIMEOUTS_DOWN;
        // Counted timeouts follow one another: Redis was silent for `streak` timeouts.
        if !down && timeout.saturating_mul(streak) < STALL_AFTER {
            return;
        }
        let reason = format!("{streak} calls in a row got no answer within {timeout:?}");
        connection.stalled(&reason);
        if down {
            self.fell(sent, reason, connection, timeout);
        }
    }

    /// Redis is down, as a call sent at `sent` found: calls are answered at once from now on,
    /// and one task probes Redis until it answers.
    fn fell(
        self: &Arc<Self>,
        sent: u64,
        reason: String,
        connection: &Connection,
        timeout: Duration,
    ) {
        // Without a runtime to probe on, each call goes on asking Redis.
        if sent < self.up_since.load(Ordering::Relaxed)
            || tokio::runtime::Handle::try_current().is_err()
        {
            return;
        }
        *lock(&self.reason) = self.message(&reason);
        if !self.down.swap(true, Ordering::AcqRel) {
            // A cluster master's probe holds no connection: the store's would keep its
            // cluster, and so this health, alive after the store is dropped.
            let connection = self.master.is_none().then(|| connection.clone());
            spawn(probe(Arc::downgrade(self), connection, timeout));
        }
    }

    /// Redis answered a probe sent at `sent`: calls go to it again.
    fn rose(&self, sent: u64) {
        self.up_since.store(sent, Ordering::Relaxed);
        self.answered.fetch_max(sent, Ordering::Relaxed);
        self.streak.store(0, Ordering::Relaxed);
        self.down.store(false, Ordering::Release);
    }
}

/// Sends `PING` every [`PROBE_EVERY`] until Redis answers (or the store is gone).
async fn probe(health: Weak<Health>, connection: Option<Connection>, timeout: Duration) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(health) = health.upgrade() else {
            return;
        };
        let sent = health.now();
        let up = match (&health.master, &connection) {
            (Some(master), _) => master.probe(timeout).await,
            (None, Some(connection)) => {
                // A connection found broken is made again by the call that finds it: the second
                // `PING` goes over the new one, so a Redis back is found by the first probe
                // after it.
                let twice = async {
                    match ping(connection).await {
                        Err(error) if errors::kind(&error) == ErrorKind::Unreachable => {
                            ping(connection).await
                        }
                        answer => answer,
                    }
                };
                tokio::time::timeout(timeout, twice)
                    .await
                    .is_ok_and(answered)
            }
            (None, None) => return,
        };
        if up {
            health.rose(sent);
            return;
        }
        if let Some(connection) = &connection {
            connection.stalled("the primary did not answer a probe");
        }
    }
}

/// Whether a probe's `PING` was answered: an error Redis answers (no permission to `PING`,
/// say) is an answer; `LOADING` and the like are not.
pub(crate) fn answered(answer: redis::RedisResult<()>) -> bool {
    match answer {
        Ok(()) => true,
        Err(error) => !matches!(
            errors::kind(&error),
            ErrorKind::Unreachable | ErrorKind::Timeout
        ),
    }
}

async fn ping(connection: &Connection) -> redis::RedisResult<()> {
    connection.query(&redis::cmd("PING")).await
}

/// The error of calls answered while Redis is down, whose message they share.
#[derive(Debug)]
struct Down(Arc<str>);

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Down {}
