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

/// An operator at `info` sees that requests are being limited: the first denial of a policy is
/// reported at once, then at most one report every 10 s (on the layer's clock) with how many
/// were denied since the last one; never the key.
#[cfg(feature = "tracing")]
#[test]
fn denials_are_reported_at_info_at_most_every_ten_seconds() {
    use std::time::Duration;

    use support_logs::Captured;

    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::INFO);
    let clock = ManualClock::new();
    tracing::subscriber::with_default(subscriber, || {
        let mut svc = RateLimitLayer::gcra(Quota::per_minute(1).named("api"))
            .clock(clock.clone())
            .layer(ok());
        let from = |i: u32| {
            Req::new()
                .from(&format!("198.51.100.{}:1", i % 200))
                .build()
        };
        for i in 0..200 {
            send(&mut svc, from(i));
        }
        // The first 200 requests: 200 clients each allowed once, nothing denied.
        assert!(log.take().is_empty(), "{}", log.text());
        for i in 0..150 {
            send(&mut svc, from(i));
        }
        let first = log.take();
        assert_eq!(first.len(), 1, "{first:?}");
        assert!(
            first[0].contains("INFO")
                && first[0].contains("policy=\"api\"")
                && first[0].contains("denied=1")
                && first[0].contains("key_kind=\"ipv4\""),
            "{first:?}"
        );
        // 9.999 s later, still within the interval: nothing more.
        clock.advance(Duration::from_millis(9_999));
        send(&mut svc, from(1));
        assert!(log.take().is_empty());
        // 10 s after the first report: the 150 denials since (149, 1 and this one) in one line.
        clock.advance(Duration::from_millis(1));
        send(&mut svc, from(2));
        let second = log.take();
        assert_eq!(second.len(), 1, "{second:?}");
        assert!(second[0].contains("denied=151"), "{second:?}");
        for line in first.iter().chain(&second) {
            assert!(
                !line.contains("198.51.100."),
                "a key above trace level: {line}"
            );
        }
    });
}
