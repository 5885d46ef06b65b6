//! Failed logins only: 5 failures per 15 minutes per account and client IP; successful logins
//! cost nothing.
//!
//! Run it with `cargo run --example login` (set `PORT` to use another port than 3000), then:
//!
//! ```text
//! for i in $(seq 1 7); do curl -s -w ' %{http_code}\n' -d password=guess http://127.0.0.1:3000/login/alice; done
//! curl -s -w ' %{http_code}\n' -d password=hunter2 http://127.0.0.1:3000/login/bob
//! ```
//!
//! Alice's 6th wrong guess is refused with 429 before the password is even checked; Bob, and
//! Alice from another address, are unaffected. `count_if` picks the responses that count (401s
//! here); the others give their capacity back.
//!
//! The key is the account the handler looks up, made by the same function ([`account`]), never
//! the path's text: `/login/%61lice` and `/login/ALICE` are alice, and spend alice's budget. A
//! limit keyed on the raw path would give each of the 3ⁿ spellings of an n-letter name (`a`,
//! `A`, `%61`, ...) a fresh budget of guesses.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Form;
use axum::http::{StatusCode, Uri};
use axum::routing::post;
use axum::Router;
use tollgate::key::{from_fn, KeyError, PeerIp};
use tollgate::{Key, Quota, RateLimitLayer};

/// The accounts and their passwords (a real service keeps password hashes in its database).
const ACCOUNTS: &[(&str, &str)] = &[("alice", "hunter2"), ("bob", "hunter2")];

/// Account names are 1 to 32 ASCII letters, digits, `.`, `_` or `-`, case-insensitive.
const MAX_NAME: usize = 32;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!("tollgate login example on http://{addr}/login/{{user}} (alice and bob; the password is \"hunter2\")");
    println!("  for i in $(seq 1 7); do curl -s -w ' %{{http_code}}\\n' -d password=guess http://{addr}/login/alice; done");
    println!("  curl -s -w ' %{{http_code}}\\n' -d password=guess http://{addr}/login/%41LICE   # alice too: refused");
    println!("  curl -s -w ' %{{http_code}}\\n' -d password=hunter2 http://{addr}/login/bob");
    println!("Press Ctrl-C to stop.");

    axum::serve(
        listener,
        app().into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// The login route behind its limit of failed attempts. Serve it with connect info: the key
/// includes the client IP.
pub fn app() -> Router {
    // The account is in the path, so it is known before the body is read. The key is the
    // account exactly as the handler looks it up.
    let user = from_fn(|head| match account(head.uri().path()) {
        Some(name) => Ok(Some(Key::from(name))),
        None => Err(KeyError::new(
            StatusCode::NOT_FOUND,
            "no such account: names are 1 to 32 letters, digits, '.', '_' or '-'",
        )),
    });
    let failed_logins =
        RateLimitLayer::gcra(Quota::new(5, Duration::from_secs(15 * 60)).named("failed-logins"))
            .key((user, PeerIp))
            .count_if(|response| response.status == StatusCode::UNAUTHORIZED);
    // Across servers, keep the state in Redis and fail closed: `.store(redis)` then
    // `.on_failure(OnFailure::Closed)`. While Redis fails, logins answer 503; the store's
    // default, a local budget on each server, would give a guesser one budget per server.

    Router::new()
        .route("/login/{user}", post(login))
        .route_layer(failed_logins)
}

/// The account a login path names, as the app looks it up: the segment after `/login/`,
/// percent-decoded, ASCII only (so no Unicode form can spell a name twice), lower-cased.
/// `None` for anything that is not a well-formed name.
pub fn account(path: &str) -> Option<String> {
    let segment = path.strip_prefix("/login/")?;
    let name = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()?;
    let valid = (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    valid.then(|| name.to_ascii_lowercase())
}

/// Checks the password of the account the path names: 200, or 401 for a wrong password or an
/// unknown account (which are not told apart).
async fn login(uri: Uri, Form(form): Form<HashMap<String, String>>) -> (StatusCode, String) {
    let password = form.get("password").map(String::as_str);
    let known = account(uri.path()).and_then(|name| {
        ACCOUNTS
            .iter()
            .find(|(account, _)| *account == name)
            .map(|&(account, secret)| (account, secret))
    });
    match known {
        Some((name, secret)) if password == Some(secret) => {
            (StatusCode::OK, format!("welcome, {name}"))
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            "wrong account or password".to_owned(),
        ),
    }
}
