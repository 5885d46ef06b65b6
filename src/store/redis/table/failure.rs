//! What a [`RedisTable`](super::RedisTable) answers when Redis fails: the failure policy's
//! answer, counted and logged.

use super::Inner;
use crate::store::redis::algorithms::RedisAlgorithm;
use crate::store::redis::fallback::Asked;
use crate::store::redis::health::Health;
use crate::{Decision, Error, Key};

impl<A: RedisAlgorithm> Inner<A> {
    /// A reset or block that Redis failed: counted and logged as a check's failure would be,
    /// and handed back (the local fallback has it already).
    pub(super) fn update_failed(&self, error: Error, now: u64) -> Error {
        self.failures.note(now, || &error);
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
        asked: Asked,
    ) -> Result<Decision, Error> {
        self.failures.note(now, || health.error());
        self.fallback
            .answer(|| health.error(), &self.limits, key, now, cost, asked)
    }

    /// What the failure policy answers when Redis could not; counted, and logged at most
    /// every ten seconds.
    pub(super) fn failed(
        &self,
        error: Error,
        key: Key,
        now: u64,
        cost: u64,
        asked: Asked,
    ) -> Result<Decision, Error> {
        // Redis out of memory records nothing: an admission here (open, or on a local budget
        // of this server's own) would go past the quota, so it is refused whatever the policy,
        // and counted as `closed`.
        if error.kind() == crate::ErrorKind::Full {
            self.failures.note_full(now, &error);
            return Err(error);
        }
        self.failures.note(now, || &error);
        self.fallback
            .answer(|| error, &self.limits, key, now, cost, asked)
    }
}
