use super::*;

const S: u64 = 1_000_000_000;

fn log(entries: &[(u64, u64)]) -> SlidingLogState {
    SlidingLogState {
        entries: entries.iter().map(|&(t, c)| (t * S, c)).collect(),
    }
}

#[test]
fn hand_checked_table() {
    // 3 per 10 s.
    let algo = SlidingLog::new(&Quota::new(3, Duration::from_secs(10)));
    // (log (s, cost), now s, cost) -> (allowed, remaining, reset_after s, retry_after s, next)
    type Case<'a> = (
        (&'a [(u64, u64)], u64, u64),
        (bool, u64, u64, Option<u64>, Option<&'a [(u64, u64)]>),
    );
    let cases: [Case<'_>; 13] = [
        // fresh key
        ((&[], 100, 1), (true, 2, 10, None, Some(&[(100, 1)]))),
        ((&[], 100, 3), (true, 0, 10, None, Some(&[(100, 3)]))),
        // above the limit: never
        ((&[], 100, 4), (false, 3, 0, None, None)),
        // peeks
        ((&[], 100, 0), (true, 3, 0, None, None)),
        ((&[(100, 1), (104, 1)], 105, 0), (true, 1, 9, None, None)),
        // the same instant shares an entry
        (
            (&[(100, 1), (104, 1)], 104, 1),
            (true, 0, 10, None, Some(&[(100, 1), (104, 2)])),
        ),
        // full: retry when the oldest entry leaves, at 110 s
        (
            (&[(100, 1), (104, 2)], 105, 1),
            (false, 0, 9, Some(5), None),
        ),
        // cost 2 with 0 left needs both entries gone: 104 s + 10 s
        (
            (&[(100, 1), (104, 2)], 105, 2),
            (false, 0, 9, Some(9), None),
        ),
        // cost 2 with 1 left needs the oldest gone, whatever else came in
        (
            (&[(100, 1), (104, 1)], 105, 2),
            (false, 1, 9, Some(5), None),
        ),
        // the window is (now − 10 s, now]: the entry at 100 s is out at 110 s, and dropped
        (
            (&[(100, 1), (104, 2)], 110, 1),
            (true, 0, 10, None, Some(&[(104, 2), (110, 1)])),
        ),
        // ... and in 1 ns earlier
        (
            (&[(100, 1), (104, 2)], 109, 1),
            (false, 0, 5, Some(1), None),
        ),
        // a clock before the newest entry reads as that entry's time
        (
            (&[(100, 1), (104, 1)], 90, 1),
            (true, 0, 24, None, Some(&[(100, 1), (104, 2)])),
        ),
        // everything out of the window: fresh again, the old entries dropped
        (
            (&[(100, 1), (104, 2)], 200, 2),
            (true, 1, 10, None, Some(&[(200, 2)])),
        ),
    ];
    for ((entries, now, cost), (allowed, remaining, reset, retry, next)) in cases {
        let before = log(entries);
        let out = algo.check(&before, now * S, cost);
        let d = out.decision;
        let case = format!("log={entries:?} now={now} cost={cost}");
        assert_eq!(d.allowed, allowed, "{case}");
        assert_eq!(d.limit, 3, "{case}");
        assert_eq!(d.remaining, remaining, "{case}");
        assert_eq!(d.reset_after, Duration::from_secs(reset), "{case}");
        assert_eq!(d.retry_after, retry.map(Duration::from_secs), "{case}");
        assert_eq!(d.delay, Duration::ZERO, "{case}");
        assert_eq!(out.state, next.map(log), "{case}");
        let mut in_place = before.clone();
        assert_eq!(algo.check_mut(&mut in_place, now * S, cost), d, "{case}");
        assert_eq!(in_place, out.state.unwrap_or(before), "{case}");
    }
}

#[test]
fn refunds_take_from_the_newest_entries() {
    let algo = SlidingLog::new(&Quota::new(5, Duration::from_secs(10)));
    let state = log(&[(95, 1), (100, 2), (104, 2)]);
    assert_eq!(
        algo.refund(&state, 105 * S, 1),
        Some(log(&[(100, 2), (104, 1)]))
    );
    assert_eq!(algo.refund(&state, 105 * S, 3), Some(log(&[(100, 1)])));
    assert_eq!(algo.refund(&state, 105 * S, 9), Some(log(&[])));
    assert_eq!(algo.refund(&state, 105 * S, 0), None);
    assert_eq!(algo.refund(&state, 114 * S, 1), None);
    assert_eq!(algo.refund(&log(&[]), 114 * S, 1), None);
}

#[test]
fn freshness_follows_the_newest_entry() {
    let algo = SlidingLog::new(&Quota::new(3, Duration::from_secs(10)));
    assert!(algo.is_fresh(&log(&[]), 0));
    let state = log(&[(100, 1), (104, 1)]);
    assert!(!algo.is_fresh(&state, 50 * S));
    assert!(!algo.is_fresh(&state, 114 * S - 1));
    assert!(algo.is_fresh(&state, 114 * S));
}

#[test]
fn extreme_values_saturate_instead_of_overflowing() {
    let algo = SlidingLog::new(&Quota::new(u64::MAX, Duration::from_nanos(u64::MAX)));
    let out = algo.check(&SlidingLogState::default(), u64::MAX, u64::MAX);
    assert!(out.decision.allowed);
    assert_eq!(out.decision.reset_after, Duration::from_nanos(u64::MAX));
    let full = out.state.unwrap_or_default();
    let out = algo.check(&full, u64::MAX, u64::MAX);
    assert!(!out.decision.allowed);
    assert_eq!(
        out.decision.retry_after,
        Some(Duration::from_nanos(u64::MAX))
    );
    let out = algo.check(&full, 0, 1);
    assert!(!out.decision.allowed);
    assert_eq!(out.decision.remaining, 0);
    let small = SlidingLog::new(&Quota::per_second(1));
    let out = small.check(&full, 0, 1);
    assert_eq!(
        out.decision.retry_after,
        Some(Duration::from_nanos(u64::MAX))
    );
    assert_eq!(small.check(&full, 0, 2).decision.retry_after, None);
}

#[cfg(target_pointer_width = "64")]
#[test]
fn state_size() {
    assert_eq!(std::mem::size_of::<SlidingLogState>(), 32);
}
