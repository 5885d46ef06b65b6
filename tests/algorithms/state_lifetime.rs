//! `RedisAlgorithm::lifetime`, the bound the Redis store keeps old states readable for after a
//! change of quotas (`Handle::set_quotas`), against the Rust reference of every algorithm: after
//! any sequence of checks (costs, shaping, refunds, clock steps), a key's state is fresh again
//! at most `lifetime` ns after the request that last changed it. A bound too short would let
//! the store stop reading what a key used while it still counts.
#![cfg(feature = "redis")]

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{
    FixedWindow, Gcra, Hybrid, LeakyBucket, SlidingLog, SlidingWindow, Tiered, TokenBucket,
};
use tollgate::store::redis::RedisAlgorithm;
use tollgate::Quota;

const START: u64 = 1_750_000_000_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check(u64),
    /// Refunds the last admission.
    Refund,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..3_000_000_000).prop_map(Op::Advance),
            6 => prop_oneof![4 => Just(1u64), 2 => 0u64..6, 1 => Just(u64::MAX / 2)].prop_map(Op::Check),
            1 => Just(Op::Refund),
        ],
        1..120,
    )
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..20, 1u64..5_000, 0u64..4).prop_map(|(limit, ms, burst)| {
        let quota = Quota::new(limit, Duration::from_millis(ms));
        if burst > 0 {
            quota.with_burst(limit * burst)
        } else {
            quota
        }
    })
}

/// Runs `ops` on `algorithm` and fails when the state is not fresh `lifetime` ns after the
/// last change.
fn holds<A: RedisAlgorithm>(algorithm: &A, ops: &[Op]) -> Result<(), TestCaseError> {
    let lifetime = algorithm.lifetime();
    let (mut now, mut state) = (START, A::State::default());
    let mut last = None;
    for op in ops {
        let changed = match *op {
            Op::Advance(ns) => {
                now += ns;
                None
            }
            Op::Check(cost) => {
                let outcome = algorithm.check(&state, now, cost);
                if outcome.decision.allowed && cost > 0 {
                    last = Some((outcome.decision.clone(), cost));
                }
                outcome.state
            }
            Op::Refund => last
                .take()
                .and_then(|(admission, cost)| algorithm.refund(&state, &admission, now, cost)),
        };
        if let Some(next) = changed {
            state = next;
            let fresh_at = now.saturating_add(lifetime);
            prop_assert!(
                algorithm.is_fresh(&state, fresh_at),
                "{:?}: not fresh {} ns (its lifetime) after a change at {}",
                algorithm,
                lifetime,
                now - START
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn gcra(q in quota(), delay in prop::option::of(0u64..4_000), ops in ops()) {
        let gcra = Gcra::new(&q);
        let gcra = delay.map_or(gcra, |ms| gcra.max_delay(Duration::from_millis(ms)));
        holds(&gcra, &ops)?;
    }

    #[test]
    fn token_bucket(q in quota(), delay in prop::option::of(0u64..4_000), ops in ops()) {
        let bucket = TokenBucket::new(&q);
        let bucket = delay.map_or(bucket, |ms| bucket.max_delay(Duration::from_millis(ms)));
        holds(&bucket, &ops)?;
    }

    #[test]
    fn leaky_bucket(q in quota(), ops in ops()) {
        holds(&LeakyBucket::new(&q), &ops)?;
    }

    #[test]
    fn fixed_window(q in quota(), aligned in any::<bool>(), ops in ops()) {
        let window = FixedWindow::new(&q);
        let window = if aligned && q.period() >= Duration::from_millis(1) { window.aligned() } else { window };
        holds(&window, &ops)?;
    }

    #[test]
    fn sliding_window(q in quota(), k in prop::option::of(1usize..8), ops in ops()) {
        let window = SlidingWindow::new(&q);
        let window = k.map_or(window, |k| window.sub_windows(k));
        holds(&window, &ops)?;
    }

    #[test]
    fn sliding_log(q in quota(), ops in ops()) {
        holds(&SlidingLog::new(&q), &ops)?;
    }

    #[test]
    fn hybrid(q in quota(), ops in ops()) {
        holds(&Hybrid::new(&q), &ops)?;
    }

    #[test]
    fn tiers(a in quota(), b in quota(), ops in ops()) {
        holds(&Tiered::new([Gcra::new(&a), Gcra::new(&b)]), &ops)?;
        holds(&Tiered::new([SlidingWindow::new(&a), SlidingWindow::new(&b)]), &ops)?;
    }
}
