//! Attacks on a live layer in combination: its handle (`set_quotas`, `peek`, `reset`,
//! `block`), bans, per-key plans and calendar windows. Each must fail to get a client more
//! than its quota or out of a block:
//!
//! - bans of many attacker keys, filling the store's bounded blocks, do not crowd out a block
//!   the operator made through the handle;
//! - moving the layer's quotas to those of a plan does not give that plan's keys a fresh
//!   budget (they keep their plan's limiter);
//! - a named policy's blocks in memory are kept per time base: a block made by a plain
//!   limiter is not read on the wall clock by a calendar-window limiter of the same name, nor
//!   the other way round, and each ends on time on its own clock;
//! - a handle's reset, awaited after a change of quotas, still makes the key fresh, with bans
//!   or without.

use crate::support::live_app;

use std::time::{Duration, UNIX_EPOCH};

use axum::http::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::key::RequestHead;
use tollgate::layer::Ban;
use tollgate::store::MemoryStore;
use tollgate::{Key, Quota, RateLimitLayer, RateLimiter};

use live_app::{block_on, live, passes, runtime, send};

/// The operator blocks `victim` for 10 minutes through the handle. The layer bans
/// repeat offenders for an hour. An attacker with a handful of keys (here 16; in production
/// `max_keys / 16` keys landing in the victim's shard of the policy's `Blocks`) gets each key
/// banned: the bans go to the same bounded `Blocks` as the operator's block would, which,
/// ending soonest, would be evicted. The layer holds the operator's block itself, apart from
/// the store's, so the victim stays blocked.
#[test]
fn attacker_bans_evict_an_operator_block_on_the_layers_own_quota() {
    let rt = runtime();
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_minute(1))
        .store(MemoryStore::new().with_max_keys(8))
        .ban(Ban::new(
            1,
            Duration::from_secs(60),
            Duration::from_secs(3600),
        ));
    let (handle, app) = live(layer, &clock);
    rt.block_on(handle.block("victim", Duration::from_secs(600)))
        .unwrap();
    assert!(!passes(&rt, &app, "victim"), "blocked by the operator");
    // Each attacker key: allowed, denied (counted), denied again (banned for an hour).
    for n in 0..16 {
        let key = format!("attacker-{n}");
        for _ in 0..3 {
            send(&rt, &app, &key);
        }
        assert!(!passes(&rt, &app, &key), "{key} is banned");
    }
    // No time has passed: the operator's 10-minute block must still hold.
    let response = send(&rt, &app, "victim");
    assert_eq!(
        response.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the operator's block was evicted by bans the attacker triggered"
    );
}

/// Plans by key: `p…` keys are on 10/min, others on the layer's own 2/min. A pro
/// key uses its 10. The operator raises the layer's quota to 10/min (the same quota as the pro
/// plan): the pro key's plan is unchanged (the selector still returns 10/min), and now equals
/// the layer's quotas in force. Were such a plan sent to the layer's limiter, which never saw
/// its usage, the key would get a second full budget within the same minute; it keeps its
/// plan's limiter.
#[test]
fn moving_the_layer_to_a_plans_quotas_gives_that_plans_keys_a_fresh_budget() {
    let rt = runtime();
    let clock = ManualClock::new();
    let pro = Quota::per_minute(10);
    let picked = pro.clone();
    let layer = RateLimitLayer::gcra(Quota::per_minute(2)).quota_for(
        move |key: &Key, _head: RequestHead<'_>| {
            if key.as_bytes().is_some_and(|b| b.starts_with(b"p")) {
                picked.clone()
            } else {
                Quota::per_minute(2)
            }
        },
    );
    let (handle, app) = live(layer, &clock);
    for i in 0..10 {
        assert!(passes(&rt, &app, "pat"), "pro request {i}");
    }
    assert!(!passes(&rt, &app, "pat"), "the pro plan is used up");
    handle.set_quotas(pro).unwrap();
    // Same instant: "pat" used 10 of 10/min and its plan is still 10/min.
    let extra = (0..10).filter(|_| passes(&rt, &app, "pat")).count();
    assert_eq!(
        extra, 0,
        "a pro key got {extra} more requests in the same minute after set_quotas"
    );
}

/// Blocks of a named policy are shared by name in a `MemoryStore`, but a calendar-window
/// limiter decides on the wall clock and a plain one on its monotonic clock: the two keep
/// their blocks apart. A block written through the plain limiter (an hour from t = 0 on the
/// monotonic clock) would read as long over at the calendar limiter's `now` (wall time, some
/// 1.8e18 ns); instead it is not read there at all, and it ends on time on its own clock.
#[test]
fn a_block_of_a_named_policy_is_not_read_on_another_clock() {
    let clock = ManualClock::new();
    clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let store = MemoryStore::new();
    let plain = RateLimiter::fixed_window(Quota::per_day(1000).named("daily"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let calendar = RateLimiter::fixed_window(Quota::per_day(1000).named("daily"))
        .aligned()
        .with_clock(clock.clone())
        .with_store(store);
    block_on(plain.block("mallory", Duration::from_secs(3600))).unwrap();
    assert!(plain.check_now("mallory").is_blocked());
    let decision = calendar.check_now("mallory");
    assert!(
        decision.allowed && !decision.is_blocked(),
        "the calendar limiter read a block made on another clock: {decision:?}"
    );
    clock.advance(Duration::from_secs(3599));
    let decision = plain.check_now("mallory");
    assert!(decision.is_blocked(), "{decision:?}");
    assert_eq!(decision.retry_after, Some(Duration::from_secs(1)));
    clock.advance(Duration::from_secs(1));
    assert!(plain.check_now("mallory").allowed);
}

/// The other way round: a 60 s block written by the calendar-window limiter ends
/// at wall ns (~1.8e18); the plain limiter of the same name reads it with monotonic ns and
/// finds the key blocked for some 57 years (until a reset). An automatic ban in one layer
/// becomes a quasi-permanent block in another.
#[test]
fn a_calendar_window_block_ends_on_time_for_a_plain_limiter_of_its_name() {
    let clock = ManualClock::new();
    clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let store = MemoryStore::new();
    let plain = RateLimiter::fixed_window(Quota::per_day(1000).named("daily"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let calendar = RateLimiter::fixed_window(Quota::per_day(1000).named("daily"))
        .aligned()
        .with_clock(clock.clone())
        .with_store(store);
    block_on(calendar.block("eve", Duration::from_secs(60))).unwrap();
    assert!(calendar.check_now("eve").is_blocked());
    clock.advance(Duration::from_secs(61));
    assert!(
        calendar.check_now("eve").allowed,
        "over on the calendar limiter"
    );
    let decision = plain.check_now("eve");
    assert!(
        decision.allowed,
        "a 60 s block still holds after 61 s on the plain limiter: {decision:?}"
    );
}

/// `Handle::reset` returns a `'static` future "to spawn or await where you like". A
/// `set_quotas` before the future runs carries the key's usage into the new limiter: the reset
/// must have cleared the key when it was asked for, bans or not, for the key to be fresh.
#[test]
fn a_reset_awaited_after_a_quota_change_still_makes_the_key_fresh() {
    let rt = runtime();
    let clock = ManualClock::new();
    let ban = Ban::new(100, Duration::from_secs(60), Duration::from_secs(600));
    let (handle, app) = live(RateLimitLayer::gcra(Quota::per_minute(2)).ban(ban), &clock);
    assert!(passes(&rt, &app, "alice"));
    assert!(passes(&rt, &app, "alice"));
    assert!(!passes(&rt, &app, "alice"));
    let reset = handle.reset("alice");
    handle.set_quotas(Quota::per_minute(2)).unwrap();
    rt.block_on(reset).unwrap();
    assert!(
        passes(&rt, &app, "alice"),
        "the reset did not reach the limiter in force: alice kept her usage"
    );
}

/// the same sequence without bans passes (the reset is eager).
#[test]
fn control_a_reset_without_bans_survives_a_quota_change() {
    let rt = runtime();
    let clock = ManualClock::new();
    let (handle, app) = live(RateLimitLayer::gcra(Quota::per_minute(2)), &clock);
    assert!(passes(&rt, &app, "alice"));
    assert!(passes(&rt, &app, "alice"));
    assert!(!passes(&rt, &app, "alice"));
    let reset = handle.reset("alice");
    handle.set_quotas(Quota::per_minute(2)).unwrap();
    rt.block_on(reset).unwrap();
    assert!(passes(&rt, &app, "alice"));
}
