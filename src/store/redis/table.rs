//! [`RedisTable`]: one policy in Redis, and the round trip of one check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Script;

use super::algorithms::{RedisAlgorithm, RedisTier};
use super::carry::{Carry, Generation};
use super::deny_cache::DenyCache;
use super::failures::FailureCounter;
use super::fallback::Fallback;
use super::family::{self, Family};
use super::future::RedisFuture;
use super::health::Health;
use super::healths::Healths;
use super::keys::KeyNames;
use super::leases::{GiveBack, LeaseBook, Plan};
use super::reply::{self, Figure};
use super::version::{self, VersionCheck};
use super::warn::Warnings;
use super::{bounds, errors, script, Connection, RedisStore};
use crate::store::{Role, Update};
use crate::{Decision, Error, Key};

/// Whether Redis answered that it does not have the script.
fn is_no_script(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A [`RedisStore`]'s view of one policy.
pub struct RedisTable<A: RedisAlgorithm> {
    inner: Arc<Inner<A>>,
}

impl<A: RedisAlgorithm> Clone for RedisTable<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: RedisAlgorithm> std::fmt::Debug for RedisTable<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTable")
            .field("policy", &self.inner.policy)
            .field("tiers", &self.inner.limits.len())
            .finish()
    }
}

struct Inner<A: RedisAlgorithm> {
    connection: Connection,
    script: Script,
    /// How many times this table loaded its script, and the lock its loaders take turns on:
    /// together they load it once per `NOSCRIPT` episode rather than once per caller.
    script_loads: AtomicU64,
    script_loading: tokio::sync::Mutex<()>,
    policy: Arc<str>,
    /// The Redis keys of each tier, but for the client's part.
    names: KeyNames,
    params: Vec<u64>,
    limits: Vec<u64>,
    timeout: Duration,
    caller_clock: bool,
    /// Whether the policy's name was given by the user (for the local fallback's table).
    shared: bool,
    /// The longest a state of this table lives ([`RedisAlgorithm::lifetime`]).
    lifetime: u64,
    /// What the table carries over from tables of other quotas it took over from.
    carry: Option<Carry>,
    fallback: Fallback<A>,
    /// The failures `fallback` answered.
    failures: FailureCounter,
    denials: DenyCache,
    /// This server's slices of hot keys' budgets, when the store leases and the algorithm
    /// can be leased ([`RedisAlgorithm::LEASES`]).
    leases: Option<LeaseBook>,
    /// Whether admissions are refunded ([`Store::expect_refunds`](crate::store::Store::expect_refunds)),
    /// and whether leases may go on then (calendar-aligned fixed windows: no refund moves
    /// their windows).
    refunding: AtomicBool,
    leases_with_refunds: bool,
    /// Whether the table was asked to decide every request in Redis (a ban counter).
    exactly: AtomicBool,
    /// Whether the server's version was found good (checked once per store).
    version: Arc<VersionCheck>,
    /// Whether Redis answers (on a Redis Cluster, each master), shared by the store's tables
    /// and clones.
    health: Healths,
    warnings: Warnings,
    /// The table's part in its layer's family, for a table of a layer's.
    family: Option<Family>,
}

impl<A: RedisAlgorithm> RedisTable<A> {
    /// The table of `policy` decided by `algorithm`, or a misconfiguration error when a figure
    /// of the policy is too large for the algorithm's script ([`bounds`]).
    pub(crate) fn new(
        store: &RedisStore,
        policy: &str,
        shared: bool,
        algorithm: &A,
    ) -> Result<Self, Error> {
        Self::make(store, policy, shared, algorithm, None)
    }

    /// The table of `policy` decided by `algorithm` (new quotas of the same shape) that takes
    /// over from `previous`: each key's next check first carries over what it used there, and
    /// in the tables `previous` was still carrying over from ([`carry`](super::carry)). Its
    /// keys are named by `policy`, as a server started with these quotas names them; blocks
    /// kept under `previous`'s names are read too ([`KeyNames::after`]).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new); and when the policy still carries over from as many earlier
    /// quotas as it follows at once.
    pub(crate) fn succeeded(
        store: &RedisStore,
        policy: &str,
        previous: &Self,
        algorithm: &A,
        now: u64,
    ) -> Result<Self, Error> {
        Self::make(
            store,
            policy,
            previous.inner.shared,
            algorithm,
            Some((previous, now)),
        )
    }

    /// This table once the local fallback's table has carried over every key (the Redis
    /// states are carried over key by key, on each key's next check).
    pub(crate) fn settle(&self, now: u64) -> Self {
        self.inner.fallback.settle(now);
        self.clone()
    }

    fn make(
        store: &RedisStore,
        policy: &str,
        shared: bool,
        algorithm: &A,
        previous: Option<(&Self, u64)>,
    ) -> Result<Self, Error> {
        bounds::check(policy, algorithm)?;
        let mut tiers: Vec<RedisTier> = Vec::new();
        algorithm.redis_tiers(&mut tiers);
        let params: Vec<u64> = tiers
            .iter()
            .flat_map(|t| t.params.iter().copied())
            .collect();
        let limits: Vec<u64> = tiers.iter().map(|t| t.limit).collect();
        let mut names = KeyNames::new::<A>(&store.prefix, policy, &tiers);
        if let Some((previous, _)) = previous {
            names = names.after(&previous.inner.names);
        }
        if let Some(tie) = store.tie.as_ref().filter(|tie| tie.role == Role::Plan) {
            names = names.reading_block_of(&tie.layer);
        }
        let family = store
            .tie
            .as_ref()
            .map(|tie| Family::new(&store.prefix, tie, names.ends()));
        let (fallback, carry) = match previous {
            None => (
                Fallback::new(&store.on_failure, policy, shared, algorithm)?,
                None,
            ),
            Some((previous, now)) => {
                let old = &previous.inner;
                let last = Generation::new(
                    old.names.clone(),
                    old.params.clone(),
                    old.limits.len(),
                    now,
                    old.lifetime,
                    old.carry.as_ref().map(Carry::until),
                );
                let earlier = old
                    .carry
                    .iter()
                    .flat_map(|c| c.generations().iter().cloned());
                let generations = std::iter::once(last).chain(earlier);
                (
                    old.fallback
                        .succeeded(&store.on_failure, policy, shared, algorithm)?,
                    Carry::new(&names, limits.len(), generations, policy)?,
                )
            }
        };
        let policy: Arc<str> = policy.into();
        Ok(Self {
            inner: Arc::new(Inner {
                failures: FailureCounter::new(&policy, fallback.name()),
                connection: store.connection.clone(),
                script: Script::new(&script::source::<A>()),
                script_loads: AtomicU64::new(0),
                script_loading: tokio::sync::Mutex::new(()),
                policy,
                names,
                params,
                limits,
                timeout: store.timeout,
                caller_clock: store.caller_clock,
                shared,
                lifetime: algorithm.lifetime(),
                carry,
                fallback,
                denials: DenyCache::new(store.deny_cache),
                leases: store
                    .leases
                    .as_ref()
                    .filter(|_| A::LEASES && tiers.iter().all(A::leasable))
                    .map(|leases| {
                        let margin = tiers.iter().map(A::lease_margin).min().unwrap_or(0);
                        LeaseBook::new(leases, margin)
                    }),
                refunding: AtomicBool::new(
                    previous.is_some_and(|(p, _)| p.inner.refunding.load(Ordering::Relaxed)),
                ),
                leases_with_refunds: tiers.iter().all(A::leases_with_refunds),
                exactly: AtomicBool::new(
                    previous.is_some_and(|(p, _)| p.inner.exactly.load(Ordering::Relaxed)),
                ),
                version: Arc::clone(&store.version),
                health: store.health.clone(),
                warnings: Warnings::default(),
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

    /// Checks a request of `cost` for `key`; or, with `refund` (each tier's receipt from the
    /// admission), gives back what that admission took.
    #[inline]
    pub(crate) fn run(
        &self,
        key: Key,
        now: u64,
        cost: u64,
        refund: Option<Vec<u64>>,
    ) -> RedisFuture {
        let inner = &self.inner;
        // Leases are kept out of a table that carries usage over, and of one whose refunds may
        // start a window again: their keys are decided exactly.
        let book = inner.leases.as_ref().filter(|_| inner.leasing());
        if let Some(book) = book {
            let local = match &refund {
                Some(receipts) => book.refund(&key, receipts, now, cost),
                None if cost > 0 => book.spend(&key, now, cost),
                None => None,
            };
            if let Some(decision) = local {
                return RedisFuture::ready(Ok(decision));
            }
        }
        if refund.is_some() {
            inner.denials.remove(&key);
        } else if cost == 1 {
            if let Some(denied) = inner.denials.get(&key, now) {
                return RedisFuture::ready(Ok(denied));
            }
        }
        // While Redis is known to be down, the failure policy answers at once.
        if let Some(health) = inner.health.down(&key) {
            return RedisFuture::ready(inner.answered_down(
                &health,
                key,
                now,
                cost,
                refund.is_some(),
            ));
        }
        self.remote(key, now, cost, refund, book)
    }

    /// [`run`](Self::run) once neither a lease, a remembered denial nor Redis known down
    /// answers: one round trip.
    #[inline(never)]
    fn remote(
        &self,
        key: Key,
        now: u64,
        cost: u64,
        refund: Option<Vec<u64>>,
        book: Option<&LeaseBook>,
    ) -> RedisFuture {
        let plan = match book {
            Some(book) if refund.is_none() && cost > 0 => book.plan(&key, now, false),
            _ => Plan::Exact,
        };
        // A call that takes a slice ends in the book whatever becomes of it, even when its
        // future is dropped before it is first polled.
        let done = Done::of(self, &key, &plan);
        let table = self.clone();
        RedisFuture::pending(Box::pin(async move {
            let _done = done;
            let result = match plan {
                Plan::Exact => table.call(&key, now, cost, refund.as_deref()).await,
                plan => table.leased(&key, now, cost, plan).await,
            };
            let inner = &table.inner;
            match result {
                Ok(decision) => {
                    if cost == 1 && refund.is_none() && !decision.allowed {
                        inner.denials.insert(key, now, &decision);
                    }
                    Ok(decision)
                }
                Err(error) => inner.failed(error, key, now, cost, refund.is_some()),
            }
        }))
    }

    /// One round trip: the script, bounded by the timeout.
    async fn call(
        &self,
        key: &Key,
        now: u64,
        cost: u64,
        refund: Option<&[u64]>,
    ) -> Result<Decision, Error> {
        let mode = match refund {
            Some(receipts) => Mode::Refund(cost, receipts),
            None => Mode::Check(cost),
        };
        let reply = self.round_trip(key, now, mode).await?;
        reply::decision(&reply, &self.inner.limits, A::TIERED)
    }

    /// A request of `cost` for a hot key: after waiting for the slice another call is taking
    /// (spent from it when it holds enough), a lease or an exact check.
    async fn leased(&self, key: &Key, now: u64, cost: u64, plan: Plan) -> Result<Decision, Error> {
        let inner = &self.inner;
        let Some(book) = inner.leases.as_ref() else {
            return self.call(key, now, cost, None).await;
        };
        // A lease planned in `run` has its guard there; one planned here after a wait gets its
        // own below.
        let (plan, _done) = match plan {
            Plan::Wait(mut slice) => {
                let waiting = Instant::now();
                // The other call ends within the timeout: it is bounded by it.
                let _ = tokio::time::timeout(inner.timeout, slice.changed()).await;
                // The slice is spent no later than its end, counting the time that passed
                // meanwhile. (The call below still names `now`: it began then.)
                let waited = u64::try_from(waiting.elapsed().as_nanos()).unwrap_or(u64::MAX);
                let later = now.saturating_add(waited);
                if let Some(decision) = book.spend(key, later, cost) {
                    return Ok(decision);
                }
                // Leases may have stopped meanwhile (refunds told of).
                if !inner.leasing() {
                    return self.call(key, now, cost, None).await;
                }
                let plan = book.plan(key, later, true);
                // Whatever becomes of the call (an error, a drop mid-way), the checks that wait
                // for it wake.
                let done = Done::of(self, key, &plan);
                (plan, done)
            }
            plan => (plan, None),
        };
        match plan {
            Plan::Lease { back, ticket, want } => {
                self.lease(book, key, now, cost, want, back.as_ref(), ticket)
                    .await
            }
            _ => self.call(key, now, cost, None).await,
        }
    }

    /// One round trip that decides a request of `cost` and takes a slice of up to `want` units
    /// of what is left on top (giving `back` an ended slice's units first), kept in the
    /// table's book.
    #[allow(clippy::too_many_arguments)]
    async fn lease(
        &self,
        book: &LeaseBook,
        key: &Key,
        now: u64,
        cost: u64,
        want: u64,
        back: Option<&GiveBack>,
        ticket: u64,
    ) -> Result<Decision, Error> {
        let inner = &self.inner;
        let leases = book.leases();
        let mode = Mode::Lease {
            cost,
            want,
            share: leases.share_of_left(),
            back,
        };
        let sent = Instant::now();
        let reply = self.round_trip(key, now, mode).await?;
        let figures = 6 * inner.limits.len();
        // A blocked key's reply has no slice.
        let (decision, units, life) = match reply.len() {
            n if n == figures + 2 => {
                let tail = |i: usize| u64::try_from(reply[figures + i].value()).ok();
                let bad = || Error::protocol("unexpected lease in the Redis script's reply");
                (
                    reply::decision(&reply[..figures], &inner.limits, A::TIERED)?,
                    tail(0).ok_or_else(bad)?,
                    tail(1).ok_or_else(bad)?,
                )
            }
            _ => (reply::decision(&reply, &inner.limits, A::TIERED)?, 0, 0),
        };
        // Spent here no later than the slice's end in Redis: the call left at `now`, before
        // Redis began the slice's life. On Redis's clock, a margin of a thousandth for the
        // rates of the two clocks.
        let (life, deadline) = if inner.caller_clock {
            (life, None)
        } else {
            let life = life - life / 1024;
            (life, sent.checked_add(Duration::from_nanos(life)))
        };
        Ok(book.granted(key, ticket, now, deadline, decision, units, life))
    }

    /// The script in `mode` for `key`, bounded by the timeout; its reply. While Redis is known
    /// to be down, an error at once; otherwise what the call found is noted in the store's
    /// health.
    async fn round_trip(&self, key: &Key, now: u64, mode: Mode<'_>) -> Result<Vec<Figure>, Error> {
        let inner = &self.inner;
        let Some(health) = inner.health.of(key) else {
            return self.round_trip_once(key, now, mode).await;
        };
        if health.is_down() {
            return Err(health.error());
        }
        let sent = health.now();
        let result = self.round_trip_once(key, now, mode).await;
        health.observe(&result, sent, &inner.connection, inner.timeout);
        result
    }

    /// [`round_trip`](Self::round_trip), asking Redis whatever is known of it.
    async fn round_trip_once(
        &self,
        key: &Key,
        now: u64,
        mode: Mode<'_>,
    ) -> Result<Vec<Figure>, Error> {
        let inner = &self.inner;
        if !inner.version.is_done() {
            match tokio::time::timeout(inner.timeout, version::check(&inner.connection)).await {
                Ok(Ok(())) => inner.version.done(),
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(errors::timed_out(inner.timeout)),
            }
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
            .map(|(carry, _)| carry.generations())
            .unwrap_or_default()
            .iter()
            .map(|generation| &generation.names);
        let keys = inner.names.call_keys(key, carried);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(inner.script.get_hash()).arg(keys.len());
        for k in keys {
            cmd.arg(k);
        }
        let (letter, cost) = match mode {
            Mode::Check(cost) if carry.is_some() => ('C', cost),
            Mode::Check(cost) => ('c', cost),
            Mode::Refund(cost, _) if carry.is_some() => ('R', cost),
            Mode::Refund(cost, _) => ('r', cost),
            Mode::Reset => ('x', 0),
            Mode::Block(nanos) => ('b', nanos),
            Mode::Lease { cost, .. } => ('l', cost),
        };
        // The letter, then how many blocks under earlier names the keys hold.
        match inner.names.earlier_blocks() {
            0 => cmd.arg(letter.to_string()),
            n => cmd.arg(format!("{letter}{n}")),
        };
        cmd.arg(cost);
        if inner.caller_clock {
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
        match tokio::time::timeout(inner.timeout, inner.evaluate(&cmd)).await {
            Ok(reply) => reply.map_err(|e| errors::deciding(&e, key)),
            Err(_) => Err(errors::timed_out(inner.timeout)),
        }
    }

    /// `key`'s standing: a check of cost 0, never answered from the denials remembered here
    /// (a peek asks Redis).
    pub(crate) fn peek(&self, key: Key, now: u64) -> RedisFuture {
        self.run(key, now, 0, None)
    }

    /// Deletes `key`'s state in every tier and its block (for a layer's own table, under
    /// every table of the layer too: [`family`]), and forgets its denial here and in the
    /// local fallback.
    pub(crate) fn reset(&self, key: Key, now: u64) -> Update {
        let table = self.clone();
        Box::pin(async move {
            let inner = &table.inner;
            inner.denials.remove(&key);
            if let Some(book) = &inner.leases {
                book.forget(&key);
            }
            inner.fallback.reset(&key, now);
            let mut result = table.round_trip(&key, now, Mode::Reset).await.map(drop);
            if result.is_ok() {
                result = table.reset_family(&key).await;
            }
            // A denial remembered, or a slice taken, while the reset was on its way is
            // forgotten too.
            inner.denials.remove(&key);
            if let Some(book) = &inner.leases {
                book.forget(&key);
            }
            result.map_err(|error| inner.update_failed(error, now))
        })
    }

    /// For the layer's own table: deletes `key`'s keys under every table of the layer any
    /// server has listed ([`family`]), each bounded by the timeout.
    async fn reset_family(&self, key: &Key) -> Result<(), Error> {
        let inner = &self.inner;
        let Some(reading) = inner.family.as_ref().and_then(Family::reading) else {
            return Ok(());
        };
        // The list's master known down (on a Redis Cluster): the reset fails at once.
        if let Some(down) = inner
            .family
            .as_ref()
            .and_then(|f| inner.health.down_at(f.list()))
        {
            return Err(down.error());
        }
        let ends: Vec<Vec<u8>> = inner.bounded(&reading, key).await?;
        let keys = inner.names.under(key, &ends);
        for deletion in family::deletions(&keys) {
            inner.bounded::<redis::Value>(&deletion, key).await?;
        }
        Ok(())
    }

    /// Blocks `key` for `duration` from `now` (Redis `TIME`, or `now` with the caller's
    /// clock), here and in the local fallback.
    pub(crate) fn block(&self, key: Key, now: u64, duration: Duration) -> Update {
        let table = self.clone();
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Box::pin(async move {
            let inner = &table.inner;
            if let Some(book) = &inner.leases {
                book.forget(&key);
            }
            inner.fallback.block(&key, now, duration);
            let result = table.round_trip(&key, now, Mode::Block(nanos)).await;
            // A slice taken while the block was on its way ends too.
            if let Some(book) = &inner.leases {
                book.forget(&key);
            }
            result
                .map(drop)
                .map_err(|error| inner.update_failed(error, now))
        })
    }
}

/// Ends a lease call in the book when dropped.
struct Done<A: RedisAlgorithm> {
    table: RedisTable<A>,
    key: Key,
    ticket: u64,
}

impl<A: RedisAlgorithm> Done<A> {
    /// The guard of `plan`'s call when it takes a slice.
    fn of(table: &RedisTable<A>, key: &Key, plan: &Plan) -> Option<Self> {
        match plan {
            Plan::Lease { ticket, .. } => Some(Self {
                table: table.clone(),
                key: key.clone(),
                ticket: *ticket,
            }),
            _ => None,
        }
    }
}

impl<A: RedisAlgorithm> Drop for Done<A> {
    fn drop(&mut self) {
        if let Some(book) = &self.table.inner.leases {
            book.done(&self.key, self.ticket);
        }
    }
}

/// What one script call does.
#[derive(Clone, Copy)]
enum Mode<'a> {
    /// A check of a cost.
    Check(u64),
    /// A refund of a cost, with each tier's receipt.
    Refund(u64, &'a [u64]),
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

    /// Runs the script (`cmd`, an `EVALSHA`), loading it first when the server does not have
    /// it (`NOSCRIPT`: a fresh, restarted, flushed or failed-over server). The callers that
    /// find it missing together load it once: the first loads it while the others wait, then
    /// all run it again. A script lost again since (the server flushed twice) is loaded by
    /// whoever finds it missing.
    async fn evaluate(&self, cmd: &redis::Cmd) -> redis::RedisResult<Vec<Figure>> {
        let seen = self.script_loads.load(Ordering::Acquire);
        match self.query(cmd).await {
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
        match self.query(cmd).await {
            Err(error) if is_no_script(&error) => {
                self.load_script().await?;
                self.query(cmd).await
            }
            reply => reply,
        }
    }

    /// Lists the table's key ends in its layer's family, once: before its first call, and
    /// again before the next ones until it succeeds (within the timeout; a call that fails
    /// here fails in the script's call too, which the failure policy answers).
    async fn list(&self) {
        let Some(listing) = self.family.as_ref().and_then(Family::listing) else {
            return;
        };
        // Not while the list's master is known down (on a Redis Cluster): the call goes on.
        if let Some(family) = self.family.as_ref() {
            if self.health.down_at(family.list()).is_some() {
                return;
            }
        }
        let listed = tokio::time::timeout(self.timeout, self.query::<redis::Value>(&listing));
        if let (Ok(Ok(_)), Some(family)) = (listed.await, &self.family) {
            family.listed();
        }
    }

    /// `cmd` for `key`, bounded by the timeout.
    async fn bounded<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        key: &Key,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.timeout, self.query(cmd)).await {
            Ok(reply) => reply.map_err(|e| errors::deciding(&e, key)),
            Err(_) => Err(errors::timed_out(self.timeout)),
        }
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self.connection.clone() {
            Connection::Single(mut c) => cmd.query_async(&mut c).await,
            Connection::Cluster(mut c) => cmd.query_async(&mut c).await,
            Connection::Sentinel(mut c) => cmd.query_async(&mut c).await,
        }
    }

    /// `SCRIPT LOAD`; on a Redis Cluster, on every primary.
    async fn load_script(&self) -> redis::RedisResult<()> {
        match self.connection.clone() {
            Connection::Single(mut c) => self.script.load_async(&mut c).await.map(drop),
            Connection::Cluster(mut c) => self.script.load_async(&mut c).await.map(drop),
            Connection::Sentinel(mut c) => self.script.load_async(&mut c).await.map(drop),
        }
    }

    /// Counts a failure in `tollgate_store_failures_total`: answered by the failure policy, or
    /// refused (`closed`) as Redis out of memory is whatever the policy.
    fn counted(&self, full: bool) {
        if !full {
            self.failures.increment();
            return;
        }
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "tollgate_store_failures_total",
            "policy" => metrics::SharedString::from_shared(self.policy.clone()),
            "on_failure" => "closed"
        )
        .increment(1);
    }

    /// A reset or block that Redis failed: counted and logged as a check's failure would be,
    /// and handed back (the local fallback has it already).
    fn update_failed(&self, error: Error, now: u64) -> Error {
        self.counted(false);
        self.warnings
            .warn(&error, now, &self.policy, self.fallback.name());
        error
    }

    /// What the failure policy answers while Redis is known to be down: as
    /// [`failed`](Self::failed), the error made only when it is logged or answered.
    #[inline]
    fn answered_down(
        &self,
        health: &Health,
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        let on_failure = self.fallback.name();
        self.counted(false);
        if self.warnings.due(now) {
            self.warnings.log(&health.error(), &self.policy, on_failure);
        }
        self.fallback
            .answer(|| health.error(), &self.limits, key, now, cost, refund)
    }

    /// What the failure policy answers when Redis could not; counted, and logged at most
    /// every ten seconds.
    fn failed(
        &self,
        error: Error,
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        // Redis out of memory records nothing: an admission here (open, or on a local budget
        // of this server's own) would go past the quota, so it is refused whatever the policy.
        let full = error.kind() == crate::ErrorKind::Full;
        let on_failure = if full { "closed" } else { self.fallback.name() };
        self.counted(full);
        self.warnings.warn(&error, now, &self.policy, on_failure);
        if full {
            return Err(error);
        }
        self.fallback
            .answer(|| error, &self.limits, key, now, cost, refund)
    }
}
