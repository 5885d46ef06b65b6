//! The memory store reads the clock once it has found the key (`check_now`, `check_n`), not
//! before the lookup. These properties hold its decisions to those made at a time read first
//! (`Store::check` at `clock.now_nanos()`, as the layer calls it): for every algorithm and
//! tiers, IPv4, string and long keys, costs, blocks (on keys held and never seen) and resets.
//! Two stores, one clock, the same steps. (Quotas carried over by `Handle::set_quotas` are
//! reached only through the layer, which reads the time first.)

use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::{MemoryAlgorithm, MemoryStore, Store};
use tollgate::{Key, Quota, RateLimiter};

type Limiter<A> = RateLimiter<A, MemoryStore, ManualClock>;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check(usize, u64),
    Block(usize, u64),
    Reset(usize),
}

/// An IPv4 address, a short string and a key stored by its digest.
fn key(i: usize) -> Key {
    match i {
        0 => Key::from(std::net::Ipv4Addr::new(192, 0, 2, 7)),
        1 => Key::from("client-1"),
        _ => Key::from("k".repeat(600)),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..2_000).prop_map(|ms| Op::Advance(ms * 1_000_000 + 3)),
        8 => (0usize..3, prop_oneof![4 => Just(1u64), 1 => 0u64..5])
            .prop_map(|(k, cost)| Op::Check(k, cost)),
        1 => (0usize..3, 1u64..3_000).prop_map(|(k, ms)| Op::Block(k, ms * 1_000_000)),
        1 => (0usize..3).prop_map(Op::Reset),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..120)
}

fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the memory store answers at once"),
    }
}

/// Runs `ops` on two limiters `make` builds on one clock: `late` decides through `check_now`
/// and `check_n` (the clock read after the lookup), `first` through `Store::check` at the
/// time read before it. Every decision must be the same, tiers and blocks included.
fn same_decisions<A>(
    make: impl Fn(&ManualClock) -> Limiter<A>,
    ops: &[Op],
) -> Result<(), TestCaseError>
where
    A: MemoryAlgorithm,
{
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(5_000));
    let late = make(&clock);
    let first = make(&clock);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
            Op::Check(k, cost) => {
                let got = if i % 2 == 0 {
                    late.check_n_now(key(k), cost)
                } else {
                    ready(late.check_n(key(k), cost)).unwrap()
                };
                let at = clock.now_nanos();
                let expected = ready(<MemoryStore as Store<A>>::check(
                    first.table(),
                    key(k),
                    at,
                    cost,
                ))
                .unwrap();
                prop_assert_eq!(&got, &expected, "step {} {:?}", i, op);
                prop_assert_eq!(got.tiers(), expected.tiers());
                prop_assert_eq!(got.is_blocked(), expected.is_blocked(), "step {}", i);
                prop_assert_eq!(got.receipt(), expected.receipt(), "step {}", i);
            }
            Op::Block(k, ns) => {
                ready(late.block(key(k), Duration::from_nanos(ns))).unwrap();
                ready(first.block(key(k), Duration::from_nanos(ns))).unwrap();
            }
            Op::Reset(k) => {
                ready(late.reset(key(k))).unwrap();
                ready(first.reset(key(k))).unwrap();
            }
        }
    }
    Ok(())
}

fn quota(limit: u64, period_ms: u64, burst: u64) -> Quota {
    Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn gcra(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, ops in ops()) {
        same_decisions(|c| RateLimiter::gcra(quota(l, p, b)).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn gcra_shaping(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, d in 1u64..2_000, ops in ops()) {
        let d = Duration::from_millis(d);
        same_decisions(
            |c| RateLimiter::gcra(quota(l, p, b)).max_delay(d).with_clock(c.clone()),
            &ops,
        )?;
    }

    #[test]
    fn token_bucket(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, ops in ops()) {
        same_decisions(
            |c| RateLimiter::token_bucket(quota(l, p, b)).with_clock(c.clone()),
            &ops,
        )?;
    }

    #[test]
    fn leaky_bucket(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, ops in ops()) {
        same_decisions(
            |c| RateLimiter::leaky_bucket(quota(l, p, b)).with_clock(c.clone()),
            &ops,
        )?;
    }

    #[test]
    fn windows(l in 1u64..8, p in 1u64..3_000, ops in ops()) {
        same_decisions(
            |c| RateLimiter::fixed_window(quota(l, p, 1).with_burst(l)).with_clock(c.clone()),
            &ops,
        )?;
        same_decisions(
            |c| RateLimiter::sliding_window(quota(l, p, 1).with_burst(l)).with_clock(c.clone()),
            &ops,
        )?;
        same_decisions(
            |c| RateLimiter::sliding_log(quota(l, p, 1).with_burst(l)).with_clock(c.clone()),
            &ops,
        )?;
    }

    #[test]
    fn gcra_tiers(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, ops in ops()) {
        same_decisions(
            |c| {
                RateLimiter::gcra([quota(l, p, b), quota(l * 4, p * 10, b * 4)])
                    .with_clock(c.clone())
            },
            &ops,
        )?;
    }
}
