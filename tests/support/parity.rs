//! The Redis scripts against the Rust algorithms: the same operations, on the same manual
//! clock, must give the same decisions (every field, every tier) from a limiter on the memory
//! store and one on the Redis store.
#![allow(dead_code)]

use std::cell::RefCell;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{MemoryAlgorithm, MemoryStore, RedisStore};
use tollgate::{Decision, Key, RateLimiter};

/// Where the clock starts: about the Unix time of 2025 in ns, so the scripts' split of times into
/// seconds and nanoseconds is exercised as with Redis `TIME`.
pub const EPOCH: u64 = 1_750_000_000_123_456_789;

/// One step: move the clock, then check (or refund) `cost`.
#[derive(Debug, Clone)]
pub struct Op {
    pub advance: u64,
    pub cost: u64,
    pub refund: bool,
}

/// Steps whose clock moves by up to `max_advance` ns (often not at all, often exactly a
/// multiple of `unit`, so boundaries are hit) and whose cost is up to `max_cost` (0 peeks).
pub fn ops(
    max_len: usize,
    unit: u64,
    max_advance: u64,
    max_cost: u64,
) -> impl Strategy<Value = Vec<Op>> {
    let advance = prop_oneof![
        3 => Just(0u64),
        3 => (0..=max_advance / unit.max(1)).prop_map(move |k| k * unit),
        3 => 0..=max_advance,
        1 => Just(unit.saturating_sub(1)),
    ];
    let cost = prop_oneof![6 => Just(1u64), 3 => 0..=max_cost, 1 => Just(u64::MAX / 2)];
    let step = (advance, cost, prop::bool::weighted(0.1)).prop_map(|(advance, cost, refund)| Op {
        advance,
        cost,
        refund,
    });
    prop::collection::vec(step, 1..max_len)
}

thread_local! {
    /// A plain connection to the server of this thread's test, to keep its keys from expiring.
    static KEEPER: RefCell<Option<(redis::Connection, u64)>> = const { RefCell::new(None) };
}

/// Drops this thread's keeper: each trial starts without the one a trial before it on the same
/// worker thread left (its server may be gone), as when every file was its own binary.
pub fn forget() {
    KEEPER.with(|k| *k.borrow_mut() = None);
}

/// A store on `url` with the caller's clock and no deny cache (so each check is a script run);
/// a plain connection keeps the thread's keys from expiring meanwhile.
pub async fn store(url: &str) -> RedisStore {
    let keeper = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("a plain connection");
    KEEPER.with(|k| *k.borrow_mut() = Some((keeper, 0)));
    keep(&[]);
    RedisStore::connect(url)
        .await
        .expect("redis connects")
        .with_caller_clock()
        .deny_cache(0)
        .on_failure(tollgate::store::OnFailure::Closed)
        .timeout(Duration::from_secs(5))
}

/// Runs `ops` for `key` on both limiters (which share `clock`, already at `EPOCH`) and fails at
/// the first decision that differs.
pub async fn same_decisions<A>(
    memory: &RateLimiter<A, MemoryStore, ManualClock>,
    redis: &RateLimiter<A, RedisStore, ManualClock>,
    clock: &ManualClock,
    key: &Key,
    ops: &[Op],
) -> Result<(), TestCaseError>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    same_decisions_with(memory, redis, clock, key, ops, &mut Vec::new()).await
}

/// Which of `n` admissions a refund step gives back.
pub fn pick(op: &Op, n: usize) -> usize {
    usize::try_from(op.advance).unwrap_or(0) % n
}

/// [`same_decisions`], with the admissions so far (as memory and Redis answered them) kept in
/// `admitted`: a refund step gives one of them back ([`pick`]), or one that took nothing.
pub async fn same_decisions_with<A>(
    memory: &RateLimiter<A, MemoryStore, ManualClock>,
    redis: &RateLimiter<A, RedisStore, ManualClock>,
    clock: &ManualClock,
    key: &Key,
    ops: &[Op],
    admitted: &mut Vec<(Decision, Decision)>,
) -> Result<(), TestCaseError>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    let keys = redis_keys(redis, key);
    for (i, op) in ops.iter().enumerate() {
        clock.advance(Duration::from_nanos(op.advance));
        let (expected, got) = if op.refund {
            let (on_memory, on_redis) = match admitted.len() {
                0 => (nothing(memory), nothing(memory)),
                n => admitted.swap_remove(pick(op, n)),
            };
            (
                memory.refund(key.clone(), &on_memory, op.cost).await,
                redis.refund(key.clone(), &on_redis, op.cost).await,
            )
        } else {
            (
                memory.check_n(key.clone(), op.cost).await,
                redis.check_n(key.clone(), op.cost).await,
            )
        };
        let (expected, got) = same(i, op, ops, expected, got)?;
        if !op.refund && op.cost > 0 && got.allowed {
            admitted.push((expected, got));
        }
        if !keep(&keys) {
            // Redis may have expired a key on its own clock, which the manual clock does not
            // move: the rest of this case would compare a state the test lost, not the script.
            return Ok(());
        }
    }
    Ok(())
}

/// The decisions memory (`expected`) and Redis (`got`) gave at step `i` (`step` of `all`),
/// when they are the same: every field, every tier, every receipt.
fn same<T: std::fmt::Debug>(
    i: usize,
    step: &T,
    all: &[T],
    expected: Result<Decision, tollgate::Error>,
    got: Result<Decision, tollgate::Error>,
) -> Result<(Decision, Decision), TestCaseError> {
    let expected = expected.map_err(|e| TestCaseError::fail(e.to_string()))?;
    let got = got.map_err(|e| TestCaseError::fail(format!("step {i} {step:?}: {e}")))?;
    prop_assert_eq!(&got, &expected, "step {} {:?} of {:?}", i, step, all);
    prop_assert_eq!(
        got.tiers(),
        expected.tiers(),
        "tiers, step {} {:?}",
        i,
        step
    );
    let receipts = |d: &Decision| d.tiers().iter().map(Decision::receipt).collect::<Vec<_>>();
    prop_assert_eq!(
        receipts(&got),
        receipts(&expected),
        "receipts, step {} {:?}",
        i,
        step
    );
    Ok((expected, got))
}

/// An admission that took nothing, in the shape of `limiter`'s decisions (one per tier).
pub fn nothing<A, St, C>(limiter: &RateLimiter<A, St, C>) -> Decision
where
    A: RedisAlgorithm,
    St: tollgate::store::Store<A>,
{
    let tiers: Vec<Decision> = limiter
        .quotas()
        .iter()
        .map(|q| Decision::allow(q.burst(), 0, Duration::ZERO))
        .collect();
    match &tiers[..] {
        [one] => one.clone(),
        _ => Decision::allow(0, 0, Duration::ZERO).with_tiers(tiers),
    }
}

/// The Redis keys of `key` under `limiter`'s policy, as the store names them.
pub fn redis_keys<A>(limiter: &RateLimiter<A, RedisStore, ManualClock>, key: &Key) -> Vec<Vec<u8>>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    // Tests that keep their keys themselves may use other kinds of keys.
    if key.as_bytes().is_none() {
        return Vec::new();
    }
    limiter.table().redis_keys(key)
}

/// Takes the TTL off `keys`, so that Redis, whose clock runs while the manual one stands
/// still, keeps them for the next step. Returns whether the step can be trusted: whether no
/// key expired on the server since the last step (its `expired_keys` count). Tests that made
/// their store without [`store`] keep their keys themselves.
pub fn keep(keys: &[Vec<u8>]) -> bool {
    KEEPER.with(|k| {
        let mut keeper = k.borrow_mut();
        let Some((conn, expired)) = keeper.as_mut() else {
            return true;
        };
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("PERSIST").arg(key).ignore();
        }
        pipe.cmd("INFO").arg("stats");
        let (stats,): (String,) = pipe.query(conn).expect("PERSIST and INFO");
        let now = stats
            .lines()
            .find_map(|l| l.strip_prefix("expired_keys:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .expect("INFO stats has expired_keys");
        let unchanged = now == *expired;
        *expired = now;
        unchanged
    })
}

/// A key no other case uses.
pub fn fresh_key() -> Key {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    Key::from(format!("case-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// One step of a settled sequence: move the clock, then check `cost`; or, with `actual`,
/// settle one of the admissions so far ([`pick_settled`]) at that true cost, against what it
/// reserved: below it a refund of the difference, above it a charge. With no admission left,
/// a reservation of `cost` that took nothing is settled (above it: a charge alone).
#[derive(Debug, Clone)]
pub struct Settled {
    pub advance: u64,
    pub cost: u64,
    pub actual: Option<u64>,
}

/// Steps as [`ops`], about one in three a settlement whose true cost is up to `3 * max_cost`
/// (often below the reservation), or a debt past what a double holds (around 2^53 ns of intervals,
/// up to `u64::MAX`).
pub fn settled_ops(
    max_len: usize,
    unit: u64,
    max_advance: u64,
    max_cost: u64,
) -> impl Strategy<Value = Vec<Settled>> {
    let advance = prop_oneof![
        3 => Just(0u64),
        3 => (0..=max_advance / unit.max(1)).prop_map(move |k| k * unit),
        3 => 0..=max_advance,
        1 => Just(unit.saturating_sub(1)),
    ];
    let cost = prop_oneof![6 => Just(1u64), 3 => 0..=max_cost];
    let actual = prop_oneof![
        6 => 0..=3 * max_cost,
        4 => 0..=max_cost / 2,
        1 => (1u64 << 20)..(1u64 << 54),
        1 => prop_oneof![Just(u64::MAX), Just(u64::MAX / 2), Just(1u64 << 53)],
    ];
    let settle = prop_oneof![2 => Just(None), 1 => actual.prop_map(Some)];
    let step = (advance, cost, settle).prop_map(|(advance, cost, actual)| Settled {
        advance,
        cost,
        actual,
    });
    prop::collection::vec(step, 1..max_len)
}

/// Which of `n` admissions a settling step settles.
pub fn pick_settled(step: &Settled, n: usize) -> usize {
    usize::try_from(step.advance).unwrap_or(0) % n
}

/// Runs `steps` for `key` on both limiters (which share `clock`) and fails at the first
/// decision that differs: checks, and settlements below, at and above what was reserved.
pub async fn same_settled_decisions<A>(
    memory: &RateLimiter<A, MemoryStore, ManualClock>,
    redis: &RateLimiter<A, RedisStore, ManualClock>,
    clock: &ManualClock,
    key: &Key,
    steps: &[Settled],
) -> Result<(), TestCaseError>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    same_settled_decisions_across(&[(memory, redis)], &[clock], key, steps).await
}

/// A limiter on the memory store and the same on Redis: one server of a fleet.
pub type Server<'a, A> = (
    &'a RateLimiter<A, MemoryStore, ManualClock>,
    &'a RateLimiter<A, RedisStore, ManualClock>,
);

/// [`same_settled_decisions`] across servers that share their states (the memory limiters
/// one memory store, the Redis limiters one Redis), each on its own clock
/// (`clocks[j]` for `servers[j]`): every clock moves by each step's advance, and step `i` goes
/// to server `(i + advance) % n`, a refund to the last. An admission may be settled through
/// another server.
pub async fn same_settled_decisions_across<A>(
    servers: &[Server<'_, A>],
    clocks: &[&ManualClock],
    key: &Key,
    steps: &[Settled],
) -> Result<(), TestCaseError>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    let keys = redis_keys(servers[0].1, key);
    // Each admission as memory and Redis answered it, and its cost (what it reserved).
    let mut admitted: Vec<(Decision, Decision, u64)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        for clock in clocks {
            clock.advance(Duration::from_nanos(step.advance));
        }
        let at = usize::try_from(step.advance).unwrap_or(0);
        let (memory, redis) = servers[i.wrapping_add(at) % servers.len()];
        let (expected, got) = match step.actual {
            Some(actual) => {
                let (on_memory, on_redis, reserved) = match admitted.len() {
                    0 => (nothing(memory), nothing(memory), step.cost),
                    n => admitted.swap_remove(pick_settled(step, n)),
                };
                // A refund goes through the last server. (With clocks that disagree, give it
                // the earliest: a refund that leaves the state fresh on a later clock has Redis
                // delete the key, while the memory store keeps a state an earlier clock reads
                // as used. The stores keep keys apart there, whatever the scripts decide.)
                let (memory, redis) = if actual < reserved {
                    servers[servers.len() - 1]
                } else {
                    (memory, redis)
                };
                (
                    memory
                        .settle(key.clone(), &on_memory, reserved, actual)
                        .await,
                    redis.settle(key.clone(), &on_redis, reserved, actual).await,
                )
            }
            None => (
                memory.check_n(key.clone(), step.cost).await,
                redis.check_n(key.clone(), step.cost).await,
            ),
        };
        let (expected, got) = same(i, step, steps, expected, got)?;
        if step.actual.is_none() && step.cost > 0 && got.allowed {
            admitted.push((expected, got, step.cost));
        }
        if !keep(&keys) {
            // Redis expired a key on its own clock: the rest would compare a lost state.
            return Ok(());
        }
    }
    Ok(())
}
