//! Every algorithm in the memory store under random sequences of everything a layer asks of
//! it, at the edges: keys of every shape (IPv6, IPv4-mapped IPv6, IPv4, tuples, long keys and
//! long tuples, integers), costs of 0, above the burst and near `u64::MAX`, refunds and
//! settlements of any earlier admission in any order, peeks, resets, blocks up to `u64::MAX`
//! ns, and a clock that jumps forward, back, and to the end of its range. Nothing panics, and
//! every answer is coherent: `remaining` within the limit (each tier's too), no wait on an
//! admission, no delay on a denial.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use futures_util::FutureExt;
use proptest::prelude::*;
use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
use tollgate::{Decision, Key, Quota, RateLimiter};

/// What is asked of the limiter: a check of a key at a cost; a refund or a settlement at a
/// cost of one of the admissions so far (by index, modulo their number); a peek, a reset or
/// a block (of ns) of a key; the clock moved forward or set (ns).
#[derive(Debug, Clone)]
enum Op {
    Check(u8, u8),
    Refund(usize, u8),
    Settle(usize, u8),
    Peek(u8),
    Reset(u8),
    Block(u8, u64),
    Forward(u64),
    Set(u64),
}

/// One of a few keys, one of each shape.
fn key(i: u8) -> Key {
    match i % 7 {
        0 => Key::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        1 => Key::from(Ipv4Addr::new(1, 2, 3, 4).to_ipv6_mapped()),
        2 => Key::from(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4))),
        3 => Key::from(("a", 7u64)),
        4 => Key::from("x".repeat(300)),
        5 => Key::from((Ipv6Addr::LOCALHOST, "x".repeat(300))),
        _ => Key::from(u64::MAX),
    }
}

/// A cost: 0, small, above the burst, or near `u64::MAX`.
fn cost(c: u8) -> u64 {
    match c % 6 {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 7,
        4 => u64::MAX,
        _ => u64::MAX - 1,
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>()).prop_map(|(k, c)| Op::Check(k, c)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, c)| Op::Refund(i, c)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, c)| Op::Settle(i, c)),
        1 => any::<u8>().prop_map(Op::Peek),
        1 => any::<u8>().prop_map(Op::Reset),
        1 => (any::<u8>(), prop_oneof![Just(u64::MAX), 0u64..5_000_000_000]).prop_map(|(k, d)| Op::Block(k, d)),
        3 => prop_oneof![0u64..3_000_000_000, Just(u64::MAX / 2), Just(u64::MAX)].prop_map(Op::Forward),
        1 => prop_oneof![0u64..10_000_000_000, Just(u64::MAX), Just(u64::MAX - 1), (u64::MAX - 10_000_000_000)..u64::MAX].prop_map(Op::Set),
    ]
}

/// Runs `ops` on `limiter` on a manual clock, checking every answer.
fn run<A: Algorithm>(limiter: RateLimiter<A, MemoryStore>, ops: &[Op])
where
    MemoryStore: tollgate::store::Store<A>,
{
    let clock = ManualClock::new();
    let limiter = limiter.with_clock(clock.clone());
    let mut admitted: Vec<(Key, Decision, u64)> = Vec::new();
    for op in ops {
        match *op {
            Op::Check(k, c) => {
                let d = limiter
                    .check_n(key(k), cost(c))
                    .now_or_never()
                    .unwrap()
                    .unwrap();
                sane(&d);
                if d.allowed {
                    admitted.push((key(k), d, cost(c)));
                }
            }
            Op::Refund(i, c) if !admitted.is_empty() => {
                let (k, d, reserved) = admitted[i % admitted.len()].clone();
                let back = cost(c).min(reserved);
                sane(&limiter.refund(k, &d, back).now_or_never().unwrap().unwrap());
            }
            Op::Settle(i, c) if !admitted.is_empty() => {
                let (k, d, reserved) = admitted[i % admitted.len()].clone();
                sane(
                    &limiter
                        .settle(k, &d, reserved, cost(c))
                        .now_or_never()
                        .unwrap()
                        .unwrap(),
                );
            }
            Op::Peek(k) => {
                sane(&limiter.peek(key(k)).now_or_never().unwrap().unwrap());
            }
            Op::Reset(k) => {
                let reset = limiter.reset(key(k)).now_or_never();
                assert!(matches!(reset, Some(Ok(()))), "{reset:?}");
            }
            Op::Block(k, d) => {
                let block = limiter
                    .block(key(k), Duration::from_nanos(d))
                    .now_or_never();
                assert!(matches!(block, Some(Ok(()))), "{block:?}");
            }
            Op::Forward(by) => clock.advance(Duration::from_nanos(by)),
            Op::Set(to) => clock.set(Duration::from_nanos(to)),
            _ => {}
        }
    }
}

/// A decision's figures agree with one another.
fn sane(d: &Decision) {
    assert!(d.remaining <= d.limit, "{d:?}");
    assert!(!d.allowed || d.retry_after.is_none(), "{d:?}");
    assert!(d.allowed || d.delay.is_zero(), "{d:?}");
    for t in d.tiers() {
        assert!(t.remaining <= t.limit, "{d:?}");
    }
}

fn q() -> Quota {
    Quota::new(5, Duration::from_secs(2)).with_burst(3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_at_the_edges_answers_coherently(ops in prop::collection::vec(op(), 1..60), alg in 0u8..12) {
        let tiers = vec![Quota::new(3, Duration::from_secs(1)), Quota::new(7, Duration::from_secs(10))];
        match alg {
            0 => run(RateLimiter::gcra(q()), &ops),
            1 => run(RateLimiter::gcra(q()).max_delay(Duration::from_secs(3)), &ops),
            2 => run(RateLimiter::token_bucket(q()), &ops),
            3 => run(RateLimiter::leaky_bucket(q()), &ops),
            4 => run(RateLimiter::fixed_window(q()), &ops),
            5 => run(RateLimiter::fixed_window(q()).aligned(), &ops),
            6 => run(RateLimiter::sliding_window(q()).sub_windows(4), &ops),
            7 => run(RateLimiter::sliding_log(q()), &ops),
            8 => run(RateLimiter::hybrid(q()), &ops),
            9 => run(RateLimiter::gcra(tiers), &ops),
            10 => run(RateLimiter::token_bucket(tiers), &ops),
            _ => run(RateLimiter::sliding_window(tiers), &ops),
        }
    }
}
