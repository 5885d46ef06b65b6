//! Real HTTP for the tests: an axum app served on a free local port, a client, and header reads.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Serves `app` on a free local port, recording peer addresses (the default key), and returns
/// its base URL (`http://127.0.0.1:port`, no trailing slash).
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    tokio::spawn(async move { server.await.unwrap() });
    format!("http://{addr}")
}

/// Serves `app` on a free local port without recording peer addresses (keys that need none
/// still work; the default key fails), and returns its base URL.
pub async fn serve_without_peers(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A client whose timeout only keeps a broken server from hanging the test run.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A client with its own connections, sending from `source` (a loopback address), with the
/// same timeout.
pub fn client_from(source: impl Into<IpAddr>) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(source.into())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The value of header `name`, which must be there.
#[track_caller]
pub fn header(resp: &reqwest::Response, name: &str) -> String {
    match resp.headers().get(name) {
        Some(value) => value.to_str().unwrap().to_owned(),
        None => panic!("no {name} header in {:?}", resp.headers()),
    }
}
