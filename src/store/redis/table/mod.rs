//! [`RedisTable`]: one policy in Redis, and the round trip of one check.
//!
//! This file holds the table and how it is made; `check.rs` decides a request (from a lease, a
//! remembered denial or one round trip), `round_trip.rs` makes the script's call,
//! `failure.rs` holds what the failure policy answers, and `update.rs` resets and blocks keys.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use redis::Script;

use super::algorithms::RedisAlgorithm;
use super::carry::{self, Carry, Generation};
use super::deny_cache::DenyCache;
use super::failures::FailureCounter;
use super::fallback::{Fallback, Local};
use super::family::Family;
use super::keys::KeyNames;
use super::leases::LeaseBook;
use super::{bounds, script, RedisStore};
use crate::store::Role;
use crate::{Error, Key};

mod check;
mod failure;
mod round_trip;
mod update;

/// A [`RedisStore`]'s view of one policy.
#[doc(hidden)]
#[derive(Clone)]
pub struct RedisTable<A: RedisAlgorithm> {
    inner: Arc<Inner<A>>,
}

impl<A: RedisAlgorithm> std::fmt::Debug for RedisTable<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTable")
            .field("policy", self.inner.failures.policy())
            .field("tiers", &self.inner.limits.len())
            .finish()
    }
}

struct Inner<A: RedisAlgorithm> {
    /// The store that made the table: its connection, timeout and clock, whether the server's
    /// version was found good (checked once per store), and whether Redis answers (on a Redis
    /// Cluster, each master), shared by the store's tables and clones.
    store: RedisStore,
    script: Script,
    /// How many times this table loaded its script, and the lock its loaders take turns on:
    /// together they load it once per `NOSCRIPT` episode rather than once per caller.
    script_loads: AtomicU64,
    script_loading: tokio::sync::Mutex<()>,
    /// The Redis keys of each tier, but for the client's part.
    names: KeyNames,
    params: Vec<u64>,
    limits: Vec<u64>,
    /// Whether the policy's name was given by the user (for the local fallback's table).
    shared: bool,
    /// The longest a state of this table lives ([`RedisAlgorithm::lifetime`]).
    lifetime: u64,
    /// What the table carries over from tables of other quotas it took over from.
    carry: Option<Carry>,
    fallback: Fallback<Local<A>>,
    /// The failures `fallback` answered, and the policy's name.
    failures: FailureCounter,
    denials: DenyCache,
    /// This server's slices of hot keys' budgets, when the store leases and the algorithm
    /// can be leased ([`RedisAlgorithm::LEASING`]).
    leases: Option<LeaseBook>,
    /// Whether admissions are refunded ([`Store::expect_refunds`](crate::store::Store::expect_refunds)),
    /// and whether leases may go on then (calendar-aligned fixed windows: no refund moves
    /// their windows).
    refunding: AtomicBool,
    leases_with_refunds: bool,
    /// Whether the table was asked to decide every request in Redis (a ban counter, or a
    /// charge: [`charge`](RedisTable::charge)).
    exactly: AtomicBool,
    /// Whether the algorithm carries a debt ([`Algorithm::settles`](crate::algorithm::Algorithm::settles)).
    settles: bool,
    /// The table's part in its layer's family, for a table of a layer's.
    family: Option<Family>,
}

impl<A: RedisAlgorithm> RedisTable<A> {
    /// This table once the local fallback's table has carried over every key (the Redis
    /// states are carried over key by key, on each key's next check).
    pub(crate) fn settle(&self, now: u64) -> Self {
        self.inner.fallback.settle(now);
        self.clone()
    }

    /// The table of `policy` decided by `algorithm`, or a misconfiguration error when a figure
    /// of the policy is too large for the algorithm's script ([`bounds`]).
    ///
    /// With `previous` (and the time), whose `shared` it keeps, the table of new quotas of the
    /// same shape that takes over from it: each key's next check first carries over what it
    /// used there, and in the tables `previous` was still carrying over from
    /// ([`carry`](super::carry)); an error when the policy still carries over from as many
    /// earlier quotas as it follows at once. Its keys are named by `policy`, as a server
    /// started with these quotas names them; blocks kept under `previous`'s names are read too
    /// ([`KeyNames::after`]).
    pub(crate) fn new(
        store: &RedisStore,
        policy: &str,
        shared: bool,
        algorithm: &A,
        previous: Option<(&Self, u64)>,
    ) -> Result<Self, Error> {
        let tiers = bounds::tiers(policy, algorithm)?;
        let params: Vec<u64> = tiers
            .iter()
            .flat_map(|t| t.params.iter().copied())
            .collect();
        let limits: Vec<u64> = tiers.iter().map(|t| t.limit).collect();
        let old = previous.map(|(previous, _)| &previous.inner);
        let mut names = KeyNames::new::<A>(&store.prefix, policy, &tiers);
        if let Some(old) = old {
            names = names.after(&old.names);
        }
        if let Some(tie) = store.tie.as_ref().filter(|tie| tie.role == Role::Plan) {
            names = names.reading_block_of(&tie.layer);
        }
        let family = store
            .tie
            .as_ref()
            .map(|tie| Family::new(&store.prefix, tie, names.ends()));
        let shared = old.map_or(shared, |old| old.shared);
        let fallback = Fallback::new(
            &store.on_failure,
            policy,
            shared,
            algorithm,
            old.map(|old| &old.fallback),
        )?;
        let carry = match previous {
            Some((previous, now)) => {
                let old = &previous.inner;
                let last = Generation {
                    names: old.names.clone(),
                    params: old.params.clone(),
                    tiers: old.limits.len(),
                    switched: now,
                    until: carry::until(old.lifetime, old.carry.as_ref()),
                };
                let earlier = old.carry.iter().flat_map(|c| c.generations.iter().cloned());
                let generations = std::iter::once(last).chain(earlier);
                Carry::new(&names, limits.len(), generations, policy)?
            }
            None => None,
        };
        let margin = tiers.iter().map(|t| t.lease_margin(A::LEASING)).min();
        Ok(Self {
            inner: Arc::new(Inner {
                failures: FailureCounter::new(&policy.into(), fallback.name()),
                store: store.clone(),
                script: Script::new(&script::source::<A>()),
                script_loads: AtomicU64::new(0),
                script_loading: tokio::sync::Mutex::new(()),
                names,
                params,
                limits,
                shared,
                lifetime: algorithm.lifetime(),
                carry,
                fallback,
                denials: DenyCache::new(store.deny_cache),
                leases: store
                    .leases
                    .as_ref()
                    .filter(|_| tiers.iter().all(|t| t.leasable(A::LEASING)))
                    .map(|leases| LeaseBook::new(leases, margin.unwrap_or(0))),
                refunding: AtomicBool::new(
                    old.is_some_and(|o| o.refunding.load(Ordering::Relaxed)),
                ),
                leases_with_refunds: tiers.iter().all(|t| t.leases_with_refunds(A::LEASING)),
                exactly: AtomicBool::new(old.is_some_and(|o| o.exactly.load(Ordering::Relaxed))),
                settles: algorithm.settles(),
                family,
            }),
        })
    }

    /// The Redis keys that hold `key`'s state under this policy, one per tier:
    /// `<prefix>:{<key>}:<policy>:<algorithm>.<fingerprint>`, tiers adding `:<n>` (see the
    /// [module docs](super)). For operators who inspect or delete a client's state by hand.
    pub fn redis_keys(&self, key: &Key) -> Vec<Vec<u8>> {
        self.inner.names.keys(key)
    }

    /// The Redis key of `key`'s block under this policy: `<prefix>:{<key>}:<policy>:block`,
    /// in the key's slot. It holds the block's end and expires with it.
    pub fn block_key(&self, key: &Key) -> Vec<u8> {
        self.inner.names.block(key)
    }

    /// How many keys this server's book of [leases](super::Leases) tracks right now (0 without
    /// leases, or for an algorithm that is not leased).
    pub fn leased_keys(&self) -> usize {
        self.inner.leases.as_ref().map_or(0, LeaseBook::len)
    }

    /// Tells the table that its admissions will be refunded, which stops its
    /// [leases](super::Leases) unless its windows are calendar-aligned fixed windows (no
    /// refund moves them). A layer with [`count_if`](crate::RateLimitLayer::count_if) does
    /// this where it is built, and [`RateLimiter::refund`](crate::RateLimiter::refund) on its
    /// first call; a limiter that refunds, used without a layer, calls it before its first
    /// check on every server: slices taken before would outlive it (see [`Leases`](super::Leases)).
    pub fn expect_refunds(&self) {
        if !self.inner.refunding.load(Ordering::Relaxed) {
            self.inner.refunding.store(true, Ordering::Relaxed);
        }
    }

    /// Stops the table's [leases](super::Leases): every request is decided in Redis.
    pub(crate) fn decide_exactly(&self) {
        self.inner.exactly.store(true, Ordering::Relaxed);
    }

    /// How many denials the table remembers locally right now.
    pub fn cached_denials(&self) -> usize {
        self.inner.denials.len()
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// Whether the table's keys may be leased right now.
    fn leasing(&self) -> bool {
        (self.leases_with_refunds || !self.refunding.load(Ordering::Relaxed))
            && !self.exactly.load(Ordering::Relaxed)
            && !self.carrying()
    }

    /// Whether the table carries usage over from earlier quotas right now.
    fn carrying(&self) -> bool {
        self.carry
            .as_ref()
            .is_some_and(|carry| carry.hold(Instant::now()).is_some())
    }
}
