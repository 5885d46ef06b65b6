//! Costs settled after the response, in combination, on a memory store: a debt and a live
//! change of quotas, a reset, a block, and plans kept by limiters of their own.
//!
//! - New quotas keep a debt (`Handle::set_quotas` while a key owes): a key that owes 3 past a
//!   burst of 5 owes 3 past a burst of 2, and pays them back at the new rate; under a burst of
//!   20 it has used 8 of it, as a key that used 8 there. Never forgiven, never more than the
//!   old quota allowed before the change and the new one after it.
//! - A reset forgets a debt; a settlement that arrives after it charges the fresh key what
//!   was overspent, and gives nothing back below its reservation.
//! - A block and a debt: the key is denied until both are over, and `retry_after` says when
//!   (the longer of the two); a settlement during a block still charges the key.
//! - Plans as limiters of their own on one store: each plan's debt is paid under that plan.

use crate::support::live_app;

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
use tollgate::{Decision, Quota, RateLimitLayer, RateLimiter};

use live_app::{block_on, live, passes, runtime};

const MS: Duration = Duration::from_millis(1);

fn tokens(per_second: u64, burst: u64) -> Quota {
    Quota::per_second(per_second)
        .with_burst(burst)
        .named("tokens")
}

/// A limiter and a live layer keyed by `x-api-key` sharing one named policy in one store, on
/// `clock`: the limiter settles costs, the layer's handle changes its quotas.
fn shared(
    clock: &ManualClock,
) -> (
    RateLimiter<tollgate::algorithm::Gcra, MemoryStore, ManualClock>,
    tollgate::layer::Handle,
    axum::Router,
) {
    let store = MemoryStore::new();
    let limiter = RateLimiter::gcra(tokens(10, 5))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let (handle, app) = live(RateLimitLayer::gcra(tokens(10, 5)).store(store), clock);
    (limiter, handle, app)
}

/// Puts `key` 3 units past a burst of 5 at 10 a second: reserved 5, cost 8.
fn in_debt<St, C>(limiter: &RateLimiter<tollgate::algorithm::Gcra, St, C>, key: &str) -> Decision
where
    St: tollgate::store::Store<tollgate::algorithm::Gcra>,
    C: tollgate::clock::Clock,
{
    let admission = block_on(limiter.check_n(key, 5)).unwrap();
    assert!(admission.allowed);
    let standing = block_on(limiter.settle(key, &admission, 5, 8)).unwrap();
    assert!(!standing.allowed);
    assert_eq!(standing.retry_after, Some(300 * MS));
    standing
}

#[test]
fn smaller_quotas_keep_a_debt() {
    let (rt, clock) = (runtime(), ManualClock::new());
    let (limiter, handle, app) = shared(&clock);
    in_debt(&limiter, "alice");
    let peek = block_on(handle.peek("alice")).unwrap();
    assert_eq!(peek.retry_after, Some(300 * MS), "the layer reads the debt");
    assert!(!passes(&rt, &app, "alice"));
    handle.set_quotas(tokens(10, 2)).unwrap();
    let peek = block_on(handle.peek("alice")).unwrap();
    assert!(!peek.allowed, "the debt was forgiven: {peek:?}");
    assert_eq!(peek.retry_after, Some(300 * MS));
    // Paid back at 10 a second: one request 400 ms later, not a nanosecond sooner.
    clock.advance(400 * MS - Duration::from_nanos(1));
    assert!(!passes(&rt, &app, "alice"));
    clock.advance(Duration::from_nanos(1));
    assert!(passes(&rt, &app, "alice"));
    assert!(!passes(&rt, &app, "alice"));
}

#[test]
fn a_slower_rate_is_paid_back_slower() {
    let (rt, clock) = (runtime(), ManualClock::new());
    let (limiter, handle, app) = shared(&clock);
    in_debt(&limiter, "alice");
    handle.set_quotas(tokens(1, 5)).unwrap();
    let peek = block_on(handle.peek("alice")).unwrap();
    assert_eq!(peek.retry_after, Some(Duration::from_secs(3)));
    clock.advance(Duration::from_secs(4) - Duration::from_nanos(1));
    assert!(!passes(&rt, &app, "alice"));
    clock.advance(Duration::from_nanos(1));
    assert!(passes(&rt, &app, "alice"));
}

#[test]
fn larger_quotas_count_a_debt_as_used() {
    let (rt, clock) = (runtime(), ManualClock::new());
    let (limiter, handle, app) = shared(&clock);
    in_debt(&limiter, "alice");
    in_debt(&limiter, "bob");
    handle.set_quotas(tokens(10, 20)).unwrap();
    // 8 of 20 used: 12 more at once, as for a key that used 8 under the new quotas; a key
    // that used nothing gets all 20.
    let peek = block_on(handle.peek("alice")).unwrap();
    assert_eq!((peek.allowed, peek.remaining), (true, 12));
    let passed = (0..30).filter(|_| passes(&rt, &app, "alice")).count();
    assert_eq!(passed, 12);
    let fresh = (0..30).filter(|_| passes(&rt, &app, "carol")).count();
    assert_eq!(fresh, 20);
    // Over the change, alice got 8 (5 allowed, 3 overspent while in flight) and then 12:
    // the new quota's 20, no more.
    assert_eq!(8 + passed, 20);
    // bob, untouched until the change settles, keeps his debt too.
    let peek = block_on(handle.peek("bob")).unwrap();
    assert_eq!(peek.remaining, 12);
}

#[test]
fn a_reset_forgets_a_debt() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(5)).with_clock(clock.clone());
    in_debt(&limiter, "alice");
    // A request admitted before the reset and settled after it.
    let admission = limiter.check_n_now("bob", 4);
    let other = limiter.check_n_now("bob", 1);
    block_on(limiter.reset("alice")).unwrap();
    block_on(limiter.reset("bob")).unwrap();
    let peek = block_on(limiter.peek("alice")).unwrap();
    assert_eq!((peek.allowed, peek.remaining), (true, 5));
    // Below its reservation: nothing to give back to a fresh key.
    let standing = block_on(limiter.settle("bob", &admission, 4, 1)).unwrap();
    assert_eq!(standing.remaining, 5);
    // Above it: the fresh key is charged what was overspent.
    let standing = block_on(limiter.settle("bob", &other, 1, 4)).unwrap();
    assert_eq!(standing.remaining, 2);
}

#[test]
fn a_block_and_a_longer_debt_deny_until_the_debt_is_paid() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(5)).with_clock(clock.clone());
    // 30 units past the burst: 3 s of debt, and a block of 1 s.
    let admission = limiter.check_n_now("alice", 5);
    block_on(limiter.settle("alice", &admission, 5, 35)).unwrap();
    block_on(limiter.block("alice", Duration::from_secs(1))).unwrap();
    for decision in [
        limiter.check_now("alice"),
        block_on(limiter.peek("alice")).unwrap(),
    ] {
        assert!(decision.is_blocked());
        assert_eq!(
            decision.retry_after,
            Some(Duration::from_secs(3)),
            "a client told to retry when the block ends is denied again: {decision:?}"
        );
    }
    // The block is over, the debt is not.
    clock.advance(Duration::from_secs(1));
    let denied = limiter.check_now("alice");
    assert!(!denied.allowed && !denied.is_blocked());
    assert_eq!(denied.retry_after, Some(Duration::from_millis(2100)));
    clock.advance(Duration::from_millis(2100));
    assert!(limiter.check_now("alice").allowed);
}

#[test]
fn a_block_outlasting_a_debt_decides_and_settlements_still_count_during_it() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(5)).with_clock(clock.clone());
    let admission = limiter.check_n_now("alice", 5);
    let standing = block_on(limiter.settle("alice", &admission, 5, 8)).unwrap();
    assert_eq!(standing.retry_after, Some(300 * MS));
    // Admitted before the block, settled during it: still charged.
    clock.advance(Duration::from_secs(1));
    let late = limiter.check_n_now("alice", 2);
    assert!(late.allowed);
    block_on(limiter.block("alice", Duration::from_secs(2))).unwrap();
    let standing = block_on(limiter.settle("alice", &late, 2, 40)).unwrap();
    assert!(standing.is_blocked());
    // 40 from 1 s: 35 past the burst, 3.5 s; longer than the block's 2 s.
    assert_eq!(standing.retry_after, Some(Duration::from_millis(3500)));
    let peek = block_on(limiter.peek("alice")).unwrap();
    assert_eq!(peek.retry_after, Some(Duration::from_millis(3500)));
    // A debt shorter than the block: the block decides.
    let admission = limiter.check_n_now("bob", 5);
    block_on(limiter.settle("bob", &admission, 5, 6)).unwrap();
    block_on(limiter.block("bob", Duration::from_secs(2))).unwrap();
    assert_eq!(
        limiter.check_now("bob").retry_after,
        Some(Duration::from_secs(2))
    );
    clock.advance(Duration::from_secs(2));
    assert!(limiter.check_now("bob").allowed);
}

#[test]
fn plans_kept_by_limiters_of_their_own_pay_their_own_debts() {
    // A free plan, and a pro plan of tokens per minute and per day, on one store.
    let clock = ManualClock::new();
    let store = MemoryStore::new();
    let free = RateLimiter::gcra(Quota::per_minute(60).with_burst(10).named("free"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let pro = RateLimiter::gcra([
        Quota::per_minute(600).with_burst(100).named("pro-tpm"),
        Quota::per_day(14_400).with_burst(1000).named("pro-tpd"),
    ])
    .with_clock(clock.clone())
    .with_store(store);
    // alice overspends on free: 20 past its burst, 20 s at one a second.
    let admission = free.check_n_now("alice", 10);
    block_on(free.settle("alice", &admission, 10, 30)).unwrap();
    assert_eq!(
        block_on(free.peek("alice")).unwrap().retry_after,
        Some(Duration::from_secs(20))
    );
    // Her plan is pro now: pro keeps its own state, fresh for her.
    let admission = pro.check_n_now("alice", 100);
    assert!(admission.allowed);
    // 1100 tokens: 1000 past the minute's burst (100 s at 10 a second), 100 past the day's
    // (which earns one every 6 s: 600 s).
    let standing = block_on(pro.settle("alice", &admission, 100, 1100)).unwrap();
    assert_eq!(standing.retry_after, Some(Duration::from_secs(600)));
    assert_eq!(standing.tiers().len(), 2);
    assert_eq!(
        standing.tiers()[0].retry_after,
        Some(Duration::from_secs(100))
    );
    // Back on free, her debt there is as it was (one more token 21 s after it): each plan's
    // debt is paid under that plan.
    clock.advance(Duration::from_secs(21));
    assert!(free.check_now("alice").allowed);
    assert!(!pro.check_now("alice").allowed);
    // One more token on pro waits for the day's debt and itself: 606 s from the settlement.
    clock.advance(Duration::from_secs(585) - Duration::from_nanos(1));
    assert!(!pro.check_now("alice").allowed);
    clock.advance(Duration::from_nanos(1));
    assert!(pro.check_now("alice").allowed);
}

#[test]
fn a_key_in_debt_is_the_last_a_full_store_forgets() {
    // A store of 64 keys, filled many times over by clients that each used one request: the
    // key in debt is kept (forgetting it would forgive its debt), those that used least go.
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(5))
        .with_clock(clock.clone())
        .with_store(MemoryStore::new().with_max_keys(64));
    in_debt(&limiter, "mallory");
    for n in 0..2000 {
        assert!(limiter.check_now(format!("client-{n}")).allowed);
    }
    assert!(limiter.table().len() <= 64);
    let peek = block_on(limiter.peek("mallory")).unwrap();
    assert_eq!(peek.retry_after, Some(300 * MS), "the debt was forgotten");
}
