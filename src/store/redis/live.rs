//! A layer's record of its quotas changed live, kept in Redis so that every server sharing it
//! follows a change made through any of them: `<prefix>:live:<layer>`, a hash with no TTL
//! (the layer named by the quotas it was built with) holding `v`, a version that each write
//! increments, and one field per quotas changed (the layer's own, each plan's), whose value
//! is the latest quotas put in force, the last one in force now: a server that missed some
//! puts each in force in turn, so that every key is charged what it used under each. A write sets its field and increments the version in one script
//! call, so of two changes racing, the one Redis runs last is the record's.
//!
//! Each server reads `v` every [`POLL_EVERY`] (one `HGET`), and the whole hash (`HGETALL`)
//! when the version moved. Calls are bounded by the store's timeout, and skipped while the
//! store knows Redis is down.

use std::time::Duration;

use super::errors::bounded;
use super::{errors, RedisStore};
use crate::Error;

/// How often each server reads the version of each layer's record.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(250);

/// Adds a value to a field's history (the latest [`HISTORY`] kept) and increments the version;
/// the new version (the script says how).
const WRITE: &str = include_str!("lua/live_write.lua");

/// How many values a field's history keeps: as many quotas as a policy carries over from.
const HISTORY: usize = 8;

/// A layer's record in Redis.
#[derive(Clone)]
pub(crate) struct LiveRecord {
    store: RedisStore,
    key: Vec<u8>,
}

impl std::fmt::Debug for LiveRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRecord")
            .field("key", &String::from_utf8_lossy(&self.key))
            .finish_non_exhaustive()
    }
}

impl LiveRecord {
    /// The record of the layer named `layer` in `store`.
    pub(crate) fn of(store: &RedisStore, layer: &str) -> Self {
        Self {
            store: store.clone(),
            key: format!("{}:live:{layer}", store.prefix).into_bytes(),
        }
    }

    /// The record's version: 0 when there is none.
    pub(crate) async fn version(&self) -> Result<u64, Error> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.key).arg("v");
        let version: Option<u64> = self.query(&cmd).await?;
        Ok(version.unwrap_or(0))
    }

    /// The record's version and its fields but the version's.
    pub(crate) async fn read(&self) -> Result<(u64, Vec<(Vec<u8>, Vec<u8>)>), Error> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&self.key);
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = self.query(&cmd).await?;
        let version = fields
            .iter()
            .position(|(field, _)| field == b"v")
            .map(|at| fields.swap_remove(at).1);
        let version = version
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
            .unwrap_or(0);
        Ok((version, fields))
    }

    /// Adds `value` to `field`'s history; the record's new version.
    pub(crate) async fn write(&self, field: &[u8], value: &[u8]) -> Result<u64, Error> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(WRITE)
            .arg(1)
            .arg(&self.key)
            .arg(field)
            .arg(value)
            .arg(HISTORY);
        self.query(&cmd).await
    }

    /// `cmd`, bounded by the timeout; an error at once while Redis is known to be down.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        // On a Redis Cluster, by the record's slot.
        let store = &self.store;
        if let Some(health) = store.health.down_at(&self.key) {
            return Err(health.error());
        }
        bounded(
            store.timeout,
            store.connection.query(cmd),
            errors::connecting,
        )
        .await
    }
}
