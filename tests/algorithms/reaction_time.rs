//! Seed 000's reaction-time analysis, measured on the pure algorithms.
//!
//! A client sending at `a` times its permitted rate `q` per window `w` (the abuse factor), from a
//! fresh key. A linear limiter (GCRA with `burst = q`, the token bucket) refills while the client
//! drains it, so it lets through about `q·a/(a−1)` requests before the first denial: twice the
//! quota at `a = 2`. The hybrid quota-linear algorithm lets through exactly `q` in the first
//! window, then about `q` per window.
//!
//! The seed's `q·a/(a−1)` comes from a fluid model that counts until the bucket is empty. Counted
//! in whole requests, request `k` (sent at `k·w/(a·q)`, `k = 0, 1, ...`) finds
//! `q − k + k/a` tokens and passes while that is at least 1, so exactly
//! `N = ⌊(q−1)·a/(a−1)⌋ + 1` pass: between `1/(a−1)` and `a/(a−1)` below the fluid figure
//! (199 for 200 at `a = 2`, 133 for 133.3 at `a = 4`, 298 for 300 at `a = 1.5`).

use std::time::Duration;

use tollgate::algorithm::{FixedWindow, Gcra, Hybrid, SlidingLog, TokenBucket};
use tollgate::store::MemoryAlgorithm;
use tollgate::Quota;

/// The quota per window.
const Q: u64 = 100;
/// The window: 60 s, so that every interval below is a whole number of nanoseconds.
const W: u64 = 60_000_000_000;

/// Abuse factors `a = num / den`.
const ABUSE: [(u64, u64); 3] = [(3, 2), (2, 1), (4, 1)];

fn quota() -> Quota {
    Quota::new(Q, Duration::from_nanos(W))
}

/// Nanoseconds between the client's requests at `a = num / den` times the rate: `w / (a·q)`.
fn gap((num, den): (u64, u64)) -> u64 {
    assert_eq!(W * den % (num * Q), 0);
    W * den / (num * Q)
}

/// The client's requests, one every `gap` ns from 0, each of cost 1: which pass.
fn run<A: MemoryAlgorithm>(alg: &A, gap: u64, requests: u64) -> Vec<(u64, bool)> {
    let mut state = A::State::default();
    (0..requests)
        .map(|k| (k * gap, alg.check_mut(&mut state, k * gap, 1).allowed))
        .collect()
}

/// Requests that pass before the first denial.
fn before_first_denial(log: &[(u64, bool)]) -> u64 {
    let n = log.iter().take_while(|&&(_, allowed)| allowed).count();
    assert!(n < log.len(), "never denied");
    n as u64
}

/// Requests admitted in the window `[from, from + W)`.
fn admitted_in(log: &[(u64, bool)], from: u64) -> u64 {
    log.iter()
        .filter(|&&(at, allowed)| allowed && (from..from + W).contains(&at))
        .count() as u64
}

#[test]
fn linear_limiters_admit_about_q_a_over_a_minus_1() {
    let quota = quota();
    for a in ABUSE {
        let (num, den) = a;
        // N = ⌊(q−1)·a/(a−1)⌋ + 1, with a/(a−1) = num/(num−den).
        let exact = (Q - 1) * num / (num - den) + 1;
        // The fluid figure q·a/(a−1) less N lies in [1/(a−1), a/(a−1)): in units of
        // 1/(num−den), q·num − N·(num−den) lies in [den, num).
        let short = Q * num - exact * (num - den);
        assert!((den..num).contains(&short), "a = {num}/{den}");

        let requests = 3 * Q * num / den;
        let gcra = run(&Gcra::new(&quota), gap(a), requests);
        let bucket = run(&TokenBucket::new(&quota), gap(a), requests);
        let n = before_first_denial(&gcra);
        eprintln!(
            "a = {num}/{den}: GCRA admits {n} before the first denial (q·a/(a−1) = {:.2}), \
             {} in the first window",
            (Q * num) as f64 / (num - den) as f64,
            admitted_in(&gcra, 0),
        );
        assert_eq!(n, exact, "a = {num}/{den}");
        assert_eq!(
            bucket, gcra,
            "a = {num}/{den}: the token bucket decides as GCRA"
        );
        // The point of the analysis: more than a quota in the first window.
        assert!(admitted_in(&gcra, 0) > Q, "a = {num}/{den}");
    }
}

#[test]
fn hybrid_admits_exactly_q_in_the_first_window() {
    let hybrid = Hybrid::new(&quota());
    for a in ABUSE {
        let (num, den) = a;
        let requests = 10 * Q * num / den; // ten windows' worth
        let log = run(&hybrid, gap(a), requests);
        let n = before_first_denial(&log);
        let per_window: Vec<u64> = (0..10).map(|k| admitted_in(&log, k * W)).collect();
        eprintln!(
            "a = {num}/{den}: Hybrid admits {n} before the first denial; per window {per_window:?}"
        );
        assert_eq!(n, Q, "a = {num}/{den}");
        assert_eq!(per_window[0], Q, "a = {num}/{den}");
        // Then smooth mode: one token at each window's end and one every T = w/q after it, so
        // this steady client gets exactly a quota in every later window too.
        assert_eq!(per_window, [Q; 10], "a = {num}/{den}");
    }
}

/// The window algorithms hold the quota per window however hard the client pushes: exactly `q`
/// before the first denial and in the first window. The fixed window gives a whole quota again
/// at the start of each of its windows (which start at the client's first request, so they line
/// up with `k·w` here); the sliding log never admits more than `q` in any window of length `w`.
#[test]
fn window_limiters_admit_exactly_q_in_the_first_window() {
    let quota = quota();
    for a in ABUSE {
        let (num, den) = a;
        let requests = 5 * Q * num / den; // five windows' worth
        let fixed = run(&FixedWindow::new(&quota), gap(a), requests);
        let log = run(&SlidingLog::new(&quota), gap(a), requests);
        for (name, log) in [("fixed window", &fixed), ("sliding log", &log)] {
            assert_eq!(before_first_denial(log), Q, "{name}, a = {num}/{den}");
            assert_eq!(admitted_in(log, 0), Q, "{name}, a = {num}/{den}");
        }
        let per_window: Vec<u64> = (0..5).map(|k| admitted_in(&fixed, k * W)).collect();
        assert_eq!(per_window, [Q; 5], "fixed window, a = {num}/{den}");
        // Every window of length `w` that starts at an admission holds at most `q` of them.
        let admitted: Vec<u64> = log.iter().filter(|e| e.1).map(|e| e.0).collect();
        for &from in &admitted {
            assert!(admitted_in(&log, from) <= Q, "sliding log from {from}");
        }
        // And it is not starved either: after the first window, a quota in each.
        assert_eq!(admitted.len() as u64, 5 * Q, "sliding log, a = {num}/{den}");
    }
}
