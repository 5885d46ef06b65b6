//! The answers the layer writes itself; the rate limit headers are written by `headers`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use percent_encoding::{AsciiSet, CONTROLS};

use super::answer::Answer;
use super::headers::{HeaderWriter, Headers};
use super::observe::{Denials, Now, Observer};
use super::text::{int_value, Text};
use crate::decision::{ceil_millis, ceil_secs};
use crate::key::{KeyError, RequestHead};
use crate::limiter::Limiter;
use crate::{Decision, Error, Quota};

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// gRPC status RESOURCE_EXHAUSTED.
const GRPC_RESOURCE_EXHAUSTED: &str = "8";
/// gRPC status UNAVAILABLE.
const GRPC_UNAVAILABLE: &str = "14";

/// The message of an in-flight limit's denial: no one knows when a slot comes back.
const BUSY: &str = "Too many requests in progress: retry once one has finished.";
/// The message of a denial that no wait would turn into an allowance.
const TOO_LARGE: &str = "Request too large: it costs more than the rate limit ever allows.";
/// The body of the answer when the store failed to decide.
const UNAVAILABLE: &str = "Rate limiting is unavailable; try again shortly.\n";

/// A request answered the gRPC way: HTTP 200, the outcome in `grpc-status`, and the content
/// type the client speaks.
#[derive(Debug, Clone)]
pub(crate) struct Grpc {
    content_type: HeaderValue,
}

impl Grpc {
    /// The gRPC form of `req`, if it has one and the layer answers it the gRPC way. gRPC is a
    /// `POST` with `application/grpc[+subtype]` over HTTP/2 (gRPC runs over nothing else),
    /// answered so when `grpc` is on; gRPC-Web is a `POST` with
    /// `application/grpc-web[-text][+subtype]` over any version, answered so only when `web`
    /// is on too. Anything else is plain HTTP: any other method (`GET`, `HEAD`, a lower-case
    /// `post`), `application/grpc` over HTTP/1.x, look-alike types. A client chooses the
    /// content type it sends: a gRPC answer is an HTTP 200, so one given to a request that is
    /// not gRPC would turn its denial into a 200 that defences watching for 429s never see.
    fn of<B>(req: &Request<B>, grpc: bool, web: bool) -> Option<Self> {
        if !grpc || req.method() != Method::POST {
            return None;
        }
        let value = req.headers().get(CONTENT_TYPE)?.as_bytes();
        // The media type, without parameters (`; charset=...`).
        let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
        let media = value[..end].trim_ascii();
        let rest = strip_prefix_ignore_case(media, b"application/grpc")?;
        let (is_web, rest) = match strip_prefix_ignore_case(rest, b"-web-text") {
            Some(rest) => (true, rest),
            None => match strip_prefix_ignore_case(rest, b"-web") {
                Some(rest) => (true, rest),
                None => (false, rest),
            },
        };
        let answered = if is_web {
            web
        } else {
            req.version() == Version::HTTP_2
        };
        if !answered {
            return None;
        }
        // Nothing more, or `+` and a subtype (`proto`, `json`, ...).
        let common = match rest {
            [] => true,
            [b'+', subtype @ ..] if !subtype.is_empty() && subtype.iter().all(|&b| is_tchar(b)) => {
                subtype.eq_ignore_ascii_case(b"proto")
            }
            _ => return None,
        };
        let content_type = if common {
            // The common types, without allocating.
            let base = &media[..media.len() - rest.len()];
            HeaderValue::from_static(common_type(base, rest.is_empty()))
        } else {
            HeaderValue::from_bytes(&media.to_ascii_lowercase()).ok()?
        };
        Some(Self { content_type })
    }
}

/// `application/grpc`, `application/grpc-web` or `application/grpc-web-text` (as `base` is),
/// bare or with `+proto`.
fn common_type(base: &[u8], bare: bool) -> &'static str {
    let web_text = base.len() == "application/grpc-web-text".len();
    let web = base.len() == "application/grpc-web".len();
    match (web_text, web, bare) {
        (true, _, true) => "application/grpc-web-text",
        (true, _, false) => "application/grpc-web-text+proto",
        (_, true, true) => "application/grpc-web",
        (_, true, false) => "application/grpc-web+proto",
        (_, _, true) => "application/grpc",
        (_, _, false) => "application/grpc+proto",
    }
}

fn strip_prefix_ignore_case<'a>(bytes: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let (head, rest) = bytes.split_at_checked(prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then_some(rest)
}

/// A character of an HTTP token (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The gRPC status code (as its decimal text) for an HTTP status, after the HTTP mapping of
/// `google.rpc.Code`: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404
/// NOT_FOUND, 409 ABORTED, 412 FAILED_PRECONDITION, 416 OUT_OF_RANGE, 429 RESOURCE_EXHAUSTED,
/// 499 CANCELLED, 500 INTERNAL, 501 UNIMPLEMENTED, 502 and 503 UNAVAILABLE, 504
/// DEADLINE_EXCEEDED; any other status UNKNOWN.
pub(crate) fn grpc_code(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "3",
        401 => "16",
        403 => "7",
        404 => "5",
        409 => "10",
        412 => "9",
        416 => "11",
        429 => GRPC_RESOURCE_EXHAUSTED,
        499 => "1",
        500 => "13",
        501 => "12",
        502 | 503 => GRPC_UNAVAILABLE,
        504 => "4",
        _ => "2",
    }
}

/// What the layer does with a request once its check is done.
pub(crate) enum Admission {
    /// The request goes on to the inner service.
    Allowed(Decision),
    /// The layer answers the request itself.
    Answered(Response<Answer>),
}

/// Makes the response to a denied request, in place of the layer's plain-text one.
pub(crate) type OnLimited = dyn Fn(&Decision, RequestHead<'_>) -> Response<Answer> + Send + Sync;

/// Makes the response to a request without a key, in place of the layer's plain-text one.
pub(crate) type OnKeyError = dyn Fn(&KeyError, RequestHead<'_>) -> Response<Answer> + Send + Sync;

/// Picks the responses whose requests count against the quota.
pub(crate) type CountIf = dyn Fn(&http::response::Parts) -> bool + Send + Sync;

/// How a layer answers: its header settings, the status of denials, a custom denial response,
/// whether gRPC requests get gRPC answers, and whether it only reports (dry run).
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) headers: Headers,
    /// The status of denied HTTP requests; `None` for 429.
    pub(crate) status: Option<StatusCode>,
    pub(crate) on_limited: Option<Arc<OnLimited>>,
    pub(crate) on_key_error: Option<Arc<OnKeyError>>,
    pub(crate) dry_run: bool,
    /// Which responses count against the quota; `None`: all of them.
    pub(crate) count_if: Option<Arc<CountIf>>,
    /// Whether gRPC requests get gRPC answers (`grpc-status`); when off, every request gets
    /// the plain HTTP ones.
    pub(crate) grpc: bool,
    /// Whether gRPC-Web requests get gRPC answers too (while `grpc` is on); off by default.
    pub(crate) grpc_web: bool,
    /// The layer's denials since it last reported them at `info` level, shared by its plans.
    pub(crate) denials: Arc<Denials>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            headers: Headers::default(),
            status: None,
            on_limited: None,
            on_key_error: None,
            dry_run: false,
            count_if: None,
            grpc: true,
            grpc_web: false,
            denials: Arc::default(),
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("headers", &self.headers)
            .field("status", &self.status)
            .field("on_limited", &self.on_limited.is_some())
            .field("on_key_error", &self.on_key_error.is_some())
            .field("dry_run", &self.dry_run)
            .field("count_if", &self.count_if.is_some())
            .field("grpc", &self.grpc)
            .field("grpc_web", &self.grpc_web)
            .finish()
    }
}

/// Answers for one policy: the rate limit headers in the layer's style, and denials.
pub(crate) struct Responder {
    /// Logs and metrics for this policy.
    observer: Observer,
    headers: HeaderWriter,
    settings: Settings,
    /// The limiter's clock, read when a response leaves: its headers report what is left of
    /// the waits decided earlier.
    clock: Option<Arc<Now>>,
    /// For an in-flight limit, its slots per key: its denials name no wait.
    in_flight: Option<u64>,
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("observer", &self.observer)
            .field("headers", &self.headers)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// The responder for a limiter's quotas (one, or each tier) under its policy name.
    pub(crate) fn new(quotas: &[Quota], policy: &str, settings: Settings) -> Self {
        let headers = match quotas {
            [quota] => HeaderWriter::new([(quota, policy)], settings.headers),
            tiers => {
                let names: Vec<String> = tiers.iter().map(Quota::name).collect();
                HeaderWriter::new(
                    tiers.iter().zip(names.iter().map(|n| &**n)),
                    settings.headers,
                )
            }
        };
        Self {
            observer: Observer::new(policy),
            headers,
            settings,
            clock: None,
            in_flight: None,
        }
    }

    /// The responder for `limiter`'s quotas and policy, reading its clock when a response
    /// leaves.
    pub(crate) fn for_limit(limiter: &Arc<dyn Limiter>, settings: Settings) -> Self {
        let clock = limiter.clone();
        let in_flight = limiter.in_flight();
        let responder = match in_flight {
            Some(limit) => Self {
                observer: Observer::new(limiter.policy()),
                headers: HeaderWriter::in_flight(limiter.policy(), limit, settings.headers),
                settings,
                clock: None,
                in_flight: None,
            },
            None => Self::new(limiter.quotas(), limiter.policy(), settings),
        };
        Self {
            clock: Some(Arc::new(move || clock.now())),
            in_flight,
            ..responder
        }
    }

    /// Whether the layer only reports what it would deny ([`dry_run`](super::RateLimitLayer::dry_run)).
    pub(crate) fn dry_run(&self) -> bool {
        self.settings.dry_run
    }

    /// The limiter's time now, in nanoseconds (0 without a clock).
    pub(crate) fn now(&self) -> u64 {
        self.clock.as_ref().map_or(0, |now| now())
    }

    /// How `req` is answered: the gRPC way, with its content type, when it is a gRPC request
    /// (or a gRPC-Web one, where the layer opted in) and the layer answers those the gRPC way;
    /// `None` for plain HTTP.
    pub(crate) fn grpc<B>(&self, req: &Request<B>) -> Option<Grpc> {
        Grpc::of(req, self.settings.grpc, self.settings.grpc_web)
    }

    /// The policy's instruments (logs and metrics).
    pub(crate) fn observer(&self) -> &Observer {
        &self.observer
    }

    /// Acts on a check's result: an allowed request gets the decision in its extensions and
    /// goes on; any other gets the layer's own answer. `key_kind` is for logs.
    pub(crate) fn admit<B>(
        &self,
        result: Result<Decision, Error>,
        req: &mut Request<B>,
        key_kind: &'static str,
    ) -> Admission {
        let dry_run = self.settings.dry_run;
        match result {
            Ok(decision) => {
                let (denials, now) = (&self.settings.denials, self.clock.as_deref());
                self.observer
                    .decision(&decision, dry_run, key_kind, denials, now);
                if decision.allowed || dry_run {
                    // A dry run's would-be denials are reported by the observer, as denials.
                    hand_on(req.extensions_mut(), &decision, self.observer.policy_name());
                    Admission::Allowed(decision)
                } else {
                    Admission::Answered(self.limited(&decision, req))
                }
            }
            Err(error) => {
                self.observer.count("store_error");
                #[cfg(feature = "tracing")]
                tracing::error!(policy = self.observer.policy(), %error, "rate limit check failed");
                Admission::Answered(store_error(&error, self.grpc(req)).map(Answer::Full))
            }
        }
    }

    /// Whether the request that got `response` counts against the quota (always, without
    /// `count_if`). Gives the response back unchanged.
    pub(crate) fn counts<R>(&self, response: Response<R>) -> (bool, Response<R>) {
        match &self.settings.count_if {
            None => (true, response),
            Some(count_if) => {
                let (parts, body) = response.into_parts();
                (count_if(&parts), Response::from_parts(parts, body))
            }
        }
    }

    /// How long an allowed request must wait before it goes on (shaping), if at all. A dry run
    /// never holds requests back.
    pub(crate) fn delay(&self, decision: &Decision) -> Option<std::time::Duration> {
        let wait = decision.allowed && !decision.delay.is_zero() && !self.settings.dry_run;
        wait.then_some(decision.delay)
    }

    /// Whether responses are sorted by `count_if`.
    pub(crate) fn counts_some(&self) -> bool {
        self.settings.count_if.is_some()
    }

    /// Adds the rate limit fields describing `decision`, if the layer's placement wants them
    /// on this response.
    pub(crate) fn add_headers(&self, headers: &mut HeaderMap, decision: &Decision) {
        if self.headers.covers(decision) {
            self.headers
                .write(decision.tiers(), Duration::ZERO, headers);
        }
    }

    /// [`add_headers`](Self::add_headers) for a response that leaves later than its decision
    /// was made at `decided_at` (a shaping delay, a slow handler): the clock is read only for a
    /// response that gets the fields.
    pub(crate) fn add_headers_since(
        &self,
        headers: &mut HeaderMap,
        decision: &Decision,
        decided_at: u64,
    ) {
        if self.headers.covers(decision) {
            let elapsed = Duration::from_nanos(self.now().saturating_sub(decided_at));
            self.headers.write(decision.tiers(), elapsed, headers);
        }
    }

    /// The answer to a denied request: 429 (or the layer's status, or `on_limited`'s response)
    /// with `Retry-After`, or a gRPC RESOURCE_EXHAUSTED.
    pub(crate) fn limited<B>(&self, decision: &Decision, req: &Request<B>) -> Response<Answer> {
        let grpc = self.grpc(req);
        if let (Some(on_limited), None) = (&self.settings.on_limited, &grpc) {
            // `f` sees the decision as handlers do, with its layer's policy name.
            let named = decision
                .clone()
                .with_policy(self.observer.policy_name().clone());
            let mut response = on_limited(&named, RequestHead::new(req));
            let headers = response.headers_mut();
            if let Some(secs) = decision.retry_after_secs() {
                if !headers.contains_key(RETRY_AFTER) {
                    headers.insert(RETRY_AFTER, int_value(secs));
                }
            }
            not_to_be_stored(headers);
            self.add_headers(headers, decision);
            return response;
        }
        let status = self
            .settings
            .status
            .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        // Formatted on the stack and copied once, into the body or the gRPC message: a client
        // over its limit can ask for denials as fast as it likes, so they are kept cheap.
        let mut message = Text::new();
        // An in-flight denial with slots still to come back (not a request above the limit).
        let busy = self
            .in_flight
            .is_some_and(|_| decision.remaining < decision.limit);
        match decision.retry_after {
            Some(wait) => {
                let secs = ceil_secs(wait);
                message.push("Too many requests: retry in ");
                message.push_int(secs);
                message.push(if secs == 1 { " second." } else { " seconds." });
            }
            None if busy => message.push(BUSY),
            None => message.push(TOO_LARGE),
        }
        let mut response = match &grpc {
            Some(form) => grpc_response(form, GRPC_RESOURCE_EXHAUSTED, message.as_bytes()),
            None => {
                message.push("\n");
                plain(status, message.to_bytes())
            }
        };
        let headers = response.headers_mut();
        match (decision.retry_after, grpc.is_some()) {
            (Some(wait), false) => {
                headers.insert(RETRY_AFTER, int_value(ceil_secs(wait)));
            }
            (Some(wait), true) => {
                headers.insert(GRPC_PUSHBACK.clone(), int_value(ceil_millis(wait)));
            }
            // No one knows when a slot comes back: the client retries on its own policy.
            (None, true) if busy => {}
            // A negative pushback tells gRPC clients not to retry.
            (None, true) => {
                headers.insert(GRPC_PUSHBACK.clone(), HeaderValue::from_static("-1"));
            }
            (None, false) => {}
        }
        self.add_headers(headers, decision);
        response.map(Answer::Full)
    }

    /// The answer to a request whose key could not be found: `on_key_error`'s response for
    /// HTTP, or else the error's status and message; for gRPC the status code of that HTTP
    /// status. `on_key_error`'s response gets `Cache-Control: no-store` and, when it keeps a
    /// 401, the error's challenge, unless it has its own.
    pub(crate) fn key_error<B>(&self, error: &KeyError, req: &Request<B>) -> Response<Answer> {
        let grpc = self.grpc(req);
        match (&self.settings.on_key_error, grpc) {
            (Some(on_key_error), None) => {
                let mut response = on_key_error(error, RequestHead::new(req));
                let unauthorized = response.status() == StatusCode::UNAUTHORIZED;
                let headers = response.headers_mut();
                if let (true, Some(challenge)) = (unauthorized, error.challenge()) {
                    if !headers.contains_key(WWW_AUTHENTICATE) {
                        headers.insert(WWW_AUTHENTICATE, challenge.clone());
                    }
                }
                not_to_be_stored(headers);
                response
            }
            (_, grpc) => key_error(error, grpc).map(Answer::Full),
        }
    }
}

/// A ready-made [`on_limited`](super::RateLimitLayer::on_limited) response: RFC 9457 problem
/// details as `application/problem+json`, status 429.
///
/// ```
/// use tollgate::layer::problem_details;
/// use tollgate::{Quota, RateLimitLayer};
///
/// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).on_limited(problem_details);
/// # let _ = layer;
/// ```
///
/// The body names the wait in seconds (rounded up) in `detail` and in the extension member
/// `retry_after`, and the figures of the decision:
///
/// ```json
/// {"type":"about:blank","title":"Too Many Requests","status":429,
///  "detail":"Too many requests: retry in 3 seconds.","retry_after":3,"limit":60,"remaining":0}
/// ```
pub fn problem_details(decision: &Decision, _head: RequestHead<'_>) -> Response<Bytes> {
    let (detail, retry_after) = match decision.retry_after_secs() {
        Some(secs) => {
            let unit = if secs == 1 { "second" } else { "seconds" };
            (
                format!("Too many requests: retry in {secs} {unit}."),
                secs.to_string(),
            )
        }
        None => (TOO_LARGE.to_owned(), "null".to_owned()),
    };
    let body = format!(
        concat!(
            r#"{{"type":"about:blank","title":"Too Many Requests","status":429,"#,
            r#""detail":"{}","retry_after":{},"limit":{},"remaining":{}}}"#
        ),
        detail, retry_after, decision.limit, decision.remaining
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// The answer to a request whose key could not be found: the error's status and message, or
/// for gRPC the status code of that HTTP status.
/// A gRPC answer names no HTTP authentication scheme: it is no HTTP 401.
fn key_error(error: &KeyError, grpc: Option<Grpc>) -> Response<Bytes> {
    match grpc {
        Some(form) => grpc_response(&form, grpc_code(error.status()), error.message().as_bytes()),
        None => {
            let body = Bytes::from(format!("{}\n", error.message()));
            let mut response = plain(error.status(), body);
            if let Some(challenge) = error.challenge() {
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, challenge.clone());
            }
            response
        }
    }
}

/// The answer when the store failed to decide.
pub(crate) fn store_error(_error: &Error, grpc: Option<Grpc>) -> Response<Bytes> {
    match grpc {
        Some(form) => grpc_response(&form, GRPC_UNAVAILABLE, UNAVAILABLE.trim_end().as_bytes()),
        None => {
            let body = Bytes::from_static(UNAVAILABLE.as_bytes());
            plain(StatusCode::SERVICE_UNAVAILABLE, body)
        }
    }
}

/// Marks an answer the layer writes as one no cache may keep: a denial, a key error or a store
/// error is about one client at one moment, and a cache keyed by URL would hand it to others.
/// A `Cache-Control` the answer has (from `on_limited` or `on_key_error`) is kept.
fn not_to_be_stored(headers: &mut HeaderMap) {
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

/// A plain-text response, not to be stored; `body` ends with a newline.
fn plain(status: StatusCode, body: Bytes) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    // Room for the fields a denial gets (content type, `Cache-Control`, `Retry-After`, the
    // rate limit fields of any style) in one allocation.
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    *response.headers_mut() = headers;
    response
}

/// A trailers-only gRPC response, not to be stored: HTTP 200 with the status in the headers
/// and no body, in the content type the request was sent in.
fn grpc_response(form: &Grpc, code: &'static str, message: &[u8]) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, form.content_type.clone());
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static(code));
    let mut encoded = Text::new();
    percent_encode(message, &mut encoded);
    if let Some(value) = encoded.to_header_value() {
        headers.insert(GRPC_MESSAGE.clone(), value);
    }
    response
}

/// What `grpc-message` percent-encodes besides the bytes past ASCII, which are always
/// encoded: the controls (`0x00..=0x1F`, `0x7F`) and `%` itself. Printable ASCII is kept.
const GRPC_MESSAGE_ENCODED: &AsciiSet = &CONTROLS.add(b'%');

/// Writes `message` percent-encoded as `grpc-message` must be: every byte outside `0x20..=0x7E`,
/// and `%` itself, as `%XX` (upper-case hex); the rest as it is.
fn percent_encode(message: &[u8], out: &mut Text) {
    for chunk in percent_encoding::percent_encode(message, GRPC_MESSAGE_ENCODED) {
        out.push(chunk);
    }
}

/// Puts this layer's decision in the request's extensions for the handler: as the
/// [`Decision`] when no other layer decided, else the most restrictive of all as the
/// `Decision` and every layer's in [`Decisions`](crate::Decisions), outermost first. A single
/// layer allocates nothing here beyond the extension itself.
fn hand_on(extensions: &mut http::Extensions, decision: &Decision, policy: &std::sync::Arc<str>) {
    let ours = decision.clone().with_policy(policy.clone());
    // One lookup for the common case, a single layer: the insert says whether an outer layer
    // decided first.
    let Some(outer) = extensions.insert(ours) else {
        return;
    };
    let ours = decision.clone().with_policy(policy.clone());
    let strictest = {
        let pair = [outer.clone(), ours.clone()];
        pair[Decision::most_restrictive(&pair)].clone()
    };
    match extensions.get_mut::<crate::Decisions>() {
        Some(all) => all.push(ours),
        None => {
            let mut all = crate::Decisions::default();
            all.push(outer);
            all.push(ours);
            extensions.insert(all);
        }
    }
    extensions.insert(strictest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ceil_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ceil_millis(Duration::from_millis(3)), 3);
    }

    /// The rule of `grpc-message`, a byte at a time: every byte outside `0x20..=0x7E`, and `%`,
    /// as `%XX` in upper-case hex.
    fn encoded_by_hand(message: &[u8]) -> String {
        let mut out = String::new();
        for &byte in message {
            if (0x20..=0x7E).contains(&byte) && byte != b'%' {
                out.push(char::from(byte));
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
        out
    }

    fn encoded(message: &[u8]) -> String {
        let mut text = Text::new();
        percent_encode(message, &mut text);
        String::from_utf8(text.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn grpc_messages_encode_controls_percent_and_non_ascii() {
        assert_eq!(encoded(b"too many requests"), "too many requests");
        assert_eq!(encoded(b"50% off\r\n"), "50%25 off%0D%0A");
        assert_eq!(encoded(b"\x00\x1f\x7f\x80\xff ~"), "%00%1F%7F%80%FF ~");
        assert_eq!(encoded("caf\u{e9}".as_bytes()), "caf%C3%A9");
        assert_eq!(encoded(b""), "");
    }

    proptest::proptest! {
        #[test]
        fn grpc_messages_encode_as_by_hand(message in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            proptest::prop_assert_eq!(encoded(&message), encoded_by_hand(&message));
        }
    }
}
