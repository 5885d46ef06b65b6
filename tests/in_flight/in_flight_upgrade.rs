//! An in-flight limit and upgraded connections, on a real axum server over TCP with a real
//! WebSocket client (tokio-tungstenite; over HTTP/2, hyper's client and an extended `CONNECT`):
//! an open WebSocket holds its slot until it closes, an upgrade whose slot nobody keeps is
//! refused rather than let through uncounted, and the ways a client may spell an upgrade request
//! all count.

use crate::support::http as web;

use std::net::SocketAddr;

use axum::extract::ws::{Message as ServerMessage, WebSocket, WebSocketUpgrade};
use axum::extract::Extension;
use axum::response::Response;
use axum::routing::{any, get};
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use http::header::{CONNECTION, UPGRADE};
use http::{HeaderValue, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tollgate::key::Global;
use tollgate::{InFlightLayer, InFlightSlot};

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Echoes text messages until the client closes, then says so on `closed` once the slot it
/// kept is given back.
async fn echo(mut socket: WebSocket, slot: InFlightSlot, closed: mpsc::UnboundedSender<()>) {
    while let Some(Ok(message)) = socket.recv().await {
        if let ServerMessage::Text(text) = message {
            if socket.send(ServerMessage::Text(text)).await.is_err() {
                break;
            }
        }
    }
    drop(socket);
    drop(slot);
    let _ = closed.send(());
}

/// A WebSocket handler as the docs show it: the request's slot moved into the upgraded
/// connection's task.
async fn keeps_slot(
    upgrade: WebSocketUpgrade,
    Extension(slot): Extension<InFlightSlot>,
    Extension(closed): Extension<mpsc::UnboundedSender<()>>,
) -> Response {
    upgrade.on_upgrade(move |socket| echo(socket, slot, closed))
}

/// A WebSocket handler that never looks at the slot.
async fn ignores_slot(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(|mut socket| async move { while let Some(Ok(_)) = socket.recv().await {} })
}

/// A WebSocket handler that clones the slot many times and keeps every clone in tasks of its
/// own, each living as long as the connection.
async fn clones_slot(
    upgrade: WebSocketUpgrade,
    Extension(slot): Extension<InFlightSlot>,
    Extension(closed): Extension<mpsc::UnboundedSender<()>>,
) -> Response {
    let (gone, _) = tokio::sync::broadcast::channel::<()>(1);
    for _ in 0..8 {
        let clone = slot.clone();
        let mut gone = gone.subscribe();
        tokio::spawn(async move {
            let _ = gone.recv().await;
            drop(clone);
        });
    }
    upgrade.on_upgrade(move |socket| async move {
        echo(socket, slot, closed).await;
        drop(gone);
    })
}

/// A WebSocket handler whose connection task panics on the first message.
async fn panics(upgrade: WebSocketUpgrade, Extension(slot): Extension<InFlightSlot>) -> Response {
    upgrade.on_upgrade(move |mut socket| async move {
        let _slot = slot;
        if let Some(Ok(_)) = socket.recv().await {
            panic!("the handler of an upgraded connection panics (on purpose)");
        }
    })
}

/// An app with an in-flight limit of 2 per client IP (every client here is 127.0.0.1) over
/// WebSocket routes and a plain one, and the channel that tells when a socket's slot is back.
async fn app() -> (SocketAddr, mpsc::UnboundedReceiver<()>) {
    let (closed, on_close) = mpsc::unbounded_channel();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/ws", any(keeps_slot))
        .route("/ignores", any(ignores_slot))
        .route("/clones", any(clones_slot))
        .route("/panics", any(panics))
        .layer(InFlightLayer::new(2).policy_name("sockets"))
        .layer(Extension(closed));
    (serve(app).await, on_close)
}

async fn serve(app: Router) -> SocketAddr {
    let url = web::serve(app).await;
    url.trim_start_matches("http://").parse().unwrap()
}

/// Opens a WebSocket at `path`, or returns the status of the refused upgrade.
async fn open(addr: SocketAddr, path: &str) -> Result<Client, StatusCode> {
    open_with(addr, path, |_| {}).await
}

/// Opens a WebSocket at `path` with its request's headers changed by `edit` first.
async fn open_with(
    addr: SocketAddr,
    path: &str,
    edit: impl FnOnce(&mut http::HeaderMap),
) -> Result<Client, StatusCode> {
    let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
    edit(request.headers_mut());
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, response)) => {
            assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
            Ok(socket)
        }
        Err(tungstenite::Error::Http(response)) => Err(response.status()),
        Err(error) => panic!("the upgrade failed without an HTTP answer: {error}"),
    }
}

/// Sends `text` and reads it back: the socket is open end to end.
async fn round_trip(socket: &mut Client, text: &str) {
    socket.send(Message::text(text)).await.unwrap();
    match socket.next().await {
        Some(Ok(Message::Text(echoed))) => assert_eq!(echoed.as_str(), text),
        other => panic!("no echo of {text:?}: {other:?}"),
    }
}

/// Closes `socket` and waits until the server has given its slot back.
async fn close(mut socket: Client, on_close: &mut mpsc::UnboundedReceiver<()>) {
    socket.close(None).await.unwrap();
    // The server's close frame, then the end of the stream.
    while socket.next().await.is_some() {}
    on_close.recv().await.unwrap();
}

/// A plain `GET /` over HTTP/1.1: its status and its `ratelimit` header.
async fn plain(addr: SocketAddr) -> (StatusCode, String) {
    let response = web::client()
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let ratelimit = response
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, ratelimit)
}

/// Retries opening a WebSocket at `path` until it is admitted, for at most a second: for a
/// slot given back by a task the test cannot hear from (one that panicked).
async fn open_within_a_second(addr: SocketAddr, path: &str) -> Client {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match open(addr, path).await {
            Ok(socket) => return socket,
            Err(status) => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the slot did not come back"
                );
                tokio::task::yield_now().await;
            }
        }
    }
}

#[tokio::test]
async fn open_websockets_hold_their_slots_until_they_close() {
    let (addr, mut on_close) = app().await;
    let mut first = open(addr, "/ws").await.unwrap();
    let mut second = open(addr, "/ws").await.unwrap();
    round_trip(&mut first, "one").await;
    round_trip(&mut second, "two").await;
    // Both sockets are open: a third upgrade finds no slot.
    assert_eq!(
        open(addr, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    // Nor does a plain request: the sockets hold the slots.
    let (status, _) = plain(addr).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The open sockets still work.
    round_trip(&mut first, "still").await;
    // Closing one gives its slot back.
    close(first, &mut on_close).await;
    let mut third = open(addr, "/ws").await.unwrap();
    round_trip(&mut third, "three").await;
    assert_eq!(
        open(addr, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    close(second, &mut on_close).await;
    close(third, &mut on_close).await;
    assert_eq!(
        plain(addr).await,
        (StatusCode::OK, "\"sockets\";r=1".into())
    );
}

#[tokio::test]
async fn an_upgrade_whose_slot_nobody_keeps_is_refused_not_let_through_uncounted() {
    let (addr, _on_close) = app().await;
    // Every upgrade would switch with no slot held: none does.
    for _ in 0..3 {
        assert_eq!(
            open(addr, "/ignores").await.err(),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
    }
    // The body says how to fix the server.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET /ignores HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .await
        .unwrap();
    let text = read_answer(&mut stream).await;
    assert!(text.starts_with("HTTP/1.1 500"), "{text}");
    assert!(text.contains("InFlightSlot"), "{text}");
    assert!(text.contains("cache-control: no-store"), "{text}");
    // The refused upgrades hold nothing.
    assert_eq!(
        plain(addr).await,
        (StatusCode::OK, "\"sockets\";r=1".into())
    );
}

/// Reads one answer with no body or a `Content-Length` one from `stream`.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .map_or(0, |l| l.trim().parse::<usize>().unwrap());
            if bytes.len() >= end + 4 + length || n == 0 {
                return text;
            }
        } else if n == 0 {
            return text;
        }
    }
}

#[tokio::test]
async fn however_the_upgrade_is_spelled_its_socket_takes_a_slot() {
    let (addr, mut on_close) = app().await;
    // `Connection` with other tokens, and two `Upgrade` fields.
    let first = open_with(addr, "/ws", |h| {
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
    })
    .await
    .unwrap();
    let second = open_with(addr, "/ws", |h| {
        h.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        h.append(UPGRADE, HeaderValue::from_static("websocket"));
    })
    .await
    .unwrap();
    assert_eq!(
        open_with(addr, "/ws", |h| {
            h.insert(CONNECTION, HeaderValue::from_static("Upgrade, keep-alive"));
        })
        .await
        .err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    close(first, &mut on_close).await;
    close(second, &mut on_close).await;
}

#[tokio::test]
async fn an_http_1_0_upgrade_request_switches_nothing_and_holds_nothing() {
    let (addr, _on_close) = app().await;
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"GET /ws HTTP/1.0\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                  Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            )
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        // hyper upgrades HTTP/1.1 only: axum answers that the connection cannot be upgraded.
        assert!(!text.starts_with("HTTP/1.1 101"), "{text}");
        assert!(!text.starts_with("HTTP/1.0 101"), "{text}");
    }
    assert_eq!(
        plain(addr).await,
        (StatusCode::OK, "\"sockets\";r=1".into())
    );
}

#[tokio::test]
async fn a_handler_that_clones_the_slot_still_holds_one_slot_per_socket() {
    let (addr, mut on_close) = app().await;
    let mut first = open(addr, "/clones").await.unwrap();
    let second = open(addr, "/clones").await.unwrap();
    round_trip(&mut first, "one").await;
    assert_eq!(
        open(addr, "/clones").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    close(first, &mut on_close).await;
    // The clones in other tasks go once the connection's task ends: within a second.
    let third = open_within_a_second(addr, "/clones").await;
    assert_eq!(
        open(addr, "/clones").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    close(second, &mut on_close).await;
    close(third, &mut on_close).await;
}

#[tokio::test]
async fn a_connection_task_that_panics_gives_its_slot_back() {
    let (addr, mut on_close) = app().await;
    let mut doomed = open(addr, "/panics").await.unwrap();
    let kept = open(addr, "/ws").await.unwrap();
    assert_eq!(
        open(addr, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    doomed.send(Message::text("boom")).await.unwrap();
    // The connection ends with the task.
    while let Some(Ok(_)) = doomed.next().await {}
    let back = open_within_a_second(addr, "/ws").await;
    close(back, &mut on_close).await;
    close(kept, &mut on_close).await;
}

#[tokio::test]
async fn a_client_that_leaves_right_after_the_101_gives_its_slot_back() {
    let (addr, mut on_close) = app().await;
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                  Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            )
            .await
            .unwrap();
        let text = read_answer(&mut stream).await;
        assert!(text.starts_with("HTTP/1.1 101"), "{text}");
        // Gone without a close frame: the server's socket ends, and the slot with it.
        drop(stream);
        on_close.recv().await.unwrap();
    }
    assert_eq!(
        plain(addr).await,
        (StatusCode::OK, "\"sockets\";r=1".into())
    );
}

#[tokio::test]
async fn a_plain_request_that_asks_for_an_upgrade_gives_its_slot_back_with_its_body() {
    let (addr, _on_close) = app().await;
    for _ in 0..3 {
        let response = web::client()
            .get(format!("http://{addr}/"))
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(web::header(&response, "ratelimit"), "\"sockets\";r=1");
        assert_eq!(response.text().await.unwrap(), "hello");
    }
    assert_eq!(
        plain(addr).await,
        (StatusCode::OK, "\"sockets\";r=1".into())
    );
}

#[tokio::test]
async fn stacked_in_flight_layers_each_hold_their_slot_for_the_socket() {
    let (closed, mut on_close) = mpsc::unbounded_channel();
    // One socket for the whole server (outside), two per client IP (inside).
    let app = Router::new()
        .route("/ws", any(keeps_slot))
        .layer(InFlightLayer::new(2).policy_name("per-client"))
        .layer(InFlightLayer::new(1).policy_name("server").key(Global))
        .layer(Extension(closed));
    let addr = serve(app).await;
    let mut first = open(addr, "/ws").await.unwrap();
    round_trip(&mut first, "one").await;
    assert_eq!(
        open(addr, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    close(first, &mut on_close).await;
    let second = open(addr, "/ws").await.unwrap();
    close(second, &mut on_close).await;
}

/// An HTTP/2 connection to `addr` whose server allows extended `CONNECT` (RFC 8441).
async fn h2(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<axum::body::Body> {
    let io = hyper_util::rt::TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(io)
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

/// Opens a WebSocket at `path` over `send`'s HTTP/2 connection (a stream of its own), or
/// returns the status of the refused `CONNECT`.
async fn open_h2(
    send: &mut hyper::client::conn::http2::SendRequest<axum::body::Body>,
    path: &str,
) -> Result<WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>, StatusCode> {
    send.ready().await.unwrap();
    let request = http::Request::connect(path)
        .extension(hyper::ext::Protocol::from_static("websocket"))
        .header("sec-websocket-version", "13")
        .header("host", "localhost")
        .body(axum::body::Body::empty())
        .unwrap();
    let mut response = send.send_request(request).await.unwrap();
    if response.status() != StatusCode::OK {
        return Err(response.status());
    }
    let upgraded = hyper::upgrade::on(&mut response).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(upgraded);
    Ok(WebSocketStream::from_raw_socket(io, tungstenite::protocol::Role::Client, None).await)
}

#[tokio::test]
async fn http2_websockets_hold_their_slots_until_they_close() {
    let (addr, mut on_close) = app().await;
    let mut send = h2(addr).await;
    // Two sockets on two streams of one connection.
    let mut first = open_h2(&mut send, "/ws").await.unwrap();
    let mut second = open_h2(&mut send, "/ws").await.unwrap();
    for (socket, text) in [(&mut first, "one"), (&mut second, "two")] {
        socket.send(Message::text(text)).await.unwrap();
        match socket.next().await {
            Some(Ok(Message::Text(echoed))) => assert_eq!(echoed.as_str(), text),
            other => panic!("no echo of {text:?}: {other:?}"),
        }
    }
    assert_eq!(
        open_h2(&mut send, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    assert_eq!(
        open(addr, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    first.close(None).await.unwrap();
    while first.next().await.is_some() {}
    on_close.recv().await.unwrap();
    let third = open_h2(&mut send, "/ws").await.unwrap();
    assert_eq!(
        open_h2(&mut send, "/ws").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    drop((second, third));
    // An HTTP/2 upgrade whose slot nobody keeps is refused too.
    let (addr, _on_close) = app().await;
    let mut send = h2(addr).await;
    assert_eq!(
        open_h2(&mut send, "/ignores").await.err(),
        Some(StatusCode::INTERNAL_SERVER_ERROR)
    );
}

/// A dry run never changes an answer: an upgrade whose slot nobody keeps switches protocols
/// (only logged), where the layer in earnest refuses it.
#[tokio::test]
async fn in_a_dry_run_an_upgrade_whose_slot_nobody_keeps_still_switches() {
    let app = Router::new()
        .route("/ignores", any(ignores_slot))
        .layer(InFlightLayer::new(1).policy_name("sockets").dry_run(true));
    let addr = serve(app).await;
    // `open` asserts the 101.
    let socket = open(addr, "/ignores").await;
    assert!(socket.is_ok(), "{:?}", socket.err());
}
