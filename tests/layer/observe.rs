//! What operators see: decision counters and store latency (feature `metrics`).

use crate::support::drive;
use crate::support::request;
use crate::support::services;

use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimitLayer};
use tower::Layer;

use drive::send;
use request::Req;
use services::ok;

#[cfg(feature = "metrics")]
#[test]
fn decisions_are_counted_per_policy_and_outcome() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::MetricKind;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let mut svc = RateLimitLayer::gcra(Quota::per_minute(2).named("api"))
            .clock(ManualClock::new())
            .layer(ok());
        for _ in 0..3 {
            send(&mut svc, Req::new().from("192.0.2.1:1").build());
        }
        send(&mut svc, Req::new().build());
        let mut dry = RateLimitLayer::gcra(Quota::per_minute(1).named("trial"))
            .clock(ManualClock::new())
            .dry_run(true)
            .layer(ok());
        for _ in 0..2 {
            send(&mut dry, Req::new().from("192.0.2.1:1").build());
        }
        // A queue: the first request passes at once, the second is decided (in `call`, on the
        // memory store) to wait its turn and its future is dropped, the third finds it full.
        let mut queue =
            RateLimitLayer::leaky_bucket(Quota::per_minute(1).with_burst(2).named("queue"))
                .clock(ManualClock::new())
                .layer(ok());
        send(&mut queue, Req::new().from("192.0.2.1:1").build());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(tower::Service::poll_ready(&mut queue, &mut cx).is_ready());
        drop(tower::Service::call(
            &mut queue,
            Req::new().from("192.0.2.1:1").build(),
        ));
        send(&mut queue, Req::new().from("192.0.2.1:1").build());
    });

    let mut counters = Vec::new();
    let mut latencies = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        match (key.kind(), key.key().name(), value) {
            (MetricKind::Counter, "tollgate_decisions_total", DebugValue::Counter(n)) => {
                counters.push((labels, n))
            }
            (
                MetricKind::Histogram,
                "tollgate_store_latency_seconds",
                DebugValue::Histogram(samples),
            ) => latencies.push((labels, samples.len())),
            other => panic!("unexpected metric {other:?}"),
        }
    }
    counters.sort();
    latencies.sort();
    let label = |policy: &str, outcome: &str| {
        vec![
            ("policy".to_owned(), policy.to_owned()),
            ("outcome".to_owned(), outcome.to_owned()),
        ]
    };
    assert_eq!(
        counters,
        vec![
            (label("api", "allowed"), 2),
            (label("api", "denied"), 1),
            (label("api", "key_error"), 1),
            (label("queue", "allowed"), 1),
            (label("queue", "delayed"), 1),
            (label("queue", "denied"), 1),
            (label("trial", "allowed"), 1),
            (label("trial", "dry_run_denied"), 1),
        ]
    );
    let policy = |p: &str| vec![("policy".to_owned(), p.to_owned())];
    assert_eq!(
        latencies,
        vec![
            (policy("api"), 3),
            (policy("queue"), 3),
            (policy("trial"), 2)
        ]
    );
}
