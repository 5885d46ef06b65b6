//! The login and API key examples, served as they are on a local port and called by a real HTTP
//! client: a client cannot respell its key (an account name, an API key) to get a fresh budget.
#![cfg(feature = "axum")]

use crate::support::http as web;

#[path = "../../examples/login.rs"]
#[allow(dead_code)]
mod login;

#[path = "../../examples/api_keys.rs"]
#[allow(dead_code)]
mod api_keys;

use proptest::prelude::*;
use reqwest::StatusCode;

use web::{client, serve};

async fn attempt(client: &reqwest::Client, base: &str, name: &str, password: &str) -> StatusCode {
    client
        .post(format!("{base}/login/{name}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("password={password}"))
        .send()
        .await
        .unwrap()
        .status()
}

/// `name` with each letter written one of three ways: as it is, in the other case, or
/// percent-encoded (either case of hex digit), as `choices` picks.
fn respell(name: &str, choices: &[u8]) -> String {
    name.bytes()
        .zip(choices.iter().cycle())
        .map(|(b, choice)| match choice % 4 {
            0 => (b as char).to_string(),
            1 => (b as char).to_ascii_uppercase().to_string(),
            2 => format!("%{b:02X}"),
            _ => format!("%{b:02x}"),
        })
        .collect()
}

#[tokio::test]
async fn every_spelling_of_an_account_spends_one_budget_of_failed_logins() {
    let base = serve(login::app()).await;
    let client = client();
    let spellings = ["alice", "%61lice", "ALICE", "Al%69ce", "%41%4C%49%43%45"];
    for name in spellings {
        assert_eq!(
            attempt(&client, &base, name, "guess").await,
            StatusCode::UNAUTHORIZED,
            "{name}"
        );
    }
    // Five failures for alice, however spelled: the next attempt is refused before the
    // password is checked, the right password included, in any spelling.
    for name in ["alice", "aLiCe", "%61%6c%69%63%65"] {
        assert_eq!(
            attempt(&client, &base, name, "hunter2").await,
            StatusCode::TOO_MANY_REQUESTS,
            "{name}"
        );
    }
    // Bob has his own budget; a success costs nothing.
    for _ in 0..6 {
        assert_eq!(
            attempt(&client, &base, "B%6Fb", "hunter2").await,
            StatusCode::OK
        );
    }
    // Names the app cannot look up are refused, and spend nothing.
    for name in ["al%C3%AFce", "ali%2Fce", "%FF", &"a".repeat(33)] {
        assert_eq!(
            attempt(&client, &base, name, "guess").await,
            StatusCode::NOT_FOUND,
            "{name}"
        );
    }
}

#[test]
fn the_key_is_the_account_the_handler_looks_up() {
    proptest!(|(name in "[a-z0-9._-]{1,32}", choices in proptest::collection::vec(any::<u8>(), 1..8))| {
        let spelled = respell(&name, &choices);
        prop_assert_eq!(login::account(&format!("/login/{spelled}")), Some(name));
    });
}

#[tokio::test]
async fn invented_api_keys_share_the_client_ip_budget_on_the_free_plan() {
    let base = serve(api_keys::app()).await;
    let client = client();
    let get = |key: Option<String>| {
        let mut request = client.get(format!("{base}/"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request.send()
    };
    // Five a minute for this IP, whatever keys it invents (claiming the pro plan or not).
    for i in 0..5 {
        let resp = get(Some(format!("pro_{i}"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{i}");
        assert!(resp.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .starts_with("\"free\""));
    }
    for key in [Some("pro_5".to_owned()), Some("PRO_7QX2".to_owned()), None] {
        let resp = get(key.clone()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{key:?}");
    }
    // An issued key is its customer's own budget, on its plan.
    for _ in 0..20 {
        let resp = get(Some("pro_7Qx2".to_owned())).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .starts_with("\"pro\""));
    }
    let resp = get(Some("pro_7Qx2".to_owned())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..5 {
        let resp = get(Some("free_9Lk4".to_owned())).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = get(Some("free_9Lk4".to_owned())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}
