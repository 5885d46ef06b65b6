//! An OpenAI-style gateway: `POST /v1/chat/completions`, each API key limited to tokens per
//! minute and per day, counted by the tokens its answers truly used.
//!
//! Run it with `cargo run --example llm_gateway` (set `PORT` to use another port than 3000),
//! then ask with Alice's key (`sk-alice-7Qx2`; Bob's is `sk-bob-9Lk4`):
//!
//! ```text
//! curl -N -i http://127.0.0.1:3000/v1/chat/completions -H 'authorization: Bearer sk-alice-7Qx2' \
//!   -H 'content-type: application/json' -d '{"max_tokens": 4000, "messages": [{"role": "user", "content": "Tell me a story"}]}'
//! ```
//!
//! The answer streams as server-sent events, the last carrying the `usage` the model reports.
//! Each key may use 10 000 tokens a minute (`tpm`) and 200 000 a day (`tpd`), both GCRA. The
//! third such request is still allowed, and puts Alice in debt: the next is refused with 429
//! and a `Retry-After` of the seconds the debt takes to pay back at 10 000 tokens a minute.
//!
//! The layer decides before the request's body is read, so a request reserves an estimate made
//! from its head: its size, about 4 bytes a token ([`estimate`]). The answer's true `usage`,
//! read from its last event, is reported through the [`Usage`] the layer put in the request;
//! when the answer's body ends (or the client drops it), the layer settles: a request that used
//! less than its estimate gives the rest back, one that used more is charged the difference,
//! past the budget if need be. A request whose answer never reported its usage (a client that
//! hangs up first) keeps its reservation. The estimate is low on purpose, as the true cost is
//! charged in full: a higher one is given back only while no later request of the key was
//! admitted (see `RateLimiter::refund`), so a key whose answers stream side by side would keep
//! most of it (`cargo run --example simulate`, `docs/sim-llm-tokens.svg`).
//!
//! The key is the customer an issued API key belongs to, never the header's text: an invented
//! key is refused with 401, not given a fresh budget. The "model" is a stub in the same process
//! that streams a few words; a real gateway forwards the request to its provider (asking for
//! the usage in the stream, `"stream_options": {"include_usage": true}` for OpenAI) and passes
//! the provider's events through the same reader.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use futures_util::{stream, Stream, StreamExt};
use serde_json::{json, Value};
use tollgate::key::{from_fn, BearerToken, KeyError, KeyExtractor, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer, Usage};

/// The API keys this service issued, and their customers. A real service keeps them hashed in
/// its database and looks them up there.
const ISSUED: &[(&str, &str)] = &[("sk-alice-7Qx2", "alice"), ("sk-bob-9Lk4", "bob")];

/// Each customer's tokens per minute and per day.
pub const TOKENS_PER_MINUTE: u64 = 10_000;
/// See [`TOKENS_PER_MINUTE`].
pub const TOKENS_PER_DAY: u64 = 200_000;

/// The largest request body read: 32 KiB (larger ones are refused with 413).
pub const MAX_BODY: usize = 32 * 1024;

/// The most tokens an answer may be asked for (`max_tokens`), and what it gets when it does
/// not say.
pub const MAX_TOKENS: u64 = 4_096;
/// See [`MAX_TOKENS`].
pub const DEFAULT_MAX_TOKENS: u64 = 16;

/// The stub model's words per event, and the time it takes to write each event.
pub const WORDS_PER_EVENT: usize = 64;
/// See [`WORDS_PER_EVENT`].
pub const PACE: Duration = Duration::from_millis(20);

/// The longest line of an answer's event stream read for its usage: 16 KiB.
const MAX_LINE: usize = 16 * 1024;

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
    let url = format!("http://{addr}/v1/chat/completions");
    let ask =
        r#"{"max_tokens": 4000, "messages": [{"role": "user", "content": "Tell me a story"}]}"#;
    println!("tollgate llm_gateway example on {url}");
    println!("  curl -N -i {url} -H 'authorization: Bearer sk-alice-7Qx2' -H 'content-type: application/json' -d '{ask}'");
    println!("  (the 4th time within a minute: 429, and Retry-After for the debt)");
    println!(
        "  curl -i {url} -H 'authorization: Bearer sk-mine' -d '{{}}'   # 401: not an issued key"
    );
    println!("Press Ctrl-C to stop.");

    axum::serve(listener, app())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// The gateway behind its limits.
pub fn app() -> Router {
    gateway(limits())
}

/// Tokens per minute and per day for each customer, reserving [`estimate`] and settling to
/// the answer's true usage.
pub fn limits() -> RateLimitLayer {
    let tiers = [
        Quota::per_minute(TOKENS_PER_MINUTE).named("tpm"),
        Quota::per_day(TOKENS_PER_DAY).named("tpd"),
    ];
    RateLimitLayer::gcra(tiers)
        .key(from_fn(customer))
        .cost(|_key, head| estimate(head))
        .settle()
}

/// The chat route behind `limits` (the layer must settle: the route reports each answer's
/// usage).
pub fn gateway(limits: RateLimitLayer) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .layer(limits)
}

/// The customer of the request's bearer token, which must be one of [`ISSUED`]: 401 for any
/// other (and for a request without one).
fn customer(head: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
    let token = BearerToken.extract(head)?;
    let customer = ISSUED
        .iter()
        .find(|(issued, _)| token.as_ref().and_then(Key::as_bytes) == Some(issued.as_bytes()))
        .map(|&(_, customer)| Key::from(customer));
    match customer {
        Some(customer) => Ok(Some(customer)),
        None => Err(KeyError::new(
            StatusCode::UNAUTHORIZED,
            "not an API key this service issued",
        )
        .with_challenge(HeaderValue::from_static("Bearer error=\"invalid_token\""))),
    }
}

/// What a request reserves before its body is read: a token for every 4 bytes of its body, by
/// its `Content-Length`, at least 1; a body without one (chunked) reserves the most a body may
/// hold. A longer body is refused with 413 and given back.
pub fn estimate(head: RequestHead<'_>) -> u64 {
    let most = MAX_BODY as u64;
    let length = head
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(most);
    length.min(most).div_ceil(4).max(1)
}

/// `POST /v1/chat/completions`: the stub model's answer, streamed, its usage reported as it
/// passes. A request refused here never reached the model: it costs nothing.
async fn chat(Extension(usage): Extension<Usage>, body: Body) -> Response {
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        usage.set(0);
        let message = format!("the request body must be at most {MAX_BODY} bytes");
        return error(StatusCode::PAYLOAD_TOO_LARGE, &message);
    };
    let request = match ChatRequest::parse(&body) {
        Ok(request) => request,
        Err(message) => {
            usage.set(0);
            return error(StatusCode::BAD_REQUEST, &message);
        }
    };
    let mut reader = UsageReader::new(usage);
    let answer = model(&request).map(move |event| {
        if let Ok(bytes) = &event {
            reader.feed(bytes);
        }
        event
    });
    let headers = [
        (CONTENT_TYPE, "text/event-stream"),
        (CACHE_CONTROL, "no-cache"),
    ];
    (headers, Body::from_stream(answer)).into_response()
}

/// An OpenAI-style error.
fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": "invalid_request_error" } });
    (
        status,
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// What the stub model reads of a chat request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    /// The words of every message's content: the stub counts a token a word.
    pub prompt_tokens: u64,
    /// The words to answer with.
    pub max_tokens: u64,
}

impl ChatRequest {
    /// Reads `{"messages": [{"role": ..., "content": "..."}, ...], "max_tokens": n}`; the
    /// message for the client when it is not that.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let request: Value =
            serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .filter(|messages| !messages.is_empty())
            .ok_or("`messages` must be a list of messages")?;
        let mut prompt_tokens = 0;
        for message in messages {
            let content = message
                .get("content")
                .and_then(Value::as_str)
                .ok_or("each message needs a `content` string")?;
            prompt_tokens += content.split_whitespace().count() as u64;
        }
        let max_tokens = match request.get("max_tokens") {
            None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
            Some(n) => n.as_u64().filter(|&n| n <= MAX_TOKENS).ok_or(format!(
                "`max_tokens` must be a number from 0 to {MAX_TOKENS}"
            ))?,
        };
        Ok(Self {
            prompt_tokens,
            max_tokens,
        })
    }
}

/// The stub model: `max_tokens` words in events of [`WORDS_PER_EVENT`], one every [`PACE`],
/// then an event with no words and the `usage`, then `[DONE]`.
pub fn model(request: &ChatRequest) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    const WORDS: [&str; 8] = ["once", "upon", "a", "time", "a", "rate", "limit", "held"];
    let words: Vec<&str> = (0..request.max_tokens)
        .map(|i| WORDS[i as usize % WORDS.len()])
        .collect();
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "model": "stub",
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        })
    };
    let mut events: Vec<Value> = words
        .chunks(WORDS_PER_EVENT)
        .map(|some| chunk(json!({ "content": some.join(" ") + " " }), Value::Null))
        .collect();
    let mut last = chunk(json!({}), json!("stop"));
    last["usage"] = json!({
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": request.max_tokens,
        "total_tokens": request.prompt_tokens + request.max_tokens,
    });
    events.push(last);
    let lines = events
        .into_iter()
        .map(|event| format!("data: {event}\n\n"))
        .chain(["data: [DONE]\n\n".to_owned()]);
    stream::iter(lines).then(|line| async move {
        tokio::time::sleep(PACE).await;
        Ok(Bytes::from(line))
    })
}

/// Reads an answer's event stream as it passes and reports the `usage.total_tokens` of its
/// events (the last one's, where OpenAI puts it) to the layer. Lines may be split across
/// chunks; a line longer than 16 KiB is skipped.
pub struct UsageReader {
    usage: Usage,
    line: Vec<u8>,
    overlong: bool,
}

impl UsageReader {
    /// A reader reporting to `usage`.
    pub fn new(usage: Usage) -> Self {
        Self {
            usage,
            line: Vec::new(),
            overlong: false,
        }
    }

    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        for part in bytes.split_inclusive(|&b| b == b'\n') {
            if self.line.len() + part.len() > MAX_LINE {
                self.overlong = true;
                self.line.clear();
            }
            if !self.overlong {
                self.line.extend_from_slice(part);
            }
            if part.ends_with(b"\n") {
                if !self.overlong {
                    self.read_line();
                }
                self.line.clear();
                self.overlong = false;
            }
        }
    }

    /// Reports the usage of a complete `data:` line, if it has one (`[DONE]` and the events
    /// without usage have none).
    fn read_line(&self) {
        let Some(data) = self.line.trim_ascii().strip_prefix(b"data:") else {
            return;
        };
        let Ok(event) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
            return;
        };
        if let Some(total) = event.pointer("/usage/total_tokens").and_then(Value::as_u64) {
            self.usage.set(total);
        }
    }
}
