//! Logs never show a key above trace level (feature `tracing`). Alone in its test binary: a
//! `tracing` callsite first reached on another test's thread, with no subscriber there, could
//! otherwise be cached as uninteresting before this test's subscriber sees it.

mod support;

use support::drive;
#[cfg(feature = "tracing")]
use support::logs as support_logs;
use support::request;
use support::services;

use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimitLayer};
use tower::Layer;

use drive::send;
use request::Req;
use services::ok;

#[cfg(feature = "tracing")]
#[test]
fn keys_show_only_at_trace_level() {
    use support_logs::Captured;

    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::TRACE);
    tracing::subscriber::with_default(subscriber, || {
        let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
            .clock(ManualClock::new())
            .layer(ok());
        send(&mut svc, Req::new().from("198.51.100.77:1").build());
        send(&mut svc, Req::new().from("198.51.100.77:1").build());
    });
    let text = log.text();
    let decisions: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate limit decision"))
        .collect();
    assert_eq!(decisions.len(), 2, "{text}");
    assert!(
        decisions[0].contains("DEBUG")
            && decisions[0].contains("key_kind=\"ipv4\"")
            && decisions[0].contains("outcome=\"allowed\""),
        "{text}"
    );
    assert!(decisions[1].contains("outcome=\"denied\""), "{text}");
    // Each decision is logged inside the `rate_limit` span, which names the policy.
    assert!(
        decisions
            .iter()
            .all(|l| l.contains("rate_limit{policy=\"1/min\"")),
        "{text}"
    );
    for line in text.lines().filter(|l| l.contains("198.51.100.77")) {
        assert!(
            line.contains("TRACE"),
            "the key shows above trace level: {line}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.contains("TRACE") && l.contains("198.51.100.77")),
        "{text}"
    );
}
