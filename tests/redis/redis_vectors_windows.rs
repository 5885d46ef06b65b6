//! The fixed window, the sliding window (with sub-windows) and the sliding log in Redis decide
//! exactly as in memory: random quotas and random sequences of checks, peeks and refunds, every
//! decision compared, tiers of them too; limits and periods up to 2^53 - 1 (2^53 is refused)
//! and costs about 2^53; a clock that reads earlier than a key's newest request; clocks up to
//! the end of time. Each write's TTL is the time until the key's state is fresh again, in ms
//! rounded up, and a malformed or unreadable state is an error, never a decision.
//!
//! The parity runs take the TTL off each key after each step (`PERSIST`): Redis expires keys
//! in real time, the limiters decide on a manual clock, and a key written a millisecond
//! before it is fresh would otherwise vanish before the manual clock gets there. (A write
//! whose TTL is that short moves the clock on until it is fresh; a case where Redis expired a
//! key all the same, on a machine that stalled, ends there.) The TTLs are checked on their
//! own.

use crate::support::parity;
use crate::support::redis as server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{Algorithm, FixedWindow, SlidingLog, SlidingWindow};
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{MemoryAlgorithm, MemoryStore, RedisStore};
use tollgate::{Decision, Key, Quota, RateLimiter};

use parity::{ops, pick, same_decisions, store, Op, EPOCH};
use server::runtime;

const S: u64 = 1_000_000_000;
const EXACT: u64 = 1 << 53;
/// The largest limit, period or horizon the window scripts take.
const MAX: u64 = EXACT - 1;
/// The largest sliding log limit the Redis store keeps.
const MAX_LOG: u64 = 500;
/// A TTL that certainly outlives the real time from a write to the next `persist`.
const SHORT: Duration = Duration::from_millis(100);

/// A quota named `w`: periods of whole seconds (met exactly by the steps' whole-second moves)
/// or of any length.
fn quota() -> impl Strategy<Value = Quota> {
    let period = prop_oneof![(1u64..=120).prop_map(|s| s * S), 1_000_000..120 * S];
    (1u64..40, period)
        .prop_map(|(limit, ns)| Quota::new(limit, Duration::from_nanos(ns)).named("w"))
}

/// A sliding log's quota: `q`'s, its limit within the store's bound for the log.
fn log_quota(q: &Quota) -> Quota {
    Quota::new(q.limit().min(MAX_LOG), q.period()).named("w")
}

/// Sliding log limits up to the store's bound, periods up to the largest it takes, and steps
/// of up to two periods with costs up to the limit.
fn extreme_log() -> impl Strategy<Value = (Quota, Vec<Op>)> {
    let limit = prop_oneof![Just(MAX_LOG), 1..=MAX_LOG];
    let period = prop_oneof![Just(MAX), MAX - 64..=MAX, 1..=MAX];
    (limit, period).prop_flat_map(|(limit, period)| {
        let q = Quota::new(limit, Duration::from_nanos(period)).named("w");
        (Just(q), ops(40, period, period.saturating_mul(2), limit))
    })
}

/// Steps of up to 40 s, costs up to 12.
fn steps() -> impl Strategy<Value = Vec<Op>> {
    ops(60, S, 40 * S, 12)
}

/// Limits and periods up to the largest the store takes (`max_period`), and steps of up to two
/// periods with costs up to the limit, and some about 2^53, where Lua numbers stop being exact.
fn extreme(max_period: u64) -> impl Strategy<Value = (Quota, Vec<Op>)> {
    let limit = prop_oneof![Just(MAX), MAX - 64..=MAX, 1..=MAX];
    let period = prop_oneof![
        Just(max_period),
        max_period - 64..=max_period,
        1..=max_period
    ];
    (limit, period).prop_flat_map(|(limit, period)| {
        let q = Quota::new(limit, Duration::from_nanos(period)).named("w");
        let ops = ops(40, period, period.saturating_mul(2), limit);
        let odd = prop::collection::vec(prop::option::weighted(0.1, EXACT - 2..=EXACT + 2), 40);
        let ops = (ops, odd).prop_map(|(mut ops, odd)| {
            for (op, cost) in ops.iter_mut().zip(odd) {
                op.cost = cost.unwrap_or(op.cost);
            }
            ops
        });
        (Just(q), ops)
    })
}

/// Every step on the clock ahead (see [`Rig::parity`]).
fn one_clock(ops: Vec<Op>) -> Vec<(Op, bool)> {
    ops.into_iter().map(|op| (op, false)).collect()
}

/// Each step on either clock.
fn two_clocks(ops: Vec<Op>) -> impl Strategy<Value = Vec<(Op, bool)>> {
    let n = ops.len();
    prop::collection::vec(prop::bool::ANY, n)
        .prop_map(move |late| ops.iter().cloned().zip(late).collect())
}

fn sub_windows() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1usize), 2..=8usize, Just(64usize), 1..=64usize]
}

/// The longest period whose horizon, `period + ⌈period / k⌉`, the store takes.
fn longest_sliding_period(k: usize) -> u64 {
    let k = k as u64;
    let fits = |p: u64| p + p.div_ceil(k) <= MAX;
    let mut p = MAX / (k + 1) * k;
    while fits(p + 1) {
        p += 1;
    }
    p
}

/// 40 cases each, unless `PROPTEST_CASES` says otherwise.
fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    let set = std::env::var_os("PROPTEST_CASES").is_some();
    ProptestConfig {
        cases: if set { default.cases } else { 40 },
        ..default
    }
}

fn clock(at: u64) -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(at));
    clock
}

/// A key no other case uses, and its text.
fn key() -> (Key, String) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("window-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    (Key::from(name.as_str()), name)
}

/// A redis-server, a runtime and a store on it.
struct Rig {
    server: server::RedisServer,
    rt: tokio::runtime::Runtime,
    store: RedisStore,
}

fn rig() -> Option<Rig> {
    let server = server::RedisServer::start()?;
    let rt = runtime();
    // A loaded machine may stall for seconds; a timeout is no decision to compare.
    let store = rt
        .block_on(store(&server.url()))
        .timeout(Duration::from_secs(120));
    Some(Rig { server, rt, store })
}

impl Rig {
    /// Takes the TTL off every tier's key of `name`, and tells how many keys Redis has expired
    /// so far.
    fn persist(&self, name: &str) -> u64 {
        // SCAN, not KEYS: it reclaims (and so counts) a key whose TTL ran out, which KEYS
        // skips unnoticed.
        let script = "local c = '0' repeat local page = redis.call('SCAN', c, 'MATCH', ARGV[1], \
                      'COUNT', 1000) c = page[1] for _, k in ipairs(page[2]) do \
                      redis.call('PERSIST', k) end until c == '0' \
                      return string.match(redis.call('INFO', 'stats'), 'expired_keys:(%d+)')";
        let reply = server::command(
            self.server.port,
            &format!("EVAL \"{script}\" 0 tollgate:{{s:{name}}}:*"),
        );
        let count = reply
            .as_deref()
            .and_then(|r| r.lines().nth(1)?.parse().ok());
        count.unwrap_or_else(|| panic!("PERSIST and INFO: {reply:?}"))
    }

    /// A one-line reply of `cmd` as an integer (`TIME`: its milliseconds).
    fn integer(&self, cmd: &str) -> i64 {
        let reply = server::command(self.server.port, cmd).unwrap_or_default();
        let number = |line: &str| line.trim_start_matches(':').parse::<i64>().ok();
        let parsed = if cmd == "TIME" {
            // *2, $n, seconds, $n, microseconds.
            let lines: Vec<&str> = reply.lines().collect();
            lines
                .get(2)
                .zip(lines.get(4))
                .and_then(|(s, us)| Some(number(s)? * 1000 + number(us)? / 1000))
        } else {
            number(reply.trim())
        };
        parsed.unwrap_or_else(|| panic!("{cmd}: {reply:?}"))
    }

    /// `ops` on limiters that `make` builds (its quotas named), on memory and on Redis, each
    /// on two clocks `lag` apart, the one behind at `start`: each step on the clock it says
    /// (`true`: the one behind, so a key's newest request is often later than the clock),
    /// every decision the same.
    fn parity<A>(
        &self,
        make: impl Fn() -> RateLimiter<A>,
        (start, lag): (u64, u64),
        ops: &[(Op, bool)],
    ) -> Result<(), TestCaseError>
    where
        A: RedisAlgorithm,
        A: MemoryAlgorithm,
    {
        let (ahead, behind) = (clock(start.saturating_add(lag)), clock(start));
        let mem = MemoryStore::new();
        let pair = |c: &ManualClock| {
            let memory = make().with_clock(c.clone()).with_store(mem.clone());
            let redis = make().with_clock(c.clone()).with_store(self.store.clone());
            (memory, redis)
        };
        let (on_ahead, on_behind) = (pair(&ahead), pair(&behind));
        let (key, name) = key();
        let expired = self.persist(&name);
        for (op, late) in ops {
            ahead.advance(Duration::from_nanos(op.advance));
            behind.advance(Duration::from_nanos(op.advance));
            let (clock, (memory, redis)) = if *late {
                (&behind, &on_behind)
            } else {
                (&ahead, &on_ahead)
            };
            let step = Op {
                advance: 0,
                ..op.clone()
            };
            let step = same_decisions(memory, redis, clock, &key, std::slice::from_ref(&step));
            self.rt.block_on(step)?;
            if self.persist(&name) > expired {
                // The machine stalled past a TTL: the rest would not compare like with like.
                return Ok(());
            }
            // A write with a TTL too short to outlive the real time until `persist` surely:
            // move both clocks on until its tier is fresh on both.
            if op.cost > 0 {
                let peek = |pair: &(RateLimiter<A, MemoryStore, ManualClock>, _)| {
                    pair.0.check_n_now(key.clone(), 0)
                };
                let writer = peek(if *late { &on_behind } else { &on_ahead });
                let skip = writer
                    .tiers()
                    .iter()
                    .zip(peek(&on_behind).tiers())
                    .filter(|(w, _)| !w.reset_after.is_zero() && w.reset_after < SHORT)
                    .map(|(_, b)| b.reset_after)
                    .max();
                if let Some(skip) = skip {
                    ahead.advance(skip);
                    behind.advance(skip);
                }
            }
        }
        Ok(())
    }

    /// `ops` on a Redis limiter of `make` (one quota, named `ttl`, whose states take at most
    /// `span` ns to be fresh) and on `algorithm` itself: after every write, the key's TTL is
    /// the time until the state is fresh, in ms rounded up, and past it as much as the share of
    /// the quota used and whether the key is limited say (`kept_ms`); a state written fresh is
    /// not in Redis.
    fn ttls<A>(
        &self,
        algorithm: A,
        span: u64,
        make: impl Fn() -> RateLimiter<A>,
        ops: &[Op],
    ) -> Result<(), TestCaseError>
    where
        A: RedisAlgorithm,
        A: MemoryAlgorithm,
    {
        let clock = clock(EPOCH);
        let redis = make()
            .with_clock(clock.clone())
            .with_store(self.store.clone());
        let (key, name) = key();
        let redis_key = String::from_utf8(redis.table().redis_keys(&key).remove(0)).unwrap();
        let expired = self.persist(&name);
        let mut state = A::State::default();
        // The admissions so far, as Redis and the algorithm answered them; a refund gives one
        // back.
        let mut admitted: Vec<(Decision, Decision)> = Vec::new();
        for op in ops {
            clock.advance(Duration::from_nanos(op.advance));
            let now = clock.now_nanos();
            let before = self.integer("TIME");
            let next = if op.refund {
                let Some((on_redis, mine)) =
                    (!admitted.is_empty()).then(|| admitted.swap_remove(pick(op, admitted.len())))
                else {
                    continue;
                };
                let _ = self
                    .rt
                    .block_on(redis.refund(key.clone(), &on_redis, op.cost));
                algorithm.refund(&state, &mine, now, op.cost)
            } else {
                let got = self.rt.block_on(redis.check_n(key.clone(), op.cost));
                let out = algorithm.check(&state, now, op.cost);
                prop_assert_eq!(got.as_ref().ok(), Some(&out.decision), "{:?}", op);
                if let (Ok(got), true) = (got, out.state.is_some()) {
                    prop_assert_eq!(got.receipt(), out.decision.receipt(), "{:?}", op);
                    admitted.push((got, out.decision));
                }
                out.state
            };
            let Some(next) = next else { continue };
            state = next;
            let expires = self.integer(&format!("PEXPIRETIME {redis_key}"));
            let after = self.integer("TIME");
            let fresh_in = fresh_in(&algorithm, &state, now);
            let remaining = algorithm.check(&state, now, 0).decision.remaining;
            let capacity = algorithm
                .check(&A::State::default(), now, 0)
                .decision
                .remaining;
            let kept = server::kept_ms(Duration::from_nanos(fresh_in), remaining, capacity, span);
            if fresh_in == 0 {
                prop_assert_eq!(expires, -2, "a fresh state is deleted, {:?}", op);
            } else {
                // The script set its TTL at a server time from `before` to `after` (ms): when
                // both are the same millisecond, that is exactly the TTL.
                let ms = i64::try_from(kept).unwrap_or(i64::MAX);
                let expired = expires == -2 && ms <= after - before + 1;
                prop_assert!(
                    (expires - after..=expires - before).contains(&ms) || expired,
                    "expires at {} ms, written from {} to {} ms, {} ns to fresh, {:?}",
                    expires,
                    before,
                    after,
                    fresh_in,
                    op
                );
            }
            if self.persist(&name) > expired {
                return Ok(());
            }
            // As in `parity`.
            if fresh_in > 0 && fresh_in < SHORT.as_nanos() as u64 {
                clock.advance(Duration::from_nanos(fresh_in));
            }
        }
        Ok(())
    }
}

/// The time from `now` until `state` is fresh, by bisection over `is_fresh`.
fn fresh_in<A: Algorithm>(algorithm: &A, state: &A::State, now: u64) -> u64 {
    if algorithm.is_fresh(state, now) {
        return 0;
    }
    let (mut stale, mut fresh) = (0u64, 1u64 << 55);
    while fresh - stale > 1 {
        let mid = stale + (fresh - stale) / 2;
        if algorithm.is_fresh(state, now + mid) {
            fresh = mid;
        } else {
            stale = mid;
        }
    }
    fresh
}

/// `q` with a period of at least 1 ms, the shortest calendar windows take.
fn calendar(q: &Quota) -> Quota {
    Quota::new(q.limit(), q.period().max(Duration::from_millis(1))).named("w")
}

fn the_fixed_window_decides_in_redis_as_in_memory() {
    let Some(rig) = rig() else { return };
    // Calendar windows: whole multiples of the period since the epoch (the manual clocks'
    // wall time is their time).
    proptest!(config(), |(q in quota(), ops in steps())| {
        rig.parity(|| RateLimiter::fixed_window(q.clone()).aligned(), (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |((q, ops) in extreme(MAX))| {
        let q = calendar(&q);
        rig.parity(|| RateLimiter::fixed_window(q.clone()).aligned(), (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |(a in quota(), b in quota(), ops in steps())| {
        let tiers = || RateLimiter::fixed_window([a.clone(), b.clone()]).aligned();
        rig.parity(tiers, (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |(q in quota(), ops in steps())| {
        rig.parity(|| RateLimiter::fixed_window(q.clone()), (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |((q, ops) in extreme(MAX))| {
        rig.parity(|| RateLimiter::fixed_window(q.clone()), (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |(a in quota(), b in quota(), ops in steps())| {
        let tiers = || RateLimiter::fixed_window([a.clone(), b.clone()]);
        rig.parity(tiers, (EPOCH, 0), &one_clock(ops))?;
    });
}

fn the_sliding_window_decides_in_redis_as_in_memory() {
    let Some(rig) = rig() else { return };
    proptest!(config(), |(q in quota(), k in sub_windows(), ops in steps())| {
        let sliding = || RateLimiter::sliding_window(q.clone()).sub_windows(k);
        rig.parity(sliding, (EPOCH, 0), &one_clock(ops))?;
    });
    let extreme = sub_windows().prop_flat_map(|k| (Just(k), extreme(longest_sliding_period(k))));
    proptest!(config(), |((k, (q, ops)) in extreme)| {
        let sliding = || RateLimiter::sliding_window(q.clone()).sub_windows(k);
        rig.parity(sliding, (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |(a in quota(), b in quota(), k in sub_windows(), ops in steps())| {
        let tiers = || RateLimiter::sliding_window([a.clone(), b.clone()]).sub_windows(k);
        rig.parity(tiers, (EPOCH, 0), &one_clock(ops))?;
    });
}

fn the_sliding_log_decides_in_redis_as_in_memory() {
    let Some(rig) = rig() else { return };
    proptest!(config(), |(q in quota(), ops in steps())| {
        rig.parity(|| RateLimiter::sliding_log(q.clone()), (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |((q, ops) in extreme_log())| {
        rig.parity(|| RateLimiter::sliding_log(q.clone()), (EPOCH, 0), &one_clock(ops))?;
    });
    proptest!(config(), |(a in quota(), b in quota(), ops in steps())| {
        let tiers = || RateLimiter::sliding_log([a.clone(), b.clone()]);
        rig.parity(tiers, (EPOCH, 0), &one_clock(ops))?;
    });
}

fn a_clock_behind_the_newest_request_reads_as_its_time_in_redis_too() {
    let Some(rig) = rig() else { return };
    let usual = (quota(), steps()).prop_flat_map(|(q, ops)| (Just(q), two_clocks(ops)));
    let usual = (usual, (Just(EPOCH), 0..=130 * S), sub_windows());
    // A state up to 2^51 ahead of the clock, as far as waits stay below 2^53, and clocks up to
    // the end of time (2^64 - 1 ns).
    let far = extreme(1 << 51).prop_flat_map(|(q, ops)| (Just(q), two_clocks(ops)));
    let start = prop_oneof![Just(EPOCH), (0..=1u64 << 56).prop_map(|x| u64::MAX - x)];
    let far = (far, (start, 0..=1u64 << 51), sub_windows());
    proptest!(config(), |(((q, ops), clocks, k) in prop_oneof![usual, far])| {
        rig.parity(|| RateLimiter::fixed_window(q.clone()), clocks, &ops)?;
        // Two wall clocks apart: calendar windows whose start is ahead of the clock.
        let aligned = calendar(&q);
        rig.parity(|| RateLimiter::fixed_window(aligned.clone()).aligned(), clocks, &ops)?;
        rig.parity(|| RateLimiter::sliding_window(q.clone()).sub_windows(k), clocks, &ops)?;
        let log = log_quota(&q);
        rig.parity(|| RateLimiter::sliding_log(log.clone()), clocks, &ops)?;
    });
}

fn each_write_lives_until_the_state_is_fresh() {
    let Some(rig) = rig() else { return };
    proptest!(config(), |(q in quota(), k in sub_windows(), ops in steps())| {
        let q = q.named("ttl");
        let period = u64::try_from(q.period().as_nanos()).unwrap();
        let horizon = period + period.div_ceil(k as u64);
        rig.ttls(FixedWindow::new(&q), period, || RateLimiter::fixed_window(q.clone()), &ops)?;
        let sliding = SlidingWindow::new(&q).sub_windows(k);
        rig.ttls(sliding, horizon, || RateLimiter::sliding_window(q.clone()).sub_windows(k), &ops)?;
        rig.ttls(SlidingLog::new(&q), period, || RateLimiter::sliding_log(q.clone()), &ops)?;
    });
}

/// Whether a check of `key` passes on `make`'s limiter in Redis at `clock`, or the error.
fn check_at<A>(
    rig: &Rig,
    make: impl Fn() -> RateLimiter<A>,
    clock: &ManualClock,
    key: &Key,
) -> Result<bool, String>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    let limiter = make()
        .with_clock(clock.clone())
        .with_store(rig.store.clone());
    let got = rig.rt.block_on(limiter.check(key.clone()));
    got.map(|d| d.allowed).map_err(|e| e.to_string())
}

fn first_check<A>(rig: &Rig, make: impl Fn() -> RateLimiter<A>) -> Result<bool, String>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    check_at(rig, make, &clock(EPOCH), &key().0)
}

/// [`first_check`], with a panic where the limiter is built as its error.
fn built_first_check<A>(rig: &Rig, make: impl Fn() -> RateLimiter<A>) -> Result<bool, String>
where
    A: RedisAlgorithm,
    A: MemoryAlgorithm,
{
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| first_check(rig, make)))
        .unwrap_or_else(|panic| Err(panic.downcast_ref::<String>().cloned().unwrap_or_default()))
}

fn figures_of_2_pow_53_are_refused() {
    let Some(rig) = rig() else { return };
    // Refused where the limiter gets the store: a panic, never a decision.
    let refused =
        |got: Result<bool, String>| got.is_err_and(|e| e.contains("cannot be kept in Redis"));
    for (limit, period, accepted) in [(MAX, MAX, true), (EXACT, 1, false), (1, EXACT, false)] {
        let q = Quota::new(limit, Duration::from_nanos(period));
        let fixed = built_first_check(&rig, || RateLimiter::fixed_window(q.clone()));
        // The sliding log's limit has a bound of its own (below).
        let log = built_first_check(&rig, || RateLimiter::sliding_log(log_quota(&q)));
        for (got, accepted) in [(fixed, accepted), (log, period <= MAX)] {
            if accepted {
                assert_eq!(got, Ok(true), "{limit}/{period}ns");
            } else {
                assert!(refused(got), "{limit}/{period}ns");
            }
        }
    }
    // The sliding window's horizon, `period + ⌈period / k⌉`, too.
    for k in [1, 3, 64] {
        let longest = longest_sliding_period(k);
        for (period, accepted) in [(longest, true), (longest + 1, false)] {
            let q = Quota::new(5, Duration::from_nanos(period));
            let got = built_first_check(&rig, || {
                RateLimiter::sliding_window(q.clone()).sub_windows(k)
            });
            if accepted {
                assert_eq!(got, Ok(true), "k={k} period={period}");
            } else {
                assert!(refused(got), "k={k} period={period}");
            }
        }
    }
}

fn a_sliding_log_limit_over_the_bound_is_refused_where_the_limiter_is_built() {
    let Some(rig) = rig() else { return };
    let q = Quota::new(MAX_LOG, Duration::from_secs(60));
    assert_eq!(
        first_check(&rig, || RateLimiter::sliding_log(q.clone())),
        Ok(true)
    );
    for limit in [MAX_LOG + 1, 100_000, MAX] {
        let q = Quota::new(limit, Duration::from_secs(60));
        let store = rig.store.clone();
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _ = RateLimiter::sliding_log(q).with_store(store);
        }));
        let message = built.expect_err("an over-bound sliding log limit was accepted");
        let message = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        for part in [&limit.to_string(), &MAX_LOG.to_string(), "sliding_window"] {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
    }
}

fn a_state_too_far_ahead_of_the_clock_is_refused() {
    let Some(rig) = rig() else { return };
    // 2^40 ns, so every wait is within 2^41 of the state's newest time.
    let q = Quota::new(3, Duration::from_nanos(1 << 40)).named("w");
    let check = |ahead: bool| {
        (
            Op {
                advance: 0,
                cost: 1,
                refund: false,
            },
            ahead,
        )
    };
    let ops = [check(false), check(true), check(true), check(false)];
    let fixed = || RateLimiter::fixed_window(q.clone());
    let sliding = || RateLimiter::sliding_window(q.clone()).sub_windows(7);
    let log = || RateLimiter::sliding_log(q.clone());
    // Waits from the clock behind up to 2^53 - 2^41: exact.
    let near = (EPOCH, EXACT - (1 << 42));
    rig.parity(fixed, near, &ops).unwrap();
    rig.parity(sliding, near, &ops).unwrap();
    rig.parity(log, near, &ops).unwrap();
    // Past 2^53: an error, not a rounded decision.
    fn refused<A>(rig: &Rig, make: impl Fn() -> RateLimiter<A>)
    where
        A: RedisAlgorithm,
        A: MemoryAlgorithm,
    {
        let key = key().0;
        let ahead = check_at(rig, &make, &clock(EPOCH + EXACT), &key);
        assert_eq!(ahead, Ok(true));
        let behind = check_at(rig, &make, &clock(EPOCH), &key);
        assert!(
            behind.as_ref().is_err_and(|e| e.contains("corrupt")),
            "{behind:?}"
        );
    }
    refused(&rig, fixed);
    refused(&rig, sliding);
    refused(&rig, log);
}

fn a_malformed_state_is_an_error_not_a_decision() {
    let Some(rig) = rig() else { return };
    let q = Quota::new(5, Duration::from_secs(60)).named("w");
    let fixed = [
        "fw:",
        "fw:7",
        "fw:7:",
        "fw:x:1",
        "fw:-7:1",
        "fw:7:1:2",
        "fw:7:1.5",
        "fw:7:9007199254740993",
        "fw:184467440737095516150:1",
        "gcra:7",
    ];
    let sliding = [
        "sw:",
        "sw:7:0",
        "sw:7:0:",
        "sw:7:0:1,",
        "sw:7:0:,1",
        "sw:7:0:1,,1",
        "sw:7:x:1,1",
        "sw:7:9007199254740993:1,1",
        "sw:7:0:1,9007199254740993",
        "sw:7:0:0,9007199254740992,1",
        "log:7:0:1",
    ];
    let log = [
        "log:",
        "log:7",
        "log:7:",
        "log:7:0:1,",
        "log:7:3:1",
        "log:7:0:0",
        "log:7:0:1,0:1",
        "log:7:1:1,2:1,0:1",
        "log:7:1:9007199254740992,0:1",
        "log:7:0:1:2",
        "log:7:0|",
        "log:7|0123456789abcdef",
        "log:x:0|0123456789abcdef",
        "log:7:0|0123456789abcde",
        "log:7:0|0123456789abcdef",
        "log:7:9007199254740993|0123456789abcdef",
        "fw:7:1",
    ];
    fn each<A>(rig: &Rig, make: impl Fn() -> RateLimiter<A>, states: &[&str])
    where
        A: RedisAlgorithm,
        A: MemoryAlgorithm,
    {
        for state in states {
            let (key, _) = key();
            let redis = make().with_store(rig.store.clone());
            let redis_key = String::from_utf8(redis.table().redis_keys(&key).remove(0)).unwrap();
            let set = server::command(rig.server.port, &format!("SET {redis_key} {state}"));
            assert!(set.is_some_and(|r| r.starts_with("+OK")));
            let got = check_at(rig, &make, &clock(EPOCH), &key);
            let clear = got
                .as_ref()
                .is_err_and(|e| e.contains("holds a corrupt") || e.contains("holds no"));
            assert!(clear, "{state}: {got:?}");
        }
    }
    each(&rig, || RateLimiter::fixed_window(q.clone()), &fixed);
    each(&rig, || RateLimiter::sliding_window(q.clone()), &sliding);
    each(&rig, || RateLimiter::sliding_log(q.clone()), &log);
}

/// On the server's `TIME` (no caller clock), a day's calendar window ends at the next midnight
/// UTC as the server counts it: the reported `reset_after`, from the moment of the script,
/// lands on a multiple of a day, read against the local wall clock around the call (the
/// server runs on this machine).
fn calendar_windows_follow_the_servers_time() {
    let Some(rig) = rig() else { return };
    let day = 86_400 * S;
    let url = rig.server.url();
    let store = rig.rt.block_on(RedisStore::connect(&url));
    let store = store.expect("redis connects").deny_cache(0);
    let limiter = RateLimiter::fixed_window(Quota::per_day(3).named("daily"))
        .aligned()
        .with_store(store);
    let wall = || tollgate::clock::SystemClock.wall_nanos();
    let (key, _) = key();
    for remaining in [2, 1, 0] {
        let before = wall();
        let d = rig
            .rt
            .block_on(limiter.check(key.clone()))
            .expect("decided");
        let after = wall();
        assert!(d.allowed);
        assert_eq!(d.remaining, remaining);
        let midnight = before / day * day + day;
        if after >= midnight {
            return; // the test ran across midnight: nothing to compare
        }
        let reset = u64::try_from(d.reset_after.as_nanos()).unwrap();
        // The script ran between `before` and `after` (TIME has microseconds).
        let at = midnight - reset;
        assert!(
            before.saturating_sub(1_000) <= at && at <= after + 1_000,
            "the window ends {reset} ns after a call made between {before} and {after}"
        );
    }
    let denied = rig.rt.block_on(limiter.check(key)).expect("decided");
    assert!(!denied.allowed);
    assert!(denied
        .retry_after
        .is_some_and(|r| r <= Duration::from_secs(86_400)));
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "calendar_windows_follow_the_servers_time",
            calendar_windows_follow_the_servers_time,
        ),
        server::needs_redis(
            "the_fixed_window_decides_in_redis_as_in_memory",
            the_fixed_window_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_sliding_window_decides_in_redis_as_in_memory",
            the_sliding_window_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_sliding_log_decides_in_redis_as_in_memory",
            the_sliding_log_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "a_clock_behind_the_newest_request_reads_as_its_time_in_redis_too",
            a_clock_behind_the_newest_request_reads_as_its_time_in_redis_too,
        ),
        server::needs_redis(
            "each_write_lives_until_the_state_is_fresh",
            each_write_lives_until_the_state_is_fresh,
        ),
        server::needs_redis(
            "figures_of_2_pow_53_are_refused",
            figures_of_2_pow_53_are_refused,
        ),
        server::needs_redis(
            "a_sliding_log_limit_over_the_bound_is_refused_where_the_limiter_is_built",
            a_sliding_log_limit_over_the_bound_is_refused_where_the_limiter_is_built,
        ),
        server::needs_redis(
            "a_state_too_far_ahead_of_the_clock_is_refused",
            a_state_too_far_ahead_of_the_clock_is_refused,
        ),
        server::needs_redis(
            "a_malformed_state_is_an_error_not_a_decision",
            a_malformed_state_is_an_error_not_a_decision,
        ),
    ]
}
