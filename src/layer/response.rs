//! How one policy answers: the rate limit headers of each response, and the answers to its
//! denials and key errors (in the forms of `plain` and `grpc`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

use super::answer::Answer;
use super::grpc::{grpc_response, Grpc, GRPC_PUSHBACK, GRPC_RESOURCE_EXHAUSTED};
use super::headers::HeaderWriter;
use super::observe::{Now, Observer};
use super::plain::{key_error, not_to_be_stored, plain, store_error};
use super::settings::Settings;
use super::text::{int_value, Text};
use crate::decision::{ceil_millis, ceil_secs};
use crate::key::{KeyError, RequestHead};
use crate::limiter::Limiter;
use crate::{Decision, Error, Quota};

/// The message of an in-flight limit's denial: no one knows when a slot comes back.
const BUSY: &str = "Too many requests in progress: retry once one has finished.";
/// The message of a denial that no wait would turn into an allowance.
const TOO_LARGE: &str = "Request too large: it costs more than the rate limit ever allows.";

/// What the layer does with a request once its check is done.
pub(crate) enum Admission {
    /// The request goes on to the inner service.
    Allowed(Decision),
    /// The layer answers the request itself.
    Answered(Response<Answer>),
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
}
