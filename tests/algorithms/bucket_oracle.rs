//! The token bucket and the hybrid quota-linear algorithm against brute-force oracles written
//! without looking at `src/algorithm/{token_bucket,hybrid}.rs`:
//!
//! - [`ExactBucket`]: a token bucket in exact rationals (tokens over the denominator `period`),
//!   on quotas where `period` is a multiple of `limit`, so that the emission interval is exact.
//! - `Gcra`: the token bucket must decide exactly as GCRA does, on any quota.
//! - [`Pseudocode`]: seed 000's pseudocode, clause by clause, in exact rationals.
//! - [`consistent`]: what every algorithm's decision must mean, checked by probing the algorithm
//!   itself: `remaining` is how many requests of cost 1 pass right now, `retry_after` the first
//!   instant the same request passes, `reset_after` the first instant the key is fresh; `check`,
//!   `check_mut` and `transition` + `decide` agree; a fresh state behaves as `Default`.
//!
//! The algorithms are driven directly with explicit times (no clock, no store).

use crate::support::oracle;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{Algorithm, Gcra, Hybrid, HybridState, TokenBucket};
use tollgate::store::MemoryAlgorithm;
use tollgate::Quota;

use oracle::{cases, nanos, Expected};

/// Gaps between requests: often none, often about one interval `t`, sometimes whole periods.
fn gaps(t: u64, period: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => Just(0u64),
        4 => 0..=2 * t,
        1 => (0u64..=3).prop_map(move |k| k * t),
        2 => 0..=2 * period,
        1 => (0u64..=2).prop_map(move |k| k * period),
    ]
}

/// Costs for a capacity of `cap`: mostly 1, some up to a little above the capacity, rarely huge.
fn costs(cap: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => Just(1u64),
        4 => 0..=cap + 2,
        1 => Just(u64::MAX),
    ]
}

// ---------------------------------------------------------------------------------------------
// (1) The token bucket in exact rationals.

/// A token bucket whose level is `tokens / period` tokens, refilled by `limit / period` tokens
/// per nanosecond, capped at `burst`, starting full.
#[derive(Debug, Clone)]
struct ExactBucket {
    limit: u128,
    period: u128,
    burst: u128,
    /// Numerator over `period`.
    tokens: u128,
    at: u64,
}

impl ExactBucket {
    fn new(limit: u64, period: u64, burst: u64) -> Self {
        let (limit, period, burst) = (u128::from(limit), u128::from(period), u128::from(burst));
        Self {
            limit,
            period,
            burst,
            tokens: burst * period,
            at: 0,
        }
    }

    /// Nanoseconds for `numerator` tokens to flow in: exact on these quotas.
    fn time_for(&self, numerator: u128) -> Duration {
        assert_eq!(numerator % self.limit, 0, "inexact refill time");
        Duration::from_nanos(u64::try_from(numerator / self.limit).unwrap())
    }

    fn request(&mut self, now: u64, n: u64) -> Expected {
        assert!(now >= self.at);
        let full = self.burst * self.period;
        self.tokens = full.min(self.tokens + u128::from(now - self.at) * self.limit);
        self.at = now;
        let n = u128::from(n);
        let need = n * self.period;
        let allowed = n <= self.burst && self.tokens >= need;
        let retry_after = (!allowed && n <= self.burst).then(|| self.time_for(need - self.tokens));
        if allowed {
            self.tokens -= need;
        }
        Expected {
            allowed,
            limit: u64::try_from(self.burst).unwrap(),
            remaining: u64::try_from(self.tokens / self.period).unwrap(),
            reset_after: self.time_for(full - self.tokens),
            retry_after,
            delay: Duration::ZERO,
        }
    }
}

/// A quota whose period is `limit × T` (an exact emission interval), and requests.
fn exact_scenario() -> impl Strategy<Value = (Quota, Vec<(u64, u64)>)> {
    (1u64..=50, 1u64..=200_000_000, 1u64..=60).prop_flat_map(|(limit, t, burst)| {
        let period = limit * t;
        let quota = Quota::new(limit, Duration::from_nanos(period)).with_burst(burst);
        let steps = prop::collection::vec((gaps(t, period), costs(burst)), 0..=200);
        (Just(quota), steps)
    })
}

proptest! {
    #![proptest_config(cases(256))]

    /// Every field of every decision equals the exact token bucket's.
    #[test]
    fn token_bucket_matches_the_exact_bucket((quota, steps) in exact_scenario()) {
        let bucket = TokenBucket::new(&quota);
        let period = nanos(quota.period());
        let mut oracle = ExactBucket::new(quota.limit(), period, quota.burst());
        let mut state = Default::default();
        let mut now = 0u64;
        for (step, &(gap, cost)) in steps.iter().enumerate() {
            now += gap;
            let out = bucket.check(&state, now, cost);
            let want = oracle.request(now, cost);
            prop_assert_eq!(Expected::from(out.decision), want,
                "step {} at {} ns, cost {}, {:?}", step, now, cost, &quota);
            if let Some(next) = out.state {
                state = next;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (2) The token bucket decides as GCRA does.

#[derive(Debug, Clone, Copy)]
enum Op {
    Check(u64, u64),
    Refund(u64, u64),
}

/// Any quota (emission intervals rounded up), times from anywhere in the clock's range (up to
/// its end, where GCRA denies rather than overflow), checks and refunds.
fn any_scenario() -> impl Strategy<Value = (Quota, u64, Vec<Op>)> {
    (
        1u64..=1000,
        prop_oneof![1u64..=1000, 1u64..=100_000_000_000],
        1u64..=100,
    )
        .prop_flat_map(|(limit, period, burst)| {
            let quota = Quota::new(limit, Duration::from_nanos(period)).with_burst(burst);
            let t = period.div_ceil(limit);
            let start = prop_oneof![
                3 => Just(0u64),
                1 => any::<u64>(),
                1 => (0u64..=4 * t * burst).prop_map(|back| u64::MAX - back),
            ];
            let op = prop_oneof![
                6 => (gaps(t, period), costs(burst)).prop_map(|(g, c)| Op::Check(g, c)),
                1 => (gaps(t, period), costs(burst)).prop_map(|(g, c)| Op::Refund(g, c)),
            ];
            (Just(quota), start, prop::collection::vec(op, 0..=200))
        })
}

proptest! {
    #![proptest_config(cases(256))]

    /// Every decision, every refund and every freshness test agree; the bucket's state is
    /// GCRA's TAT in other words (`refilled_at + deficit`, while it is not full).
    #[test]
    fn token_bucket_decides_as_gcra(
        (quota, start, ops) in any_scenario(),
        shaping in prop_oneof![Just(0u64), 0..10_000_000_000u64],
    ) {
        // Also when both shape (`max_delay`): the bucket borrows what GCRA's TAT runs ahead.
        let max_delay = std::time::Duration::from_nanos(shaping);
        let bucket = TokenBucket::new(&quota).max_delay(max_delay);
        let gcra = Gcra::new(&quota).max_delay(max_delay);
        let (mut state, mut tat) = (Default::default(), 0u64);
        let mut now = start;
        // The admissions so far, as the bucket and GCRA answered them; refunds give back the
        // newest (the one a refund can take back whole) or, every other time, the oldest.
        let mut admitted: Vec<(tollgate::Decision, tollgate::Decision)> = Vec::new();
        for (step, &op) in ops.iter().enumerate() {
            let ctx = format!("step {step} {op:?} at {now} ns, {quota:?}");
            match op {
                Op::Check(gap, cost) => {
                    now = now.saturating_add(gap);
                    let got = bucket.check(&state, now, cost);
                    let want = gcra.check(&tat, now, cost);
                    prop_assert_eq!(&got.decision, &want.decision, "{}", ctx);
                    prop_assert_eq!(got.decision.receipt(), want.decision.receipt(), "{}", ctx);
                    prop_assert_eq!(got.state.is_some(), want.state.is_some(), "{}", ctx);
                    if let (Some(s), Some(t)) = (got.state, want.state) {
                        state = s;
                        tat = t;
                        admitted.push((got.decision, want.decision));
                    }
                }
                Op::Refund(gap, cost) => {
                    now = now.saturating_add(gap);
                    let none = tollgate::Decision::allow(0, 0, std::time::Duration::ZERO);
                    let (mine, its) = match admitted.len() {
                        0 => (none.clone(), none),
                        n if step % 2 == 0 => admitted.swap_remove(n - 1),
                        _ => admitted.remove(0),
                    };
                    let got = bucket.refund(&state, &mine, now, cost);
                    let want = gcra.refund(&tat, &its, now, cost);
                    prop_assert_eq!(got.is_some(), want.is_some(), "{}", ctx);
                    if let (Some(s), Some(t)) = (got, want) {
                        state = s;
                        tat = t;
                    }
                }
            }
            let fresh = bucket.is_fresh(&state, now);
            prop_assert_eq!(fresh, gcra.is_fresh(&tat, now), "{}", ctx);
            if !fresh {
                prop_assert_eq!(state.refilled_at + state.deficit, tat, "{}", ctx);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (3) The hybrid algorithm against seed 000's pseudocode.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bursty,
    Smooth,
}

#[derive(Debug, Clone, Copy)]
struct Client {
    /// Tokens, as a numerator over `window`.
    bucket: i128,
    time: u64,
    mode: Mode,
}

/// Which clause of the pseudocode answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clause {
    Reset,
    Switch,
    Take,
    Deny,
}

/// Seed 000's pseudocode for one client, in exact rationals: `rate = quota / window` tokens per
/// nanosecond is `quota` per nanosecond over the denominator `window`, one token is `window`.
#[derive(Debug, Clone)]
struct Pseudocode {
    quota: i128,
    window: u64,
    c: Option<Client>,
}

impl Pseudocode {
    fn new(quota: u64, window: u64) -> Self {
        Self {
            quota: i128::from(quota),
            window,
            c: None,
        }
    }

    fn reset(&mut self, now: u64) -> Clause {
        self.c = Some(Client {
            bucket: (self.quota - 1) * i128::from(self.window),
            time: now,
            mode: Mode::Bursty,
        });
        Clause::Reset
    }

    fn request(&mut self, now: u64) -> Clause {
        let one = i128::from(self.window);
        let rate = self.quota; // per ns, over `window`
        let Some(c) = self.c.as_mut() else {
            return self.reset(now);
        };
        if c.mode == Mode::Bursty && c.time + self.window <= now {
            return self.reset(now);
        }
        if c.mode == Mode::Bursty && c.bucket == one {
            let remaining = i128::from(c.time + self.window - now);
            c.bucket = -remaining * rate + one;
            c.time = now;
            c.mode = Mode::Smooth;
            return Clause::Switch;
        }
        if c.mode == Mode::Smooth {
            c.bucket += i128::from(now - c.time) * rate;
            c.time = now;
        }
        if c.mode == Mode::Smooth && c.bucket >= self.quota * one {
            return self.reset(now);
        }
        if c.bucket >= one {
            c.bucket -= one;
            Clause::Take
        } else {
            Clause::Deny
        }
    }

    fn allows(&self, now: u64) -> bool {
        self.clone().request(now) != Clause::Deny
    }

    /// Requests at `now` that would pass, one after another (at most `quota + 1`).
    fn passes_now(&self, now: u64) -> u64 {
        let mut probe = self.clone();
        (0..=self.quota)
            .take_while(|_| probe.request(now) != Clause::Deny)
            .count() as u64
    }

    /// Whether the next request at `now` would start over as a new client.
    fn fresh_at(&self, now: u64) -> bool {
        self.clone().request(now) == Clause::Reset
    }
}

fn hybrid_scenario() -> impl Strategy<Value = (Quota, Vec<u64>)> {
    (1u64..=20, 1u64..=1_000_000_000).prop_flat_map(|(limit, t)| {
        let period = limit * t;
        let quota = Quota::new(limit, Duration::from_nanos(period));
        (Just(quota), prop::collection::vec(gaps(t, period), 0..=200))
    })
}

proptest! {
    #![proptest_config(cases(256))]

    /// For requests of cost 1, the same requests pass, and every other field says what the
    /// pseudocode does: `remaining` requests pass now, the key starts over as new after
    /// `reset_after` (not 1 ns sooner), a denied request passes after `retry_after` (not 1 ns
    /// sooner). A peek before each request reports the same standing.
    #[test]
    fn hybrid_matches_the_pseudocode((quota, gaps) in hybrid_scenario()) {
        let hybrid = Hybrid::new(&quota);
        let mut oracle = Pseudocode::new(quota.limit(), nanos(quota.period()));
        let mut state = HybridState::default();
        let mut now = 0u64;
        for (step, &gap) in gaps.iter().enumerate() {
            now += gap;
            let ctx = format!("step {step} at {now} ns, {quota:?}, {state:?}, {oracle:?}");

            let peek = hybrid.check(&state, now, 0);
            prop_assert!(peek.decision.allowed && peek.state.is_none(), "{}", ctx);
            prop_assert_eq!(peek.decision.remaining, oracle.passes_now(now), "{}", ctx);
            prop_assert_eq!(hybrid.is_fresh(&state, now), oracle.fresh_at(now), "{}", ctx);

            let out = hybrid.check(&state, now, 1);
            let d = out.decision;
            let clause = oracle.request(now);
            prop_assert_eq!(d.allowed, clause != Clause::Deny, "{} {:?}", ctx, clause);
            prop_assert_eq!(out.state.is_some(), d.allowed, "{}", ctx);
            if let Some(next) = out.state {
                state = next;
            }
            prop_assert_eq!(d.limit, quota.limit(), "{}", ctx);
            prop_assert_eq!(d.delay, Duration::ZERO, "{}", ctx);
            prop_assert_eq!(d.remaining, oracle.passes_now(now), "{}", ctx);

            let reset = nanos(d.reset_after);
            prop_assert!(oracle.fresh_at(now + reset), "{}", ctx);
            if reset > 0 {
                prop_assert!(!oracle.fresh_at(now + reset - 1), "{}", ctx);
            }
            match d.retry_after.map(nanos) {
                Some(retry) => {
                    prop_assert!(!d.allowed && retry > 0, "{}", ctx);
                    prop_assert!(oracle.allows(now + retry), "{}", ctx);
                    prop_assert!(!oracle.allows(now + retry - 1), "{}", ctx);
                }
                // Cost 1 can always pass eventually.
                None => prop_assert!(d.allowed, "{}", ctx),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (4) What the fields mean, for every algorithm, by probing the algorithm itself.

/// Runs `steps` through `alg` from a fresh key and checks every decision's meaning and the
/// agreement of the trait's methods.
fn consistent<A>(alg: &A, capacity: u64, steps: &[(u64, u64)]) -> Result<(), TestCaseError>
where
    A: MemoryAlgorithm,
    A::State: std::fmt::Debug + PartialEq,
{
    let mut state = A::State::default();
    let mut now = 0u64;
    for (step, &(gap, cost)) in steps.iter().enumerate() {
        now += gap;
        let ctx = format!("step {step} at {now} ns, cost {cost}, {state:?}");

        // check, check_mut and transition + decide agree.
        let out = alg.check(&state, now, cost);
        let d = out.decision;
        let next = alg.transition(&state, now, cost);
        prop_assert_eq!(&next, &out.state, "{}", ctx);
        prop_assert_eq!(&alg.decide(&state, next.as_ref(), now, cost), &d, "{}", ctx);
        let mut in_place = state.clone();
        prop_assert_eq!(&alg.check_mut(&mut in_place, now, cost), &d, "{}", ctx);
        prop_assert_eq!(&in_place, out.state.as_ref().unwrap_or(&state), "{}", ctx);

        // Only an allowed request of positive cost changes the state.
        prop_assert_eq!(out.state.is_some(), d.allowed && cost > 0, "{}", ctx);
        prop_assert_eq!(d.limit, capacity, "{}", ctx);
        prop_assert_eq!(d.delay, Duration::ZERO, "{}", ctx);

        // A fresh state is as good as a key never seen, from now on.
        if alg.is_fresh(&state, now) {
            let (mut a, mut b) = (state.clone(), A::State::default());
            let mut later = now;
            for &(gap, cost) in std::iter::once(&(0, cost))
                .chain(&steps[step + 1..])
                .take(8)
            {
                later += gap;
                let (da, db) = (
                    alg.check_mut(&mut a, later, cost),
                    alg.check_mut(&mut b, later, cost),
                );
                prop_assert_eq!(da, db, "{} then {} ns cost {}", ctx, later, cost);
            }
        }
        if let Some(next) = out.state {
            state = next;
        }

        // `remaining`: requests of cost 1 that pass now, one after another.
        let mut probe = state.clone();
        let passes = (0..=capacity)
            .take_while(|_| alg.check_mut(&mut probe, now, 1).allowed)
            .count() as u64;
        prop_assert_eq!(d.remaining, passes, "{}", ctx);

        // `reset_after`: fresh then, and not 1 ns sooner; a peek agrees.
        let reset = nanos(d.reset_after);
        prop_assert!(alg.is_fresh(&state, now + reset), "{}", ctx);
        prop_assert_eq!(alg.is_fresh(&state, now), reset == 0, "{}", ctx);
        if reset > 0 {
            prop_assert!(!alg.is_fresh(&state, now + reset - 1), "{}", ctx);
        }
        let peek = alg.check(&state, now, 0);
        prop_assert!(peek.decision.allowed && peek.state.is_none(), "{}", ctx);
        prop_assert_eq!(peek.decision.remaining, d.remaining, "{}", ctx);
        prop_assert_eq!(peek.decision.reset_after, d.reset_after, "{}", ctx);

        // `retry_after`: the same request passes then, and not 1 ns sooner; `None` only when
        // allowed or hopeless.
        match d.retry_after.map(nanos) {
            Some(retry) => {
                prop_assert!(!d.allowed && retry > 0, "{}", ctx);
                prop_assert!(
                    alg.check(&state, now + retry, cost).decision.allowed,
                    "{}",
                    ctx
                );
                prop_assert!(
                    !alg.check(&state, now + retry - 1, cost).decision.allowed,
                    "{}",
                    ctx
                );
            }
            None if !d.allowed => prop_assert!(cost > capacity, "{}", ctx),
            None => {}
        }
    }
    Ok(())
}

fn quota_and_steps() -> impl Strategy<Value = (Quota, Vec<(u64, u64)>)> {
    (1u64..=30, 1u64..=10_000_000_000, 1u64..=40).prop_flat_map(|(limit, period, burst)| {
        let quota = Quota::new(limit, Duration::from_nanos(period)).with_burst(burst);
        let t = period.div_ceil(limit);
        let steps = (gaps(t, period), costs(limit.max(burst)));
        (Just(quota), prop::collection::vec(steps, 0..=100))
    })
}

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn gcra_fields_mean_what_they_say((quota, steps) in quota_and_steps()) {
        consistent(&Gcra::new(&quota), quota.burst(), &steps)?;
    }

    #[test]
    fn token_bucket_fields_mean_what_they_say((quota, steps) in quota_and_steps()) {
        consistent(&TokenBucket::new(&quota), quota.burst(), &steps)?;
    }

    #[test]
    fn hybrid_fields_mean_what_they_say((quota, steps) in quota_and_steps()) {
        consistent(&Hybrid::new(&quota), quota.limit(), &steps)?;
    }

    /// Any state, time and cost: no panic, and the decision is well-formed.
    #[test]
    fn arbitrary_inputs_never_panic(
        limit in prop_oneof![Just(1u64), 1u64..=1000, Just(u64::MAX)],
        period in prop_oneof![Just(1u64), any::<u64>().prop_map(|p| p.max(1)), Just(u64::MAX)],
        state in (any::<u64>(), any::<u64>(), 0u8..3),
        now in any::<u64>(),
        cost in prop_oneof![0u64..=3, any::<u64>()],
    ) {
        // The text form builds any limit and period, with a burst of 1.
        let quota: Quota = format!("{limit}/{period}ns;burst=1").parse().unwrap();
        let (a, b, which) = state;
        let bucket = TokenBucket::new(&quota);
        let tb = tollgate::algorithm::TokenBucketState { deficit: a, refilled_at: b };
        well_formed(&bucket, &tb, now, cost)?;
        let hybrid = Hybrid::new(&quota);
        let hs = match which {
            0 => HybridState::Fresh,
            1 => HybridState::Bursty { start: a, tokens: b },
            _ => HybridState::Smooth { time: a, empty_at: b },
        };
        well_formed(&hybrid, &hs, now, cost)?;
    }
}

fn well_formed<A: MemoryAlgorithm>(
    alg: &A,
    state: &A::State,
    now: u64,
    cost: u64,
) -> Result<(), TestCaseError> {
    let out = alg.check(state, now, cost);
    let d = out.decision;
    prop_assert!(d.allowed || out.state.is_none());
    prop_assert!(!d.allowed || d.retry_after.is_none());
    prop_assert!(d.retry_after.is_none_or(|r| r > Duration::ZERO));
    let _ = alg.transition(state, now, cost);
    let _ = alg.decide(state, out.state.as_ref(), now, cost);
    let _ = alg.refund(state, &d, now, cost);
    let _ = alg.is_fresh(state, now);
    Ok(())
}
