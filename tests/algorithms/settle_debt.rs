//! A debt is paid back at the quota's rate, exactly: after a settlement that leaves a key `D`
//! cost units past what it may take at once, a peek waits exactly `D` intervals, a request of
//! cost `c` waits `D + c` intervals less the burst it still has, and the key is allowed exactly
//! then, not a nanosecond sooner. For GCRA, the token bucket, the leaky bucket and two tiers
//! (per minute and per day), through `RateLimiter::settle` on a memory store and a manual clock.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Decision, Quota, RateLimiter};

/// One case: a key uses `used` (kept whole), then a request reserves `reserved` and turns out
/// to cost `actual`; then a request of cost `cost` is tried `wait_part` of the way to its time.
#[derive(Debug, Clone)]
struct Case {
    used: u64,
    reserved: u64,
    actual: u64,
    cost: u64,
    wait_part: f64,
}

/// What a tier waits for a request of `cost` after `charged` units at time 0, at time `at`
/// (ns): the units past its burst, in its intervals, less the time gone.
fn wait(quota: &Quota, charged: u64, cost: u64, at: u64) -> u64 {
    let t = quota.emission_interval().as_nanos() as u64;
    let past = (charged + cost).saturating_sub(quota.burst());
    (past * t).saturating_sub(at)
}

/// The longest wait of any tier: the request passes when every tier allows it.
fn longest_wait(quotas: &[Quota], charged: u64, cost: u64, at: u64) -> u64 {
    quotas
        .iter()
        .map(|q| wait(q, charged, cost, at))
        .max()
        .unwrap()
}

fn retry(decision: &Decision) -> u64 {
    decision.retry_after.map_or(0, |d| d.as_nanos() as u64)
}

fn debt_is_paid_at_the_rate<A>(
    limiter: RateLimiter<A>,
    quotas: &[Quota],
    case: &Case,
) -> Result<(), TestCaseError>
where
    A: Algorithm + MemoryAlgorithm,
{
    let clock = ManualClock::new();
    let limiter: RateLimiter<A, MemoryStore, ManualClock> = limiter.with_clock(clock.clone());
    let Case {
        used,
        reserved,
        actual,
        cost,
        wait_part,
    } = *case;
    if used > 0 {
        prop_assert!(limiter.check_n_now("k", used).allowed);
    }
    let admission = limiter.check_n_now("k", reserved);
    prop_assert!(admission.allowed, "{:?}", admission);
    let standing = limiter
        .settle("k", &admission, reserved, actual)
        .into_inner()
        .unwrap();
    let charged = used + actual;
    // The settlement answers with the key's standing: a peek's.
    let peek = limiter.peek("k").into_inner().unwrap();
    prop_assert_eq!(&standing, &peek);
    let owed = longest_wait(quotas, charged, 0, 0);
    prop_assert_eq!(peek.allowed, owed == 0, "{:?}", peek);
    prop_assert_eq!(
        retry(&peek),
        owed,
        "the peek waits for the debt: {:?}",
        peek
    );
    // A request of `cost`: denied until exactly its time, and the denials change nothing.
    let due = longest_wait(quotas, charged, cost, 0);
    let early = limiter.check_n_now("k", cost);
    prop_assert_eq!(early.allowed, due == 0);
    if due == 0 {
        return Ok(());
    }
    prop_assert_eq!(retry(&early), due, "{:?}", early);
    let part = ((due as f64 * wait_part) as u64).min(due - 1);
    clock.advance(Duration::from_nanos(part));
    let partway = limiter.check_n_now("k", cost);
    prop_assert!(!partway.allowed);
    prop_assert_eq!(retry(&partway), due - part);
    let peek = limiter.peek("k").into_inner().unwrap();
    prop_assert_eq!(retry(&peek), longest_wait(quotas, charged, 0, part));
    clock.advance(Duration::from_nanos(due - 1 - part));
    let a_nanosecond_early = limiter.check_n_now("k", cost);
    prop_assert!(!a_nanosecond_early.allowed, "{:?}", a_nanosecond_early);
    prop_assert_eq!(retry(&a_nanosecond_early), 1);
    clock.advance(Duration::from_nanos(1));
    let on_time = limiter.check_n_now("k", cost);
    prop_assert!(on_time.allowed, "{:?}", on_time);
    Ok(())
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=20, 1u64..=60, 1u64..=10).prop_map(|(limit, secs, burst)| {
        Quota::new(limit, Duration::from_secs(secs)).with_burst(burst)
    })
}

/// A case for quotas whose smallest burst is `burst`: what is used and reserved fits in it.
fn case(burst: u64) -> impl Strategy<Value = Case> {
    (0..=burst, 0..=burst, 0u64..=3 * burst + 5, 0.0f64..1.0).prop_flat_map(
        move |(used, reserved, actual, wait_part)| {
            let reserved = reserved.min(burst - used);
            (1..=burst).prop_map(move |cost| Case {
                used,
                reserved,
                actual,
                cost,
                wait_part,
            })
        },
    )
}

fn single() -> impl Strategy<Value = (Quota, Case)> {
    quota().prop_flat_map(|q| {
        let burst = q.burst();
        (Just(q), case(burst))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gcra_pays_a_debt_back_at_its_rate((q, case) in single()) {
        debt_is_paid_at_the_rate(RateLimiter::gcra(q.clone()), &[q], &case)?;
    }

    #[test]
    fn token_bucket_pays_a_debt_back_at_its_rate((q, case) in single()) {
        debt_is_paid_at_the_rate(RateLimiter::token_bucket(q.clone()), &[q], &case)?;
    }

    #[test]
    fn leaky_bucket_pays_a_debt_back_at_its_rate((q, case) in single()) {
        // The queue holds `burst`: a request waits for a place in it, then for its turn.
        debt_is_paid_at_the_rate(RateLimiter::leaky_bucket(q.clone()), &[q], &case)?;
    }

    #[test]
    fn tiers_pay_a_debt_back_at_each_tiers_rate(
        per_minute in 2u64..=60,
        minute_burst in 1u64..=10,
        per_day in 20u64..=2000,
        case in case(10).prop_filter("fits the minute's burst", |c| c.used + c.reserved <= 10),
    ) {
        // As an LLM API's tokens: per minute and per day, the day's burst the smaller one
        // sometimes.
        let minute = Quota::per_minute(per_minute).with_burst(minute_burst.max(case.used + case.reserved).max(case.cost));
        let day = Quota::per_day(per_day).with_burst(per_day.min(12).max(case.used + case.reserved).max(case.cost));
        let quotas = [minute, day];
        debt_is_paid_at_the_rate(RateLimiter::gcra(quotas.clone()), &quotas, &case)?;
        debt_is_paid_at_the_rate(RateLimiter::token_bucket(quotas.clone()), &quotas, &case)?;
    }
}

/// The figures a user reads: 600 tokens a minute, an estimate of 100, a true cost of 700.
#[test]
fn the_guides_example() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_minute(600)).with_clock(clock.clone());
    let admission = limiter.check_n_now("key", 100);
    let standing = limiter
        .settle("key", &admission, 100, 700)
        .into_inner()
        .unwrap();
    // 700 of 600: 100 tokens of debt, 10 s at 10 a second.
    assert!(!standing.allowed);
    assert_eq!(standing.remaining, 0);
    assert_eq!(standing.retry_after, Some(Duration::from_secs(10)));
    // One more token waits for the debt and itself.
    let denied = limiter.check_now("key");
    assert_eq!(denied.retry_after, Some(Duration::from_millis(10_100)));
    clock.advance(Duration::from_millis(10_100) - Duration::from_nanos(1));
    assert!(!limiter.check_now("key").allowed);
    clock.advance(Duration::from_nanos(1));
    assert!(limiter.check_now("key").allowed);
    // A settlement at the reservation changes nothing; one below it gives the rest back.
    let admission = limiter.check_n_now("other", 100);
    let same = limiter
        .settle("other", &admission, 100, 100)
        .into_inner()
        .unwrap();
    assert_eq!(same.remaining, 500);
    let less = limiter
        .settle("other", &admission, 100, 40)
        .into_inner()
        .unwrap();
    assert_eq!(less.remaining, 560);
}
