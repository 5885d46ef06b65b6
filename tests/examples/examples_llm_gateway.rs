//! The LLM gateway example served on a local port and called by a real HTTP client: its answers
//! stream, and each key is charged the tokens its answers reported, on a manual clock.
//!
//! Each key may use 10 000 tokens a minute (one every 6 ms) and 200 000 a day. A request
//! reserves a token for every 4 bytes of its body; the stub model answers `max_tokens` words
//! and reports `prompt words + max_tokens` as its usage.
#![cfg(feature = "axum")]

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tollgate::clock::ManualClock;
use tollgate::layer::Handle;
use tollgate::{Decision, Usage};

use crate::support::http as web;

#[path = "../../examples/llm_gateway.rs"]
#[allow(dead_code)]
mod llm_gateway;

use llm_gateway::{TOKENS_PER_DAY, TOKENS_PER_MINUTE};

const ALICE: &str = "sk-alice-7Qx2";
const BOB: &str = "sk-bob-9Lk4";

/// The example's gateway on a local port, its limits on a manual clock.
struct Gateway {
    base: String,
    clock: ManualClock,
    handle: Handle,
    client: reqwest::Client,
}

impl Gateway {
    async fn start() -> Self {
        let clock = ManualClock::new();
        let limits = llm_gateway::limits().clock(clock.clone());
        let handle = limits.handle();
        let base = web::serve(llm_gateway::gateway(limits)).await;
        Self {
            base,
            clock,
            handle,
            client: web::client(),
        }
    }

    async fn ask(&self, token: &str, body: &str) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/chat/completions", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
    }

    /// `customer`'s standing: a request of cost 0, per tier (`tpm`, `tpd`).
    async fn standing(&self, customer: &str) -> Decision {
        self.handle.peek(customer).await.unwrap()
    }

    /// Waits (a few seconds at most) until `customer` has `left` tokens of its minute: the
    /// layer settles as the answer's body ends, on the server's side of the connection.
    async fn settled(&self, customer: &str, left: u64) {
        let mut now = self.standing(customer).await;
        for _ in 0..300 {
            if now.tiers()[0].remaining == left {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            now = self.standing(customer).await;
        }
        panic!("{customer} has {now:?}, not {left} tokens left");
    }
}

/// A chat request asking `max_tokens` words for `content`.
fn chat(content: &str, max_tokens: u64) -> String {
    json!({ "max_tokens": max_tokens, "messages": [{ "role": "user", "content": content }] })
        .to_string()
}

/// What the layer reserves for `body`: a token for every 4 bytes.
fn estimate(body: &str) -> u64 {
    (body.len() as u64).div_ceil(4)
}

/// The events of a whole answer: the `data:` of each, `[DONE]` last.
async fn events(response: reqwest::Response) -> Vec<String> {
    let text = response.text().await.unwrap();
    text.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| event.strip_prefix("data: ").unwrap().to_owned())
        .collect()
}

/// The `usage.total_tokens` of an answer's last event before `[DONE]`.
fn total_tokens(events: &[String]) -> u64 {
    let [.., last, done] = events else {
        panic!("no events: {events:?}")
    };
    assert_eq!(done, "[DONE]");
    let last: Value = serde_json::from_str(last).unwrap();
    last["usage"]["total_tokens"].as_u64().unwrap()
}

fn header(response: &reqwest::Response, name: &str) -> String {
    web::header(response, name)
}

#[tokio::test]
async fn the_tokens_an_answer_reports_are_what_the_key_is_charged_into_debt() {
    let gw = Gateway::start().await;
    // Four words of prompt and 4 000 of answer: 4 004 tokens, reserved as its size (a few dozen).
    let body = chat("tell me a story", 4_000);
    let (est, used) = (estimate(&body), 4_004);
    let mut left = TOKENS_PER_MINUTE;
    for _ in 0..2 {
        let response = gw.ask(ALICE, &body).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "content-type"), "text/event-stream");
        // The headers show the reservation: the answer's cost is not known yet.
        let rate = header(&response, "ratelimit");
        assert!(
            rate.starts_with(&format!("\"tpm\";r={};", left - est)),
            "{rate}"
        );
        let events = events(response).await;
        // 4 000 words in events of 64, the usage, [DONE].
        assert_eq!(events.len(), 63 + 2);
        assert_eq!(total_tokens(&events), used);
        left -= used;
        gw.settled("alice", left).await;
    }
    // 1 992 left: the third request's estimate fits, and its answer's 4 004 tokens are charged
    // whatever is left: 2 012 tokens of debt, in both tiers.
    assert_eq!(left, 1_992);
    let response = gw.ask(ALICE, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(total_tokens(&events(response).await), used);
    let debt = 3 * used - TOKENS_PER_MINUTE;
    let interval = Duration::from_millis(6);
    let mut standing = gw.standing("alice").await;
    for _ in 0..300 {
        if !standing.allowed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        standing = gw.standing("alice").await;
    }
    assert!(!standing.allowed, "{standing:?}");
    assert_eq!(standing.retry_after, Some(interval * debt as u32));
    assert_eq!(standing.tiers()[1].remaining, TOKENS_PER_DAY - 3 * used);
    // The next request waits for the debt and its own estimate: (2 012 + est) · 6 ms, in whole
    // seconds rounded up.
    let response = gw.ask(ALICE, &body).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait = interval * (debt + est) as u32;
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    assert_eq!(header(&response, "retry-after"), secs.to_string());
    // Bob is not Alice.
    let response = gw.ask(BOB, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    drop(response);
    // Once the debt is paid back, Alice is served again.
    gw.clock.advance(Duration::from_secs(secs));
    let response = gw.ask(ALICE, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_answer_under_its_estimate_gives_the_rest_back_so_the_next_fits() {
    let gw = Gateway::start().await;
    // One long word and 8 words of answer: 9 tokens, reserved as some 7 500.
    let body = chat(&"x".repeat(30_000), 8);
    let est = estimate(&body);
    assert!(est > TOKENS_PER_MINUTE / 2 && est < TOKENS_PER_MINUTE);
    let mut left = TOKENS_PER_MINUTE;
    for _ in 0..3 {
        // Without the refund, the second request would find 10 000 − 2·est < est left.
        let response = gw.ask(BOB, &body).await;
        assert_eq!(response.status(), StatusCode::OK);
        let rate = header(&response, "ratelimit");
        assert!(
            rate.starts_with(&format!("\"tpm\";r={};", left - est)),
            "{rate}"
        );
        assert_eq!(total_tokens(&events(response).await), 9);
        left -= 9;
        gw.settled("bob", left).await;
    }
    assert_eq!(
        gw.standing("bob").await.tiers()[1].remaining,
        TOKENS_PER_DAY - 27
    );
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_answer_keeps_its_reservation() {
    let gw = Gateway::start().await;
    // 4 097 tokens if the answer ran to its end; the request reserves its size.
    let body = chat("hello", 4_096);
    let est = estimate(&body);
    assert!(est < 4_097);
    let mut response = gw.ask(ALICE, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: {"), "{first:?}");
    drop(response);
    // The answer takes 64 + 2 events of 20 ms. Had it run to its end, its usage would have
    // been charged by then: the key stays at its reservation throughout, and after.
    let answer = llm_gateway::PACE * 66;
    let waited = std::time::Instant::now();
    while waited.elapsed() < answer + Duration::from_millis(500) {
        let left = gw.standing("alice").await.tiers()[0].remaining;
        assert_eq!(left, TOKENS_PER_MINUTE - est);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The next answer, read to its end, is charged what it reports.
    let response = gw.ask(ALICE, &body).await;
    assert_eq!(total_tokens(&events(response).await), 4_097);
    gw.settled("alice", TOKENS_PER_MINUTE - est - 4_097).await;
}

#[tokio::test]
async fn invented_keys_are_refused_and_requests_the_model_never_saw_cost_nothing() {
    let gw = Gateway::start().await;
    let body = chat("hello", 4);
    for token in ["sk-alice-7qx2", "sk-mine", ""] {
        let response = gw.ask(token, &body).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        assert!(header(&response, "www-authenticate").starts_with("Bearer"));
    }
    let too_many = chat("hello", llm_gateway::MAX_TOKENS + 1);
    // Just over the bound: the server reads it all before refusing it (a body cut short would
    // leave bytes unread, and the connection could be reset before the answer is read).
    let too_long = chat(&"x".repeat(llm_gateway::MAX_BODY), 4);
    assert!(too_long.len() > llm_gateway::MAX_BODY);
    for (bad, status) in [
        ("{not json", StatusCode::BAD_REQUEST),
        (r#"{"messages": []}"#, StatusCode::BAD_REQUEST),
        (r#"{"messages": [{"content": 4}]}"#, StatusCode::BAD_REQUEST),
        (too_many.as_str(), StatusCode::BAD_REQUEST),
        (too_long.as_str(), StatusCode::PAYLOAD_TOO_LARGE),
    ] {
        let response = gw.ask(ALICE, bad).await;
        assert_eq!(response.status(), status, "{bad:.40}");
        let error: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert!(error["error"]["message"].is_string());
        // Its reservation is given back whole.
        gw.settled("alice", TOKENS_PER_MINUTE).await;
    }
}

#[test]
fn the_usage_is_read_across_chunks_and_overlong_lines_are_skipped() {
    let usage = Usage::default();
    let mut reader = llm_gateway::UsageReader::new(usage.clone());
    let stream = concat!(
        "data: {\"choices\":[],\"usage\":{\"total_tokens\":7}}\n\n",
        "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9,\"total_tokens\":12}}\n\n",
        "data: [DONE]\n\n"
    );
    // Split at every byte: the lines are put together again.
    for byte in stream.as_bytes().chunks(1) {
        reader.feed(byte);
    }
    assert_eq!(usage.get(), Some(12));
    // A line past 16 KiB is skipped whole, and the next one read.
    let overlong = format!(
        "data: {{\"usage\":{{\"total_tokens\":99}},\"pad\":\"{}\"}}\n",
        "x".repeat(20_000)
    );
    reader.feed(overlong.as_bytes());
    assert_eq!(usage.get(), Some(12));
    reader.feed(b"data: {\"usage\":{\"total_tokens\":5}}\n");
    assert_eq!(usage.get(), Some(5));
    // Without a usage, nothing is reported.
    let silent = Usage::default();
    let mut reader = llm_gateway::UsageReader::new(silent.clone());
    reader.feed(b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n");
    assert_eq!(silent.get(), None);
}
