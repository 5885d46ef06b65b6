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

impl Generation {
    /// A table of `names` and `params` (for `tiers` tiers) taken over at `switched` (on the
    /// limiter's clock), whose states live at most `lifetime` ns from now, or until `carried`
    /// (the end of its own carrying over: the states it wrote then are kept that long).
    pub(crate) fn new(
        names: KeyNames,
        params: Vec<u64>,
        tiers: usize,
        switched: u64,
        lifetime: u64,
        carried: Option<Instant>,
    ) -> Self {
        let until = Instant::now() + margin(lifetime);
        Self {
            names,
            params,
            tiers,
            switched,
            until: carried.map_or(until, |c| c.max(until)),
        }
    }
}

/// Twice the longest a state lives, and a second more: the old keys are read past their TTLs
/// by a wide margin rather than forgotten a moment too soon (the local clock and Redis's run
/// at slightly different rates).
fn margin(lifetime: u64) -> Duration {
    Duration::from_nanos(lifetime.saturating_mul(2)).saturating_add(Duration::from_secs(1))
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
        for generation in generations {
            if generation.until <= now {
                continue;
            }
            if generation.names.same_states(names) {
                continue;
            }
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
        let mut counts = tiers.to_string();
        for generation in &kept {
            counts.push(',');
            counts.push_str(&generation.tiers.to_string());
        }
        let params = kept.iter().flat_map(|g| g.params.iter().copied()).collect();

        let until = kept.iter().map(|g| g.until).max().unwrap_or(now);
        Ok(Some(Self {
            generations: kept,
            params,
            id: format!("{:016x}", RandomState::new().hash_one(now)),
            counts,
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
