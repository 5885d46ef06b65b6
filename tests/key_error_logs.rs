//! Key errors in the log (feature `tracing`): a client's mistake (a 4xx, such as a missing
//! header) at debug level, never hiding a server misconfiguration (a 5xx, such as no peer
//! address recorded), which is logged at error level once per kind; no key bytes above trace.
//! Alone in its test binary: the layer remembers which misconfigurations it has logged for the
//! whole process, and a `tracing` callsite first reached on another test's thread could be
//! cached as uninteresting before this test's subscriber sees it.
#![cfg(feature = "tracing")]

mod support;

use support::drive;
use support::logs;
use support::request;
use support::services;

use http::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::key::{Header, KeyError, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::Layer;

use drive::send;
use logs::Captured;
use request::Req;
use services::ok;

/// The levels of the lines that mention `text`.
fn levels<'a>(lines: &'a [String], text: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|l| l.contains(text))
        .map(|l| {
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]
                .into_iter()
                .find(|level| l.contains(level))
                .unwrap_or("?")
        })
        .collect()
}

#[test]
fn client_mistakes_log_at_debug_and_each_misconfiguration_at_error_once() {
    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::TRACE);
    tracing::subscriber::with_default(subscriber, || {
        // A client that omits its API key, first: its own mistake, at debug level, every time.
        let mut by_api_key = RateLimitLayer::gcra(Quota::per_minute(1))
            .clock(ManualClock::new())
            .key(Header::new("x-api-key"))
            .layer(ok());
        for _ in 0..2 {
            let response = send(&mut by_api_key, Req::new().from("192.0.2.1:1").build());
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        }
        let lines = log.take();
        assert_eq!(
            levels(&lines, "missing header `x-api-key`"),
            ["DEBUG", "DEBUG"],
            "{lines:#?}"
        );

        // Then the server is misconfigured (no peer address): an error, once.
        let mut by_peer = RateLimitLayer::gcra(Quota::per_minute(1))
            .clock(ManualClock::new())
            .layer(ok());
        for _ in 0..3 {
            let response = send(&mut by_peer, Req::new().build());
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        }
        let lines = log.take();
        assert_eq!(
            levels(&lines, "carries no peer address"),
            ["ERROR", "DEBUG", "DEBUG"],
            "{lines:#?}"
        );

        // Another kind of misconfiguration still shows, once.
        let broken = |_: RequestHead<'_>| -> Result<Option<Key>, KeyError> {
            Err(KeyError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "tenant directory not configured",
            ))
        };
        let mut by_tenant = RateLimitLayer::gcra(Quota::per_minute(1))
            .clock(ManualClock::new())
            .key(broken)
            .layer(ok());
        for _ in 0..2 {
            let response = send(&mut by_tenant, Req::new().from("192.0.2.1:1").build());
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        let lines = log.take();
        assert_eq!(
            levels(&lines, "tenant directory not configured"),
            ["ERROR", "DEBUG"],
            "{lines:#?}"
        );

        // Keys show at trace level only: a sent API key, one sent twice (a client error).
        let mut req = Req::new().from("192.0.2.1:1").build();
        req.headers_mut()
            .insert("x-api-key", "sekrit-api-key-1".parse().unwrap());
        assert_eq!(send(&mut by_api_key, req).status(), StatusCode::OK);
        let mut req = Req::new().from("192.0.2.1:1").build();
        for value in ["sekrit-api-key-2", "sekrit-api-key-3"] {
            req.headers_mut()
                .append("x-api-key", value.parse().unwrap());
        }
        assert_eq!(send(&mut by_api_key, req).status(), StatusCode::BAD_REQUEST);
        let lines = log.take();
        assert!(levels(&lines, "sent once").contains(&"DEBUG"), "{lines:#?}");
        for line in lines.iter().filter(|l| l.contains("sekrit")) {
            assert!(line.contains("TRACE"), "a key above trace level: {line}");
        }
        assert!(
            lines.iter().any(|l| l.contains("sekrit-api-key-1")),
            "the key is traced: {lines:#?}"
        );
    });
}
