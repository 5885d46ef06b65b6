//! `block`, `reset` and `peek` per key in memory, for every algorithm and tiers: a blocked key
//! is denied with exactly what is left of its block, and once the block ends it decides as a
//! twin limiter that never saw the block (nor the requests the block refused); a reset key
//! decides as a brand-new limiter; a peek takes nothing and remembers no key.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Key, Quota, RateLimiter};

use crate::support::drive;
use drive::ready_now as block_on;

type Limiter<A> = RateLimiter<A, MemoryStore, ManualClock>;

/// One step against the limiter under test and its twin.
#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check(u64),
    Peek,
    Block(u64),
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(|ms| Op::Advance(ms * 1_000_000)),
        1 => (0u64..5).prop_map(|k| Op::Advance(k * 250_000_000)),
        6 => prop_oneof![4 => Just(1u64), 1 => 0u64..4].prop_map(Op::Check),
        1 => Just(Op::Peek),
        1 => (0u64..4_000).prop_map(|ms| Op::Block(ms * 1_000_000 + 1)),
        1 => Just(Op::Reset),
    ]
}

/// Runs `ops` on a limiter `make` builds and on twins that never see a block: each check of a
/// blocked key is denied with what is left of the block and is not shown to the twin; every
/// other decision equals the twin's; a reset starts a new twin.
fn against_a_twin<A>(
    make: impl Fn(&ManualClock) -> Limiter<A>,
    ops: &[Op],
) -> Result<(), TestCaseError>
where
    A: MemoryAlgorithm,
{
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000));
    let limiter = make(&clock);
    let mut twin = make(&clock);
    let key = "k";
    let mut until = 0u64;
    let now = || clock.now_nanos();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
            Op::Block(ns) => {
                block_on(limiter.block(key, Duration::from_nanos(ns))).unwrap();
                until = until.max(now() + ns);
            }
            Op::Reset => {
                block_on(limiter.reset(key)).unwrap();
                twin = make(&clock);
                until = 0;
            }
            Op::Check(_) | Op::Peek => {
                let got = match *op {
                    Op::Check(cost) => limiter.check_n_now(key, cost),
                    _ => block_on(limiter.peek(key)).unwrap(),
                };
                if now() < until {
                    let left = Duration::from_nanos(until - now());
                    prop_assert!(!got.allowed, "step {i}: a blocked key passed: {got:?}");
                    prop_assert!(got.is_blocked(), "step {i}");
                    prop_assert_eq!(got.retry_after, Some(left), "step {}", i);
                    prop_assert_eq!(got.remaining, 0);
                    prop_assert!(got.reset_after >= left);
                    for tier in got.tiers() {
                        prop_assert_eq!(tier.retry_after, Some(left));
                        prop_assert!(!tier.allowed && tier.is_blocked());
                    }
                } else {
                    let expected = match *op {
                        Op::Check(cost) => twin.check_n_now(key, cost),
                        _ => block_on(twin.peek(key)).unwrap(),
                    };
                    prop_assert!(!got.is_blocked(), "step {i}: {got:?}");
                    prop_assert_eq!(&got, &expected, "step {} {:?} in {:?}", i, op, ops);
                    prop_assert_eq!(got.tiers(), expected.tiers());
                }
            }
        }
    }
    Ok(())
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..8, 1u64..4_000, 1u64..10).prop_map(|(limit, period_ms, burst)| {
        Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst)
    })
}

fn window() -> impl Strategy<Value = Quota> {
    (1u64..8, 1u64..4_000)
        .prop_map(|(limit, period_ms)| Quota::new(limit, Duration::from_millis(period_ms)))
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn gcra(q in quota(), ops in ops()) {
        against_a_twin(|c| RateLimiter::gcra(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn gcra_shaping(q in quota(), delay_ms in 1u64..3_000, ops in ops()) {
        let d = Duration::from_millis(delay_ms);
        against_a_twin(|c| RateLimiter::gcra(q.clone()).max_delay(d).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn token_bucket(q in quota(), ops in ops()) {
        against_a_twin(|c| RateLimiter::token_bucket(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn token_bucket_shaping(q in quota(), delay_ms in 1u64..3_000, ops in ops()) {
        let d = Duration::from_millis(delay_ms);
        against_a_twin(|c| RateLimiter::token_bucket(q.clone()).max_delay(d).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn leaky_bucket(q in quota(), ops in ops()) {
        against_a_twin(|c| RateLimiter::leaky_bucket(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn fixed_window(q in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::fixed_window(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn sliding_window(q in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::sliding_window(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn sliding_window_with_sub_windows(q in window(), k in 1usize..8, ops in ops()) {
        against_a_twin(|c| RateLimiter::sliding_window(q.clone()).sub_windows(k).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn sliding_log(q in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::sliding_log(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn hybrid(q in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::hybrid(q.clone()).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn tiers_of_gcra(a in quota(), b in quota(), ops in ops()) {
        against_a_twin(|c| RateLimiter::gcra([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn tiers_of_sliding_windows(a in window(), b in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::sliding_window([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn tiers_of_sliding_logs(a in window(), b in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::sliding_log([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn tiers_of_fixed_windows_and_hybrids(a in window(), b in window(), ops in ops()) {
        against_a_twin(|c| RateLimiter::fixed_window([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
        against_a_twin(|c| RateLimiter::hybrid([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn tiers_of_buckets(a in quota(), b in quota(), ops in ops()) {
        against_a_twin(|c| RateLimiter::token_bucket([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
        against_a_twin(|c| RateLimiter::leaky_bucket([a.clone(), b.clone()]).with_clock(c.clone()), &ops)?;
    }
}

#[test]
fn a_block_reports_what_is_left_of_it_and_leaves_the_state_as_it_was() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(2)).with_clock(clock.clone());
    assert!(limiter.check_now("k").allowed);
    block_on(limiter.block("k", Duration::from_secs(10))).unwrap();
    // A shorter block never shortens a longer one; a longer one extends it.
    block_on(limiter.block("k", Duration::from_secs(1))).unwrap();
    clock.advance(Duration::from_secs(4));
    let denied = limiter.check_now("k");
    assert!(denied.is_blocked());
    assert_eq!(denied.retry_after, Some(Duration::from_secs(6)));
    assert_eq!(denied.reset_after, Duration::from_secs(6));
    block_on(limiter.block("k", Duration::from_secs(8))).unwrap();
    clock.advance(Duration::from_secs(6));
    assert_eq!(
        limiter.check_now("k").retry_after,
        Some(Duration::from_secs(2))
    );
    clock.advance(Duration::from_secs(2));
    let back = limiter.check_now("k");
    assert!(back.allowed && !back.is_blocked());
    assert_eq!(back.remaining, 1, "the usage came back with time, as usual");
}

#[test]
fn zero_and_endless_blocks() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::sliding_log(Quota::per_second(1)).with_clock(clock.clone());
    block_on(limiter.block("z", Duration::ZERO)).unwrap();
    assert!(
        limiter.check_now("z").allowed,
        "a zero block blocks nothing"
    );
    clock.advance(Duration::from_secs(5));
    block_on(limiter.block("forever", Duration::MAX)).unwrap();
    clock.advance(Duration::from_secs(100 * 365 * 24 * 3600));
    let denied = limiter.check_now("forever");
    assert!(denied.is_blocked());
    let left = u64::MAX - clock.now_nanos();
    assert_eq!(denied.retry_after, Some(Duration::from_nanos(left)));
    // A zero block keeps a block that is there.
    block_on(limiter.block("forever", Duration::ZERO)).unwrap();
    assert!(limiter.check_now("forever").is_blocked());
    block_on(limiter.reset("forever")).unwrap();
    assert!(limiter.check_now("forever").allowed);
}

#[test]
fn a_peek_takes_nothing_remembers_no_key_and_shows_a_block() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::sliding_window(Quota::per_minute(3)).with_clock(clock.clone());
    for _ in 0..5 {
        let standing = block_on(limiter.peek("ghost")).unwrap();
        assert!(standing.allowed);
        assert_eq!(standing.remaining, 3);
    }
    assert_eq!(
        limiter.table().len(),
        0,
        "a peek at an unknown key keeps nothing"
    );
    block_on(limiter.block("ghost", Duration::from_secs(3))).unwrap();
    let standing = block_on(limiter.peek("ghost")).unwrap();
    assert!(standing.is_blocked() && !standing.allowed);
    assert_eq!(standing.retry_after, Some(Duration::from_secs(3)));
    assert_eq!(limiter.table().len(), 0, "a block is not a key's state");
    assert_eq!(limiter.table().blocked_keys(), 1);
}

#[test]
fn blocks_of_a_named_policy_are_shared_and_survive_a_new_quota() {
    let clock = ManualClock::new();
    let store = MemoryStore::new();
    let a = RateLimiter::gcra(Quota::per_second(5).named("api"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let b = RateLimiter::fixed_window(Quota::per_minute(100).named("api"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let other = RateLimiter::gcra(Quota::per_second(5).named("other"))
        .with_clock(clock.clone())
        .with_store(store);
    block_on(a.block("k", Duration::from_secs(60))).unwrap();
    assert!(b.check_now("k").is_blocked());
    assert!(other.check_now("k").allowed);
    block_on(b.reset("k")).unwrap();
    assert!(a.check_now("k").allowed);
}

#[test]
fn many_blocked_keys_never_outgrow_the_bound() {
    let clock = ManualClock::new();
    let max = 2_000;
    let limiter = RateLimiter::gcra(Quota::per_second(1))
        .with_clock(clock.clone())
        .with_store(MemoryStore::new().with_max_keys(max));
    for n in 0..20 * max as u64 {
        let key = Key::from(format!("attacker-{n}").as_str());
        block_on(limiter.block(
            key.clone(),
            Duration::from_secs(60) + Duration::from_nanos(n),
        ))
        .unwrap();
        assert!(limiter.table().blocked_keys() <= max);
        assert!(
            limiter.check_now(key).is_blocked(),
            "the newest block holds"
        );
    }
    // Past their end, blocks leave the hot path: a check costs one load again (tested by the
    // benches), and new blocks replace the ended ones.
    clock.advance(Duration::from_secs(61));
    assert!(limiter.check_now("attacker-0").allowed);
}
