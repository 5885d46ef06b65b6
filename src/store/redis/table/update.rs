//! A [`RedisTable`]'s resets and blocks of a key, in Redis and in the local fallback.

use std::time::Duration;

use super::round_trip::Mode;
use super::RedisTable;
use crate::clock::saturating_nanos;
use crate::store::redis::algorithms::RedisAlgorithm;
use crate::store::redis::family;
use crate::store::Update;
use crate::{Error, Key};

impl<A: RedisAlgorithm> RedisTable<A> {
    /// Deletes `key`'s state in every tier and its block (for a layer's own table, under
    /// every table of the layer too: [`family`]), and forgets its denial here and in the
    /// local fallback.
    pub(crate) fn reset(&self, key: Key, now: u64) -> Update {
        let table = self.clone();
        Box::pin(async move {
            let inner = &table.inner;
            inner.denials.remove(&key);
            inner.leases.iter().for_each(|book| book.forget(&key));
            inner.fallback.reset(&key, now);
            let mut result = table.round_trip(&key, now, Mode::Reset).await.map(drop);
            if result.is_ok() {
                result = table.reset_family(&key).await;
            }
            // A denial remembered, or a slice taken, while the reset was on its way is
            // forgotten too.
            inner.denials.remove(&key);
            inner.leases.iter().for_each(|book| book.forget(&key));
            result.map_err(|error| inner.update_failed(error, now))
        })
    }

    /// For the layer's own table: deletes `key`'s keys under every table of the layer any
    /// server has listed ([`family`]), each bounded by the timeout.
    async fn reset_family(&self, key: &Key) -> Result<(), Error> {
        let inner = &self.inner;
        let Some((family, reading)) = inner.family.as_ref().and_then(|f| Some((f, f.reading()?)))
        else {
            return Ok(());
        };
        // The list's master known down (on a Redis Cluster): the reset fails at once.
        if let Some(down) = inner.store.health.down_at(&family.list) {
            return Err(down.error());
        }
        let ends: Vec<Vec<u8>> = inner.bounded(&reading, key).await?;
        let keys = inner.names.under(key, &ends);
        for batch in keys.chunks(family::DEL_BATCH) {
            inner
                .bounded::<redis::Value>(redis::cmd("DEL").arg(batch), key)
                .await?;
        }
        Ok(())
    }

    /// Blocks `key` for `duration` from `now` (Redis `TIME`, or `now` with the caller's
    /// clock), here and in the local fallback.
    pub(crate) fn block(&self, key: Key, now: u64, duration: Duration) -> Update {
        let table = self.clone();
        let nanos = saturating_nanos(duration);
        Box::pin(async move {
            let inner = &table.inner;
            inner.leases.iter().for_each(|book| book.forget(&key));
            inner.fallback.block(&key, now, duration);
            let result = table.round_trip(&key, now, Mode::Block(nanos)).await;
            // A slice taken while the block was on its way ends too.
            inner.leases.iter().for_each(|book| book.forget(&key));
            result
                .map(drop)
                .map_err(|error| inner.update_failed(error, now))
        })
    }
}
