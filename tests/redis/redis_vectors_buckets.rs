//! The token bucket (with shaping) and the hybrid quota-linear algorithm in Redis decide exactly
//! as in memory: random quotas, random sequences of checks, peeks and refunds, every decision
//! compared, and after each step the state Redis holds compared with the Rust algorithm's. Tiers
//! of each; figures beyond a double's 2^53 (quotas up to what the store accepts, the end of the
//! clock's range); states written by hand; the keys' TTLs; corrupt states.

use crate::support::parity;
use crate::support::redis as server;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncCommands, AsyncConnectionConfig};
use tollgate::algorithm::{
    Hybrid, HybridState, Tiered, TieredState, TokenBucket, TokenBucketState,
};
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{MemoryAlgorithm, MemoryStore, OnFailure, RedisStore};
use tollgate::{Decision, Key, Quota, RateLimiter};

use parity::{nothing, ops, pick, same_decisions_with, Op, EPOCH};
use server::runtime;

const MAX53: u64 = 1 << 53;
const S: u64 = 1_000_000_000;

/// One Redis server for a test: the a store deciding on the caller's clock, and a raw
/// connection to read the keys.
struct Bench {
    _server: server::RedisServer,
    rt: tokio::runtime::Runtime,
    store: RedisStore,
    conn: MultiplexedConnection,
}

impl Bench {
    /// As `parity::store`, but no call times out: on a loaded machine redis-rs's own default
    /// (500 ms per reply, whatever the store's timeout) fails a test that is right.
    fn start() -> Option<Self> {
        let server = server::RedisServer::start()?;
        let rt = runtime();
        let client = redis::Client::open(server.url()).expect("a client");
        let (store, conn) = rt.block_on(async {
            let config = ConnectionManagerConfig::new().set_response_timeout(None);
            let manager = ConnectionManager::new_with_config(client.clone(), config).await;
            let store = RedisStore::from_connection_manager(manager.expect("a connection"))
                .with_caller_clock()
                .deny_cache(0)
                .on_failure(OnFailure::Closed)
                .timeout(Duration::from_secs(60));
            let config = AsyncConnectionConfig::new().set_response_timeout(None);
            let conn = client.get_multiplexed_async_connection_with_config(&config);
            (store, conn.await.expect("a raw connection"))
        });
        Some(Self {
            _server: server,
            rt,
            store,
            conn,
        })
    }
}

/// A key no other case uses, and its name in Redis under `redis`'s policy (for tiers, the name
/// that `:<tier>` follows).
fn fresh_key<A: Stored>(redis: &RateLimiter<A, RedisStore, ManualClock>) -> (Key, String) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let key = Key::from(NEXT.fetch_add(1, Ordering::Relaxed));
    let mut name = String::from_utf8(redis.table().redis_keys(&key).remove(0)).unwrap();
    if A::TIERED {
        name.truncate(name.rfind(':').unwrap());
    }
    (key, name)
}

fn clock_at(nanos: u64) -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(nanos));
    clock
}

fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What the test knows of an algorithm's keys in Redis.
trait Stored: RedisAlgorithm {
    /// For each tier of `state` at `now`: the text the script stores, and how long its key is
    /// kept, in whole ms (zero: fresh, deleted; see `kept_ms`).
    fn stored(&self, state: &Self::State, now: u64) -> Vec<(String, u64)>;

    /// The admission a refund of `state` gives back: the one that wrote it last.
    fn last_admission(&self, state: &Self::State) -> Decision;
}

impl Stored for TokenBucket {
    fn stored(&self, s: &TokenBucketState, now: u64) -> Vec<(String, u64)> {
        let text = format!("token_bucket:{}:{}", s.refilled_at, s.deficit);
        vec![(text, kept(self, s, now, self.bound_nanos()))]
    }

    fn last_admission(&self, s: &TokenBucketState) -> Decision {
        // Full again at the end of the last request's slot.
        Decision::allow(0, 0, Duration::ZERO).with_receipt(s.refilled_at.saturating_add(s.deficit))
    }
}

impl Stored for Hybrid {
    fn stored(&self, s: &HybridState, now: u64) -> Vec<(String, u64)> {
        let text = match *s {
            HybridState::Fresh => "hybrid:fresh".into(),
            HybridState::Bursty { start, tokens } => format!("hybrid:b:{start}:{tokens}"),
            HybridState::Smooth { time, empty_at } => format!("hybrid:s:{time}:{empty_at}"),
        };
        vec![(text, kept(self, s, now, hybrid_span(self)))]
    }

    fn last_admission(&self, _: &HybridState) -> Decision {
        Decision::allow(0, 0, Duration::ZERO)
    }
}

impl<A: Stored> Stored for Tiered<A>
where
    A: MemoryAlgorithm,
{
    fn stored(&self, state: &TieredState<A::State>, now: u64) -> Vec<(String, u64)> {
        let fresh = A::State::default();
        let states = state.states();
        let tiers = self.tiers().iter().enumerate();
        tiers
            .flat_map(|(i, tier)| tier.stored(states.get(i).unwrap_or(&fresh), now))
            .collect()
    }

    fn last_admission(&self, state: &TieredState<A::State>) -> Decision {
        let fresh = A::State::default();
        let states = state.states();
        let tiers: Vec<Decision> = (self.tiers().iter().enumerate())
            .map(|(i, tier)| tier.last_admission(states.get(i).unwrap_or(&fresh)))
            .collect();
        Decision::allow(0, 0, Duration::ZERO).with_tiers(tiers)
    }
}

/// How long the key of `algorithm`'s `state` at `now` is kept, in whole ms, for a span of
/// `span` ns (`kept_ms`).
fn kept<A: MemoryAlgorithm>(algorithm: &A, state: &A::State, now: u64, span: u64) -> u64 {
    let standing = algorithm.check(state, now, 0).decision;
    let capacity = algorithm
        .check(&A::State::default(), now, 0)
        .decision
        .remaining;
    server::kept_ms(standing.reset_after, standing.remaining, capacity, span)
}

/// The hybrid's span: a window, then a whole quota of smooth tokens.
fn hybrid_span(hybrid: &Hybrid) -> u64 {
    hybrid.period_nanos() + hybrid.limit() * hybrid.interval_nanos()
}

/// How many ms of Redis's clock may have passed since `since`: a TTL read then is at most this
/// much shorter than the one written (on a loaded machine, seconds).
fn waited(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX) + 2
}

/// A limiter on the memory store and one on Redis for the same policy, on one clock.
struct Pair<A: Stored>
where
    A: MemoryAlgorithm,
{
    memory: RateLimiter<A, MemoryStore, ManualClock>,
    redis: RateLimiter<A, RedisStore, ManualClock>,
    clock: ManualClock,
}

impl<A: Stored> Pair<A>
where
    A: MemoryAlgorithm,
    A::State: Debug,
{
    /// `limiter`'s policy in memory and in Redis, on a clock at `start` ns.
    /// (`_policy` is the quota's name, for the reader: the store names the keys.)
    fn new(limiter: RateLimiter<A>, store: &RedisStore, _policy: &str, start: u64) -> Self {
        let clock = clock_at(start);
        let memory = limiter.with_clock(clock.clone());
        Self {
            redis: memory.clone().with_store(store.clone()),
            memory,
            clock,
        }
    }

    /// Runs `ops` for a fresh key on both limiters, comparing every decision (`same_decisions`),
    /// and after each step compares each tier's key in Redis with the algorithm's state.
    ///
    /// A key holds the state's text. A key the step wrote lives as long as the state takes to
    /// be fresh, rounded up to a whole ms; a write that leaves a tier fresh deletes its key.
    /// The test then makes the key persistent: Redis expires keys on its own clock, which is
    /// not the test's, and a key expiring between two steps would change the next decision.
    /// For the same reason a key may vanish before it is read when its TTL is a few ms; it is
    /// written back.
    async fn run(&self, mut conn: MultiplexedConnection, ops: &[Op]) -> Result<(), TestCaseError> {
        let (key, name) = fresh_key(&self.redis);
        let algorithm = self.memory.algorithm();
        let mut state = A::State::default();
        let mut admitted: Vec<(Decision, Decision)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let step = std::slice::from_ref(op);
            let since = Instant::now();
            // The admission a refund gives back, as `same_decisions_with` picks it.
            let admission = (op.refund && !admitted.is_empty())
                .then(|| admitted[pick(op, admitted.len())].0.clone());
            same_decisions_with(
                &self.memory,
                &self.redis,
                &self.clock,
                &key,
                step,
                &mut admitted,
            )
            .await
            .map_err(|e| TestCaseError::fail(format!("step {i} of {ops:?}: {e}")))?;
            let now = self.clock.now_nanos();
            let next = if op.refund {
                let admission = admission.unwrap_or_else(|| nothing(&self.memory));
                algorithm.refund(&state, &admission, now, op.cost)
            } else {
                algorithm.check(&state, now, op.cost).state
            };
            state = next.unwrap_or(state);
            let tiers = algorithm.stored(&state, now);
            for (t, (text, want)) in tiers.iter().enumerate() {
                let name = if A::TIERED {
                    format!("{name}:{t}")
                } else {
                    name.clone()
                };
                let want = *want;
                let (stored, ttl): (Option<String>, i64) = redis::pipe()
                    .atomic()
                    .get(&name)
                    .pttl(&name)
                    .query_async(&mut conn)
                    .await
                    .expect("GET and PTTL");
                let slack = waited(since);
                let case = format!("step {i} {op:?}, tier {t}: {state:?}, {ttl} ms");
                match stored {
                    Some(stored) => {
                        prop_assert_eq!(&stored, text, "{}", case);
                        if ttl != -1 {
                            let ttl = u64::try_from(ttl).unwrap_or(0);
                            prop_assert!(want > 0, "a fresh state is stored: {}", case);
                            prop_assert!(ttl <= want && ttl + slack >= want, "{}", case);
                        }
                    }
                    None if want == 0 => continue,
                    None => prop_assert!(want <= slack, "no key: {}", case),
                }
                // Kept, or written back, without a TTL.
                let () = conn.set(&name, text).await.expect("SET");
            }
        }
        Ok(())
    }
}

/// Everyday quotas: up to 40 per up to 2 minutes, bursts up to 50.
fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, 1u64..120_000, 1u64..50).prop_map(|(limit, period_ms, burst)| {
        Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst)
    })
}

/// A figure from 1 to 2^53, often at either end.
fn up_to_2_53() -> impl Strategy<Value = u64> {
    prop_oneof![1..=MAX53, MAX53 - 1000..=MAX53, 1..=1000u64, 1..=S]
}

/// Steps with costs and advances around `unit` and `most` (the largest cost that can pass):
/// 0, 1, `most` and `most + 1`, 2^53 and 2^53 + 1, anything up to `most + 2`; advances of up
/// to 2^54 ns, often `unit` or `unit - 1`.
fn big_ops(unit: u64, most: u64) -> impl Strategy<Value = Vec<Op>> {
    let cost = prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(most),
        Just(most + 1),
        Just(MAX53),
        Just(MAX53 + 1),
        0..=most + 2,
    ];
    let advance = prop_oneof![Just(0u64), Just(unit), Just(unit - 1), 0..=2 * MAX53, 0..=S];
    let step = (advance, cost, prop::bool::weighted(0.1)).prop_map(|(advance, cost, refund)| Op {
        advance,
        cost,
        refund,
    });
    prop::collection::vec(step, 1..40)
}

/// A token bucket whose figures reach 2^53: the interval, the capacity, and the capacity plus
/// `max_delay`, with steps around its interval and the largest cost that fits.
fn big_bucket() -> impl Strategy<Value = (Quota, u64, Vec<Op>)> {
    (1u64..=1000, up_to_2_53())
        .prop_flat_map(|(limit, period)| {
            let interval = period.div_ceil(limit);
            let bursts = (MAX53 / interval).max(1);
            (
                Just(Quota::new(limit, Duration::from_nanos(period))),
                prop_oneof![1..=bursts, Just(bursts)],
            )
        })
        .prop_flat_map(|(quota, burst)| {
            let quota = quota.with_burst(burst);
            let interval = quota.emission_interval().as_nanos() as u64;
            let free = MAX53.saturating_sub(interval * burst);
            (Just(quota), prop_oneof![Just(0), 0..=free, Just(free)])
        })
        .prop_flat_map(|(quota, max_delay)| {
            let interval = quota.emission_interval().as_nanos() as u64;
            let most = (interval * quota.burst() + max_delay) / interval;
            (Just(quota), Just(max_delay), big_ops(interval, most))
        })
}

/// A hybrid quota whose limit and period reach 2^53 (a whole quota of smooth tokens up to
/// 2^54 ns), with steps around its interval and limit.
fn big_hybrid() -> impl Strategy<Value = (Quota, Vec<Op>)> {
    (up_to_2_53(), up_to_2_53()).prop_flat_map(|(limit, period)| {
        let quota = Quota::new(limit, Duration::from_nanos(period));
        let interval = quota.emission_interval().as_nanos() as u64;
        (Just(quota), big_ops(interval, limit))
    })
}

/// No shaping, or up to 5 s of it.
fn max_delay_ms() -> impl Strategy<Value = Duration> {
    prop_oneof![Just(0u64), 1u64..5_000].prop_map(Duration::from_millis)
}

fn the_token_bucket_decides_in_redis_as_in_memory() {
    let Some(bench) = Bench::start() else {
        return;
    };
    proptest!(cases(48), |(q in quota(), max_delay in max_delay_ms(), ops in ops(60, S, 30 * S, 12))| {
        let limiter = RateLimiter::token_bucket(q.named("tb")).max_delay(max_delay);
        let pair = Pair::new(limiter, &bench.store, "tb", EPOCH);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

fn the_token_bucket_decides_in_redis_as_in_memory_up_to_2_53() {
    let Some(bench) = Bench::start() else {
        return;
    };
    proptest!(cases(64), |((q, max_delay, ops) in big_bucket())| {
        let limiter = RateLimiter::token_bucket(q.named("tb")).max_delay(Duration::from_nanos(max_delay));
        let pair = Pair::new(limiter, &bench.store, "tb", EPOCH);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

fn token_bucket_tiers_decide_in_redis_as_in_memory() {
    let Some(bench) = Bench::start() else {
        return;
    };
    proptest!(cases(32), |(a in quota(), b in quota(), max_delay in max_delay_ms(), ops in ops(60, S, 30 * S, 12))| {
        let limiter = RateLimiter::token_bucket([a.named("a"), b.named("b")]).max_delay(max_delay);
        let pair = Pair::new(limiter, &bench.store, "a+b", EPOCH);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

fn the_hybrid_decides_in_redis_as_in_memory() {
    let Some(bench) = Bench::start() else {
        return;
    };
    // Advances in units of 100 ms up to 10 s: windows end, penalties run out, buckets fill.
    proptest!(cases(64), |(q in quota(), ops in ops(60, S / 10, 10 * S, 12))| {
        let pair = Pair::new(RateLimiter::hybrid(q.named("hq")), &bench.store, "hq", EPOCH);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

fn the_hybrid_decides_in_redis_as_in_memory_up_to_2_53() {
    let Some(bench) = Bench::start() else {
        return;
    };
    proptest!(cases(64), |((q, ops) in big_hybrid())| {
        let pair = Pair::new(RateLimiter::hybrid(q.named("hq")), &bench.store, "hq", EPOCH);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

fn hybrid_tiers_decide_in_redis_as_in_memory() {
    let Some(bench) = Bench::start() else {
        return;
    };
    proptest!(cases(32), |(a in quota(), b in quota(), ops in ops(60, S / 10, 10 * S, 12))| {
        let limiter = RateLimiter::hybrid([a.named("a"), b.named("b")]);
        let pair = Pair::new(limiter, &bench.store, "a+b", EPOCH);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

fn both_decide_in_redis_as_in_memory_at_the_end_of_the_clock() {
    // Within minutes of u64::MAX ns: the bucket would be full again past the clock's range
    // (denied), the hybrid's window ends past it (its bucket stays empty at u64::MAX).
    let Some(bench) = Bench::start() else {
        return;
    };
    proptest!(cases(32), |(q in quota(), back in 0..=300 * S, ops in ops(40, S, 30 * S, 12))| {
        let start = u64::MAX - back;
        let limiter = RateLimiter::token_bucket(q.clone().named("tb")).max_delay(Duration::from_secs(1));
        let pair = Pair::new(limiter, &bench.store, "tb", start);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
        let pair = Pair::new(RateLimiter::hybrid(q.named("hq")), &bench.store, "hq", start);
        bench.rt.block_on(pair.run(bench.conn.clone(), &ops))?;
    });
}

/// A time within 2^55 ns of `EPOCH`, either side: far past, far future (another clock), or
/// close.
fn near_epoch() -> impl Strategy<Value = u64> {
    prop_oneof![
        EPOCH - 4 * MAX53..=EPOCH + 4 * MAX53,
        EPOCH - 100 * S..=EPOCH + 100 * S,
    ]
}

/// Writes `state` for a fresh key of the policy `handmade`, runs one request of `cost` (a refund when `refund`) at
/// `EPOCH` on `redis`, and compares it with its algorithm on `state`: the decision, and the
/// key afterwards.
async fn from_state<A: Stored>(
    mut conn: MultiplexedConnection,
    redis: RateLimiter<A, RedisStore, ManualClock>,
    state: &A::State,
    cost: u64,
    refund: bool,
) -> Result<(), TestCaseError>
where
    A::State: Debug,
{
    let algorithm = redis.algorithm();
    let text = |s: &A::State| algorithm.stored(s, EPOCH).remove(0).0;
    let (key, name) = fresh_key(&redis);
    let () = conn.set(&name, text(state)).await.expect("SET");
    let since = Instant::now();
    let (decision, next, got) = if refund {
        let admission = algorithm.last_admission(state);
        let next = algorithm.refund(state, &admission, EPOCH, cost);
        let after = next.clone().unwrap_or_else(|| state.clone());
        let decision = algorithm.check(&after, EPOCH, 0).decision;
        (decision, next, redis.refund(key, &admission, cost).await)
    } else {
        let outcome = algorithm.check(state, EPOCH, cost);
        let got = redis.check_n(key, cost).await;
        (outcome.decision, outcome.state, got)
    };
    let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(got, decision, "{:?} cost {} refund {}", state, cost, refund);
    let stored: Option<String> = conn.get(&name).await.expect("GET");
    // A key with a TTL of a few ms may be gone by the time it is read (see `Pair::run`).
    let slack = waited(since);
    let short = |s: &A::State| algorithm.stored(s, EPOCH)[0].1 <= slack;
    match next {
        None => prop_assert_eq!(stored, Some(text(state))),
        Some(next) if algorithm.is_fresh(&next, EPOCH) => prop_assert_eq!(stored, None),
        Some(next) if stored.is_none() && short(&next) => {}
        Some(next) => prop_assert_eq!(stored, Some(text(&next))),
    }
    Ok(())
}

/// A cost of 0, 1, `most`, `most + 1`, anything up to `most + 2`, or u64::MAX.
fn cost_near(most: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(most),
        Just(most + 1),
        0..=most + 2,
        Just(u64::MAX),
    ]
}

fn token_buckets_written_by_hand_decide_as_the_algorithm() {
    // Any state a bucket of any quota could have written, read at any time: refilled in the
    // far past, or ahead of this clock; a deficit up to 2^53 (more than this bucket holds).
    let Some(bench) = Bench::start() else {
        return;
    };
    let states =
        (near_epoch(), prop_oneof![0..=MAX53, 0..=100 * S]).prop_map(|(refilled_at, deficit)| {
            TokenBucketState {
                deficit,
                refilled_at,
            }
        });
    let buckets = big_bucket().prop_flat_map(|(q, max_delay, _)| {
        let bucket = TokenBucket::new(&q).max_delay(Duration::from_nanos(max_delay));
        let most = (bucket.capacity_nanos() + max_delay) / bucket.interval_nanos();
        (Just((q, max_delay)), cost_near(most))
    });
    proptest!(cases(256), |(((q, max_delay), cost) in buckets, state in states, refund in prop::bool::weighted(0.2))| {
        let limiter = RateLimiter::token_bucket(q.named("handmade")).max_delay(Duration::from_nanos(max_delay));
        let redis = limiter.with_clock(clock_at(EPOCH)).with_store(bench.store.clone());
        bench.rt.block_on(from_state(bench.conn.clone(), redis, &state, cost, refund))?;
    });
}

fn hybrid_states_written_by_hand_decide_as_the_algorithm() {
    // Windows opened long ago, just now or ahead of this clock, with any tokens left; smooth
    // buckets far below empty, nearly full, or read before their last request.
    let Some(bench) = Bench::start() else {
        return;
    };
    let states = prop_oneof![
        (near_epoch(), prop_oneof![0..=MAX53, 0..=50u64])
            .prop_map(|(start, tokens)| HybridState::Bursty { start, tokens }),
        (near_epoch(), near_epoch())
            .prop_map(|(time, empty_at)| HybridState::Smooth { time, empty_at }),
    ];
    let quotas = big_hybrid().prop_flat_map(|(q, _)| {
        let limit = q.limit();
        (Just(q), cost_near(limit))
    });
    proptest!(cases(256), |((q, cost) in quotas, state in states)| {
        let redis = RateLimiter::hybrid(q.named("handmade")).with_clock(clock_at(EPOCH)).with_store(bench.store.clone());
        bench.rt.block_on(from_state(bench.conn.clone(), redis, &state, cost, false))?;
    });
}

/// `name` lives `want` ms (`kept_ms`), less the time since the write (made after `since`).
async fn assert_ttl(conn: &mut MultiplexedConnection, name: &str, want: u64, since: Instant) {
    let ttl: i64 = conn.pttl(name).await.expect("PTTL");
    let ttl = u64::try_from(ttl).unwrap_or(0);
    assert!(
        ttl <= want && ttl + waited(since) >= want,
        "PTTL {ttl}, want {want} ms"
    );
}

fn keys_live_until_their_state_is_fresh() {
    let Some(bench) = Bench::start() else {
        return;
    };
    bench.rt.block_on(async {
        let clock = clock_at(EPOCH);
        let conn = &mut bench.conn.clone();
        // T = 6 s, burst 10, shaping up to 10 s.
        let bucket = RateLimiter::token_bucket(Quota::per_minute(10).named("ttl-tb"))
            .max_delay(Duration::from_secs(10))
            .with_clock(clock.clone())
            .with_store(bench.store.clone());
        let (key, name) = fresh_key(&bucket);
        // Kept until full, and past that by the share of the burst used of the span (the
        // capacity and the longest wait, 70 s), a whole span more when nothing passes.
        let span = 70_000_000_000;
        let since = Instant::now();
        let first = bucket.check_n(key.clone(), 3).await.unwrap();
        assert_eq!(first.reset_after, Duration::from_secs(18));
        assert_eq!(
            server::kept_ms(first.reset_after, first.remaining, 10, span),
            18_000 + 21_000
        );
        assert_ttl(conn, &name, 39_000, since).await;
        clock.advance(Duration::from_nanos(2_500_000_001));
        let since = Instant::now();
        let d = bucket.check_n(key.clone(), 9).await.unwrap();
        assert_eq!(d.delay, Duration::from_nanos(9_499_999_999));
        assert_eq!(d.remaining, 0);
        let limited = server::kept_ms(d.reset_after, 0, 10, span);
        assert_eq!(limited, 69_500 + 70_000 + 70_000);
        assert_ttl(conn, &name, limited, since).await;
        // A peek or a denial writes nothing; giving everything back deletes the key.
        let _ = bucket.check_n(key.clone(), 0).await.unwrap();
        assert!(!bucket.check_n(key.clone(), 5).await.unwrap().allowed);
        assert_ttl(conn, &name, limited, since).await;
        // The first admission is not the last one: nothing comes back for it yet.
        let kept = bucket.refund(key.clone(), &first, 3).await.unwrap();
        assert_eq!(kept.remaining, 0);
        let _ = bucket.refund(key.clone(), &d, 9).await.unwrap();
        let d = bucket.refund(key.clone(), &first, 3).await.unwrap();
        assert_eq!(d.remaining, 10);
        assert!(
            !conn.exists::<_, bool>(&name).await.unwrap(),
            "a full bucket is deleted"
        );

        // 4 per second: windows of 1 s, T = 250 ms, a whole quota of smooth tokens is 1 s.
        let hybrid = RateLimiter::hybrid(Quota::per_second(4).named("ttl-hq"))
            .with_clock(clock.clone())
            .with_store(bench.store.clone());
        let (key, name) = fresh_key(&hybrid);
        // A span of 2 s: a window, then a whole quota.
        let span = 2_000_000_000;
        let since = Instant::now();
        let d = hybrid.check(key.clone()).await.unwrap();
        assert_ttl(conn, &name, 1_000 + 500, since).await;
        assert_eq!(d.reset_after, Duration::from_secs(1));
        clock.advance(Duration::from_millis(300));
        // The window's last tokens: smooth, 700 ms of penalty, a whole quota 1.45 s away.
        let since = Instant::now();
        let d = hybrid.check_n(key.clone(), 3).await.unwrap();
        assert_eq!(d.reset_after, Duration::from_millis(1450));
        assert_eq!(
            server::kept_ms(d.reset_after, d.remaining, 4, span),
            1_450 + 2_000 + 2_000
        );
        assert_ttl(conn, &name, 5_450, since).await;
        // Then the key is fresh, when its TTL runs out: expiring it changes no decision.
        clock.advance(d.reset_after);
        let kept = hybrid.check_n(key.clone(), 0).await.unwrap();
        assert_eq!((kept.remaining, kept.reset_after), (4, Duration::ZERO));
        let _: () = conn.del(&name).await.unwrap();
        assert_eq!(hybrid.check_n(key.clone(), 0).await.unwrap(), kept);

        // A period of 2^53 ns (104 days) and a limit of 3: smooth buckets more than 2^53 ns
        // from full (beyond a double's exact integers), each TTL rounded up to the ms, never
        // one more.
        let big = Quota::new(3, Duration::from_nanos(MAX53)).named("ttl-big");
        let hybrid = RateLimiter::hybrid(big)
            .with_clock(clock.clone())
            .with_store(bench.store.clone());
        for _ in 0..40 {
            clock.advance(Duration::from_nanos(123_457));
            let (key, name) = fresh_key(&hybrid);
            assert!(hybrid.check_n(key.clone(), 2).await.unwrap().allowed);
            let since = Instant::now();
            let d = hybrid.check(key.clone()).await.unwrap();
            assert!(d.reset_after.as_nanos() > u128::from(MAX53), "{d:?}");
            let span = hybrid_span(hybrid.algorithm());
            assert_ttl(
                conn,
                &name,
                server::kept_ms(d.reset_after, d.remaining, 3, span),
                since,
            )
            .await;
        }
    });
}

fn the_edges_of_a_double_are_exact() {
    let Some(bench) = Bench::start() else {
        return;
    };
    bench.rt.block_on(async {
        // A double reads 2^53 + 1 as 2^53: the scripts compare the cost's text. T = 1 ns,
        // capacity 2^53; a limit of 2^53.
        let edge = Quota::new(1, Duration::from_nanos(1)).with_burst(MAX53);
        let bucket = RateLimiter::token_bucket(edge.named("handmade"));
        let hybrid =
            RateLimiter::hybrid(Quota::new(MAX53, Duration::from_nanos(MAX53)).named("handmade"));
        for cost in [MAX53 - 1, MAX53, MAX53 + 1] {
            let fresh = TokenBucketState::default();
            let bucket = bucket.clone().with_clock(clock_at(EPOCH));
            let redis = bucket.with_store(bench.store.clone());
            from_state(bench.conn.clone(), redis, &fresh, cost, false)
                .await
                .unwrap();
            let fresh = HybridState::Bursty {
                start: 0,
                tokens: 0,
            };
            let hybrid = hybrid.clone().with_clock(clock_at(EPOCH));
            let redis = hybrid.with_store(bench.store.clone());
            from_state(bench.conn.clone(), redis, &fresh, cost, false)
                .await
                .unwrap();
        }
        // 6 per 2^53 ns: T = 1501199875790166 ns, a whole quota 2^53 + 4 ns. A bucket one ns
        // short of it holds 5 whole tokens; a double reads 2^53 + 3 as 2^53 + 4, 6 tokens.
        let quota = Quota::new(6, Duration::from_nanos(MAX53)).named("handmade");
        let nearly_full = HybridState::Smooth {
            time: EPOCH,
            empty_at: EPOCH - (MAX53 + 3),
        };
        for cost in [0, 1, 5, 6] {
            let hybrid = RateLimiter::hybrid(quota.clone()).with_clock(clock_at(EPOCH));
            let redis = hybrid.with_store(bench.store.clone());
            from_state(bench.conn.clone(), redis, &nearly_full, cost, false)
                .await
                .unwrap();
        }
    });
}

fn corrupt_states_are_errors() {
    let Some(bench) = Bench::start() else {
        return;
    };
    bench.rt.block_on(async {
        let clock = clock_at(EPOCH);
        let bucket = RateLimiter::token_bucket(Quota::per_second(5).named("bad"))
            .with_clock(clock.clone())
            .with_store(bench.store.clone());
        let hybrid = RateLimiter::hybrid(Quota::per_second(5).named("bad"))
            .with_clock(clock.clone())
            .with_store(bench.store.clone());
        let too_late = "18446744073709551616";
        let huge = "9007199254740993";
        for text in [
            "token_bucket:",
            "token_bucket:1",
            // A third field is the end of a slice's life (leases); a fourth is not a state.
            "token_bucket:1:2:3:4",
            "token_bucket:1:2:",
            &format!("token_bucket:1:2:{too_late}"),
            "token_bucket:-1:2",
            "token_bucket:1.5:2",
            &format!("token_bucket:{too_late}:0"),
            &format!("token_bucket:1:{huge}"),
            &format!("token_bucket:{}:0", "9".repeat(400)),
            "hybrid:b:1:2",
        ] {
            let (key, name) = fresh_key(&bucket);
            let () = bench.conn.clone().set(&name, text).await.unwrap();
            let error = bucket.check(key).await.unwrap_err().to_string();
            assert!(error.contains("token_bucket"), "{text}: {error}");
        }
        for text in [
            "hybrid:",
            "hybrid:b:1",
            "hybrid:x:1:2",
            "hybrid:f",
            "hybrid:b:1:2:3",
            "hybrid:s:1:-2",
            &format!("hybrid:s:1:{too_late}"),
            &format!("hybrid:b:{too_late}:1"),
            &format!("hybrid:b:1:{huge}"),
            "token_bucket:1:2",
        ] {
            let (key, name) = fresh_key(&hybrid);
            let () = bench.conn.clone().set(&name, text).await.unwrap();
            let error = hybrid.check(key).await.unwrap_err().to_string();
            assert!(error.contains("hybrid"), "{text}: {error}");
        }
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "the_token_bucket_decides_in_redis_as_in_memory",
            the_token_bucket_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_token_bucket_decides_in_redis_as_in_memory_up_to_2_53",
            the_token_bucket_decides_in_redis_as_in_memory_up_to_2_53,
        ),
        server::needs_redis(
            "token_bucket_tiers_decide_in_redis_as_in_memory",
            token_bucket_tiers_decide_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_hybrid_decides_in_redis_as_in_memory",
            the_hybrid_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_hybrid_decides_in_redis_as_in_memory_up_to_2_53",
            the_hybrid_decides_in_redis_as_in_memory_up_to_2_53,
        ),
        server::needs_redis(
            "hybrid_tiers_decide_in_redis_as_in_memory",
            hybrid_tiers_decide_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "both_decide_in_redis_as_in_memory_at_the_end_of_the_clock",
            both_decide_in_redis_as_in_memory_at_the_end_of_the_clock,
        ),
        server::needs_redis(
            "token_buckets_written_by_hand_decide_as_the_algorithm",
            token_buckets_written_by_hand_decide_as_the_algorithm,
        ),
        server::needs_redis(
            "hybrid_states_written_by_hand_decide_as_the_algorithm",
            hybrid_states_written_by_hand_decide_as_the_algorithm,
        ),
        server::needs_redis(
            "keys_live_until_their_state_is_fresh",
            keys_live_until_their_state_is_fresh,
        ),
        server::needs_redis(
            "the_edges_of_a_double_are_exact",
            the_edges_of_a_double_are_exact,
        ),
        server::needs_redis("corrupt_states_are_errors", corrupt_states_are_errors),
    ]
}
