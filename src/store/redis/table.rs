//! One policy in Redis: its script, its keys, and what happens when Redis cannot answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::Script;

use super::algorithms::{RedisAlgorithm, RedisTier};
use super::deny_cache::DenyCache;
use super::keys::{redact, KeyNames};
use super::version::{self, VersionCheck};
use super::{Connection, OnFailure, RedisStore};
use crate::store::{MemoryTable, Store};
use crate::{Decision, Error, Key};

/// How often a failing store logs its warning, at most: once per this many ns.
const WARN_EVERY: u64 = 10_000_000_000;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const DRIVER: &str = include_str!("lua/driver.lua");

/// The full script of an algorithm: the prelude, its module, the driver.
pub(crate) fn script_source<A: RedisAlgorithm>() -> String {
    format!("{PRELUDE}\n{}\n{DRIVER}", A::LUA)
}

/// One figure of a script's reply: an integer, or an integer as text (past what Lua replies
/// as an integer exactly).
#[derive(Debug, Clone, Copy)]
struct Figure(i128);

impl redis::FromRedisValue for Figure {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let figure = match &v {
            redis::Value::Int(n) => Some(i128::from(*n)),
            redis::Value::BulkString(text) => {
                std::str::from_utf8(text).ok().and_then(|t| t.parse().ok())
            }
            _ => None,
        };
        figure
            .map(Figure)
            .ok_or_else(|| format!("not a figure: {v:?}").into())
    }
}

/// A [`RedisStore`]'s view of one policy.
pub struct RedisTable<A: RedisAlgorithm> {
    inner: Arc<Inner<A>>,
}

impl<A: RedisAlgorithm> Clone for RedisTable<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: RedisAlgorithm> std::fmt::Debug for RedisTable<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTable")
            .field("policy", &self.inner.policy)
            .field("tiers", &self.inner.limits.len())
            .finish()
    }
}

enum Fallback<A: RedisAlgorithm> {
    Open,
    Closed,
    Local(MemoryTable<A>),
}

struct Inner<A: RedisAlgorithm> {
    connection: Connection,
    script: Script,
    policy: Box<str>,
    /// The Redis keys of each tier, but for the client's part.
    names: KeyNames,
    params: Vec<u64>,
    limits: Vec<u64>,
    tiered: bool,
    timeout: Duration,
    caller_clock: bool,
    fallback: Fallback<A>,
    denials: DenyCache,
    /// Whether the server's version was found good (checked once per store).
    version: Arc<VersionCheck>,
    /// When the last failure was logged (the limiter's time, ns), plus one.
    warned: AtomicU64,
}

impl<A: RedisAlgorithm> RedisTable<A> {
    /// # Panics
    ///
    /// When a figure of the policy is too large for the algorithm's script ([`bounds`]).
    #[track_caller]
    pub(crate) fn new(store: &RedisStore, policy: &str, shared: bool, algorithm: &A) -> Self {
        if let Some(message) = refusal(policy, algorithm) {
            panic!("{message}");
        }
        let mut tiers: Vec<RedisTier> = Vec::new();
        algorithm.redis_tiers(&mut tiers);
        let params: Vec<u64> = tiers
            .iter()
            .flat_map(|t| t.params.iter().copied())
            .collect();
        let limits: Vec<u64> = tiers.iter().map(|t| t.limit).collect();
        let fallback = match &store.on_failure {
            OnFailure::Open => Fallback::Open,
            OnFailure::Closed => Fallback::Closed,
            OnFailure::Local(memory) => {
                Fallback::Local(Store::<A>::table(memory, policy, shared, algorithm))
            }
        };
        Self {
            inner: Arc::new(Inner {
                connection: store.connection.clone(),
                script: Script::new(&script_source::<A>()),
                policy: policy.into(),
                names: KeyNames::new::<A>(&store.prefix, policy, &tiers),
                params,
                limits,
                tiered: A::TIERED,
                timeout: store.timeout,
                caller_clock: store.caller_clock,
                fallback,
                denials: DenyCache::new(store.deny_cache),
                version: Arc::clone(&store.version),
                warned: AtomicU64::new(0),
            }),
        }
    }

    /// The Redis keys that hold `key`'s state under this policy, one per tier:
    /// `<prefix>:{<key>}:<policy>:<algorithm>.<fingerprint>`, tiers adding `:<n>` (see the
    /// [module docs](super)). For operators who inspect or delete a client's state by hand.
    pub fn redis_keys(&self, key: &Key) -> Vec<Vec<u8>> {
        self.inner.names.keys(key)
    }

    /// How many denials the table remembers locally right now.
    pub fn cached_denials(&self) -> usize {
        self.inner.denials.len()
    }

    /// Checks a request of `cost` for `key`; or, with `refund` (each tier's receipt from the
    /// admission), gives back what that admission took.
    pub(crate) fn run(
        &self,
        key: Key,
        now: u64,
        cost: u64,
        refund: Option<Vec<u64>>,
    ) -> RedisFuture {
        let inner = &self.inner;
        if refund.is_some() {
            inner.denials.remove(&key);
        } else if cost == 1 {
            if let Some(denied) = inner.denials.get(&key, now) {
                return RedisFuture::ready(Ok(denied));
            }
        }
        let table = self.clone();
        RedisFuture::pending(Box::pin(async move {
            let result = table.call(&key, now, cost, refund.as_deref()).await;
            let inner = &table.inner;
            match result {
                Ok(decision) => {
                    if cost == 1 && refund.is_none() && !decision.allowed {
                        inner.denials.insert(key, now, &decision);
                    }
                    Ok(decision)
                }
                Err(error) => inner.failed(error, key, now, cost, refund.is_some()),
            }
        }))
    }

    /// One round trip: the script, bounded by the timeout.
    async fn call(
        &self,
        key: &Key,
        now: u64,
        cost: u64,
        refund: Option<&[u64]>,
    ) -> Result<Decision, Error> {
        let inner = &self.inner;
        if !inner.version.is_done() {
            match tokio::time::timeout(inner.timeout, version::check(&inner.connection)).await {
                Ok(Ok(())) => inner.version.done(),
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(timed_out(inner.timeout)),
            }
        }
        let mut invocation = inner.script.prepare_invoke();
        for k in inner.names.keys(key) {
            invocation.key(k);
        }
        invocation
            .arg(if refund.is_some() { "r" } else { "c" })
            .arg(cost);
        if inner.caller_clock {
            invocation.arg(now / 1_000_000_000).arg(now % 1_000_000_000);
        } else {
            invocation.arg("").arg("");
        }
        invocation.arg(&inner.params[..]);
        // A refund names what each tier's admission took, after the parameters.
        if let Some(receipts) = refund {
            invocation.arg(receipts);
        }
        let call = async {
            match inner.connection.clone() {
                Connection::Single(mut c) => invocation.invoke_async::<Vec<Figure>>(&mut c).await,
                Connection::Cluster(mut c) => invocation.invoke_async::<Vec<Figure>>(&mut c).await,
            }
        };
        let reply = match tokio::time::timeout(inner.timeout, call).await {
            Ok(reply) => reply.map_err(|e| Error::store(redact(&e.to_string(), key)))?,
            Err(_) => return Err(timed_out(inner.timeout)),
        };
        inner.decision(&reply)
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// The decision from the script's reply: six integers per tier (the sixth is the
    /// admission's receipt, which may pass `i64::MAX` and comes as text).
    fn decision(&self, reply: &[Figure]) -> Result<Decision, Error> {
        let bad = || Error::store(format!("unexpected reply from the Redis script: {reply:?}"));
        if reply.len() != 6 * self.limits.len() {
            return Err(bad());
        }
        let reply: Vec<i128> = reply.iter().map(|f| f.0).collect();
        let nanos = |v: i128| {
            u64::try_from(v)
                .map(Duration::from_nanos)
                .map_err(|_| bad())
        };
        let decisions = reply
            .chunks_exact(6)
            .zip(&self.limits)
            .map(|(d, &limit)| {
                let remaining = u64::try_from(d[1]).map_err(|_| bad())?;
                let reset_after = nanos(d[2])?;
                let receipt = u64::try_from(d[5]).map_err(|_| bad())?;
                match d[0] {
                    1 => Ok(Decision::allow(limit, remaining, reset_after)
                        .delayed(nanos(d[4])?)
                        .with_receipt(receipt)),
                    0 => {
                        let retry_after = if d[3] == -1 { None } else { Some(nanos(d[3])?) };
                        Ok(Decision::deny(limit, remaining, reset_after, retry_after))
                    }
                    _ => Err(bad()),
                }
            })
            .collect::<Result<Vec<Decision>, Error>>()?;
        if self.tiered {
            Ok(Decision::from_tiers(decisions.into()))
        } else {
            decisions.into_iter().next().ok_or_else(bad)
        }
    }

    /// What the failure policy answers when Redis could not.
    fn failed(
        &self,
        error: Error,
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        let policy = match self.fallback {
            Fallback::Open => "open",
            Fallback::Closed => "closed",
            Fallback::Local(_) => "local",
        };
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "tollgate_store_failures_total",
            "policy" => self.policy.to_string(),
            "on_failure" => policy
        )
        .increment(1);
        self.warn(&error, now, policy);
        match &self.fallback {
            Fallback::Closed => Err(error),
            Fallback::Open => {
                // Allowed, reported as if every tier were fresh.
                let fresh = |&limit: &u64| Decision::allow(limit, limit, Duration::ZERO);
                let tiers: Vec<Decision> = self.limits.iter().map(fresh).collect();
                if self.tiered {
                    Ok(Decision::from_tiers(tiers.into()))
                } else {
                    tiers.into_iter().next().ok_or(error)
                }
            }
            // The admission's receipt is in Redis's terms, which the local table cannot read:
            // a refund while Redis is away gives nothing back (the request keeps counting),
            // and reports the local standing.
            // An admission decided here carries no receipt: a refund of it that reaches Redis
            // once it is back must not take back an admission Redis made (the request keeps
            // counting, here and there).
            Fallback::Local(table) => {
                let decision = table.decide(key, now, if refund { 0 } else { cost });
                Ok(decision.without_receipts())
            }
        }
    }

    /// Logs a failure, at most once every ten seconds.
    fn warn(&self, error: &Error, now: u64, policy: &'static str) {
        let last = self.warned.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last - 1) >= WARN_EVERY;
        if due
            && self
                .warned
                .compare_exchange(
                    last,
                    now.saturating_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                policy = &*self.policy,
                on_failure = policy,
                "Redis rate limit store failed ({error}); failing {policy} until it answers again \
                 (logged at most every 10 s)"
            );
            #[cfg(not(feature = "tracing"))]
            let _ = (error, policy);
        }
    }
}

fn timed_out(timeout: Duration) -> Error {
    Error::store(format!("Redis did not answer within {timeout:?}"))
}

/// Why a policy decided by `algorithm` cannot be kept in Redis (a figure too large for its
/// script, a sliding log too long), with a message that says how to fix it; `None` when it can.
pub(crate) fn refusal<A: RedisAlgorithm>(policy: &str, algorithm: &A) -> Option<String> {
    if let Some(message) = algorithm.refusal() {
        return Some(message);
    }
    let mut tiers: Vec<RedisTier> = Vec::new();
    algorithm.redis_tiers(&mut tiers);
    bounds::<A>(policy, &tiers).err()
}

/// Refuses a policy that a figure makes too large for `A`'s script, with a message that names
/// the figure, its value, the bound and how to bring it within.
fn bounds<A: RedisAlgorithm>(policy: &str, tiers: &[RedisTier]) -> Result<(), String> {
    let max = A::MAX_FIGURE;
    for (n, tier) in tiers.iter().enumerate() {
        let named = tier.params.iter().enumerate().map(|(i, &value)| {
            let (figure, fix) = A::FIGURES
                .get(i)
                .copied()
                .unwrap_or(("parameter", "a shorter period or a smaller limit"));
            (figure, fix, value)
        });
        let limit = (
            "reported limit (burst)",
            "a smaller burst or limit",
            tier.limit,
        );
        for (figure, fix, value) in named.chain([limit]) {
            if value > max {
                let tier = if A::TIERED {
                    format!(" (tier {n})")
                } else {
                    String::new()
                };
                return Err(format!(
                    "tollgate::RedisStore: the policy {policy:?}{tier} cannot be kept in Redis: its \
                     {alg} {figure} is {value}, above the bound of {max} ({days} days) within \
                     which the Redis script decides exactly; choose {fix} so that it is at most \
                     {max}, or keep this limit in a MemoryStore",
                    alg = A::NAME,
                    days = max / 86_400_000_000_000,
                ));
            }
        }
    }
    Ok(())
}

/// The future of a check on the [`RedisStore`]: ready at once when the answer is local (a
/// remembered denial), otherwise one round trip.
pub struct RedisFuture {
    state: FutureState,
}

type Boxed = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send>>;

enum FutureState {
    Ready(Option<Result<Decision, Error>>),
    Pending(Boxed),
}

impl RedisFuture {
    fn ready(result: Result<Decision, Error>) -> Self {
        Self {
            state: FutureState::Ready(Some(result)),
        }
    }

    fn pending(future: Boxed) -> Self {
        Self {
            state: FutureState::Pending(future),
        }
    }
}

impl std::fmt::Debug for RedisFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFuture").finish_non_exhaustive()
    }
}

impl Future for RedisFuture {
    type Output = Result<Decision, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            FutureState::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => Poll::Ready(Err(Error::store("RedisFuture polled after it completed"))),
            },
            FutureState::Pending(future) => future.as_mut().poll(cx),
        }
    }
}
