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
use super::{Connection, OnFailure, RedisStore};
use crate::algorithm::tiered::report;
use crate::store::{MemoryState, MemoryTable, Store};
use crate::{Decision, Error, Key};

/// How often a failing store logs its warning, at most: once per this many ns.
const WARN_EVERY: u64 = 10_000_000_000;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const DRIVER: &str = include_str!("lua/driver.lua");

/// The full script of an algorithm: the prelude, its module, the driver.
pub(crate) fn script_source<A: RedisAlgorithm>() -> String {
    format!("{PRELUDE}\n{}\n{DRIVER}", A::LUA)
}

/// A [`RedisStore`]'s view of one policy.
pub struct RedisTable<A: RedisAlgorithm>
where
    A::State: MemoryState,
{
    inner: Arc<Inner<A>>,
}

impl<A: RedisAlgorithm> Clone for RedisTable<A>
where
    A::State: MemoryState,
{
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: RedisAlgorithm> std::fmt::Debug for RedisTable<A>
where
    A::State: MemoryState,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTable")
            .field("policy", &self.inner.policy)
            .field("tiers", &self.inner.limits.len())
            .finish()
    }
}

enum Fallback<A: RedisAlgorithm>
where
    A::State: MemoryState,
{
    Open,
    Closed,
    Local(MemoryTable<A>),
}

struct Inner<A: RedisAlgorithm>
where
    A::State: MemoryState,
{
    connection: Connection,
    script: Script,
    policy: Box<str>,
    prefix: Box<str>,
    /// Each tier's key after the client's key: `}:<policy>`, then `:<tier>` for tiers.
    suffixes: Vec<Vec<u8>>,
    params: Vec<u64>,
    limits: Vec<u64>,
    tiered: bool,
    timeout: Duration,
    caller_clock: bool,
    fallback: Fallback<A>,
    denials: DenyCache,
    /// Why this policy cannot run in Redis, when it cannot.
    invalid: Option<Arc<str>>,
    /// When the last failure was logged (the limiter's time, ns), plus one.
    warned: AtomicU64,
}

impl<A: RedisAlgorithm> RedisTable<A>
where
    A::State: MemoryState,
{
    pub(crate) fn new(store: &RedisStore, policy: &str, shared: bool, algorithm: &A) -> Self {
        let mut tiers: Vec<RedisTier> = Vec::new();
        algorithm.redis_tiers(&mut tiers);
        let tiered = A::TIERED;
        let params: Vec<u64> = tiers
            .iter()
            .flat_map(|t| t.params.iter().copied())
            .collect();
        let limits: Vec<u64> = tiers.iter().map(|t| t.limit).collect();
        let invalid = params
            .iter()
            .chain(&limits)
            .any(|&v| v > A::MAX_FIGURE)
            .then(|| {
                Arc::from(format!(
                    "the policy {policy:?} is too large for the Redis store: its figures must stay \
                     at most {} (periods, bursts and waits in ns, and limits)",
                    A::MAX_FIGURE
                ))
            });
        let suffixes = (0..tiers.len())
            .map(|i| {
                let mut suffix = format!("}}:{policy}").into_bytes();
                if tiered {
                    suffix.extend_from_slice(format!(":{i}").as_bytes());
                }
                suffix
            })
            .collect();
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
                prefix: store.prefix.clone(),
                suffixes,
                params,
                limits,
                tiered,
                timeout: store.timeout,
                caller_clock: store.caller_clock,
                fallback,
                denials: DenyCache::new(store.deny_cache),
                invalid,
                warned: AtomicU64::new(0),
            }),
        }
    }

    /// The Redis key of each tier for `key`.
    pub(crate) fn keys(&self, key: &Key) -> Vec<Vec<u8>> {
        let inner = &self.inner;
        let mut base = Vec::with_capacity(inner.prefix.len() + 48);
        base.extend_from_slice(inner.prefix.as_bytes());
        base.extend_from_slice(b":{");
        encode_key(key, &mut base);
        inner
            .suffixes
            .iter()
            .map(|suffix| {
                let mut k = base.clone();
                k.extend_from_slice(suffix);
                k
            })
            .collect()
    }

    /// How many denials the table remembers locally right now.
    pub fn cached_denials(&self) -> usize {
        self.inner.denials.len()
    }

    pub(crate) fn run(&self, key: Key, now: u64, cost: u64, refund: bool) -> RedisFuture {
        let inner = &self.inner;
        if let Some(reason) = &inner.invalid {
            return RedisFuture::ready(Err(Error::store(reason.to_string())));
        }
        if refund {
            inner.denials.remove(&key);
        } else if cost == 1 {
            if let Some(denied) = inner.denials.get(&key, now) {
                return RedisFuture::ready(Ok(denied));
            }
        }
        let table = self.clone();
        RedisFuture::pending(Box::pin(async move {
            let result = table.call(&key, now, cost, refund).await;
            let inner = &table.inner;
            match result {
                Ok(decision) => {
                    if cost == 1 && !refund && !decision.allowed {
                        inner.denials.insert(key, now, &decision);
                    }
                    Ok(decision)
                }
                Err(error) => inner.failed(error, key, now, cost, refund),
            }
        }))
    }

    /// One round trip: the script, bounded by the timeout.
    async fn call(&self, key: &Key, now: u64, cost: u64, refund: bool) -> Result<Decision, Error> {
        let inner = &self.inner;
        let mut invocation = inner.script.prepare_invoke();
        for k in self.keys(key) {
            invocation.key(k);
        }
        invocation.arg(if refund { "r" } else { "c" }).arg(cost);
        if inner.caller_clock {
            invocation.arg(now / 1_000_000_000).arg(now % 1_000_000_000);
        } else {
            invocation.arg("").arg("");
        }
        invocation.arg(&inner.params[..]);
        let call = async {
            match inner.connection.clone() {
                Connection::Single(mut c) => invocation.invoke_async::<Vec<i64>>(&mut c).await,
                Connection::Cluster(mut c) => invocation.invoke_async::<Vec<i64>>(&mut c).await,
            }
        };
        let reply = match tokio::time::timeout(inner.timeout, call).await {
            Ok(reply) => reply.map_err(Error::store)?,
            Err(_) => {
                return Err(Error::store(format!(
                    "Redis did not answer within {:?}",
                    inner.timeout
                )))
            }
        };
        inner.decision(&reply)
    }
}

impl<A: RedisAlgorithm> Inner<A>
where
    A::State: MemoryState,
{
    /// The decision from the script's reply: five integers per tier.
    fn decision(&self, reply: &[i64]) -> Result<Decision, Error> {
        let bad = || Error::store(format!("unexpected reply from the Redis script: {reply:?}"));
        if reply.len() != 5 * self.limits.len() {
            return Err(bad());
        }
        let nanos = |v: i64| {
            u64::try_from(v)
                .map(Duration::from_nanos)
                .map_err(|_| bad())
        };
        let decisions = reply
            .chunks_exact(5)
            .zip(&self.limits)
            .map(|(d, &limit)| {
                let remaining = u64::try_from(d[1]).map_err(|_| bad())?;
                let reset_after = nanos(d[2])?;
                match d[0] {
                    1 => Ok(Decision::allow(limit, remaining, reset_after).delayed(nanos(d[4])?)),
                    0 => {
                        let retry_after = if d[3] == -1 { None } else { Some(nanos(d[3])?) };
                        Ok(Decision::deny(limit, remaining, reset_after, retry_after))
                    }
                    _ => Err(bad()),
                }
            })
            .collect::<Result<Vec<Decision>, Error>>()?;
        if self.tiered {
            Ok(report(decisions.into()))
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
                    Ok(report(tiers.into()))
                } else {
                    tiers.into_iter().next().ok_or(error)
                }
            }
            Fallback::Local(table) => Ok(if refund {
                table.refund(key, now, cost)
            } else {
                table.decide(key, now, cost)
            }),
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

/// Writes `key` so that keys of different kinds never meet: `ip:` + the address, `n:` + the
/// integer, `s:` + the bytes as they are, `h:` + the hex SHA-256 of a long key.
fn encode_key(key: &Key, out: &mut Vec<u8>) {
    use std::io::Write as _;
    // Writes into a Vec cannot fail.
    let _ = if let Some(ip) = key.as_ip() {
        write!(out, "ip:{ip}")
    } else if let Some(n) = key.as_u64() {
        write!(out, "n:{n}")
    } else if let Some(bytes) = key.as_bytes() {
        out.extend_from_slice(b"s:");
        out.extend_from_slice(bytes);
        Ok(())
    } else if let Some(digest) = key.as_digest() {
        out.extend_from_slice(b"h:");
        digest.iter().try_for_each(|b| write!(out, "{b:02x}"))
    } else {
        Ok(())
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn encoded(key: Key) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(&key, &mut out);
        out
    }

    #[test]
    fn keys_of_different_kinds_never_meet() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(encoded(Key::from(ip)), b"ip:192.0.2.1");
        assert_eq!(encoded(Key::from("192.0.2.1")), b"s:192.0.2.1");
        assert_eq!(encoded(Key::from(7u64)), b"n:7");
        assert_eq!(encoded(Key::from("7")), b"s:7");
        assert_eq!(encoded(Key::from(&b"\xff{}\x00"[..])), b"s:\xff{}\x00");
        let long = "x".repeat(100);
        let digest = encoded(Key::from(long.as_str()));
        assert!(digest.starts_with(b"h:"));
        assert_eq!(digest.len(), 2 + 64);
    }
}
