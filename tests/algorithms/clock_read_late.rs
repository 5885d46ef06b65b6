//! The memory store reads the clock once it has found the key (`check_now`, `check_n`), not
//! before the lookup. These properties hold it to the decisions made at a time read first
//! (`Store::check` at that time, as the layer calls it), on a clock that moves at every
//! reading: each check reads the clock exactly once and decides and updates the state at that
//! reading, and both stores hold the same keys and blocks after it. Every algorithm (calendar
//! windows read the wall clock), shaping, sub-windows, tiers; IPv4, IPv6, integer, string,
//! long and tuple keys; costs and peeks; blocks on keys held and never seen; resets; a clock
//! that jumps back (as readings on different cores may). Two stores, one clock, the same
//! steps. (Quotas carried over by `Handle::set_quotas` are reached only through the
//! layer, which reads the time first; eviction is left out, as two maps may break a tie
//! between equally cheap keys differently.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::Clock;
use tollgate::store::{MemoryAlgorithm, MemoryStore, Store};
use tollgate::{Key, Quota, RateLimiter};

use crate::support::drive;
use drive::ready_now as ready;

type Limiter<A> = RateLimiter<A, MemoryStore, Ticking>;

/// A clock that moves `step` nanoseconds at every reading (monotonic and wall alike), and
/// counts its readings and keeps the last.
#[derive(Clone, Default)]
struct Ticking(Arc<[AtomicU64; 4]>);

const NOW: usize = 0;
const STEP: usize = 1;
const READS: usize = 2;
const LAST: usize = 3;
/// The wall clock's distance from the monotonic one.
const WALL: u64 = 1_700_000_000_000_000_000;

impl Ticking {
    fn read(&self) -> u64 {
        let step = self.0[STEP].load(Ordering::SeqCst);
        let at = self.0[NOW].fetch_add(step, Ordering::SeqCst) + step;
        self.0[READS].fetch_add(1, Ordering::SeqCst);
        at
    }

    fn advance(&self, ns: u64) {
        self.0[NOW].fetch_add(ns, Ordering::SeqCst);
    }

    fn back(&self, ns: u64) {
        self.0[NOW].fetch_sub(ns, Ordering::SeqCst);
    }

    /// Runs `f` on a clock that stands still.
    fn still<R>(&self, f: impl FnOnce() -> R) -> R {
        let step = self.0[STEP].swap(0, Ordering::SeqCst);
        let out = f();
        self.0[STEP].store(step, Ordering::SeqCst);
        out
    }
}

impl Clock for Ticking {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }

    fn now_nanos(&self) -> u64 {
        let at = self.read();
        self.0[LAST].store(at, Ordering::SeqCst);
        at
    }

    fn wall_nanos(&self) -> u64 {
        let at = self.read() + WALL;
        self.0[LAST].store(at, Ordering::SeqCst);
        at
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    /// The clock jumps back.
    Back(u64),
    Check(usize, u64),
    Block(usize, u64),
    Reset(usize),
    /// How far the clock moves at each reading from now on.
    Step(u64),
}

/// Every kind of key the map keeps apart: an IPv4 and an IPv6 address, an integer, a short
/// string, a key stored by its digest, and a tuple (as `.and`/`.or` keys build) of an IPv6
/// address and a long string.
fn key(i: usize) -> Key {
    let v6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 0, 0, 0, 1);
    match i {
        0 => Key::from(std::net::Ipv4Addr::new(192, 0, 2, 7)),
        1 => Key::from("client-1"),
        2 => Key::from("k".repeat(600)),
        3 => Key::from(v6),
        4 => Key::from(42u64),
        _ => Key::from((v6, "t".repeat(300))),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..2_000).prop_map(|ms| Op::Advance(ms * 1_000_000 + 3)),
        1 => (0u64..50_000_000).prop_map(Op::Back),
        8 => (0usize..6, prop_oneof![4 => Just(1u64), 1 => 0u64..5])
            .prop_map(|(k, cost)| Op::Check(k, cost)),
        1 => (0usize..6, 1u64..3_000).prop_map(|(k, ms)| Op::Block(k, ms * 1_000_000)),
        1 => (0usize..6).prop_map(Op::Reset),
        1 => (1u64..50_000_000).prop_map(Op::Step),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..120)
}

/// Runs `ops` on two limiters `make` builds on one clock: `late` decides through `check_now`
/// and `check_n` (the clock read after the lookup), `first` through `Store::check` at the
/// reading `late`'s check took. Every decision must be the same, tiers, blocks and receipts
/// included, each check must read the clock once, and both tables must hold as many keys and
/// blocks.
fn same_decisions<A>(make: impl Fn(&Ticking) -> Limiter<A>, ops: &[Op]) -> Result<(), TestCaseError>
where
    A: MemoryAlgorithm,
{
    let clock = Ticking::default();
    clock.advance(5_000_000_000_000);
    clock.0[STEP].store(1_000, Ordering::SeqCst);
    let late = make(&clock);
    let first = make(&clock);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance(ns) => clock.advance(ns),
            Op::Back(ns) => clock.back(ns),
            Op::Step(ns) => clock.0[STEP].store(ns, Ordering::SeqCst),
            Op::Check(k, cost) => {
                let reads = clock.0[READS].load(Ordering::SeqCst);
                let got = if i % 2 == 0 {
                    late.check_n_now(key(k), cost)
                } else {
                    ready(late.check_n(key(k), cost)).unwrap()
                };
                let read = clock.0[READS].load(Ordering::SeqCst) - reads;
                prop_assert_eq!(read, 1, "step {}: the clock read {} times", i, read);
                let at = clock.0[LAST].load(Ordering::SeqCst);
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
                prop_assert_eq!(late.table().len(), first.table().len(), "step {}", i);
                prop_assert_eq!(
                    late.table().blocked_keys(),
                    first.table().blocked_keys(),
                    "step {}",
                    i
                );
            }
            Op::Block(k, ns) => clock.still(|| {
                ready(late.block(key(k), Duration::from_nanos(ns))).unwrap();
                ready(first.block(key(k), Duration::from_nanos(ns))).unwrap();
            }),
            Op::Reset(k) => clock.still(|| {
                ready(late.reset(key(k))).unwrap();
                ready(first.reset(key(k))).unwrap();
            }),
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
    fn token_bucket_shaping(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, d in 1u64..2_000, ops in ops()) {
        let d = Duration::from_millis(d);
        same_decisions(
            |c| RateLimiter::token_bucket(quota(l, p, b)).max_delay(d).with_clock(c.clone()),
            &ops,
        )?;
    }

    #[test]
    fn hybrid(l in 1u64..8, p in 1u64..3_000, b in 1u64..8, ops in ops()) {
        same_decisions(|c| RateLimiter::hybrid(quota(l, p, b)).with_clock(c.clone()), &ops)?;
    }

    #[test]
    fn calendar_and_sub_windows(l in 1u64..8, p in 1u64..3_000, k in 2usize..6, ops in ops()) {
        same_decisions(
            |c| RateLimiter::fixed_window(quota(l, p, l)).aligned().with_clock(c.clone()),
            &ops,
        )?;
        same_decisions(
            |c| RateLimiter::sliding_window(quota(l, p, l)).sub_windows(k).with_clock(c.clone()),
            &ops,
        )?;
        same_decisions(
            |c| RateLimiter::sliding_window([quota(l, p, l), quota(l * 3, p * 7, l * 3)])
                .with_clock(c.clone()),
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
