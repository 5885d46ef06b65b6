//! The window algorithms (`FixedWindow`, `SlidingWindow`, `SlidingLog`), compared with
//! brute-force oracles written from their definitions, without the algorithms' bookkeeping:
//!
//! - every oracle keeps the plain list of admitted `(time, cost)`, and recomputes what weighs
//!   against a request from the whole list at each question, with no counters, rings or rebasing;
//! - [`Fixed`]: the newest window opened at the admission that found none open, and lasts
//!   `[start, start + period)`;
//! - [`Log`]: the cost admitted in `(t − period, t]`;
//! - [`Estimate`]: each admission's sub-window `⌊(time − origin) · k / period⌋` on the grid that
//!   begins at the first admission after the key was last fresh; an admission weighs in full
//!   while its sub-window is one of the `k` newest, `(period − e) / period` when it is the one
//!   before them (`e` = how far into the current sub-window, in units of `1/k` ns), and nothing
//!   after. The comparison `estimate + cost ≤ limit` is cross-multiplied by `period` in `u128`.
//!
//! A clock reading earlier than the newest admission (or, for a fixed window, the window's
//! start) reads as that instant, as the algorithms document.
//!
//! `remaining` is the largest cost that passes now; `reset_after` is the first instant the
//! oracle has nothing weighing in (and not 1 ns earlier); `retry_after` is the first instant the
//! same request passes. For the exact oracles both are found by trying every instant at which
//! something leaves the window; for the estimate, by checking that the request passes then and
//! not 1 ns earlier (nor at earlier probes), with the estimate's monotonicity in time checked on
//! its own.

use crate::support::oracle;

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{
    Algorithm, FixedWindow, FixedWindowState, SlidingLog, SlidingLogState, SlidingWindow,
    SlidingWindowState,
};
use tollgate::store::MemoryAlgorithm;
use tollgate::{Decision, Quota};

use oracle::{cases, nanos};

/// What an oracle knows: the admitted history and what weighs against a request at `t`.
trait Oracle: Clone + Debug {
    fn limit(&self) -> u64;
    /// What one request of cost 1 weighs in [`load`](Self::load).
    fn scale(&self) -> u128;
    /// What weighs against a request at `t`.
    fn load(&self, t: u64) -> u128;
    fn admit(&mut self, t: u64, cost: u64);
    /// Every instant at which the load can fall, when the oracle can list them.
    fn drops(&self) -> Option<Vec<u64>>;

    fn passes(&self, t: u64, cost: u64) -> bool {
        let cap = u128::from(self.limit()) * self.scale();
        u128::from(cost)
            .checked_mul(self.scale())
            .and_then(|c| c.checked_add(self.load(t)))
            .is_some_and(|need| need <= cap)
    }

    fn fresh(&self, t: u64) -> bool {
        self.load(t) == 0
    }

    /// The largest cost that passes at `t`.
    fn max_cost(&self, t: u64) -> u64 {
        (0..=self.limit())
            .rev()
            .find(|&n| self.passes(t, n))
            .unwrap_or(0)
    }
}

/// Fixed windows, from the history.
#[derive(Debug, Clone)]
struct Fixed {
    limit: u64,
    period: u64,
    admitted: Vec<(u64, u64)>,
    /// The admission that opened the newest window.
    opened: Option<usize>,
}

impl Fixed {
    fn new(quota: &Quota) -> Self {
        Self {
            limit: quota.limit(),
            period: nanos(quota.period()),
            admitted: Vec::new(),
            opened: None,
        }
    }
}

impl Oracle for Fixed {
    fn limit(&self) -> u64 {
        self.limit
    }
    fn scale(&self) -> u128 {
        1
    }
    fn load(&self, t: u64) -> u128 {
        let Some(i) = self.opened else { return 0 };
        let start = self.admitted[i].0;
        if u128::from(t.max(start)) < u128::from(start) + u128::from(self.period) {
            self.admitted[i..].iter().map(|&(_, c)| u128::from(c)).sum()
        } else {
            0
        }
    }
    fn admit(&mut self, t: u64, cost: u64) {
        if self.fresh(t) {
            self.opened = Some(self.admitted.len());
        }
        self.admitted.push((t, cost));
    }
    fn drops(&self) -> Option<Vec<u64>> {
        Some(
            self.opened
                .map(|i| self.admitted[i].0.saturating_add(self.period))
                .into_iter()
                .collect(),
        )
    }
}

/// The exact window `(t − period, t]` over the history.
#[derive(Debug, Clone)]
struct Log {
    limit: u64,
    period: u64,
    admitted: Vec<(u64, u64)>,
}

impl Log {
    fn new(quota: &Quota) -> Self {
        Self {
            limit: quota.limit(),
            period: nanos(quota.period()),
            admitted: Vec::new(),
        }
    }
    fn at(&self, t: u64) -> u64 {
        self.admitted.iter().map(|&(r, _)| r).fold(t, u64::max)
    }
}

impl Oracle for Log {
    fn limit(&self) -> u64 {
        self.limit
    }
    fn scale(&self) -> u128 {
        1
    }
    fn load(&self, t: u64) -> u128 {
        let t = self.at(t);
        self.admitted
            .iter()
            .filter(|&&(r, _)| t - r < self.period)
            .map(|&(_, c)| u128::from(c))
            .sum()
    }
    fn admit(&mut self, t: u64, cost: u64) {
        let t = self.at(t);
        self.admitted.push((t, cost));
    }
    fn drops(&self) -> Option<Vec<u64>> {
        Some(
            self.admitted
                .iter()
                .map(|&(r, _)| r.saturating_add(self.period))
                .collect(),
        )
    }
}

/// The sliding-window estimate with `k` sub-windows, from the history.
#[derive(Debug, Clone)]
struct Estimate {
    limit: u64,
    period: u64,
    k: u64,
    /// Where the grid begins: the first admission since the key was last fresh.
    origin: u64,
    last: u64,
    /// Admissions since `origin`.
    admitted: Vec<(u64, u64)>,
}

impl Estimate {
    fn new(quota: &Quota, k: u64) -> Self {
        Self {
            limit: quota.limit(),
            period: nanos(quota.period()),
            k,
            origin: 0,
            last: 0,
            admitted: Vec::new(),
        }
    }
    fn units(&self, t: u64) -> u128 {
        u128::from(t - self.origin) * u128::from(self.k)
    }
}

impl Oracle for Estimate {
    fn limit(&self) -> u64 {
        self.limit
    }
    fn scale(&self) -> u128 {
        u128::from(self.period)
    }
    fn load(&self, t: u64) -> u128 {
        let t = t.max(self.last);
        let p = u128::from(self.period);
        let k = u128::from(self.k);
        let now = self.units(t);
        let (current, e) = (now / p, now % p);
        self.admitted
            .iter()
            .map(|&(r, c)| {
                let sub = self.units(r) / p;
                let weight = if sub + k > current {
                    p
                } else if sub + k == current {
                    p - e
                } else {
                    0
                };
                u128::from(c) * weight
            })
            .sum()
    }
    fn admit(&mut self, t: u64, cost: u64) {
        let t = t.max(self.last);
        if self.fresh(t) {
            self.origin = t;
            self.admitted.clear();
        }
        self.admitted.push((t, cost));
        self.last = t;
    }
    fn drops(&self) -> Option<Vec<u64>> {
        None
    }
}

/// One step of a run: `now` moves forward by a gap, or back.
#[derive(Debug, Clone, Copy)]
enum Step {
    Forward(u64),
    Back(u64),
}

#[derive(Debug, Clone)]
struct Scenario {
    quota: Quota,
    k: usize,
    start: u64,
    steps: Vec<(Step, u64)>,
}

impl Scenario {
    /// The instants and costs of the run, and whether each moved time backwards.
    fn arrivals(&self) -> Vec<(u64, u64, bool)> {
        let mut now = self.start;
        self.steps
            .iter()
            .map(|&(step, cost)| match step {
                Step::Forward(gap) => {
                    now += gap;
                    (now, cost, false)
                }
                Step::Back(gap) => {
                    now = now.saturating_sub(gap);
                    (now, cost, true)
                }
            })
            .collect()
    }
}

/// Random quotas (tiny periods, where sub-windows are fractions of a nanosecond, and real
/// ones), and arrivals: bursts, gaps about the period and the sub-window length (±1 ns),
/// random gaps, and now and then a clock that goes back; costs of 1, 0 (peeks), up to a little
/// over the limit, and `u64::MAX`.
fn scenario(backwards: bool) -> impl Strategy<Value = Scenario> {
    (
        1u64..=30,
        prop_oneof![1u64..=40, 1_000u64..=10_000_000_000],
        prop_oneof![1 => Just(1usize), 2 => 1usize..=8, 1 => Just(64usize)],
        0u64..=1_000_000_000_000,
    )
        .prop_flat_map(move |(limit, period, k, start)| {
            let quota = Quota::new(limit, Duration::from_nanos(period));
            let sub = (period / k as u64).max(1);
            let near = |unit: u64| {
                (0u64..=3, 0u64..=2).prop_map(move |(m, d)| (m * unit + d).saturating_sub(1))
            };
            let gap = prop_oneof![
                3 => Just(0u64),
                3 => 0..=2 * period,
                2 => near(period),
                2 => near(sub),
                1 => 0..=period / limit,
            ];
            let step = prop_oneof![
                20 => gap.prop_map(Step::Forward),
                1 => (0..=period).prop_map(move |gap| {
                    if backwards {
                        Step::Back(gap)
                    } else {
                        Step::Forward(gap)
                    }
                }),
            ];
            let cost = prop_oneof![
                5 => Just(1u64),
                1 => Just(0u64),
                3 => 0..=limit + 2,
                1 => Just(u64::MAX),
            ];
            let steps = prop::collection::vec((step, cost), 0..=120);
            (Just(quota), Just(k), Just(start), steps).prop_map(|(quota, k, start, steps)| {
                Scenario {
                    quota,
                    k,
                    start,
                    steps,
                }
            })
        })
}

/// Checks one request against the oracle and the algorithm against itself, and moves both on.
fn step<A: MemoryAlgorithm, O: Oracle>(
    algo: &A,
    state: &mut A::State,
    oracle: &mut O,
    now: u64,
    cost: u64,
) -> Result<Decision, TestCaseError>
where
    A::State: PartialEq + Debug,
{
    let limit = oracle.limit();
    let before = state.clone();
    let out = algo.check(&before, now, cost);
    let d = out.decision;

    // The algorithm agrees with itself: check_mut, transition and decide.
    let mut in_place = before.clone();
    prop_assert_eq!(&algo.check_mut(&mut in_place, now, cost), &d);
    prop_assert_eq!(&in_place, out.state.as_ref().unwrap_or(&before));
    let next = algo.transition(&before, now, cost);
    prop_assert_eq!(&next, &out.state);
    prop_assert_eq!(&algo.decide(&before, next.as_ref(), now, cost), &d);
    // Peeks and denials change nothing.
    if cost == 0 || !d.allowed {
        prop_assert!(out.state.is_none());
    }
    if cost == 0 {
        prop_assert!(d.allowed);
    }

    // The decision and the fields.
    prop_assert_eq!(d.allowed, oracle.passes(now, cost), "allowed");
    if d.allowed && cost > 0 {
        oracle.admit(now, cost);
    }
    prop_assert_eq!(d.limit, limit);
    prop_assert_eq!(d.delay, Duration::ZERO);
    prop_assert_eq!(d.remaining, oracle.max_cost(now), "remaining");

    // `remaining` requests of cost 1 pass now, one by one, and the next one does not.
    let mut probe = in_place.clone();
    let passed = (0..=limit)
        .take_while(|_| algo.check_mut(&mut probe, now, 1).allowed)
        .count();
    prop_assert_eq!(passed as u64, d.remaining, "cost-1 requests in a row");

    // `reset_after`: fresh then, and not 1 ns earlier, for the oracle and the algorithm.
    let reset = nanos(d.reset_after);
    let reset_at = now + reset;
    prop_assert!(oracle.fresh(reset_at), "not fresh after reset_after");
    prop_assert!(algo.is_fresh(&in_place, reset_at));
    prop_assert_eq!(reset == 0, oracle.fresh(now));
    prop_assert_eq!(reset == 0, algo.is_fresh(&in_place, now));
    prop_assert_eq!(reset == 0, d.remaining == limit);
    if reset > 0 {
        prop_assert!(!oracle.fresh(reset_at - 1), "fresh before reset_after");
        prop_assert!(!algo.is_fresh(&in_place, reset_at - 1));
    }
    if let Some(drops) = oracle.drops() {
        let first = std::iter::once(now)
            .chain(drops.into_iter().filter(|&t| t > now))
            .filter(|&t| oracle.fresh(t))
            .min();
        prop_assert_eq!(
            first,
            Some(reset_at),
            "reset_after is not the first fresh instant"
        );
    }

    // `retry_after`: the first instant the same request passes, or None when allowed or never.
    match d.retry_after {
        Some(retry) => {
            let retry = nanos(retry);
            prop_assert!(!d.allowed && cost <= limit && retry > 0);
            let at = now + retry;
            prop_assert!(oracle.passes(at, cost), "does not pass at retry_after");
            prop_assert!(!oracle.passes(at - 1, cost), "passes before retry_after");
            for i in 1..8 {
                prop_assert!(!oracle.passes(now + retry / 8 * i, cost));
            }
            if let Some(drops) = oracle.drops() {
                let first = drops
                    .into_iter()
                    .filter(|&t| t > now && oracle.passes(t, cost))
                    .min();
                prop_assert_eq!(
                    first,
                    Some(at),
                    "retry_after is not the first passing instant"
                );
            }
        }
        None => prop_assert!(d.allowed || cost > limit, "denied without retry_after"),
    }

    *state = in_place;
    Ok(d)
}

/// Runs a scenario through an algorithm and its oracle, and checks that a state the algorithm
/// calls fresh behaves as the default state from then on.
fn run<A: MemoryAlgorithm, O: Oracle>(
    algo: &A,
    mut oracle: O,
    scenario: &Scenario,
    mut each: impl FnMut(&A::State, &O, u64) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError>
where
    A::State: PartialEq + Debug,
{
    let mut state = A::State::default();
    // A copy of the state begun as the default when the state was fresh.
    let mut shadow: Option<A::State> = None;
    for (i, (now, cost, back)) in scenario.arrivals().into_iter().enumerate() {
        if back {
            shadow = None;
        }
        if shadow.is_none() && algo.is_fresh(&state, now) {
            shadow = Some(A::State::default());
        }
        let shadow_decision = shadow.as_mut().map(|s| algo.check_mut(s, now, cost));
        let d = step(algo, &mut state, &mut oracle, now, cost)
            .map_err(|e| TestCaseError::fail(format!("step {i} at {now} ns, cost {cost}: {e}")))?;
        if let Some(shadow_decision) = shadow_decision {
            prop_assert_eq!(
                shadow_decision,
                d,
                "step {}: fresh state unlike the default",
                i
            );
        }
        each(&state, &oracle, now)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(192))]

    /// Fixed window: every field of every decision as the oracle's.
    #[test]
    fn fixed_window_matches_the_oracle(s in scenario(true)) {
        let algo = FixedWindow::new(&s.quota);
        run(&algo, Fixed::new(&s.quota), &s, |_, _, _| Ok(()))?;
    }

    /// Sliding log: every field of every decision as the exact window's, the log never longer
    /// than the limit.
    #[test]
    fn sliding_log_matches_the_oracle(s in scenario(true)) {
        let algo = SlidingLog::new(&s.quota);
        let limit = s.quota.limit();
        run(&algo, Log::new(&s.quota), &s, |state: &SlidingLogState, _, _| {
            prop_assert!(state.len() as u64 <= limit, "{} entries", state.len());
            Ok(())
        })?;
    }

    /// Sliding window with `k` sub-windows: every field of every decision as the estimate's,
    /// and the estimate never rises as time passes (so "passes at `retry_after`, not 1 ns
    /// before" makes it the first such instant).
    #[test]
    fn sliding_window_matches_the_oracle(
        s in scenario(true),
        probes in prop::collection::vec((0u64..=3_000, 0u64..=3_000), 4),
    ) {
        let algo = SlidingWindow::new(&s.quota).sub_windows(s.k);
        let period = nanos(s.quota.period());
        let oracle = Estimate::new(&s.quota, s.k as u64);
        run(&algo, oracle, &s, |state: &SlidingWindowState, oracle, now| {
            prop_assert!(state.counts().is_empty() || state.counts().len() == s.k + 1);
            for &(a, b) in &probes {
                let t1 = now + period / 1_000 * a;
                let t2 = t1 + period / 1_000 * b + b % 7;
                prop_assert!(oracle.load(t1) >= oracle.load(t2), "the estimate rose");
            }
            Ok(())
        })?;
    }

    /// Sliding log: in any window of length `period`, at most `limit` is admitted; and every
    /// request it denied (of cost at most `limit`) would have broken that.
    #[test]
    fn sliding_log_never_overfills_a_window(s in scenario(false)) {
        let algo = SlidingLog::new(&s.quota);
        let (limit, period) = (u128::from(s.quota.limit()), u128::from(nanos(s.quota.period())));
        let mut state = SlidingLogState::default();
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (now, cost, _) in s.arrivals() {
            let d = algo.check_mut(&mut state, now, cost);
            // The window (now − period, now] as it was before the request.
            let inside: u128 = admitted
                .iter()
                .filter(|&&(t, _)| u128::from(now - t) < period)
                .map(|&(_, c)| u128::from(c))
                .sum();
            if d.allowed {
                admitted.push((now, cost));
            } else if u128::from(cost) <= limit {
                prop_assert!(inside + u128::from(cost) > limit, "denied but fits at {}", now);
            }
        }
        // Every window [s, s + period) starting at an admission.
        for &(s, _) in &admitted {
            let sum: u128 = admitted
                .iter()
                .filter(|&&(t, _)| t >= s && u128::from(t - s) < period)
                .map(|&(_, c)| u128::from(c))
                .sum();
            prop_assert!(sum <= limit, "window from {} holds {}", s, sum);
        }
    }
}

/// Refunds: `None` exactly when nothing can be given back; never more than fresh; and a request
/// refunded at once, in part or in full, is as if it had cost only what was kept.
fn refunds<A: MemoryAlgorithm>(
    algo: &A,
    s: &Scenario,
    picks: &[(bool, u64)],
    exact: bool,
) -> Result<(), TestCaseError>
where
    A::State: PartialEq + Debug,
{
    let limit = s.quota.limit();
    // `a` gets every request and the refunds; `b` gets only what `a` kept of each.
    let mut a = A::State::default();
    let mut b = A::State::default();
    for ((now, cost, _), &(refund, back)) in s.arrivals().into_iter().zip(picks) {
        let before_b = b.clone();
        let da = algo.check_mut(&mut a, now, cost);
        let db = algo.check_mut(&mut b, now, cost);
        prop_assert_eq!(&da, &db, "at {}", now);
        let peek = algo.check(&a, now, 0).decision;
        // A refund of this admission by up to its cost: something comes back iff it took
        // something; never more than it took, never beyond fresh.
        let r = back % (cost.min(limit) + 1);
        let out = algo.refund(&a, &da, now, r);
        prop_assert_eq!(
            out.is_none(),
            r == 0 || !da.allowed || cost == 0,
            "refund {} at {}",
            r,
            now
        );
        if let Some(next) = &out {
            let after = algo.check(next, now, 0).decision;
            let most = (peek.remaining + r).min(limit);
            prop_assert!(after.remaining >= peek.remaining && after.remaining <= most);
            if exact {
                prop_assert_eq!(after.remaining, most);
            }
            prop_assert_eq!(algo.is_fresh(next, now), after.remaining == limit);
            prop_assert_eq!(after.reset_after.is_zero(), after.remaining == limit);
        }
        // An admitted request refunded at once, by at most its cost.
        if refund && da.allowed && cost > 0 && cost <= limit {
            let r = back % cost + 1;
            a = algo.refund(&a, &da, now, r).unwrap_or_else(|| a.clone());
            b = before_b;
            let kept = cost - r;
            prop_assert!(algo.check_mut(&mut b, now, kept).allowed);
            prop_assert_eq!(
                algo.check(&a, now, 0).decision,
                algo.check(&b, now, 0).decision
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn fixed_window_refunds(s in scenario(false), picks in prop::collection::vec((any::<bool>(), any::<u64>()), 120)) {
        refunds(&FixedWindow::new(&s.quota), &s, &picks, true)?;
    }

    #[test]
    fn sliding_log_refunds(s in scenario(false), picks in prop::collection::vec((any::<bool>(), any::<u64>()), 120)) {
        refunds(&SlidingLog::new(&s.quota), &s, &picks, true)?;
    }

    #[test]
    fn sliding_window_refunds(s in scenario(false), picks in prop::collection::vec((any::<bool>(), any::<u64>()), 120)) {
        refunds(&SlidingWindow::new(&s.quota).sub_windows(s.k), &s, &picks, false)?;
    }
}

/// Any quota, any instants in any order, any costs: no panic, no overflow, and the answers stay
/// consistent.
fn anything<A: MemoryAlgorithm>(
    algo: &A,
    limit: u64,
    requests: &[(u64, u64)],
) -> Result<(), TestCaseError>
where
    A::State: PartialEq + Debug,
{
    let mut state = A::State::default();
    for &(now, cost) in requests {
        let out = algo.check(&state, now, cost);
        let mut in_place = state.clone();
        prop_assert_eq!(&algo.check_mut(&mut in_place, now, cost), &out.decision);
        prop_assert_eq!(&in_place, out.state.as_ref().unwrap_or(&state));
        let d = out.decision;
        prop_assert!(d.remaining <= limit);
        if cost == 0 {
            prop_assert!(d.allowed && out.state.is_none());
        }
        if !d.allowed {
            prop_assert!(out.state.is_none());
            prop_assert_eq!(d.retry_after.is_some(), cost <= limit);
        }
        if cost > limit {
            prop_assert!(!d.allowed && d.retry_after.is_none());
        }
        if d.allowed {
            prop_assert!(d.retry_after.is_none());
        }
        let _ = algo.refund(&state, &d, now, cost);
        let _ = algo.is_fresh(&state, now);
        state = in_place;
    }
    Ok(())
}

fn any_quota() -> impl Strategy<Value = Quota> {
    let edge = prop_oneof![Just(1u64), Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()];
    (edge.clone(), edge)
        .prop_filter("a valid quota", |&(limit, period)| {
            limit > 0 && period > 0 && period.div_ceil(limit).checked_mul(limit).is_some()
        })
        .prop_map(|(limit, period)| Quota::new(limit, Duration::from_nanos(period)))
}

fn any_requests() -> impl Strategy<Value = Vec<(u64, u64)>> {
    let edge = prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        any::<u64>()
    ];
    prop::collection::vec((edge.clone(), edge), 0..=40)
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn extreme_inputs_never_panic(
        quota in any_quota(),
        k in prop_oneof![Just(1usize), Just(64usize), 1usize..=64],
        requests in any_requests(),
    ) {
        let limit = quota.limit();
        anything(&FixedWindow::new(&quota), limit, &requests)?;
        anything(&SlidingLog::new(&quota), limit, &requests)?;
        anything(&SlidingWindow::new(&quota).sub_windows(k), limit, &requests)?;
    }
}

/// A peek or a hopeless request on a never-seen key creates no state.
#[test]
fn unknown_keys_get_no_state() {
    let quota = Quota::per_second(3);
    let fixed = FixedWindow::new(&quota);
    let log = SlidingLog::new(&quota);
    let window = SlidingWindow::new(&quota).sub_windows(4);
    for now in [0, 1, u64::MAX] {
        for cost in [0, 4, u64::MAX] {
            let d = fixed.check(&FixedWindowState::default(), now, cost);
            assert_eq!(d.state, None);
            assert_eq!(d.decision.remaining, 3);
            let d = log.check(&SlidingLogState::default(), now, cost);
            assert_eq!(d.state, None);
            assert_eq!(d.decision.remaining, 3);
            let d = window.check(&SlidingWindowState::default(), now, cost);
            assert_eq!(d.state, None);
            assert_eq!(d.decision.remaining, 3);
        }
    }
}
