//! The simulation behind `cargo run --example simulate`: every algorithm gets the same quota
//! and the same traffic, on a [`ManualClock`] that jumps from one request to the next (nothing
//! sleeps), and each admitted request is recorded at the time it reaches the service.
//!
//! `tests/examples/simulate.rs` includes this file and asserts its numbers.

use std::collections::HashMap;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Decision, Quota, RateLimiter};

/// One second in nanoseconds, the unit of all times here.
pub const SECOND: u64 = 1_000_000_000;

/// The quota every algorithm gets: 100 requests per minute, so one every `T = 600 ms`.
///
/// A minute is the period people write limits in and long enough to see each algorithm's
/// rhythm: windows that refill all at once, rates that refill every 600 ms, queues that drain
/// one request at a time. 100 makes the counts read as percentages of the quota and divides
/// the intervals of every pattern exactly (at 1.2x, 2x and 4x a client sends every 500, 300
/// and 150 ms), so every time is an exact integer and every number can be checked by hand.
pub fn quota() -> Quota {
    Quota::per_minute(100)
}

/// Decides a request from `client` at `now` (nanoseconds since the start of the pattern).
pub type Decider = Box<dyn FnMut(u64, u64) -> Decision>;

/// An algorithm in the simulation: its name and how to build a fresh limiter for a quota.
pub struct Algo {
    /// The name in tables and chart legends.
    pub name: &'static str,
    /// A fresh limiter for the quota, on its own clock.
    pub make: fn(Quota) -> Decider,
}

/// Drives a limiter with a [`ManualClock`] set to each request's time.
macro_rules! on_manual_clock {
    ($limiter:expr) => {{
        let clock = ManualClock::new();
        let limiter = $limiter.with_clock(clock.clone());
        Box::new(move |client, now| {
            clock.set(Duration::from_nanos(now));
            limiter.check_now(client)
        }) as Decider
    }};
}

/// Every algorithm the simulation compares, in the order of tables and legends.
pub fn algorithms() -> Vec<Algo> {
    vec![
        Algo {
            name: "GCRA",
            make: |q| on_manual_clock!(RateLimiter::gcra(q)),
        },
        Algo {
            name: "token bucket",
            make: |q| on_manual_clock!(RateLimiter::token_bucket(q)),
        },
        Algo {
            name: "leaky bucket",
            make: |q| on_manual_clock!(RateLimiter::leaky_bucket(q)),
        },
        Algo {
            name: "fixed window",
            make: |q| on_manual_clock!(RateLimiter::fixed_window(q)),
        },
        Algo {
            name: "sliding window",
            make: |q| on_manual_clock!(RateLimiter::sliding_window(q)),
        },
        Algo {
            name: "sliding window, 6 sub-windows",
            make: |q| on_manual_clock!(RateLimiter::sliding_window(q).sub_windows(6)),
        },
        Algo {
            name: "sliding log",
            make: |q| on_manual_clock!(RateLimiter::sliding_log(q)),
        },
        Algo {
            name: "hybrid",
            make: |q| on_manual_clock!(RateLimiter::hybrid(q)),
        },
    ]
}

/// One request: when it is sent and by which client (each client is its own key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Attempt {
    /// Nanoseconds since the start of the pattern.
    pub at: u64,
    /// The client, and so the key the limiter counts it against.
    pub client: u64,
}

/// Traffic: the requests of one or more clients over a span of time.
pub struct Pattern {
    /// A short name, used in the chart's file name (`sim-<slug>.svg`).
    pub slug: &'static str,
    /// What the traffic is, in a sentence.
    pub title: String,
    /// How long the simulation runs, in nanoseconds.
    pub span: u64,
    /// The requests, in time order.
    pub attempts: Vec<Attempt>,
    /// Whether a client retries a denied request with its next ones (a client that keeps
    /// trying), or drops it (a batch that takes what passes).
    pub retries: bool,
}

impl Pattern {
    fn new(
        slug: &'static str,
        title: String,
        span: u64,
        mut attempts: Vec<Attempt>,
        retries: bool,
    ) -> Self {
        attempts.sort();
        Self {
            slug,
            title,
            span,
            attempts,
            retries,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("durations here fit in u64 nanoseconds")
}

/// One client sending at `num / den` times the quota's rate, evenly spaced from time 0, for
/// `span` nanoseconds.
pub fn steady(q: &Quota, num: u64, den: u64, span: u64) -> Pattern {
    let every = nanos(q.emission_interval()) * den / num;
    let attempts = (0..span.div_ceil(every))
        .map(|i| Attempt {
            at: i * every,
            client: 0,
        })
        .collect();
    let times = if den == 1 {
        format!("{num}x")
    } else {
        format!("{:.1}x", num as f64 / den as f64)
    };
    let slug = match (num, den) {
        (6, 5) => "abuse-1.2x",
        (2, 1) => "abuse-2x",
        (4, 1) => "abuse-4x",
        _ => "abuse",
    };
    let title = format!(
        "Steady abuse at {times}: one client sending every {} for {}",
        secs(every),
        secs(span)
    );
    Pattern::new(slug, title, span, attempts, true)
}

/// A batch client: a full quota at once (it takes what passes and drops the rest) at 0, another after three quarters of a period, and
/// a third after a long pause (2.5 periods).
pub fn burst_pause(q: &Quota) -> Pattern {
    let period = nanos(q.period());
    let starts = [0, period * 3 / 4, period * 5 / 2];
    let attempts = starts
        .iter()
        .flat_map(|&at| (0..q.limit()).map(move |_| Attempt { at, client: 0 }))
        .collect();
    let title = format!(
        "Bursts and pauses: {} requests at once at {}, {} and {}",
        q.limit(),
        secs(starts[0]),
        secs(starts[1]),
        secs(starts[2])
    );
    Pattern::new("burst-pause", title, period * 7 / 2, attempts, false)
}

/// Bursts at a window's edge (denied requests are dropped): one request at 0 (which opens the key's first window for the
/// window algorithms), then a full quota spread over the last second before `period`, and
/// another over the first second after it.
pub fn window_edges(q: &Quota) -> Pattern {
    let period = nanos(q.period());
    let step = SECOND / q.limit();
    let before = (0..q.limit()).map(|i| period - SECOND + i * step);
    let after = (0..q.limit()).map(|i| period + i * step);
    let attempts = std::iter::once(0)
        .chain(before)
        .chain(after)
        .map(|at| Attempt { at, client: 0 })
        .collect();
    let title = format!(
        "Window edges: 1 request at 0 s, then {} in the second before {} and {} in the second after",
        q.limit(),
        secs(period),
        q.limit()
    );
    Pattern::new("window-edges", title, 2 * period, attempts, false)
}

/// Many polite clients: 20 clients, each at 3/4 of the rate on average, sending in small
/// bursts (client `i` sends `i % 5 + 1` requests at once every `(i % 5 + 1) · 4T/3`), started
/// 100 ms apart, for three periods.
pub fn polite(q: &Quota) -> Pattern {
    let every = nanos(q.emission_interval()) * 4 / 3;
    let span = 3 * nanos(q.period());
    let mut attempts = Vec::new();
    for client in 0..20 {
        let size = client % 5 + 1;
        let mut at = client * SECOND / 10;
        while at < span {
            attempts.extend((0..size).map(|_| Attempt { at, client }));
            at += size * every;
        }
    }
    let title = format!(
        "Polite clients: 20 keys, each at 3/4 of the rate in bursts of 1 to 5 ({}x one quota together)",
        20 * 3 / 4
    );
    Pattern::new("polite", title, span, attempts, true)
}

/// Every pattern the simulator draws, for `q`.
pub fn patterns(q: &Quota) -> Vec<Pattern> {
    let span = 10 * nanos(q.period());
    vec![
        steady(q, 6, 5, span),
        steady(q, 2, 1, span),
        steady(q, 4, 1, span),
        burst_pause(q),
        window_edges(q),
        polite(q),
    ]
}

/// What one algorithm did with one pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// When each admitted request reached the service (its arrival plus `Decision::delay`),
    /// all clients together, in time order.
    pub served: Vec<u64>,
    /// Requests allowed.
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
    /// The most requests of one key served in `[0, period)`.
    pub first_window: u64,
    /// The most requests of one key served within any `period`: the largest count in a
    /// window `[t, t + period)`, sliding `t` over all times.
    pub busiest_window: u64,
    /// Requests allowed, all clients together, before the first denial; `None` if none was
    /// denied.
    pub before_first_denial: Option<u64>,
    /// The longest wait, in nanoseconds (see [`COLUMNS`]).
    pub longest_wait: u64,
}

/// What the columns of [`table`] mean, for the printed output.
pub const COLUMNS: &str = "\
admitted, denied     requests allowed and denied.
first window         the most requests of one key served in [0 s, 60 s).
busiest window       the most requests of one key served within any 60 s, [t, t + 60 s)
                     for every t.
before 1st denial    requests allowed, all clients together, before the first denial.
longest wait         the longest time from a request being wanted to being served. A served
                     request waits its Decision::delay (the leaky bucket's queue) after it
                     arrives. A client that keeps trying (steady abuse, polite clients)
                     retries a denied request with each of its next requests, so its wait
                     runs from its first attempt since its last served one until an attempt
                     is served; a client sending bursts drops what is denied. Waits still
                     open at the end are not counted.
A request is served when it reaches the service: its arrival plus Decision::delay.";

/// Runs `pattern` through a fresh limiter of `algo` for `q`.
pub fn simulate(algo: &Algo, q: &Quota, pattern: &Pattern) -> Outcome {
    let period = nanos(q.period());
    let mut decide = (algo.make)(q.clone());
    let mut per_client: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut waiting_since: HashMap<u64, u64> = HashMap::new();
    let (mut admitted, mut denied) = (0, 0);
    let mut before_first_denial = None;
    let mut longest_wait = 0;
    for &Attempt { at, client } in &pattern.attempts {
        let decision = decide(client, at);
        let since = if pattern.retries {
            *waiting_since.entry(client).or_insert(at)
        } else {
            at
        };
        if decision.allowed {
            let served = at + nanos(decision.delay);
            longest_wait = longest_wait.max(served - since);
            waiting_since.remove(&client);
            per_client.entry(client).or_default().push(served);
            admitted += 1;
        } else {
            before_first_denial.get_or_insert(admitted);
            denied += 1;
        }
    }
    let mut served: Vec<u64> = per_client.values().flatten().copied().collect();
    served.sort_unstable();
    let keys = || per_client.values();
    Outcome {
        algorithm: algo.name,
        served,
        admitted,
        denied,
        first_window: keys()
            .map(|s| s.iter().filter(|&&t| t < period).count() as u64)
            .max()
            .unwrap_or(0),
        busiest_window: keys().map(|s| busiest(s, period)).max().unwrap_or(0),
        before_first_denial,
        longest_wait,
    }
}

/// The most times of `sorted` within any `[t, t + period)`. The busiest window can always be
/// moved to start at one of the times, so only those are tried.
pub fn busiest(sorted: &[u64], period: u64) -> u64 {
    let mut end = 0;
    let mut most = 0;
    for (start, &t) in sorted.iter().enumerate() {
        while end < sorted.len() && sorted[end] < t + period {
            end += 1;
        }
        most = most.max(end - start);
    }
    most as u64
}

/// Every algorithm through `pattern`.
pub fn simulate_all(q: &Quota, pattern: &Pattern) -> Vec<Outcome> {
    algorithms()
        .iter()
        .map(|algo| simulate(algo, q, pattern))
        .collect()
}

/// `ns` nanoseconds as seconds, with up to three decimals: `59.4 s`, `0.15 s`, `0 s`.
pub fn secs(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = format!("{}.{:03}", ms / 1000, ms % 1000);
    format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
}

/// The table of outcomes, with a header line.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut out = format!(
        "{:<29} {:>8} {:>7} {:>12} {:>14} {:>17} {:>12}\n",
        "algorithm",
        "admitted",
        "denied",
        "first window",
        "busiest window",
        "before 1st denial",
        "longest wait"
    );
    for o in outcomes {
        let first_denial = o
            .before_first_denial
            .map_or_else(|| "never denied".to_owned(), |n| n.to_string());
        out += &format!(
            "{:<29} {:>8} {:>7} {:>12} {:>14} {:>17} {:>12}\n",
            o.algorithm,
            o.admitted,
            o.denied,
            o.first_window,
            o.busiest_window,
            first_denial,
            secs(o.longest_wait)
        );
    }
    out
}
