//! Bans of repeat offenders in memory (`RateLimitLayer::ban`): against a model of the rule
//! (more than N denials within a window of W that opens at the key's first denial ban it for
//! D; a ban's own refusals do not count; the count starts afresh after a ban) on random
//! traffic, for one quota, tiers and per-key plans; a client under the threshold is never
//! banned; many banned keys stay within the store's bound; a dry run blocks nothing; bad
//! figures fail where the layer is built.

use crate::support::drive;
use crate::support::request;
use crate::support::services;

use std::time::Duration;

use http::Response;
use proptest::prelude::*;
use tollgate::clock::{Clock, ManualClock};
use tollgate::layer::Ban;
use tollgate::store::MemoryStore;
use tollgate::{Key, Quota, RateLimitLayer, RateLimiter};
use tower::Layer;

use drive::send;
use request::Req;
use services::ok;

const S: u64 = 1_000_000_000;

/// `Retry-After` as the layer writes it: whole seconds, rounded up.
fn retry_after(d: Duration) -> String {
    d.as_nanos().div_ceil(u128::from(S)).to_string()
}

fn answer<B>(resp: &Response<B>) -> (u16, Option<String>) {
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status().as_u16(), retry)
}

/// The rule, written apart from the layer: a twin limiter that never bans, and the count.
struct Model<A: tollgate::store::MemoryAlgorithm> {
    twin: RateLimiter<A, MemoryStore, ManualClock>,
    ban: Ban,
    /// The open window of denials: its start and count.
    window: Option<(u64, u64)>,
    banned_until: u64,
}

impl<A: tollgate::store::MemoryAlgorithm> Model<A> {
    fn request(&mut self, now: u64) -> (u16, Option<String>) {
        if now < self.banned_until {
            return (
                429,
                Some(retry_after(Duration::from_nanos(self.banned_until - now))),
            );
        }
        let decision = self.twin.check_now("client");
        if decision.allowed {
            return (200, None);
        }
        let within = self.ban.within().as_nanos() as u64;
        let (start, count) = match self.window {
            Some((start, count)) if now < start + within => (start, count),
            _ => (now, 0),
        };
        if count + 1 > self.ban.denials() {
            self.banned_until = now + self.ban.duration().as_nanos() as u64;
            self.window = None;
            return (429, Some(retry_after(self.ban.duration())));
        }
        self.window = Some((start, count + 1));
        (429, decision.retry_after.map(retry_after))
    }
}

fn ban() -> impl Strategy<Value = Ban> {
    (1u64..5, 1u64..20, 1u64..30)
        .prop_map(|(n, w, d)| Ban::new(n, Duration::from_secs(w), Duration::from_secs(d)))
}

/// Steps: a gap before the next request, in ms.
fn gaps() -> impl Strategy<Value = Vec<u64>> {
    let gap = prop_oneof![4 => Just(0u64), 3 => 0u64..1_500, 1 => 1_000u64..30_000];
    prop::collection::vec(gap, 1..150)
}

/// Runs `gaps` through `layer` (with `ban` on `clock`) and through the model over `twin`.
fn against_the_model<A: tollgate::store::MemoryAlgorithm>(
    layer: RateLimitLayer,
    twin: RateLimiter<A, MemoryStore, ManualClock>,
    ban: Ban,
    clock: &ManualClock,
    gaps: &[u64],
) -> Result<(), TestCaseError> {
    let mut svc = layer.ban(ban).layer(ok());
    let mut model = Model {
        twin,
        ban,
        window: None,
        banned_until: 0,
    };
    for (i, &gap) in gaps.iter().enumerate() {
        clock.advance(Duration::from_millis(gap));
        let got = answer(&send(&mut svc, Req::new().from("192.0.2.1:1").build()));
        let expected = model.request(clock.now_nanos());
        prop_assert_eq!(got, expected, "request {} of {:?} with {:?}", i, gaps, ban);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn one_quota_bans_as_the_rule_says(ban in ban(), limit in 1u64..4, period in 1u64..5, gaps in gaps()) {
        let clock = ManualClock::new();
        let q = Quota::new(limit, Duration::from_secs(period));
        let layer = RateLimitLayer::gcra(q.clone()).clock(clock.clone());
        let twin = RateLimiter::gcra(q).with_clock(clock.clone());
        against_the_model(layer, twin, ban, &clock, &gaps)?;
    }

    #[test]
    fn tiers_ban_as_the_rule_says(ban in ban(), a in 1u64..4, b in 2u64..8, gaps in gaps()) {
        let clock = ManualClock::new();
        let tiers = [Quota::per_second(a), Quota::new(b, Duration::from_secs(20))];
        let layer = RateLimitLayer::sliding_log(tiers.clone()).clock(clock.clone());
        let twin = RateLimiter::sliding_log(tiers).with_clock(clock.clone());
        against_the_model(layer, twin, ban, &clock, &gaps)?;
    }

    #[test]
    fn plans_ban_as_the_rule_says(ban in ban(), limit in 1u64..4, gaps in gaps()) {
        let clock = ManualClock::new();
        let plan = Quota::new(limit, Duration::from_secs(3)).named("plan");
        let picked = plan.clone();
        let layer = RateLimitLayer::fixed_window(Quota::per_hour(1000).named("default"))
            .clock(clock.clone())
            .quota_for(move |_key: &Key, _head| picked.clone());
        let twin = RateLimiter::fixed_window(plan).with_clock(clock.clone());
        against_the_model(layer, twin, ban, &clock, &gaps)?;
    }

    /// A client whose denials never pass N within any span of W is never banned: its answers
    /// are those of a layer without a ban.
    #[test]
    fn a_client_under_the_threshold_is_never_banned(n in 1u64..4, w in 1u64..10, gaps in gaps()) {
        let clock = ManualClock::new();
        let q = Quota::per_second(2);
        let ban = Ban::new(n, Duration::from_secs(w), Duration::from_secs(3600));
        let mut banned = RateLimitLayer::gcra(q.clone()).clock(clock.clone()).ban(ban).layer(ok());
        let mut plain = RateLimitLayer::gcra(q).clock(clock.clone()).layer(ok());
        let mut denials: Vec<u64> = Vec::new();
        for &gap in &gaps {
            clock.advance(Duration::from_millis(gap));
            let now = clock.now_nanos();
            let expected = answer(&send(&mut plain, Req::new().from("192.0.2.1:1").build()));
            if expected.0 == 429 {
                denials.push(now);
                let span = denials.iter().filter(|&&t| t + w * S > now).count() as u64;
                if span > n {
                    // Over the threshold: the case ends here (the model test covers the rest).
                    return Ok(());
                }
            }
            let got = answer(&send(&mut banned, Req::new().from("192.0.2.1:1").build()));
            prop_assert_eq!(got, expected);
        }
    }
}

#[test]
fn a_hammering_client_is_banned_then_back_to_normal() {
    let clock = ManualClock::new();
    let mut svc = RateLimitLayer::gcra(Quota::per_second(1))
        .clock(clock.clone())
        .ban(Ban::new(
            5,
            Duration::from_secs(10),
            Duration::from_secs(60),
        ))
        .layer(ok());
    let mut hit = || answer(&send(&mut svc, Req::new().from("192.0.2.9:1").build()));
    assert_eq!(hit().0, 200);
    for _ in 0..5 {
        assert_eq!(hit(), (429, Some("1".into())));
    }
    assert_eq!(hit(), (429, Some("60".into())), "the sixth denial bans");
    // Hammering on during the ban neither extends it nor counts.
    for step in 0..59 {
        clock.advance(Duration::from_secs(1));
        for _ in 0..100 {
            assert_eq!(hit(), (429, Some((59 - step).to_string())));
        }
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(hit().0, 200, "back to normal");
    // The count started afresh: five more denials do not ban.
    for _ in 0..5 {
        assert_eq!(hit(), (429, Some("1".into())));
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(hit().0, 200);
}

#[test]
fn many_banned_keys_stay_within_the_store_bound() {
    let clock = ManualClock::new();
    let max = 1_000;
    let store = MemoryStore::new().with_max_keys(max);
    let q = Quota::per_hour(1).named("flood");
    let mut svc = RateLimitLayer::gcra(q.clone())
        .store(store.clone())
        .clock(clock.clone())
        .ban(Ban::new(
            1,
            Duration::from_secs(60),
            Duration::from_secs(600),
        ))
        .layer(ok());
    // The limiter of the same policy on the same store sees its bans.
    let view = RateLimiter::gcra(q).with_store(store);
    for n in 0..10 * max as u32 {
        let peer = std::net::SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + n), 1));
        for _ in 0..3 {
            send(&mut svc, Req::new().peer(peer).build());
        }
        assert!(view.table().blocked_keys() <= max);
    }
    assert!(
        view.table().blocked_keys() > max / 2,
        "the flood was banned"
    );
    // The newest offender is banned.
    let last = std::net::SocketAddr::from((
        std::net::Ipv4Addr::from(0x0a00_0000 + 10 * max as u32 - 1),
        1,
    ));
    let resp = send(&mut svc, Req::new().peer(last).build());
    assert_eq!(answer(&resp), (429, Some("600".into())));
}

#[test]
fn a_dry_run_bans_no_one() {
    let clock = ManualClock::new();
    let mut svc = RateLimitLayer::gcra(Quota::per_second(1))
        .clock(clock.clone())
        .dry_run(true)
        .ban(Ban::new(
            1,
            Duration::from_secs(10),
            Duration::from_secs(60),
        ))
        .layer(ok());
    for _ in 0..20 {
        let resp = send(&mut svc, Req::new().from("192.0.2.9:1").build());
        assert_eq!(resp.status(), 200);
    }
    clock.advance(Duration::from_secs(1));
    let resp = send(&mut svc, Req::new().from("192.0.2.9:1").build());
    assert_eq!(
        resp.headers()["ratelimit"],
        "\"1/s\";r=0;t=1",
        "no ban in the headers"
    );
}

#[test]
fn count_if_and_stacked_layers_each_ban_by_their_own_denials() {
    let clock = ManualClock::new();
    let inner = RateLimitLayer::gcra(Quota::per_second(1).named("inner"))
        .clock(clock.clone())
        .count_if(|_| true)
        .ban(Ban::new(
            1,
            Duration::from_secs(10),
            Duration::from_secs(30),
        ));
    let outer = RateLimitLayer::gcra(Quota::per_second(100).named("outer"))
        .clock(clock.clone())
        .ban(Ban::new(
            1,
            Duration::from_secs(10),
            Duration::from_secs(300),
        ));
    let mut svc = outer.layer(inner.layer(ok()));
    let mut hit = || answer(&send(&mut svc, Req::new().from("192.0.2.9:1").build()));
    assert_eq!(hit().0, 200);
    assert_eq!(hit(), (429, Some("1".into())));
    assert_eq!(hit(), (429, Some("30".into())), "the inner layer bans");
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        hit().0,
        200,
        "the outer layer never denied, so never banned"
    );
}

#[test]
fn bad_figures_fail_where_the_layer_is_built() {
    let cases = [
        (
            Ban::new(0, Duration::from_secs(1), Duration::from_secs(1)),
            "denials is 0",
        ),
        (
            Ban::new(1, Duration::ZERO, Duration::from_secs(1)),
            "within is zero",
        ),
        (
            Ban::new(1, Duration::from_secs(1), Duration::ZERO),
            "duration is zero",
        ),
        (
            Ban::new(1, Duration::MAX, Duration::from_secs(1)),
            "within is",
        ),
    ];
    for (ban, message) in cases {
        let panic =
            std::panic::catch_unwind(|| RateLimitLayer::gcra(Quota::per_second(1)).ban(ban))
                .unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains(message), "{text}");
        assert!(text.contains("RateLimitLayer::ban"), "{text}");
    }
}

#[cfg(feature = "metrics")]
#[test]
fn bans_are_counted() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let ban = Ban::new(1, Duration::from_secs(10), Duration::from_secs(60));
        let mut svc = RateLimitLayer::gcra(Quota::per_second(1).named("api"))
            .clock(clock.clone())
            .ban(ban)
            .layer(ok());
        let mut dry = RateLimitLayer::gcra(Quota::per_second(1).named("dry"))
            .clock(clock.clone())
            .dry_run(true)
            .ban(ban)
            .layer(ok());
        for _ in 0..6 {
            send(&mut svc, Req::new().from("192.0.2.1:1").build());
            send(&mut dry, Req::new().from("192.0.2.1:1").build());
        }
    });
    let bans: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "tollgate_bans_total")
        .map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let DebugValue::Counter(n) = value else {
                panic!("a counter")
            };
            (labels.join(","), n)
        })
        .collect();
    // One ban (its refusals do not count again); in the dry run, a would-be ban every other
    // denial, as the count starts afresh after each.
    assert!(
        bans.contains(&("policy=api,outcome=banned".into(), 1)),
        "{bans:?}"
    );
    assert!(
        bans.contains(&("policy=dry,outcome=dry_run_banned".into(), 2)),
        "{bans:?}"
    );
}
