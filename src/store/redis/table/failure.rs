//! What a [`RedisTable`](super::RedisTable) answers when Redis fails: the failure policy's
//! answer, counted and logged.

use super::Inner;
use crate::store::redis::algorithms::RedisAlgorithm;
use crate::store::redis::health::Health;
use crate::{Decision, Error, Key};

impl<A: RedisAlgorithm> Inner<A> {
    /// Counts a failure in `tollgate_store_failures_total`: answered by the failure policy, or
    /// refused (`closed`) as Redis out of memory is whatever the policy.
    fn counted(&self, full: bool) {
        if !full {
            self.failures.increment();
            return;
        }
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "tollgate_store_failures_total",
            "policy" => metrics::SharedString::from_shared(self.policy.clone()),
            "on_failure" => "closed"
        )
        .increment(1);
    }

    /// A reset or block that Redis failed: counted and logged as a check's failure would be,
    /// and handed back (the local fallback has it already).
    pub(super) fn update_failed(&self, error: Error, now: u64) -> Error {
        self.counted(false);
        self.warnings
            .warn(&error, now, &self.policy, self.fallback.name());
        error
    }

    /// What the failure policy answers while Redis is known to be down: as
    /// [`failed`](Self::failed), the error made only when it is logged or answered.
    #[inline]
    pub(super) fn answered_down(
        &self,
        health: &Health,
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        let on_failure = self.fallback.name();
        self.counted(false);
        if self.warnings.due(now) {
            self.warnings.log(&health.error(), &self.policy, on_failure);
        }
        self.fallback
            .answer(|| health.error(), &self.limits, key, now, cost, refund)
    }

    /// What the failure policy answers when Redis could not; counted, and logged at most
    /// every ten seconds.
    pub(super) fn failed(
        &self,
        error: Error,
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        // Redis out of memory records nothing: an admission here (open, or on a local budget
        // of this server's own) would go past the quota, so it is refused whatever the policy.
        let full = error.kind() == crate::ErrorKind::Full;
        let on_failure = if full { "closed" } else { self.fallback.name() };
        self.counted(full);
        self.warnings.warn(&error, now, &self.policy, on_failure);
        if full {
            return Err(error);
        }
        self.fallback
            .answer(|| error, &self.limits, key, now, cost, refund)
    }
}
