//! [`RedisTable`]: one policy in Redis, and the round trip of one check.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::algorithms::{RedisAlgorithm, RedisTier};
use super::deny_cache::DenyCache;
use super::fallback::Fallback;
use super::future::RedisFuture;
use super::keys::KeyNames;
use super::reply::{self, Figure};
use super::version::{self, VersionCheck};
use super::warn::Warnings;
use super::{bounds, errors, script, Connection, RedisStore};
use crate::{Decision, Error, Key};

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

struct Inner<A: RedisAlgorithm> {
    connection: Connection,
    script: Script,
    policy: Box<str>,
    /// The Redis keys of each tier, but for the client's part.
    names: KeyNames,
    params: Vec<u64>,
    limits: Vec<u64>,
    timeout: Duration,
    caller_clock: bool,
    fallback: Fallback<A>,
    denials: DenyCache,
    /// Whether the server's version was found good (checked once per store).
    version: Arc<VersionCheck>,
    warnings: Warnings,
}

impl<A: RedisAlgorithm> RedisTable<A> {
    /// The table of `policy` decided by `algorithm`, or a misconfiguration error when a figure
    /// of the policy is too large for the algorithm's script ([`bounds`]).
    pub(crate) fn new(
        store: &RedisStore,
        policy: &str,
        shared: bool,
        algorithm: &A,
    ) -> Result<Self, Error> {
        bounds::check(policy, algorithm)?;
        let mut tiers: Vec<RedisTier> = Vec::new();
        algorithm.redis_tiers(&mut tiers);
        let params: Vec<u64> = tiers
            .iter()
            .flat_map(|t| t.params.iter().copied())
            .collect();
        let limits: Vec<u64> = tiers.iter().map(|t| t.limit).collect();
        let fallback = Fallback::new(&store.on_failure, policy, shared, algorithm)?;
        Ok(Self {
            inner: Arc::new(Inner {
                connection: store.connection.clone(),
                script: Script::new(&script::source::<A>()),
                policy: policy.into(),
                names: KeyNames::new::<A>(&store.prefix, policy, &tiers),
                params,
                limits,
                timeout: store.timeout,
                caller_clock: store.caller_clock,
                fallback,
                denials: DenyCache::new(store.deny_cache),
                version: Arc::clone(&store.version),
                warnings: Warnings::default(),
            }),
        })
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
                Err(_) => return Err(errors::timed_out(inner.timeout)),
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
            Ok(reply) => reply.map_err(|e| errors::deciding(&e, key))?,
            Err(_) => return Err(errors::timed_out(inner.timeout)),
        };
        reply::decision(&reply, &inner.limits, A::TIERED)
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// What the failure policy answers when Redis could not; counted, and logged at most
    /// every ten seconds.
    fn failed(
        &self,
        error: Error,
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        let on_failure = self.fallback.name();
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "tollgate_store_failures_total",
            "policy" => self.policy.to_string(),
            "on_failure" => on_failure
        )
        .increment(1);
        self.warnings.warn(&error, now, &self.policy, on_failure);
        self.fallback
            .answer(error, &self.limits, key, now, cost, refund)
    }
}
