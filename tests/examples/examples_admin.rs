//! The admin example, served as it is on a local port and called by a real HTTP client from
//! several loopback addresses: the admin routes peek at, reset and block one client and change
//! the quota live; they refuse requests without the token, limit guesses at it, and refuse
//! input out of bounds.
#![cfg(feature = "axum")]

use crate::support::http as web;

#[path = "../../examples/admin.rs"]
#[allow(dead_code)]
mod admin;

use std::net::Ipv4Addr;

use reqwest::{Client, StatusCode};

use web::{client_from, serve};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn from(last: u8) -> Client {
    client_from(Ipv4Addr::new(127, 0, 0, last))
}

async fn get(client: &Client, url: &str) -> (StatusCode, Option<String>, String) {
    answer(client.get(url).send().await.unwrap()).await
}

async fn answer(response: reqwest::Response) -> (StatusCode, Option<String>, String) {
    let status = response.status();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry, response.text().await.unwrap())
}

/// An admin call: `method` on `path` with `token`.
async fn call(
    client: &Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    token: &str,
) -> (StatusCode, String) {
    let response = client
        .request(method, format!("{base}/admin{path}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let (status, _, body) = answer(response).await;
    (status, body)
}

#[tokio::test]
async fn the_admin_resets_blocks_and_requotas_one_client_live() {
    use reqwest::Method;
    let base = serve(admin::app(TOKEN).unwrap()).await;
    let admin = from(1);
    let alice = from(2);
    let bob = from(3);
    let root = format!("{base}/");

    for _ in 0..5 {
        assert_eq!(get(&alice, &root).await.0, StatusCode::OK);
    }
    assert_eq!(get(&alice, &root).await.0, StatusCode::TOO_MANY_REQUESTS);
    let (status, body) = call(&admin, &base, Method::GET, "/clients/127.0.0.2", TOKEN).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("remaining=0 blocked=false"), "{body}");
    // A peek takes nothing: bob, never seen, still has all 5 after it.
    let (_, body) = call(&admin, &base, Method::GET, "/clients/127.0.0.3", TOKEN).await;
    assert!(body.contains("remaining=5"), "{body}");

    // Reset: alice has 5 again.
    let (status, _) = call(
        &admin,
        &base,
        Method::POST,
        "/clients/127.0.0.2/reset",
        TOKEN,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    for _ in 0..5 {
        assert_eq!(get(&alice, &root).await.0, StatusCode::OK);
    }

    // Block bob for 60 s: refused at once, with Retry-After; alice is not affected by it.
    let (status, _) = call(
        &admin,
        &base,
        Method::POST,
        "/clients/127.0.0.3/block/60",
        TOKEN,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, retry, _) = get(&bob, &root).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = retry.unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry), "{retry}");
    let (_, body) = call(&admin, &base, Method::GET, "/clients/127.0.0.3", TOKEN).await;
    assert!(body.contains("blocked=true"), "{body}");

    // A new quota for everyone: alice, who used 5 this minute, has 5 more of 10.
    let (status, body) = call(&admin, &base, Method::PUT, "/quota/10", TOKEN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = call(&admin, &base, Method::GET, "/quota", TOKEN).await;
    assert!(body.starts_with("10/"), "{body}");
    for _ in 0..5 {
        assert_eq!(get(&alice, &root).await.0, StatusCode::OK);
    }
    assert_eq!(get(&alice, &root).await.0, StatusCode::TOO_MANY_REQUESTS);
    // Bob's block outlives the change.
    assert_eq!(get(&bob, &root).await.0, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn admin_routes_need_the_token_and_guesses_are_limited() {
    use reqwest::Method;
    let base = serve(admin::app(TOKEN).unwrap()).await;
    let guesser = from(4);
    let url = format!("{base}/admin/quota");
    assert_eq!(get(&guesser, &url).await.0, StatusCode::UNAUTHORIZED);
    let wrong = "0123456789abcdef0123456789abcdeX";
    for _ in 0..4 {
        let (status, _) = call(&guesser, &base, Method::GET, "/quota", wrong).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // Five failures from this address: the next attempt is refused before the token is read,
    // the right token included.
    let (status, _) = call(&guesser, &base, Method::GET, "/quota", TOKEN).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // A right token from elsewhere costs nothing of that budget.
    let admin = from(5);
    for _ in 0..10 {
        let (status, _) = call(&admin, &base, Method::GET, "/quota", TOKEN).await;
        assert_eq!(status, StatusCode::OK);
    }
    // A token that is a prefix of the real one is wrong.
    let (status, _) = call(&from(6), &base, Method::GET, "/quota", &TOKEN[..31]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn admin_input_out_of_bounds_is_refused() {
    use reqwest::Method;
    let base = serve(admin::app(TOKEN).unwrap()).await;
    let admin = from(7);
    for (method, path) in [
        (Method::POST, "/clients/127.0.0.2/block/0"),
        (Method::POST, "/clients/127.0.0.2/block/2592001"),
        (
            Method::POST,
            "/clients/127.0.0.2/block/99999999999999999999",
        ),
        (Method::POST, "/clients/not-an-ip/block/60"),
        (Method::POST, "/clients/127.0.0.2%00/reset"),
        (Method::GET, "/clients/999.0.0.1"),
        (Method::PUT, "/quota/0"),
        (Method::PUT, "/quota/1000001"),
        (Method::PUT, "/quota/-1"),
    ] {
        let (status, body) = call(&admin, &base, method.clone(), path, TOKEN).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {body}");
    }
    // Nothing changed.
    let (_, body) = call(&admin, &base, Method::GET, "/quota", TOKEN).await;
    assert!(body.starts_with("5/"), "{body}");
}

#[test]
fn a_short_or_missing_token_stops_the_app_from_being_built() {
    for token in ["", "short", &"x".repeat(31), &"x".repeat(257)] {
        let refused = admin::app(token).err().unwrap();
        assert!(refused.contains("32 to 256"), "{refused}");
    }
    assert!(admin::app(&"x".repeat(32)).is_ok());
}
