//! A key's token budget under an LLM workload: requests whose true cost (the tokens the model
//! used) is known only when the answer ends, limited by GCRA at a quota of tokens per minute.
//! Each request reserves an estimate when it arrives; a strategy either keeps the estimate
//! (never settled) or settles to the true cost when the answer ends
//! ([`RateLimiter::settle`]).
//!
//! `tests/examples/simulate.rs` includes this file and asserts its numbers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tollgate::algorithm::Gcra;
use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
use tollgate::{Decision, Quota, RateLimiter};

use crate::sim::SECOND;

/// The key's budget: 20 000 tokens per minute (GCRA, so one token every 3 ms and a burst of a
/// minute's worth).
pub fn token_quota() -> Quota {
    Quota::per_minute(20_000)
}

/// The fewest and the most tokens a request uses.
pub const FEWEST: u64 = 50;
/// See [`FEWEST`].
pub const MOST: u64 = 4_000;

/// A minute in nanoseconds: the period of the quota and of the chart's counts.
pub const MINUTE: u64 = 60 * SECOND;

/// How long the workload runs: ten minutes.
pub const SPAN: u64 = 10 * MINUTE;

/// The same seed on every run: the workload is the same every time.
const SEED: u64 = 0x5EED_70C3_2026_0001;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Tokens between [`FEWEST`] and [`MOST`] with a heavy tail ([`pareto`]).
    fn tokens(&mut self) -> u64 {
        pareto(self.next() >> 32)
    }
}

/// The tokens of a request drawn at `r` of `2^32` (see [`Call::tokens`]): the inverse of the
/// law's distribution function at `u = r / 2^32`, `FEWEST·MOST / (MOST − u·(MOST − FEWEST))`,
/// in integers.
pub fn pareto(r: u64) -> u64 {
    let r = u128::from(r.min(u64::from(u32::MAX)));
    let num = u128::from(FEWEST * MOST) << 32;
    let den = (u128::from(MOST) << 32) - r * u128::from(MOST - FEWEST);
    u64::try_from(num / den).map_or(MOST, |x| x.clamp(FEWEST, MOST))
}

/// One request of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// When it arrives, in nanoseconds since the start.
    pub at: u64,
    /// The tokens it truly uses, known when its answer ends: from [`FEWEST`] to [`MOST`],
    /// heavy-tailed (a Pareto law of index 1 cut at both ends: the chance of more than `x`
    /// tokens falls as `1/x`), so half the requests use under 99 tokens, the mean is 222 and
    /// one in 80 uses more than 2 000.
    pub tokens: u64,
    /// How long its answer streams: 300 ms, then 100 tokens a second.
    pub lasts: u64,
}

/// The workload: one API key run by an agent that sends its requests in bursts (1 to 8 at
/// once, every 1 to 3 s), each using [`Call::tokens`], about 30 000 tokens a minute in all:
/// one and a half times the quota.
pub fn workload() -> Vec<Call> {
    let mut rng = Rng(SEED);
    let mut calls = Vec::new();
    let mut at = 0;
    while at < SPAN {
        for _ in 0..=rng.below(8) {
            let tokens = rng.tokens();
            let lasts = 300 * SECOND / 1000 + tokens * SECOND / 100;
            calls.push(Call { at, tokens, lasts });
        }
        at += SECOND + rng.below(2 * SECOND);
    }
    calls
}

/// The true tokens `calls` ask for in each minute of [`SPAN`].
pub fn demand_per_minute(calls: &[Call]) -> Vec<u64> {
    let minutes = usize::try_from(SPAN.div_ceil(MINUTE)).expect("a few minutes");
    let mut demand = vec![0; minutes];
    for call in calls {
        demand[usize::try_from(call.at / MINUTE).expect("a few minutes")] += call.tokens;
    }
    demand
}

/// How a request's cost is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Reserve the estimate and keep it, whatever the request used.
    Fixed(u64),
    /// Reserve the estimate, then settle to the true cost when the answer ends.
    Settled(u64),
}

impl Strategy {
    /// The strategies the chart compares, in the order of tables and legends.
    pub const ALL: [Strategy; 4] = [
        Strategy::Fixed(100),
        Strategy::Fixed(1_000),
        Strategy::Settled(100),
        Strategy::Settled(1_000),
    ];

    /// The name in tables and legends.
    pub fn name(self) -> String {
        match self {
            Strategy::Fixed(e) => format!("reserve {}, never settled", thousands(e)),
            Strategy::Settled(e) => format!("reserve {}, settled", thousands(e)),
        }
    }
}

/// What one strategy let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenOutcome {
    /// The strategy.
    pub strategy: Strategy,
    /// Requests allowed and denied (a denied request is dropped).
    pub admitted: u64,
    /// See [`admitted`](Self::admitted).
    pub denied: u64,
    /// The true tokens of the allowed requests, counted in the minute each arrived.
    pub tokens_per_minute: Vec<u64>,
    /// The denied requests, counted in the minute each arrived.
    pub denied_per_minute: Vec<u64>,
    /// The most tokens the key was in debt after a settlement (0 when it never was).
    pub deepest_debt: u64,
}

impl TokenOutcome {
    /// The true tokens of all the allowed requests.
    pub fn tokens(&self) -> u64 {
        self.tokens_per_minute.iter().sum()
    }
}

/// An answer still streaming: it settles when it ends.
struct Streaming {
    admission: Decision,
    reserved: u64,
    tokens: u64,
}

/// One strategy's run: the limiter on its clock, the answers still streaming, and what came out.
struct Run {
    clock: ManualClock,
    limiter: RateLimiter<Gcra, MemoryStore, ManualClock>,
    interval: u128,
    /// Answers by when they end, the index into `open` breaking ties in arrival order.
    ends: BinaryHeap<Reverse<(u64, usize)>>,
    open: Vec<Option<Streaming>>,
    outcome: TokenOutcome,
}

impl Run {
    /// Settles every answer that ends by `until`, in the order they end.
    fn settle_until(&mut self, until: u64) {
        while let Some(&Reverse((ends, i))) = self.ends.peek() {
            if ends > until {
                break;
            }
            self.ends.pop();
            let Some(s) = self.open[i].take() else {
                continue;
            };
            self.clock.set(Duration::from_nanos(ends));
            let standing = self
                .limiter
                .settle("key", &s.admission, s.reserved, s.tokens)
                .into_inner()
                .expect("the memory store never fails");
            // A key denied even a request of cost 0 is in debt: it pays one token back every
            // interval until it is out.
            if !standing.allowed {
                let wait = standing.retry_after.map_or(0, |d| d.as_nanos());
                let debt = u64::try_from(wait / self.interval).unwrap_or(u64::MAX);
                self.outcome.deepest_debt = self.outcome.deepest_debt.max(debt);
            }
        }
    }

    /// Decides `call` at its arrival, after settling the answers that ended before it.
    fn arrive(&mut self, call: &Call) {
        self.settle_until(call.at);
        self.clock.set(Duration::from_nanos(call.at));
        let (reserved, settles) = match self.outcome.strategy {
            Strategy::Fixed(e) => (e, false),
            Strategy::Settled(e) => (e, true),
        };
        let minute = usize::try_from(call.at / MINUTE).expect("a few minutes");
        let admission = self.limiter.check_n_now("key", reserved);
        if !admission.allowed {
            self.outcome.denied += 1;
            self.outcome.denied_per_minute[minute] += 1;
            return;
        }
        self.outcome.admitted += 1;
        self.outcome.tokens_per_minute[minute] += call.tokens;
        if settles {
            self.ends
                .push(Reverse((call.at + call.lasts, self.open.len())));
            self.open.push(Some(Streaming {
                admission,
                reserved,
                tokens: call.tokens,
            }));
        }
    }
}

/// Runs `calls` through a fresh GCRA limiter at `quota`, counting costs by `strategy`, on a
/// [`ManualClock`] set to each arrival and each answer's end in time order.
pub fn simulate_tokens(strategy: Strategy, quota: &Quota, calls: &[Call]) -> TokenOutcome {
    let clock = ManualClock::new();
    let minutes = usize::try_from(SPAN.div_ceil(MINUTE)).expect("a few minutes");
    let mut run = Run {
        limiter: RateLimiter::gcra(quota.clone()).with_clock(clock.clone()),
        clock,
        interval: quota.emission_interval().as_nanos(),
        ends: BinaryHeap::new(),
        open: Vec::new(),
        outcome: TokenOutcome {
            strategy,
            admitted: 0,
            denied: 0,
            tokens_per_minute: vec![0; minutes],
            denied_per_minute: vec![0; minutes],
            deepest_debt: 0,
        },
    };
    for call in calls {
        run.arrive(call);
    }
    run.settle_until(u64::MAX);
    run.outcome
}

/// Every strategy through the workload.
pub fn simulate_strategies(quota: &Quota) -> Vec<TokenOutcome> {
    let calls = workload();
    Strategy::ALL
        .iter()
        .map(|&s| simulate_tokens(s, quota, &calls))
        .collect()
}

/// The most tokens GCRA at `quota` lets a fresh key take in [`SPAN`]: its burst, and the
/// quota's rate over the span.
pub fn allowed(quota: &Quota) -> u64 {
    let period = u64::try_from(quota.period().as_nanos()).expect("a minute");
    quota.burst() + quota.limit() * SPAN / period
}

/// What the chart and the table show, in one line.
pub const FINDING: &str = "\
Settled from a low estimate, a key gets what its quota allows (a request over its estimate is
charged the rest, as a debt); a fixed estimate admits too much or too little, and a high
estimate settled while other answers stream keeps most of what it reserved (a refund gives
back no place a later admission stands behind).";

/// The chart's title: the quota and what the key asks of it.
pub fn title(quota: &Quota, demand: &[u64]) -> String {
    let asked: u64 = demand.iter().sum();
    let minutes = demand.len() as u64;
    format!(
        "LLM tokens: a key asking {:.1}x its {} tokens a minute, requests of {FEWEST} to {} tokens",
        asked as f64 / (quota.limit() * minutes) as f64,
        thousands(quota.limit()),
        thousands(MOST)
    )
}

/// The table of outcomes, with a header line.
pub fn token_table(quota: &Quota, outcomes: &[TokenOutcome]) -> String {
    let allowed = allowed(quota);
    let mut out = format!(
        "{:<28} {:>8} {:>7} {:>12} {:>9} {:>12}\n",
        "strategy", "admitted", "denied", "true tokens", "of quota", "deepest debt"
    );
    for o in outcomes {
        out += &format!(
            "{:<28} {:>8} {:>7} {:>12} {:>8}% {:>12}\n",
            o.strategy.name(),
            o.admitted,
            o.denied,
            thousands(o.tokens()),
            o.tokens() * 100 / allowed,
            thousands(o.deepest_debt)
        );
    }
    out
}

/// `n` with a space between thousands: `20 000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}
