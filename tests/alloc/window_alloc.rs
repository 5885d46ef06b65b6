//! The window algorithms' in-place checks (`Algorithm::check_mut`) allocate nothing once a key
//! has its state: a sliding log that has reached its working size, a sliding window that has its
//! counters, a fixed window always.
//!
//! The counting allocator (`support/counting_alloc.rs`) counts per thread, only while a test
//! has switched it on, so the test harness's own threads add no noise.

use crate::support::counting_alloc;

use std::hint::black_box;

use tollgate::algorithm::{Algorithm, FixedWindow, SlidingLog, SlidingWindow};
use tollgate::store::MemoryAlgorithm;
use tollgate::Quota;

use counting_alloc::allocations_in;

/// Requests of cost 1 at a steady pace of `limit / 2` per period after a burst of the whole
/// limit, `rounds` times, starting at `from`: allowed and denied ones both. Returns how many
/// were allowed and the time reached.
fn traffic<A: MemoryAlgorithm>(
    algo: &A,
    state: &mut A::State,
    from: u64,
    rounds: u64,
    gap: u64,
) -> (u64, u64) {
    let mut now = from;
    let mut allowed = 0;
    for i in 0..rounds {
        // Every 50th step a burst that overflows the limit.
        let cost = if i % 50 == 0 { 40 } else { 1 };
        allowed += u64::from(black_box(algo.check_mut(state, now, cost)).allowed);
        now += gap;
    }
    (allowed, now)
}

fn steady_state_allocations<A: MemoryAlgorithm>(algo: &A, gap: u64) -> (u64, u64) {
    let mut state = A::State::default();
    // Warm up: the state reaches its working size.
    let (_, now) = traffic(algo, &mut state, 1_000, 20_000, gap);
    let (n, (allowed, _)) = allocations_in(|| traffic(algo, &mut state, now, 20_000, gap));
    (n, allowed)
}

#[test]
fn in_place_checks_do_not_allocate() {
    // The counter works.
    let (n, boxed) = allocations_in(|| black_box(Box::new(1u64)));
    assert_eq!(n, 1, "the counting allocator does not count");
    drop(boxed);

    // 100 per second; a request every 5 ms is half the limit, the bursts overflow it.
    let quota = Quota::per_second(100);
    let gap = 5_000_000;

    // A fresh key's first admitted request does allocate, for the log and the counters.
    let log = SlidingLog::new(&quota);
    let (n, _) = allocations_in(|| log.check(&Default::default(), 0, 1));
    assert!(n >= 1, "a new log did not allocate: the test cannot tell");

    let (n, allowed) = steady_state_allocations(&log, gap);
    assert!(allowed > 0 && allowed < 20_000, "{allowed} allowed");
    assert_eq!(n, 0, "sliding log check_mut allocated");

    for k in [1, 8, 64] {
        let window = SlidingWindow::new(&quota).sub_windows(k);
        let (n, allowed) = steady_state_allocations(&window, gap);
        assert!(allowed > 0 && allowed < 20_000, "{allowed} allowed");
        assert_eq!(n, 0, "sliding window check_mut allocated (k = {k})");
    }

    let fixed = FixedWindow::new(&quota);
    let (n, allowed) = steady_state_allocations(&fixed, gap);
    assert!(allowed > 0 && allowed < 20_000, "{allowed} allowed");
    assert_eq!(n, 0, "fixed window check_mut allocated");

    // Long gaps: the sliding window's key goes fresh between requests and reuses its counters.
    let window = SlidingWindow::new(&quota).sub_windows(4);
    let (n, _) = steady_state_allocations(&window, 3_000_000_000);
    assert_eq!(n, 0, "a sliding window starting over allocated");
}
