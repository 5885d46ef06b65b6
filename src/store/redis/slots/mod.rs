//! [`RedisSlots`]: the slots of a limit on requests in flight, as leases in Redis.
//!
//! Each admitted request holds a lease: a member of its key's sorted set, scored by its expiry.
//! One script (`lua/slots.lua`) takes, gives back or renews a lease atomically, dropping the
//! expired ones first, so the slots of a server that died come back within one TTL. The
//! server renews the leases it holds every third of the TTL, from one task per policy, so a
//! request may last longer than the TTL. The keys are
//! `<prefix>:{<client key>}:<policy>:in_flight.<limit>:l` (the leases) and `...:n` (the slots
//! they hold); a key blocked through a live layer's handle has `...:b`, read by every
//! acquire, so the block holds on every server. The client key's hash tag keeps them in one
//! Redis Cluster slot.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;

use super::failures::FailureCounter;
use super::fallback::Fallback;
use super::keys::encode_key;
use super::RedisStore;
use crate::clock::Clock;
use crate::store::in_flight::sealed::KeepsSlots;
use crate::store::in_flight::{SlotStore, Slots};
use crate::store::{MemorySlots, OnFailure};
use crate::{Error, Key};

mod calls;

const LUA: &str = include_str!("../lua/slots.lua");

/// The slots of one in-flight policy in Redis.
pub(crate) struct RedisSlots(Arc<Inner>);

/// A lease this server holds, renewed until it is given back.
struct Lease {
    /// The client's key, kept out of the errors of its calls.
    key: Key,
    keys: Keys,
    cost: u64,
}

/// A client key's Redis keys: its leases, the slots they hold, and its block.
type Keys = [Vec<u8>; 3];

struct Inner {
    /// The store: its connection, timeout and clock, and its health, which the calls tell
    /// what they found (as a check's would).
    store: RedisStore,
    script: Script,
    /// `<prefix>:{`
    head: Vec<u8>,
    /// `}:<policy>:in_flight.<limit>`, which the keys of the leases (`:l`), of the slots they
    /// hold (`:n`) and of the block (`:b`) end with: the block of the policy of this limit, as
    /// its slots are (in-flight layers of other limits keep their blocks apart).
    tail: Vec<u8>,
    limit: u64,
    ttl_ms: u64,
    /// The limiter's clock: the renewals' timer, and the time the script decides at when the
    /// store decides on the caller's clock instead of Redis `TIME`.
    clock: Arc<dyn Clock>,
    /// What an acquire answers when Redis could not.
    fallback: Fallback<MemorySlots>,
    /// The failures `fallback` answered.
    failures: FailureCounter,
    /// Tells this server's leases apart from every other's: random per table.
    server: u64,
    /// The last lease number handed out.
    leases: AtomicU64,
    /// The leases held now, by number, for the renewals.
    held: Mutex<HashMap<u64, Lease>>,
    /// Held by the task that renews leases while it runs.
    renewing: Arc<tokio::sync::Mutex<()>>,
}

impl SlotStore for RedisStore {}

impl KeepsSlots for RedisStore {
    /// Each lease lasts `ttl` unless renewed. `clock` is the limiter's: it times the renewals,
    /// and its time is the scripts' with `with_caller_clock`.
    fn slots(
        &self,
        policy: &str,
        limit: u64,
        ttl: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<dyn Slots>, Error> {
        // Lua numbers are exact up to 2^53; a limit past that is no limit.
        if limit > 1 << 53 {
            return Err(Error::misconfigured(format!(
                "InFlightLayer::new({limit}): the Redis store keeps at most 2^53 slots per \
                 key; choose a smaller limit"
            )));
        }
        // Leases expire on Redis's clock: renewals timed by a clock that does not follow it
        // (a ManualClock) would let them lapse while their requests run.
        if !self.caller_clock && !clock.follows_system_time() {
            return Err(Error::misconfigured(format!(
                "the in-flight limit of policy {policy:?} has a clock of its own (such as a \
                 ManualClock), but its store decides on the store server's clock (Redis TIME) \
                 and would ignore it: build the store with RedisStore::with_caller_clock() to \
                 decide on this clock (tests, simulations), or leave the clock out"
            )));
        }
        let fallback = Fallback::of(&self.on_failure, |memory| {
            Ok(MemorySlots::new(limit, memory.max_keys()))
        })?;
        Ok(Arc::new(RedisSlots(Arc::new(Inner {
            store: self.clone(),
            script: Script::new(LUA),
            head: format!("{}:{{", self.prefix).into_bytes(),
            tail: format!("}}:{policy}:in_flight.{limit}").into_bytes(),
            limit,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1),
            clock,
            failures: FailureCounter::new(&policy.into(), fallback.name()),
            fallback,
            server: std::hash::RandomState::new().hash_one(std::process::id()),
            leases: AtomicU64::new(0),
            held: Mutex::default(),
            renewing: Arc::default(),
        }))))
    }

    fn failing(&self, on_failure: &OnFailure) -> Option<Arc<dyn SlotStore>> {
        Some(Arc::new(self.clone().on_failure(on_failure.clone())))
    }
}

impl Inner {
    fn keys(&self, key: &Key) -> Keys {
        let mut base = self.head.clone();
        encode_key(key, &mut base);
        base.extend_from_slice(&self.tail);
        [":l", ":n", ":b"].map(|end| [&base, end.as_bytes()].concat())
    }

    fn member(&self, lease: u64, cost: u64) -> String {
        format!("{:016x}.{lease}.{cost}", self.server)
    }
}
