//! Failed logins only: 5 failures per 15 minutes per user name and client IP; successful logins
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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Form, Path};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use tollgate::key::{from_fn, KeyError, PeerIp};
use tollgate::{Key, Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 3000,
    };

    // The user name is in the path, so it is known before the body is read.
    let user = from_fn(|head| match head.uri().path().strip_prefix("/login/") {
        Some(name) if !name.is_empty() => Ok(Some(Key::from(name))),
        _ => Err(KeyError::new(
            StatusCode::NOT_FOUND,
            "no user name in the path",
        )),
    });
    let failed_logins =
        RateLimitLayer::gcra(Quota::new(5, Duration::from_secs(15 * 60)).named("failed-logins"))
            .key((user, PeerIp))
            .count_if(|response| response.status == StatusCode::UNAUTHORIZED);

    let app = Router::new()
        .route("/login/{user}", post(login))
        .route_layer(failed_logins);

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    println!("tollgate login example on http://{addr}/login/{{user}} (every password but \"hunter2\" is wrong)");
    println!("  for i in $(seq 1 7); do curl -s -w ' %{{http_code}}\\n' -d password=guess http://{addr}/login/alice; done");
    println!("  curl -s -w ' %{{http_code}}\\n' -d password=hunter2 http://{addr}/login/bob");
    println!("Press Ctrl-C to stop.");

    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

async fn login(
    Path(user): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> (StatusCode, String) {
    if form.get("password").is_some_and(|p| p == "hunter2") {
        (StatusCode::OK, format!("welcome, {user}"))
    } else {
        (StatusCode::UNAUTHORIZED, "wrong password".to_owned())
    }
}
