//! An in-flight limit on a real axum server over TCP, with a real HTTP client (reqwest over
//! hyper): a streaming response holds its slot until its body has been read to the end, or
//! until the client goes away and the server drops the body.

use crate::support::http as web;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use reqwest::StatusCode;
use tokio::sync::{mpsc, oneshot};
use tollgate::InFlightLayer;

/// A body of the chunks sent on a channel until it closes, telling the test when the server
/// drops it.
struct Streamed {
    chunks: mpsc::UnboundedReceiver<Bytes>,
    dropped: Option<oneshot::Sender<()>>,
}

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.chunks
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            let _ = dropped.send(());
        }
    }
}

/// The next streaming response's body, set by the test before it asks for one.
type Next = Arc<Mutex<Option<Streamed>>>;

async fn app(next: Next) -> String {
    let stream = move || {
        let next = next.clone();
        async move {
            let body = next.lock().unwrap().take().expect("a body for the stream");
            Body::new(body)
        }
    };
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/stream", get(stream))
        .layer(InFlightLayer::new(1).policy_name("streams"));
    web::serve(app).await
}

fn streamed(next: &Next) -> (mpsc::UnboundedSender<Bytes>, oneshot::Receiver<()>) {
    let (tx, chunks) = mpsc::unbounded_channel();
    let (dropped, on_drop) = oneshot::channel();
    *next.lock().unwrap() = Some(Streamed {
        chunks,
        dropped: Some(dropped),
    });
    (tx, on_drop)
}

#[tokio::test]
async fn a_streaming_body_holds_its_slot_until_read_to_the_end() {
    let next: Next = Arc::default();
    let url = app(next.clone()).await;
    let client = web::client();
    let (chunks, _) = streamed(&next);
    let mut stream = client.get(format!("{url}/stream")).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(web::header(&stream, "ratelimit"), "\"streams\";r=0");
    // The handler has returned; its body still streams, and holds the slot.
    let refused = client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().get("retry-after").is_none());
    chunks.send(Bytes::from_static(b"one")).unwrap();
    assert_eq!(stream.chunk().await.unwrap().unwrap(), "one");
    let refused = client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The end of the body gives the slot back before the client can see it.
    drop(chunks);
    assert_eq!(stream.chunk().await.unwrap(), None);
    let allowed = client.get(&url).send().await.unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
    assert_eq!(web::header(&allowed, "ratelimit"), "\"streams\";r=0");
    assert_eq!(allowed.text().await.unwrap(), "hello");
}

#[tokio::test]
async fn a_client_that_goes_away_gives_the_slot_back() {
    let next: Next = Arc::default();
    let url = app(next.clone()).await;
    // A client of its own, so that dropping its response closes its connection.
    let leaving = web::client();
    let (chunks, on_drop) = streamed(&next);
    let stream = leaving.get(format!("{url}/stream")).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let client = web::client();
    assert_eq!(
        client.get(&url).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    drop(stream);
    drop(leaving);
    // The server finds the connection gone when it next writes, and drops the body.
    chunks.send(Bytes::from_static(b"lost")).unwrap();
    tokio::time::timeout(Duration::from_secs(10), on_drop)
        .await
        .expect("the server dropped the body")
        .unwrap();
    let allowed = client.get(&url).send().await.unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
}
