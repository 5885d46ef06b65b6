//! Logs never show a key above trace level (feature `tracing`). Alone in its test binary: a
//! `tracing` callsite first reached on another test's thread, with no subscriber there, could
//! otherwise be cached as uninteresting before this test's subscriber sees it.

mod common;

use common::{hello, request, send};
use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimitLayer};
use tower::Layer;

#[cfg(feature = "tracing")]
#[test]
fn keys_show_only_at_trace_level() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let log = Captured::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
            .clock(ManualClock::new())
            .layer(hello());
        send(&mut svc, request(Some("198.51.100.77:1")));
        send(&mut svc, request(Some("198.51.100.77:1")));
    });
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
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
