//! The script calls of [`RedisSlots`](super::RedisSlots): one call on a key's leases, the
//! decision of an acquire, blocks, and what the failure policy answers when Redis fails.

use std::time::Duration;

use super::{Fallback, Inner, Keys, Reply};
use crate::store::in_flight::{LOCAL_LEASE, NO_LEASE};
use crate::store::redis::{errors, Connection};
use crate::{Decision, Error, Key};

/// The longest block the script keeps, in ms: 2^53, where its numbers stop being exact (some
/// 285 000 years).
const MAX_BLOCK_MS: u64 = 1 << 53;

impl Inner {
    /// The time the script decides at, in ms: the caller's, or `''` for Redis `TIME`.
    fn now_arg(&self) -> String {
        if self.caller_clock {
            (self.clock.now_nanos() / 1_000_000).to_string()
        } else {
            String::new()
        }
    }

    /// One script call on `keys`, bounded by the timeout.
    pub(super) async fn run(
        &self,
        keys: &Keys,
        op: &str,
        member: &str,
        cost: u64,
        key: &Key,
    ) -> Result<Reply, Error> {
        let mut invocation = self.script.prepare_invoke();
        for k in keys {
            invocation.key(&k[..]);
        }
        invocation
            .arg(op)
            .arg(member)
            .arg(cost)
            .arg(self.limit)
            .arg(self.ttl_ms)
            .arg(self.now_arg());
        let call = async {
            match self.connection.clone() {
                Connection::Single(mut c) => {
                    invocation.invoke_async::<(i64, i64, i64)>(&mut c).await
                }
                Connection::Cluster(mut c) => {
                    invocation.invoke_async::<(i64, i64, i64)>(&mut c).await
                }
                Connection::Sentinel(mut c) => {
                    invocation.invoke_async::<(i64, i64, i64)>(&mut c).await
                }
            }
        };
        let (done, held, blocked) = match tokio::time::timeout(self.timeout, call).await {
            Ok(reply) => reply.map_err(|e| errors::deciding(&e, key))?,
            Err(_) => return Err(errors::timed_out(self.timeout)),
        };
        let (Ok(held), Ok(blocked)) = (u64::try_from(held), u64::try_from(blocked)) else {
            return Err(Error::protocol(format!(
                "unexpected reply from the in-flight script: {held}, {blocked}"
            )));
        };
        Ok(Reply {
            done: done == 1,
            held,
            blocked: Duration::from_millis(blocked),
        })
    }

    /// The decision of an acquire that Redis answered with `reply`.
    pub(super) fn decision(&self, reply: &Reply, lease: u64) -> Decision {
        let remaining = self.limit.saturating_sub(reply.held);
        if !reply.blocked.is_zero() {
            Decision::deny(self.limit, remaining, Duration::ZERO, None).blocked_for(reply.blocked)
        } else if reply.done {
            Decision::allow(self.limit, remaining, Duration::ZERO).with_receipt(lease)
        } else {
            Decision::deny(self.limit, remaining, Duration::ZERO, None)
        }
    }

    /// Blocks `key` for `duration` from now (`'b'`), or lifts its block (`'x'`), in Redis; an
    /// error is counted and logged as an acquire's would be, and handed back.
    pub(super) async fn update(&self, key: Key, op: &str, duration: Duration) -> Result<(), Error> {
        // Whole ms, rounded up: a block never ends before it was asked to.
        let ms = duration.as_nanos().div_ceil(1_000_000);
        let ms = u64::try_from(ms).unwrap_or(u64::MAX).min(MAX_BLOCK_MS);
        match self.run(&self.keys(&key), op, "", ms, &key).await {
            Ok(_) => Ok(()),
            Err(error) => {
                self.count_failure(&error);
                Err(error)
            }
        }
    }

    /// Counts and logs (at most every ten seconds) a call Redis failed with `error`.
    fn count_failure(&self, error: &Error) {
        self.failures.increment();
        let now = self.clock.now_nanos();
        self.warnings
            .warn(error, now, &self.policy, self.fallback.name());
    }

    /// What the failure policy answers for an acquire that Redis failed with `error`.
    pub(super) fn failed(&self, error: Error, key: Key, cost: u64) -> Result<Decision, Error> {
        self.count_failure(&error);
        match &self.fallback {
            Fallback::Closed => Err(error),
            Fallback::Open => {
                Ok(Decision::allow(self.limit, self.limit, Duration::ZERO).with_receipt(NO_LEASE))
            }
            Fallback::Local(local) => {
                let decision = local.take(key, cost)?;
                Ok(if decision.allowed {
                    decision.with_receipt(LOCAL_LEASE)
                } else {
                    decision
                })
            }
        }
    }
}
