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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::Script;

use super::keys::encode_key;
use super::warn::Warnings;
use super::{errors, Connection, OnFailure, RedisStore};
use crate::clock::Clock;
use crate::store::in_flight::sealed::KeepsSlots;
use crate::store::in_flight::{Acquire, SlotStore, Slots, LOCAL_LEASE, NO_LEASE};
use crate::store::{MemorySlots, Update};
use crate::{Decision, Error, Key};

const LUA: &str = include_str!("lua/slots.lua");

/// The longest block the script keeps, in ms: 2^53, where its numbers stop being exact (some
/// 285 000 years).
const MAX_BLOCK_MS: u64 = 1 << 53;

/// What an acquire answers when Redis could not.
enum Fallback {
    Open,
    Closed,
    Local(MemorySlots),
}

/// The slots of one in-flight policy in Redis.
pub(crate) struct RedisSlots {
    inner: Arc<Inner>,
}

/// A lease this server holds, renewed until it is given back.
struct Lease {
    /// The client's key, kept out of the errors of its calls.
    key: Key,
    /// The Redis keys: the leases, their count, and the key's block.
    keys: Keys,
    cost: u64,
}

/// A client key's Redis keys: its leases, the slots they hold, and its block.
type Keys = [Vec<u8>; 3];

/// What one script call answers.
struct Reply {
    /// Whether the lease was taken, given back or renewed.
    done: bool,
    /// The slots the key's leases hold afterwards.
    held: u64,
    /// What is left of the key's block (zero: not blocked).
    blocked: Duration,
}

struct Inner {
    connection: Connection,
    script: Script,
    policy: Box<str>,
    /// `<prefix>:{`
    head: Vec<u8>,
    /// `}:<policy>:in_flight.<limit>`
    tail: Vec<u8>,
    /// `}:<policy>:in_flight.<limit>:b`: the block of the policy of this limit, as its slots
    /// are (in-flight layers of other limits keep their blocks apart).
    block_tail: Vec<u8>,
    limit: u64,
    ttl_ms: u64,
    timeout: Duration,
    /// The limiter's clock: the renewals' timer, and the time the script decides at when the
    /// store decides on the caller's clock instead of Redis `TIME`.
    clock: Arc<dyn Clock>,
    caller_clock: bool,
    fallback: Fallback,
    warnings: Warnings,
    /// Tells this server's leases apart from every other's: random per table.
    server: u64,
    /// The last lease number handed out.
    leases: AtomicU64,
    /// The leases held now, by number, for the renewals.
    held: Mutex<HashMap<u64, Lease>>,
    /// Whether the task that renews leases runs.
    renewing: AtomicBool,
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
        let fallback = match &self.on_failure {
            OnFailure::Open => Fallback::Open,
            OnFailure::Closed => Fallback::Closed,
            OnFailure::Local(memory) => Fallback::Local(MemorySlots::new(limit, memory.max_keys())),
        };
        let mut head = Vec::with_capacity(self.prefix.len() + 2);
        head.extend_from_slice(self.prefix.as_bytes());
        head.extend_from_slice(b":{");
        let server = {
            use std::hash::BuildHasher;
            std::hash::RandomState::new().hash_one(std::process::id())
        };
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        Ok(Arc::new(RedisSlots {
            inner: Arc::new(Inner {
                connection: self.connection.clone(),
                script: Script::new(LUA),
                policy: policy.into(),
                head,
                tail: format!("}}:{policy}:in_flight.{limit}").into_bytes(),
                block_tail: format!("}}:{policy}:in_flight.{limit}:b").into_bytes(),
                limit,
                ttl_ms,
                timeout: self.timeout,
                clock,
                caller_clock: self.caller_clock,
                fallback,
                warnings: Warnings::default(),
                server,
                leases: AtomicU64::new(0),
                held: Mutex::default(),
                renewing: AtomicBool::new(false),
            }),
        }))
    }

    fn failing(&self, on_failure: &OnFailure) -> Option<Arc<dyn SlotStore>> {
        Some(Arc::new(self.clone().on_failure(on_failure.clone())))
    }
}

impl Inner {
    fn keys(&self, key: &Key) -> Keys {
        let mut client = Vec::with_capacity(self.head.len() + 2 * Key::MAX_LEN + 2);
        client.extend_from_slice(&self.head);
        encode_key(key, &mut client);
        let with = |tail: &[&[u8]]| {
            let mut k = client.clone();
            tail.iter().for_each(|t| k.extend_from_slice(t));
            k
        };
        [
            with(&[&self.tail, b":l"]),
            with(&[&self.tail, b":n"]),
            with(&[&self.block_tail]),
        ]
    }

    fn member(&self, lease: u64, cost: u64) -> String {
        format!("{:016x}.{lease}.{cost}", self.server)
    }

    /// The time the script decides at, in ms: the caller's, or `''` for Redis `TIME`.
    fn now_arg(&self) -> String {
        if self.caller_clock {
            (self.clock.now_nanos() / 1_000_000).to_string()
        } else {
            String::new()
        }
    }

    /// One script call on `keys`, bounded by the timeout.
    async fn run(
        &self,
        keys: &Keys,
        op: &str,
        member: &str,
        cost: u64,
        key: &Key,
    ) -> Result<Reply, Error> {
        let mut invocation = self.script.prepare_invoke();
        for k in keys {
            invocation.key(&k[..]);
        }
        invocation
            .arg(op)
            .arg(member)
            .arg(cost)
            .arg(self.limit)
            .arg(self.ttl_ms)
            .arg(self.now_arg());
        let call = async {
            match self.connection.clone() {
                Connection::Single(mut c) => {
                    invocation.invoke_async::<(i64, i64, i64)>(&mut c).await
                }
                Connection::Cluster(mut c) => {
                    invocation.invoke_async::<(i64, i64, i64)>(&mut c).await
                }
                Connection::Sentinel(mut c) => {
                    invocation.invoke_async::<(i64, i64, i64)>(&mut c).await
                }
            }
        };
        let (done, held, blocked) = match tokio::time::timeout(self.timeout, call).await {
            Ok(reply) => reply.map_err(|e| errors::deciding(&e, key))?,
            Err(_) => return Err(errors::timed_out(self.timeout)),
        };
        let (Ok(held), Ok(blocked)) = (u64::try_from(held), u64::try_from(blocked)) else {
            return Err(Error::protocol(format!(
                "unexpected reply from the in-flight script: {held}, {blocked}"
            )));
        };
        Ok(Reply {
            done: done == 1,
            held,
            blocked: Duration::from_millis(blocked),
        })
    }

    /// The decision of an acquire that Redis answered with `reply`.
    fn decision(&self, reply: &Reply, lease: u64) -> Decision {
        let remaining = self.limit.saturating_sub(reply.held);
        if !reply.blocked.is_zero() {
            Decision::deny(self.limit, remaining, Duration::ZERO, None).blocked_for(reply.blocked)
        } else if reply.done {
            Decision::allow(self.limit, remaining, Duration::ZERO).with_receipt(lease)
        } else {
            Decision::deny(self.limit, remaining, Duration::ZERO, None)
        }
    }

    /// Blocks `key` for `duration` from now (`'b'`), or lifts its block (`'x'`), in Redis; an
    /// error is counted and logged as an acquire's would be, and handed back.
    async fn update(&self, key: Key, op: &str, duration: Duration) -> Result<(), Error> {
        // Whole ms, rounded up: a block never ends before it was asked to.
        let ms = duration.as_nanos().div_ceil(1_000_000);
        let ms = u64::try_from(ms).unwrap_or(u64::MAX).min(MAX_BLOCK_MS);
        match self.run(&self.keys(&key), op, "", ms, &key).await {
            Ok(_) => Ok(()),
            Err(error) => {
                self.count_failure(&error);
                Err(error)
            }
        }
    }

    /// The failure policy's name, for logs and metrics.
    fn on_failure(&self) -> &'static str {
        match self.fallback {
            Fallback::Open => "open",
            Fallback::Closed => "closed",
            Fallback::Local(_) => "local",
        }
    }

    /// Counts and logs (at most every ten seconds) a call Redis failed with `error`.
    fn count_failure(&self, error: &Error) {
        let on_failure = self.on_failure();
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "tollgate_store_failures_total",
            "policy" => self.policy.to_string(),
            "on_failure" => on_failure
        )
        .increment(1);
        let now = self.clock.now_nanos();
        self.warnings.warn(error, now, &self.policy, on_failure);
    }

    /// What the failure policy answers for an acquire that Redis failed with `error`.
    fn failed(&self, error: Error, key: Key, cost: u64) -> Result<Decision, Error> {
        self.count_failure(&error);
        match &self.fallback {
            Fallback::Closed => Err(error),
            Fallback::Open => {
                Ok(Decision::allow(self.limit, self.limit, Duration::ZERO).with_receipt(NO_LEASE))
            }
            Fallback::Local(local) => {
                let decision = local.take(key, cost)?;
                Ok(if decision.allowed {
                    decision.with_receipt(LOCAL_LEASE)
                } else {
                    decision
                })
            }
        }
    }

    /// Starts the task that renews this server's leases, if it does not run yet and a runtime
    /// does. It stops once the policy is dropped.
    fn renew_from(self: &Arc<Self>) {
        if self.renewing.load(Ordering::Relaxed) || self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.renewing.store(false, Ordering::Release);
            return;
        };
        let every = Duration::from_millis((self.ttl_ms / 3).max(1));
        let weak: Weak<Inner> = Arc::downgrade(self);
        let clock = self.clock.clone();
        // Ends with the task (the policy dropped, or its runtime shut down): the next lease
        // taken starts another.
        let running = Running(weak.clone());
        runtime.spawn(async move {
            let _running = running;
            loop {
                clock.sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                inner.renew_all().await;
            }
        });
    }

    /// The cost of `lease` if it is still held (not given back since the renewal began).
    fn cost_of(&self, lease: u64) -> Option<u64> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(&lease).map(|l| l.cost)
    }

    /// Renews every lease held now, each by its own call, together.
    async fn renew_all(self: &Arc<Self>) {
        let leases: Vec<(u64, Key, Keys)> = {
            let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.iter()
                .map(|(&lease, l)| (lease, l.key.clone(), l.keys.clone()))
                .collect()
        };
        let mut calls = tokio::task::JoinSet::new();
        for (lease, key, keys) in leases {
            let inner = self.clone();
            calls.spawn(async move {
                let Some(cost) = inner.cost_of(lease) else {
                    return;
                };
                let member = inner.member(lease, cost);
                // A failed renewal is tried again at the next round; the lease lasts a TTL.
                let _ = inner.run(&keys, "n", &member, cost, &key).await;
            });
        }
        while calls.join_next().await.is_some() {}
    }
}

/// Marks the renewing task as running while it lives.
struct Running(Weak<Inner>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.renewing.store(false, Ordering::Release);
        }
    }
}

/// Gives the lease back if the acquire is dropped before Redis answered (the request went
/// away): the script may have taken it.
struct Pending {
    inner: Arc<Inner>,
    key: Key,
    keys: Option<Keys>,
    member: String,
    cost: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(keys) = self.keys.take() {
            let lease = Lease {
                key: self.key.clone(),
                keys,
                cost: self.cost,
            };
            give_back(&self.inner, lease, std::mem::take(&mut self.member));
        }
    }
}

/// Gives `lease` (the member `member`) back on the runtime, if one runs; else its expiry does.
fn give_back(inner: &Arc<Inner>, lease: Lease, member: String) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let inner = inner.clone();
        runtime.spawn(async move {
            let Lease { key, keys, cost } = lease;
            if let Err(_error) = inner.run(&keys, "r", &member, cost, &key).await {
                #[cfg(feature = "tracing")]
                tracing::debug!(policy = &*inner.policy, error = %_error, "in-flight lease not given back; it expires");
            }
        });
    }
}

impl Slots for RedisSlots {
    /// Writes the block beside the key's leases, with a TTL to its end; every acquire reads
    /// it in the same script call, so it holds on every server.
    fn block(&self, key: Key, duration: Duration) -> Update {
        let inner = self.inner.clone();
        Box::pin(async move { inner.update(key, "b", duration).await })
    }

    /// Deletes the key's block in Redis.
    fn lift(&self, key: Key) -> Update {
        let inner = self.inner.clone();
        Box::pin(async move { inner.update(key, "x", Duration::ZERO).await })
    }

    fn acquire(&self, key: Key, _now: u64, cost: u64) -> Acquire {
        let inner = self.inner.clone();
        let lease = inner.leases.fetch_add(1, Ordering::Relaxed) + 1;
        let future = async move {
            let keys = inner.keys(&key);
            let mut pending = Pending {
                key: key.clone(),
                // A request of cost 0 takes no lease: nothing to give back.
                keys: (cost > 0).then(|| keys.clone()),
                member: inner.member(lease, cost),
                inner: inner.clone(),
                cost,
            };
            let result = inner.run(&keys, "a", &pending.member, cost, &key).await;
            match result {
                Ok(reply) => {
                    // Answered: nothing for `pending` to give back when it is dropped.
                    let keys = pending.keys.take();
                    if let (true, Some(keys)) = (reply.done && reply.blocked.is_zero(), keys) {
                        inner
                            .held
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(
                                lease,
                                Lease {
                                    key: key.clone(),
                                    keys,
                                    cost,
                                },
                            );
                        inner.renew_from();
                    }
                    Ok(inner.decision(&reply, lease))
                }
                // The script may have taken the lease before the answer was lost: `pending`
                // gives it back when dropped here.
                Err(error) => inner.failed(error, key, cost),
            }
        };
        Acquire::Waiting(Box::pin(future))
    }

    fn release(&self, key: &Key, cost: u64, lease: u64) {
        let inner = &self.inner;
        match lease {
            NO_LEASE => {}
            LOCAL_LEASE => {
                if let Fallback::Local(local) = &inner.fallback {
                    local.give_back(key, cost);
                }
            }
            lease => {
                let held = inner
                    .held
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&lease);
                if let Some(held) = held {
                    let member = inner.member(lease, held.cost);
                    give_back(inner, held, member);
                }
            }
        }
    }
}
