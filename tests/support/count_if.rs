//! `count_if` under attack, the shared machinery: a random stream of requests for one key,
//! each allowed one finishing after a random time and, when its response does not count,
//! giving back its cost then (so refunds arrive after new windows opened, after later
//! admissions, out of order). The admissions that count are then checked against the quota by
//! oracles that know nothing of refunds.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{Algorithm, Gcra};
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::{MemoryAlgorithm, Store};
use tollgate::{Decision, Quota, RateLimiter};

pub const MS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
pub struct Req {
    pub gap: u64,
    pub cost: u64,
    pub counts: bool,
    pub takes: u64,
}

pub fn requests(max_gap: u64, max_takes: u64, max_cost: u64) -> impl Strategy<Value = Vec<Req>> {
    let req = (
        0..=max_gap,
        1..=max_cost,
        prop::bool::weighted(0.4),
        0..=max_takes,
    )
        .prop_map(|(gap, cost, counts, takes)| Req {
            gap,
            cost,
            counts,
            takes,
        });
    prop::collection::vec(req, 1..80)
}

/// The counted admissions: (time the request runs, its cost, its decision).
pub type Counted = Vec<(u64, u64, Decision)>;

pub async fn run<A, St>(
    limiter: &RateLimiter<A, St, ManualClock>,
    clock: &ManualClock,
    reqs: &[Req],
    finish_first: bool,
    keep: &dyn Fn() -> bool,
) -> Option<Counted>
where
    A: Algorithm,
    St: Store<A>,
{
    let mut events: BTreeMap<(u64, u8, usize), Option<usize>> = BTreeMap::new();
    let mut at = 0;
    for (i, r) in reqs.iter().enumerate() {
        at += r.gap;
        events.insert((at, u8::from(finish_first), i), None);
    }
    let start = clock.now_nanos();
    let mut admitted: Vec<Option<Decision>> = vec![None; reqs.len()];
    let mut counted = Counted::new();
    while let Some(((ms, _, i), finish)) = events.pop_first() {
        let now = start + ms * MS;
        clock.advance(Duration::from_nanos(now - clock.now_nanos()));
        match finish {
            None => {
                let decision = limiter
                    .check_n("k", reqs[i].cost)
                    .await
                    .expect("the store answers");
                if decision.allowed {
                    let done = ms + decision.delay.as_millis() as u64 + reqs[i].takes;
                    events.insert((done, u8::from(!finish_first), i), Some(i));
                    if reqs[i].counts {
                        counted.push((
                            now + decision.delay.as_nanos() as u64,
                            reqs[i].cost,
                            decision.clone(),
                        ));
                    }
                    admitted[i] = Some(decision);
                }
            }
            Some(i) => {
                let decision = admitted[i].take().expect("finished once");
                if !reqs[i].counts {
                    limiter
                        .refund("k", &decision, reqs[i].cost)
                        .await
                        .expect("the store answers");
                }
            }
        }
        if !keep() {
            return None;
        }
    }
    Some(counted)
}

/// The counted requests, at the times given, with their costs, pass a fresh GCRA of `quota`.
pub fn conform_to_gcra(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let gcra = Gcra::new(quota);
    let mut tat = 0;
    for (i, (at, cost, _)) in counted.iter().enumerate() {
        let out = gcra.check(&tat, *at, *cost);
        prop_assert!(
            out.decision.allowed,
            "counted request {} at {} ns (cost {}) exceeds {:?}: {:?}",
            i,
            at,
            cost,
            quota,
            counted.iter().map(|(t, c, _)| (*t, *c)).collect::<Vec<_>>()
        );
        tat = out.state.unwrap_or(tat);
    }
    Ok(())
}

pub fn fit_fixed_windows(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
    for (at, cost, d) in counted {
        let start = d.receipt();
        prop_assert!(
            start <= *at && *at < start + period,
            "{} not in {}",
            at,
            start
        );
        *windows.entry(start).or_default() += cost;
    }
    let mut last_end = 0;
    for (&start, &n) in &windows {
        prop_assert!(start >= last_end, "windows overlap: {:?}", windows);
        prop_assert!(
            n <= quota.limit(),
            "{} counted in the window at {}",
            n,
            start
        );
        last_end = start + period;
    }
    Ok(())
}

pub fn fit_every_window(quota: &Quota, counted: &Counted) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    for (i, (end, _, _)) in counted.iter().enumerate() {
        let inside: u64 = counted[..=i]
            .iter()
            .filter(|(t, _, _)| end - t < period)
            .map(|(_, c, _)| c)
            .sum();
        prop_assert!(
            inside <= quota.limit(),
            "{} counted in the period up to {}: {:?}",
            inside,
            end,
            counted.iter().map(|(t, c, _)| (*t, *c)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// The sliding window: at each counted request, the window's estimate over the counted
/// requests alone (on the grid of sub-windows they were counted in) is within the limit: each
/// sub-window inside the last `period` counts whole, the one straddling its start by the part
/// inside. An allowed decision says where its sub-window ends: it leaves the estimate
/// (`reset_after`) a period after that.
pub fn fit_the_sliding_estimate(
    quota: &Quota,
    k: u64,
    counted: &Counted,
) -> Result<(), TestCaseError> {
    let period = quota.period().as_nanos() as u64;
    let sub = period / k;
    prop_assume!(sub * k == period);
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, (t, cost, d)) in counted.iter().enumerate() {
        let end = t + d.reset_after.as_nanos() as u64 - period;
        prop_assert!(
            end > *t && end - t <= sub,
            "sub-window end {} for {}",
            end,
            t
        );
        *ends.entry(end).or_default() += cost;
        let start = t.saturating_sub(period);
        let weighed: u64 = ends
            .iter()
            .map(|(&e, &n)| {
                let inside = if e <= start {
                    0
                } else if e - sub <= start {
                    e - start
                } else {
                    sub
                };
                n * inside
            })
            .sum();
        prop_assert!(
            weighed <= quota.limit() * sub,
            "counted request {} at {} ns: the estimate is {}/{} over the limit {}: {:?}",
            i,
            t,
            weighed,
            sub,
            quota.limit(),
            counted.iter().map(|(t, c, _)| (*t, *c)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// Runs `reqs` on `limiter` in memory, on a manual clock.
pub fn on_memory<A>(limiter: RateLimiter<A>, reqs: &[Req], finish_first: bool) -> Counted
where
    A: Algorithm,
    A: MemoryAlgorithm,
{
    let clock = ManualClock::new();
    let limiter = limiter.with_clock(clock.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(run(&limiter, &clock, reqs, finish_first, &|| true))
        .expect("memory never loses state")
}

/// The leaky bucket's counted requests at the time they were admitted (their run time less
/// their delay in the queue).
pub fn at_admission(counted: Counted) -> Counted {
    counted
        .into_iter()
        .map(|(t, c, d)| (t - d.delay.as_nanos() as u64, c, d))
        .collect()
}
