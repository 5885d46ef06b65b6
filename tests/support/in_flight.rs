//! A handler for in-flight limits whose requests the test holds and ends one by one: each
//! request waits for its fate, and counts as live (in the handler, or its body not yet ended or
//! dropped) in a counter the test reads.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use tokio::sync::{mpsc, oneshot};

/// What becomes of a request once the test lets it go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Answers with a whole body, read to its end.
    Complete,
    /// The request is dropped before it is answered (the client goes away, a timeout).
    Cancel,
    /// Answers; the client drops the body unread.
    DropBody,
    /// Answers with a streaming body, read frame by frame to its end.
    Stream,
    /// The handler panics.
    Panic,
}

/// Counts a request as live until dropped or ended.
pub struct Live(Option<Arc<AtomicUsize>>);

impl Live {
    pub fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(Some(count.clone()))
    }

    fn end(&mut self) {
        if let Some(count) = self.0.take() {
            count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.end();
    }
}

/// A body of one chunk, or of the chunks sent on a channel until it closes; the request
/// stops being live as the body ends, before the end is reported.
pub struct TestBody {
    whole: Option<Bytes>,
    chunks: Option<mpsc::UnboundedReceiver<Bytes>>,
    live: Option<Live>,
}

impl TestBody {
    pub fn empty() -> Self {
        Self {
            whole: None,
            chunks: None,
            live: None,
        }
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(data) = self.whole.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        let next = match &mut self.chunks {
            Some(chunks) => match chunks.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(next) => next,
            },
            None => None,
        };
        match next {
            Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
            None => {
                if let Some(live) = &mut self.live {
                    live.end();
                }
                Poll::Ready(None)
            }
        }
    }
}

/// The controls of the requests a [`handler`] holds, by the value of their `x-id` header.
#[derive(Default, Clone)]
pub struct Controls {
    fates: Arc<Mutex<HashMap<u64, oneshot::Receiver<Fate>>>>,
    chunks: Arc<Mutex<HashMap<u64, mpsc::UnboundedReceiver<Bytes>>>>,
}

/// The test's end of one request.
pub struct Control {
    pub fate: Option<oneshot::Sender<Fate>>,
    pub chunks: Option<mpsc::UnboundedSender<Bytes>>,
}

impl Controls {
    /// Registers request `id`, to be let go through the returned control.
    pub fn register(&self, id: u64) -> Control {
        let (fate, rx) = oneshot::channel();
        let (chunks, chunk_rx) = mpsc::unbounded_channel();
        self.fates.lock().unwrap().insert(id, rx);
        self.chunks.lock().unwrap().insert(id, chunk_rx);
        Control {
            fate: Some(fate),
            chunks: Some(chunks),
        }
    }
}

/// The handler: a request with `x-peek` is answered at once and is not live; any other waits
/// for the fate the test sends through its control, live all the while.
pub fn handler(
    controls: Controls,
    live: Arc<AtomicUsize>,
) -> impl tower::Service<Request<()>, Response = Response<TestBody>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<()>| {
        let controls = controls.clone();
        let live = live.clone();
        async move {
            if req.headers().contains_key("x-peek") {
                return Ok(Response::new(TestBody::empty()));
            }
            let guard = Live::new(&live);
            let id: u64 = req.headers()["x-id"].to_str().unwrap().parse().unwrap();
            let fate = controls.fates.lock().unwrap().remove(&id);
            let chunks = controls.chunks.lock().unwrap().remove(&id);
            let fate = match fate {
                Some(rx) => rx.await.unwrap_or(Fate::Cancel),
                None => Fate::Complete,
            };
            let body = match fate {
                Fate::Panic => panic!("the handler panics (on purpose)"),
                Fate::Stream => TestBody {
                    whole: None,
                    chunks,
                    live: Some(guard),
                },
                _ => TestBody {
                    whole: Some(Bytes::from_static(b"done")),
                    chunks: None,
                    live: Some(guard),
                },
            };
            Ok::<_, Infallible>(Response::new(body))
        }
    })
}
