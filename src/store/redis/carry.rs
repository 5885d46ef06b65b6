//! What a [`RedisTable`](super::RedisTable) made by new quotas (a live layer's
//! [`Handle::set_quotas`](crate::layer::Handle::set_quotas)) carries over from the tables it
//! took over from.
//!
//! New quotas have new Redis keys (the keys name a fingerprint of the quotas), so the states
//! under the old keys are not read by the new table's script as they are. Instead, for as long
//! as an old table's states may live, each check names the old keys too (every one in the
//! client key's slot), and the script charges each tier what the key used there, counted in
//! requests, before it decides (the driver, `lua/driver.lua`, says how). The new table stamps
//! the states it writes with an id of its own and what it carried over into them: a server not
//! yet changed goes on admitting under the old quotas, and each check charges a stamped state
//! what the old tables show used past that count (every server's table of the new quotas
//! alike), so that those admissions count too; a state unstamped (none stored, or written
//! before the change) is charged the most the old tables show.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use super::keys::KeyNames;
use crate::Error;

/// How many earlier tables a table reads from at most. Each change of quotas adds one for as
/// long as its states may live; a change past this many in that time is refused.
pub(crate) const MAX_GENERATIONS: usize = 8;

/// One table taken over from: its keys and parameters, and until when its states may live.
#[derive(Debug, Clone)]
pub(crate) struct Generation {
    pub(crate) names: KeyNames,
    pub(crate) params: Vec<u64>,
    pub(crate) tiers: usize,
    /// When it was taken over, on the limiter's clock (the `now` its checks are made with).
    pub(crate) switched: u64,
    pub(crate) until: Instant,
}

/// Until when the states of a table taken over now may be read: twice the longest a state
/// lives (`lifetime` ns), and a second more, so that the old keys are read past their TTLs by a
/// wide margin rather than forgotten a moment too soon (the local clock and Redis's run at
/// slightly different rates); and no sooner than the end of the table's own carrying over
/// (`carry`: the states it wrote then are kept that long).
pub(crate) fn until(lifetime: u64, carry: Option<&Carry>) -> Instant {
    let margin = Duration::from_nanos(lifetime.saturating_mul(2));
    let until = Instant::now() + margin.saturating_add(Duration::from_secs(1));
    carry.map_or(until, |c| c.until.max(until))
}

/// A table's carrying over: the tables it reads from, the latest first.
#[derive(Debug)]
pub(crate) struct Carry {
    /// The generations read from, the latest first, while they may live.
    pub(crate) generations: Vec<Generation>,
    /// Every generation's parameters, in order.
    params: Vec<u64>,
    /// The id the table stamps its states with: 16 hex digits, random.
    id: String,
    /// `n,m1,m2,...`: the table's tiers, then each generation's.
    counts: String,
    /// When the last generation's states are gone: the table then decides as any other.
    pub(crate) until: Instant,
}

impl Carry {
    /// The carrying over of a table of `names` (with `tiers` tiers) from `generations`, the
    /// latest first: those whose states may still live, each named once (the latest), and
    /// none named as the table itself (its keys are read anyway); `None` when none is left.
    ///
    /// # Errors
    ///
    /// More than [`MAX_GENERATIONS`] tables to read from.
    pub(crate) fn new(
        names: &KeyNames,
        tiers: usize,
        generations: impl IntoIterator<Item = Generation>,
        policy: &str,
    ) -> Result<Option<Self>, Error> {
        let now = Instant::now();
        let mut kept: Vec<Generation> = Vec::new();
        let live = generations.into_iter().filter(|g| g.until > now);
        for generation in live.filter(|g| !g.names.same_states(names)) {
            match kept
                .iter_mut()
                .find(|g| g.names.same_states(&generation.names))
            {
                // The same keys twice (the same quotas in force twice): read once, where the
                // latest stands, as long as the longest lived of the two says.
                Some(latest) => latest.until = latest.until.max(generation.until),
                None => kept.push(generation),
            }
        }
        if kept.is_empty() {
            return Ok(None);
        }
        if kept.len() > MAX_GENERATIONS {
            let wait = kept.iter().map(|g| g.until - now).min().unwrap_or_default();
            return Err(Error::misconfigured(format!(
                "Handle::set_quotas: the policy {policy:?} in Redis still carries over what keys \
                 used under {} earlier quotas, the most it follows at once ({MAX_GENERATIONS}); \
                 change its quotas again in {} s, when the oldest are gone",
                kept.len(),
                wait.as_secs() + 1,
            )));
        }
        let counts = std::iter::once(tiers).chain(kept.iter().map(|g| g.tiers));
        let counts: Vec<String> = counts.map(|n| n.to_string()).collect();
        let params = kept.iter().flat_map(|g| g.params.iter().copied()).collect();

        let until = kept.iter().map(|g| g.until).max().unwrap_or(now);
        Ok(Some(Self {
            generations: kept,
            params,
            id: format!("{:016x}", RandomState::new().hash_one(now)),
            counts: counts.join(","),
            until,
        }))
    }

    /// The whole ms this table's states are kept at least, from now; `None` once it no
    /// longer carries over.
    pub(crate) fn hold(&self, now: Instant) -> Option<u128> {
        let left = self.until.checked_duration_since(now)?;
        (!left.is_zero()).then(|| left.as_nanos().div_ceil(1_000_000))
    }

    /// What the script's call at `now` (the limiter's clock) takes after the table's own
    /// arguments: each generation's parameters, each one's age (ns since it was taken over),
    /// the table's id, `hold` and the counts.
    pub(crate) fn arguments(&self, cmd: &mut redis::Cmd, now: u64, hold: u128) {
        cmd.arg(&self.params[..]);
        for generation in &self.generations {
            cmd.arg(now.saturating_sub(generation.switched));
        }
        cmd.arg(&self.id).arg(hold.to_string()).arg(&self.counts);
    }
}
