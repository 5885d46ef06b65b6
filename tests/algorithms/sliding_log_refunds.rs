//! `count_if` refunds on the sliding log: whatever requests are refunded, by how much, in what
//! order and how late, the requests that count never exceed the limit in any window of the
//! period.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{Algorithm, SlidingLog, SlidingLogState};
use tollgate::{Decision, Quota};

/// An arrival `gap` ns after the previous one, of `cost`; refunded (when admitted) by
/// `back % cost + 1` once `delay` ns have passed, unless `delay` is `None`.
#[derive(Debug, Clone)]
struct Arrival {
    gap: u64,
    cost: u64,
    delay: Option<u64>,
    back: u64,
}

fn arrivals(limit: u64, period: u64) -> impl Strategy<Value = Vec<Arrival>> {
    let gap = prop_oneof![Just(0u64), 0..period / 4 + 1, 0..2 * period];
    let delay = prop::option::weighted(0.6, prop_oneof![0..period / 2 + 1, 0..3 * period]);
    let arrival =
        (gap, 0..=limit + 1, delay, any::<u64>()).prop_map(|(gap, cost, delay, back)| Arrival {
            gap,
            cost,
            delay,
            back,
        });
    prop::collection::vec(arrival, 0..120)
}

/// An event in time order: an arrival (its index), or the refund of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    Refund(usize),
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn counted_requests_never_exceed_the_limit_in_any_window(
        (limit, period, arrivals) in (1u64..10, 1u64..1_000)
            .prop_flat_map(|(l, p)| (Just(l), Just(p), arrivals(l, p)))
    ) {
        let algo = SlidingLog::new(&Quota::new(limit, Duration::from_nanos(period)));
        // Every arrival and every refund at its time; refunds come in the order of their
        // times, not of their arrivals, and ties go arrivals first, then by index.
        let mut events: Vec<(u64, Event)> = Vec::new();
        let mut now = 0u64;
        for (i, a) in arrivals.iter().enumerate() {
            now += a.gap;
            events.push((now, Event::Arrive(i)));
            if let Some(delay) = a.delay {
                events.push((now + delay, Event::Refund(i)));
            }
        }
        events.sort();
        let mut state = SlidingLogState::default();
        let mut admitted: Vec<Option<Decision>> = vec![None; arrivals.len()];
        // (time logged, cost that still counts) of each admitted request.
        let mut counted: Vec<(u64, u64)> = vec![(0, 0); arrivals.len()];
        for (now, event) in events {
            match event {
                Event::Arrive(i) => {
                    let d = algo.check_mut(&mut state, now, arrivals[i].cost);
                    if d.allowed && arrivals[i].cost > 0 {
                        counted[i] = (d.receipt(), arrivals[i].cost);
                        admitted[i] = Some(d);
                    }
                }
                Event::Refund(i) => {
                    let Some(d) = &admitted[i] else { continue };
                    let cost = arrivals[i].cost;
                    let back = arrivals[i].back % cost + 1;
                    let before = algo.check(&state, now, 0).decision.remaining;
                    if let Some(next) = algo.refund(&state, d, now, back) {
                        let after = algo.check(&next, now, 0).decision.remaining;
                        // It gives back exactly what it takes: the count drops by as much.
                        prop_assert_eq!(after, (before + back).min(limit));
                        state = next;
                        counted[i].1 -= back;
                    } else {
                        // Only an admission whose entry has left the window is refused.
                        prop_assert!(now - d.receipt() >= period, "refused at {}", now);
                    }
                }
            }
        }
        // Every window (s - period, s] ending at a logged time.
        for &(s, _) in &counted {
            let sum: u64 = counted
                .iter()
                .filter(|&&(t, c)| c > 0 && t <= s && s - t < period)
                .map(|&(_, c)| c)
                .sum();
            prop_assert!(sum <= limit, "window ending at {} counts {}", s, sum);
        }
    }
}
