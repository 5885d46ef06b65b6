//! The script's call of a [`RedisTable`]: its arguments, the script loaded again after a
//! `NOSCRIPT`, the timeout, and what the call tells of Redis's health.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Inner, RedisTable};
use crate::store::redis::algorithms::RedisAlgorithm;
use crate::store::redis::errors::bounded;
use crate::store::redis::leases::GiveBack;
use crate::store::redis::reply::Figure;
use crate::store::redis::{errors, version};
use crate::{Error, Key};

/// Whether Redis answered that it does not have the script.
fn is_no_script(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// What one script call does.
#[derive(Clone, Copy)]
pub(super) enum Mode<'a> {
    /// A check of a cost.
    Check(u64),
    /// A refund of a cost, with each tier's receipt.
    Refund(u64, &'a [u64]),
    /// A charge of a cost, whatever the key has left (a debt).
    Charge(u64),
    /// Deletes the key's states and block.
    Reset,
    /// Blocks the key for a number of ns.
    Block(u64),
    /// A check of a cost that takes a slice of up to `want` units (at most `1 / share` of
    /// what is left) on top, giving back an ended slice's units first.
    Lease {
        cost: u64,
        want: u64,
        share: u64,
        back: Option<&'a GiveBack>,
    },
}

impl<A: RedisAlgorithm> RedisTable<A> {
    /// The script in `mode` for `key`, bounded by the timeout; its reply. While Redis is known
    /// to be down, an error at once; otherwise what the call found is noted in the store's
    /// health.
    pub(super) async fn round_trip(
        &self,
        key: &Key,
        now: u64,
        mode: Mode<'_>,
    ) -> Result<Vec<Figure>, Error> {
        let store = &self.inner.store;
        let health = store.health.of(key);
        if let Some(health) = health.as_ref().filter(|health| health.is_down()) {
            return Err(health.error());
        }
        let call = self.call_script(key, now, mode);
        store.observed(health, call).await
    }

    /// The script in `mode` for `key`, bounded by the timeout, whatever is known of Redis.
    async fn call_script(&self, key: &Key, now: u64, mode: Mode<'_>) -> Result<Vec<Figure>, Error> {
        let inner = &self.inner;
        if !inner.store.version.load(Ordering::Acquire) {
            let connection = &mut inner.store.connection.clone();
            let check = version::check(connection, "");
            bounded(inner.store.timeout, check, |e| e).await?;
            inner.store.version.store(true, Ordering::Release);
        }
        inner.list().await;
        // While the table carries over, a check and a refund name the old tables' keys too (a
        // reset deletes them), before the blocks.
        let carry = inner
            .carry
            .as_ref()
            .and_then(|carry| Some((carry, carry.hold(Instant::now())?)))
            .filter(|_| !matches!(mode, Mode::Block(_) | Mode::Lease { .. }));
        let carried = carry
            .map_or(&[][..], |(carry, _)| &carry.generations)
            .iter()
            .map(|generation| &generation.names);
        let keys = inner.names.call_keys(key, carried);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(inner.script.get_hash()).arg(keys.len()).arg(keys);
        let (letter, cost) = match mode {
            Mode::Check(cost) => ('c', cost),
            Mode::Refund(cost, _) => ('r', cost),
            Mode::Charge(cost) => ('d', cost),
            Mode::Reset => ('x', 0),
            Mode::Block(nanos) => ('b', nanos),
            Mode::Lease { cost, .. } => ('l', cost),
        };
        // A check, refund or charge that carries over is told by its capital letter.
        let letter = match letter {
            'c' | 'r' | 'd' if carry.is_some() => letter.to_ascii_uppercase(),
            _ => letter,
        };
        // The letter, then how many blocks under earlier names the keys hold.
        match inner.names.earlier_blocks() {
            0 => cmd.arg(letter.to_string()),
            n => cmd.arg(format!("{letter}{n}")),
        };
        cmd.arg(cost);
        if inner.store.caller_clock {
            cmd.arg(now / 1_000_000_000).arg(now % 1_000_000_000);
        } else {
            cmd.arg("").arg("");
        }
        cmd.arg(&inner.params[..]);
        // A refund names what each tier's admission took, after the parameters.
        if let Mode::Refund(_, receipts) = mode {
            cmd.arg(receipts);
        }
        // A lease names the slice wanted, the share, and what an ended slice gives back.
        if let Mode::Lease {
            want, share, back, ..
        } = mode
        {
            cmd.arg(want).arg(share);
            match back {
                Some(back) => cmd.arg(back.units).arg(&back.receipts[..]),
                None => cmd.arg(0),
            };
        }
        if let Some((carry, hold)) = carry {
            carry.arguments(&mut cmd, now, hold);
        }
        bounded(inner.store.timeout, inner.evaluate(&cmd), |e| {
            errors::deciding(&e, key)
        })
        .await
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// Runs the script (`cmd`, an `EVALSHA`), loading it first when the server does not have
    /// it (`NOSCRIPT`: a fresh, restarted, flushed or failed-over server). The callers that
    /// find it missing together load it once: the first loads it while the others wait, then
    /// all run it again. A script lost again since (the server flushed twice) is loaded by
    /// whoever finds it missing.
    async fn evaluate(&self, cmd: &redis::Cmd) -> redis::RedisResult<Vec<Figure>> {
        let seen = self.script_loads.load(Ordering::Acquire);
        match self.store.connection.query(cmd).await {
            Err(error) if is_no_script(&error) => {}
            reply => return reply,
        }
        {
            let _one_at_a_time = self.script_loading.lock().await;
            if self.script_loads.load(Ordering::Acquire) == seen {
                self.load_script().await?;
                self.script_loads.fetch_add(1, Ordering::Release);
            }
        }
        match self.store.connection.query(cmd).await {
            Err(error) if is_no_script(&error) => {
                self.load_script().await?;
                self.store.connection.query(cmd).await
            }
            reply => reply,
        }
    }

    /// Lists the table's key ends in its layer's family, once: before its first call, and
    /// again before the next ones until it succeeds (within the timeout; a call that fails
    /// here fails in the script's call too, which the failure policy answers).
    async fn list(&self) {
        let Some((family, listing)) = self.family.as_ref().and_then(|f| Some((f, f.listing()?)))
        else {
            return;
        };
        // Not while the list's master is known down (on a Redis Cluster): the call goes on.
        if self.store.health.down_at(&family.list).is_some() {
            return;
        }
        let listed = self.store.connection.query::<redis::Value>(&listing);
        if let Ok(Ok(_)) = tokio::time::timeout(self.store.timeout, listed).await {
            family.listed();
        }
    }

    /// `cmd` for `key`, bounded by the timeout.
    pub(super) async fn bounded<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        key: &Key,
    ) -> Result<T, Error> {
        let call = self.store.connection.query(cmd);
        bounded(self.store.timeout, call, |e| errors::deciding(&e, key)).await
    }

    /// `SCRIPT LOAD`; on a Redis Cluster, on every primary.
    async fn load_script(&self) -> redis::RedisResult<()> {
        let connection = &mut self.store.connection.clone();
        self.script.load_async(connection).await.map(drop)
    }
}
