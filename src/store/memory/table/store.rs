//! The memory store's side of [`Store`]: each operation on a key's table, answered at once.

use std::future::{ready, Ready};
use std::sync::Arc;
use std::time::Duration;

use super::super::blocks::Blocks;
use super::super::registry::Map;
use super::MemoryTable;
use crate::store::memory::{MemoryAlgorithm, MemoryStore};
use crate::store::{Store, Update};
use crate::{Decision, Error, Key};

impl<A: MemoryAlgorithm> Store<A> for MemoryStore {
    type Table = MemoryTable<A>;
    type Future = Ready<Result<Decision, Error>>;

    /// Never fails: memory holds any policy.
    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> Result<MemoryTable<A>, Error> {
        let make = || Map::<A>::bounded(Some(self.max_keys));
        let blocks = || Blocks::new(self.max_keys);
        let (map, blocks) = if shared {
            let map = self.registry.map(policy, algorithm, make);
            (
                map,
                self.registry.blocks(policy, algorithm.wall_clock(), blocks),
            )
        } else {
            (Arc::new(make()), Arc::new(blocks()))
        };
        Ok(MemoryTable {
            map,
            blocks,
            algorithm: algorithm.clone(),
            previous: None,
        })
    }

    /// A private table for `algorithm` that carries each key's usage over from `previous`,
    /// converted by [`Algorithm::carried`](crate::algorithm::Algorithm::carried): on the key's
    /// first request, or when [`settle`](Store::settle) carries over the rest. It keeps
    /// `previous`'s blocks (shared under the old name when the quotas were named).
    fn succeed(
        &self,
        _policy: &str,
        previous: &MemoryTable<A>,
        algorithm: &A,
        _now: u64,
    ) -> Result<MemoryTable<A>, Error> {
        Ok(previous.succeeded(algorithm, self.max_keys))
    }

    /// Carries over every key `table` has not taken over yet, then lets the old table go.
    fn settle(&self, table: &MemoryTable<A>, now: u64) -> MemoryTable<A> {
        table.settled(now)
    }

    #[inline]
    fn check(table: &MemoryTable<A>, key: Key, now: u64, cost: u64) -> Self::Future {
        ready(Ok(table.decide(key, now, cost)))
    }

    /// Reads the time once the key's state is found, so that the clock's reading overlaps
    /// the lookup.
    #[inline]
    fn check_reading(
        table: &MemoryTable<A>,
        key: Key,
        now: &impl Fn() -> u64,
        cost: u64,
    ) -> Self::Future {
        ready(Ok(table.decide_reading(key, now, cost)))
    }

    fn refund(
        table: &MemoryTable<A>,
        key: Key,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Self::Future {
        ready(Ok(table.refund(key, admission, now, cost)))
    }

    fn charge(table: &MemoryTable<A>, key: Key, now: u64, cost: u64) -> Self::Future {
        ready(Ok(table.charge(key, now, cost)))
    }

    fn peek(table: &MemoryTable<A>, key: Key, now: u64) -> Self::Future {
        ready(Ok(table.peek(&key, now)))
    }

    fn reset(table: &MemoryTable<A>, key: Key, now: u64) -> Update {
        table.reset(&key, now);
        Box::pin(ready(Ok(())))
    }

    fn block(table: &MemoryTable<A>, key: Key, now: u64, duration: Duration) -> Update {
        table.block(&key, now, duration);
        Box::pin(ready(Ok(())))
    }
}
