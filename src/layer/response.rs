//! How a layer answers, as its builder set it ([`Settings`]: headers, the status of denials,
//! answers of your own, gRPC, dry runs and which responses count), and how one policy answers
//! by them: the rate limit headers of each response, and the answers to its denials, key
//! errors and failed stores, in plain HTTP or (see `grpc`) gRPC.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

use super::answer::Answer;
use super::grpc::{grpc_code, grpc_response, Grpc, GRPC_PUSHBACK, GRPC_RESOURCE_EXHAUSTED};
use super::headers::{HeaderWriter, Headers};
use super::text::{int_value, Text};
use crate::decision::{ceil_millis, ceil_secs};
use crate::key::{KeyError, RequestHead};
use crate::limiter::Limiter;
use crate::{Decision, Decisions, Error};

/// The message of an in-flight limit's denial: no one knows when a slot comes back.
const BUSY: &str = "Too many requests in progress: retry once one has finished.";
/// The message of the answer when the store failed to decide.
const UNAVAILABLE: &str = "Rate limiting is unavailable; try again shortly.";
/// The message of a denial that no wait would turn into an allowance.
const TOO_LARGE: &str = "Request too large: it costs more than the rate limit ever allows.";

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
    /// The status of denied HTTP requests (429 unless set).
    pub(crate) status: StatusCode,
    pub(crate) on_limited: Option<Arc<OnLimited>>,
    pub(crate) on_key_error: Option<Arc<OnKeyError>>,
    pub(crate) dry_run: bool,
    /// Which responses count against the quota; `None`: all of them.
    pub(crate) count_if: Option<Arc<CountIf>>,
    /// Whether each request's cost is settled once its response body ends (`settle`).
    pub(crate) settle: bool,
    /// Whether gRPC requests get gRPC answers (`grpc-status`); when off, every request gets
    /// the plain HTTP ones.
    pub(crate) grpc: bool,
    /// Whether gRPC-Web requests get gRPC answers too (while `grpc` is on); off by default.
    pub(crate) grpc_web: bool,
    /// The layer's denials since it last reported them at `info` level, shared by its plans.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    pub(crate) denials: Arc<Denials>,
}

impl Settings {
    /// Whether the layer gives admissions back (`count_if`, `settle`): its stores are told
    /// to expect refunds wherever its limiters are made.
    pub(crate) fn refunds(&self) -> bool {
        self.count_if.is_some() || self.settle
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            headers: Headers::default(),
            status: StatusCode::TOO_MANY_REQUESTS,
            on_limited: None,
            on_key_error: None,
            dry_run: false,
            count_if: None,
            settle: false,
            grpc: true,
            grpc_web: false,
            denials: Arc::default(),
        }
    }
}

/// The denials of one layer (its own quotas and every plan's) since it last reported them
/// (see `observe`).
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) struct Denials {
    /// Denied since the last report.
    pub(crate) count: AtomicU64,
    /// The earliest time of the next report; 0 before the first.
    pub(crate) next: AtomicU64,
}

/// Answers for one policy: the rate limit headers in the layer's style, and denials; its logs
/// and metrics are in `observe`.
pub(crate) struct Responder {
    /// The policy name, shared: with the decisions handed on, and as a metrics label.
    pub(crate) name: Arc<str>,
    headers: HeaderWriter,
    pub(crate) settings: Settings,
    /// The limiter answered for, whose clock is read when a response leaves: its headers
    /// report what is left of the waits decided earlier.
    pub(crate) limiter: Arc<dyn Limiter>,
    /// Whether the limiter is an in-flight limit: its allowed requests hold what they took
    /// until their response ends, and its denials name no wait.
    pub(crate) in_flight: bool,
}

impl Responder {
    /// The responder for `limiter`'s quotas (one, named by its policy, or each tier by its
    /// own name) and policy.
    pub(crate) fn for_limit(limiter: &Arc<dyn Limiter>, settings: Settings) -> Self {
        let (policy, quotas) = (limiter.policy(), limiter.quotas());
        let in_flight = limiter.in_flight();
        let headers = match (in_flight, quotas) {
            (Some(limit), _) => HeaderWriter::in_flight(policy, limit, settings.headers),
            (None, [quota]) => HeaderWriter::new([(quota, policy)], settings.headers),
            (None, tiers) => {
                let named = tiers.iter().map(|quota| (quota, quota.name()));
                HeaderWriter::new(named, settings.headers)
            }
        };
        Self {
            name: policy.into(),
            headers,
            settings,
            limiter: limiter.clone(),
            in_flight: in_flight.is_some(),
        }
    }

    /// How `req` is answered: the gRPC way, with its content type, when it is a gRPC request
    /// (or a gRPC-Web one, where the layer opted in) and the layer answers those the gRPC way;
    /// `None` for plain HTTP.
    pub(crate) fn grpc<B>(&self, req: &Request<B>) -> Option<Grpc> {
        Grpc::of(req, self.settings.grpc, self.settings.grpc_web)
    }

    /// Acts on a check's result: an allowed request gets the decision in its extensions and
    /// goes on (`Ok`); any other gets the layer's own answer (`Err`). `key_kind` is for logs.
    /// (Not boxed: the answer is built once, in place, and boxing it would allocate.)
    #[allow(clippy::result_large_err)]
    pub(crate) fn admit<B>(
        &self,
        result: Result<Decision, Error>,
        req: &mut Request<B>,
        key_kind: &'static str,
    ) -> Result<Decision, Response<Answer>> {
        let decision = match result {
            Ok(decision) => decision,
            Err(error) => {
                #[cfg(feature = "tracing")]
                tracing::error!(policy = &*self.name, %error, "rate limit check failed");
                return Err(self.store_error(&error, req));
            }
        };
        let now = || self.limiter.now();
        self.observe(&decision, key_kind, now);
        if decision.allowed || self.settings.dry_run {
            // A dry run's would-be denials are reported as denials (`observe`).
            hand_on(req.extensions_mut(), &decision, &self.name);
            Ok(decision)
        } else {
            Err(self.limited(&decision, req))
        }
    }

    /// The answer when the store failed to decide (counted).
    pub(crate) fn store_error<B>(&self, _error: &Error, req: &Request<B>) -> Response<Answer> {
        self.count("store_error");
        let (status, grpc) = (StatusCode::SERVICE_UNAVAILABLE, self.grpc(req));
        let message = UNAVAILABLE.as_bytes();
        own_answer(status, grpc.as_ref(), grpc_code(status), message).map(Answer::Full)
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
    pub(crate) fn delay(&self, decision: &Decision) -> Option<Duration> {
        let wait = decision.allowed && !decision.delay.is_zero() && !self.settings.dry_run;
        wait.then_some(decision.delay)
    }

    /// Adds the rate limit fields describing `decision`, if the layer's placement wants them
    /// on this response. A response that leaves later than its decision was made, at
    /// `decided_at` (a shaping delay, a slow handler), reports what is left of its waits: the
    /// clock is read only for a response that gets the fields.
    pub(crate) fn add_headers(
        &self,
        headers: &mut HeaderMap,
        decision: &Decision,
        decided_at: Option<u64>,
    ) {
        if self.headers.covers(decision) {
            let elapsed = decided_at.map_or(0, |at| self.limiter.now().saturating_sub(at));
            let elapsed = Duration::from_nanos(elapsed);
            self.headers.write(decision.tiers(), elapsed, headers);
        }
    }

    /// The answer to a denied request: 429 (or the layer's status, or `on_limited`'s response)
    /// with `Retry-After`, or a gRPC RESOURCE_EXHAUSTED.
    pub(crate) fn limited<B>(&self, decision: &Decision, req: &Request<B>) -> Response<Answer> {
        let grpc = self.grpc(req);
        if let (Some(on_limited), None) = (&self.settings.on_limited, &grpc) {
            // `f` sees the decision as handlers do, with its layer's policy name.
            let named = decision.clone().with_policy(self.name.clone());
            let mut response = on_limited(&named, RequestHead::new(req));
            let headers = response.headers_mut();
            if let Some(secs) = decision.retry_after_secs() {
                headers
                    .entry(RETRY_AFTER)
                    .or_insert_with(|| int_value(secs));
            }
            not_to_be_stored(headers);
            self.add_headers(headers, decision, None);
            return response;
        }
        // Formatted on the stack and copied once, into the body or the gRPC message: a client
        // over its limit can ask for denials as fast as it likes, so they are kept cheap.
        // An in-flight denial with slots still to come back (not a request above the limit).
        let busy = self.in_flight && decision.remaining < decision.limit;
        let message = denial_message(decision, busy);
        let (status, code) = (self.settings.status, GRPC_RESOURCE_EXHAUSTED);
        let mut response = own_answer(status, grpc.as_ref(), code, message.as_bytes());
        let wait = match (decision.retry_after, grpc.is_some()) {
            (Some(wait), false) => Some((RETRY_AFTER, int_value(ceil_secs(wait)))),
            (Some(wait), true) => Some((GRPC_PUSHBACK.clone(), int_value(ceil_millis(wait)))),
            // A negative pushback tells gRPC clients not to retry; when no one knows when a
            // slot comes back, the client retries on its own policy.
            (None, true) if !busy => Some((GRPC_PUSHBACK.clone(), HeaderValue::from_static("-1"))),
            (None, _) => None,
        };
        let headers = response.headers_mut();
        if let Some((name, value)) = wait {
            headers.insert(name, value);
        }
        self.add_headers(headers, decision, None);
        response.map(Answer::Full)
    }

    /// The answer to a request whose key could not be found (counted): `on_key_error`'s
    /// response for HTTP, or else the error's status and message; for gRPC the status code of
    /// that HTTP status (and no HTTP authentication scheme: it is no HTTP 401). The HTTP
    /// answer carries the error's challenge, as does `on_key_error`'s response when it keeps a
    /// 401 and has none of its own; that response also gets `Cache-Control: no-store`.
    pub(crate) fn key_error<B>(&self, error: &KeyError, req: &Request<B>) -> Response<Answer> {
        self.count("key_error");
        let grpc = self.grpc(req);
        if let (Some(on_key_error), None) = (&self.settings.on_key_error, &grpc) {
            let mut response = on_key_error(error, RequestHead::new(req));
            let unauthorized = response.status() == StatusCode::UNAUTHORIZED;
            let headers = response.headers_mut();
            if let (true, Some(challenge)) = (unauthorized, error.challenge()) {
                let challenge = || challenge.clone();
                headers.entry(WWW_AUTHENTICATE).or_insert_with(challenge);
            }
            not_to_be_stored(headers);
            return response;
        }
        let (status, message) = (error.status(), error.message().as_bytes());
        let mut response = own_answer(status, grpc.as_ref(), grpc_code(status), message);
        if let (None, Some(challenge)) = (grpc, error.challenge()) {
            let headers = response.headers_mut();
            headers.insert(WWW_AUTHENTICATE, challenge.clone());
        }
        response.map(Answer::Full)
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
    let detail = denial_message(decision, false);
    let detail = String::from_utf8_lossy(detail.as_bytes());
    let secs = decision.retry_after_secs();
    let retry_after = secs.map_or_else(|| "null".to_owned(), |secs| secs.to_string());
    let body = format!(
        concat!(
            r#"{{"type":"about:blank","title":"Too Many Requests","status":429,"#,
            r#""detail":"{}","retry_after":{},"limit":{},"remaining":{}}}"#
        ),
        detail, retry_after, decision.limit, decision.remaining
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let json = HeaderValue::from_static("application/problem+json");
    response.headers_mut().insert(CONTENT_TYPE, json);
    response
}

/// The message of a denial: the wait in whole seconds, else why no wait helps (`busy`: an
/// in-flight limit whose slots come back when requests finish).
fn denial_message(decision: &Decision, busy: bool) -> Text {
    let mut message = Text::new();
    match decision.retry_after_secs() {
        Some(secs) => {
            message.push("Too many requests: retry in ");
            message.push_int(secs);
            message.push(if secs == 1 { " second." } else { " seconds." });
        }
        None => message.push(if busy { BUSY } else { TOO_LARGE }),
    }
    message
}

/// Puts this layer's decision in the request's extensions for the handler: as the
/// [`Decision`] when no other layer decided, else the most restrictive of all as the
/// `Decision` and every layer's in [`Decisions`], outermost first. A single layer allocates
/// nothing here beyond the extension itself.
fn hand_on(extensions: &mut http::Extensions, decision: &Decision, policy: &Arc<str>) {
    let ours = || decision.clone().with_policy(policy.clone());
    // One lookup for the common case, a single layer: the insert says whether an outer layer
    // decided first.
    let Some(outer) = extensions.insert(ours()) else {
        return;
    };
    let pair = [outer, ours()];
    let strictest = pair[Decision::most_restrictive(&pair)].clone();
    let [outer, ours] = pair;
    match extensions.get_mut::<Decisions>() {
        Some(all) => all.push(ours),
        None => {
            let mut all = Decisions::default();
            all.push(outer);
            all.push(ours);
            extensions.insert(all);
        }
    }
    extensions.insert(strictest);
}

/// The layer's own answer, not to be stored: for a gRPC request (`grpc`), trailers-only with
/// the gRPC status `code` and `message`; else `status` with `message` as a line of plain text.
// Inlined: built where the denial is, the header map's capacity is known when compiled and its
// set-up is folded (measured: 116 instructions more a denial when it was a call of its own).
#[inline]
pub(crate) fn own_answer(
    status: StatusCode,
    grpc: Option<&Grpc>,
    code: &'static str,
    message: &[u8],
) -> Response<Bytes> {
    if let Some(form) = grpc {
        return grpc_response(form, code, message);
    }
    // One allocation of the exact size, which `Bytes` keeps.
    let mut body = Vec::with_capacity(message.len() + 1);
    body.extend_from_slice(message);
    body.push(b'\n');
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    // Room for the fields a denial gets (content type, `Cache-Control`, `Retry-After`, the
    // rate limit fields of any style) in one allocation.
    let mut headers = HeaderMap::with_capacity(8);
    let text = HeaderValue::from_static("text/plain; charset=utf-8");
    headers.insert(CONTENT_TYPE, text);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    *response.headers_mut() = headers;
    response
}

/// Marks an answer the layer writes as one no cache may keep: a denial, a key error or a store
/// error is about one client at one moment, and a cache keyed by URL would hand it to others.
/// A `Cache-Control` the answer has (from `on_limited` or `on_key_error`) is kept.
pub(crate) fn not_to_be_stored(headers: &mut HeaderMap) {
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
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
}
