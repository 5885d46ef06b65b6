//! How the layer answers: the rate limit headers, the denial's status, gRPC, answers of your
//! own, and dry runs.

use std::sync::Arc;

use http::{Response, StatusCode};

use super::super::answer::{answer, AnswerBody};
use super::super::headers::{HeaderPlacement, HeaderStyle};
use super::super::response::{OnKeyError, OnLimited};
use super::RateLimitLayer;
use crate::key::{KeyError, RequestHead};
use crate::Decision;

impl RateLimitLayer {
    /// Writes the rate limit headers in `style`: IETF draft 11 (the default), draft 7, draft 6,
    /// GitHub's `X-RateLimit-*`, or none. Per-key quotas ([`quota_for`](Self::quota_for)) use
    /// the same style.
    ///
    /// ```
    /// use tollgate::{HeaderStyle, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).headers(HeaderStyle::GitHub);
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn headers(self, style: HeaderStyle) -> Self {
        self.set(|s| s.headers.style = style)
    }

    /// Writes the rate limit headers only on some responses: allowed ones, denied ones, or all
    /// (the default). See [`HeaderPlacement`].
    #[must_use]
    pub fn headers_on(self, placement: HeaderPlacement) -> Self {
        self.set(|s| s.headers.placement = placement)
    }

    /// Answers denied HTTP requests with `status` instead of `429 Too Many Requests`, such as
    /// `503 Service Unavailable` as nginx does. gRPC requests (see [`grpc`](Self::grpc)) still
    /// get RESOURCE_EXHAUSTED.
    ///
    /// # Panics
    ///
    /// When `status` is not a client or server error (4xx or 5xx): a denial must not look like
    /// success to clients.
    #[must_use]
    #[track_caller]
    pub fn status(self, status: StatusCode) -> Self {
        if let Err(why) = Self::denial_status(status.as_u16()) {
            panic!("RateLimitLayer::status({status}): {why}");
        }
        self.set(|s| s.status = status)
    }

    /// The status `code`, when it can answer denials (a 4xx or 5xx); else why not.
    pub(crate) fn denial_status(code: u16) -> Result<StatusCode, String> {
        let why = "denials are answered with a 4xx or 5xx status, such as 429 or 503";
        let status = StatusCode::from_u16(code).ok();
        let fits = |s: &StatusCode| s.is_client_error() || s.is_server_error();
        status.filter(fits).ok_or_else(|| why.into())
    }

    /// Whether gRPC requests get gRPC answers (on by default): HTTP 200 with `grpc-status`
    /// (RESOURCE_EXHAUSTED for a denial), in the request's content type, with
    /// `Cache-Control: no-store`. A request is gRPC only when it is a `POST` with
    /// `application/grpc[+subtype]` over HTTP/2, the only way gRPC is sent. Anything else is
    /// plain HTTP and gets the plain answers ([`status`](Self::status),
    /// [`on_limited`](Self::on_limited), the key errors' statuses): a `GET` or `HEAD`, a
    /// lower-case `post`, `application/grpc` over HTTP/1.1, and gRPC-Web unless
    /// [`grpc_web`](Self::grpc_web) opted in. So a `GET` (which a cache may keep) never gets a
    /// 200 for its denial.
    ///
    /// **Turn it off on a service that serves no gRPC** (`.grpc(false)`): a client that can
    /// speak HTTP/2 to it chooses its content type, and a `POST` it sends as
    /// `application/grpc` would get its denial as gRPC (a 200 with `grpc-status: 8`) instead
    /// of the 429, [`status`](Self::status) or [`on_limited`](Self::on_limited) answer that
    /// defences watching for 429s see. Off, every request gets the plain HTTP answers,
    /// whatever its method, version and content type (gRPC-Web included).
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let rest_only = RateLimitLayer::gcra(Quota::per_minute(60)).grpc(false);
    /// # let _ = rest_only;
    /// ```
    #[must_use]
    pub fn grpc(self, enabled: bool) -> Self {
        self.set(|s| s.grpc = enabled)
    }

    /// Whether gRPC-Web requests get gRPC answers too (off by default): a `POST` with
    /// `application/grpc-web[-text][+subtype]`, over any HTTP version, then gets HTTP 200 with
    /// `grpc-status` in its own content type, as gRPC does ([`grpc`](Self::grpc), which must
    /// stay on). Turn it on for a service that serves gRPC-Web clients (browsers through
    /// `tonic-web`), with the layer around the gRPC-Web service only: any client can send the
    /// content type, and its denial would then be a 200 that a defence watching for 429s does not
    /// count.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let grpc_web = RateLimitLayer::gcra(Quota::per_minute(60)).grpc_web(true);
    /// # let _ = grpc_web;
    /// ```
    ///
    /// What each kind of request gets:
    /// [`guide::responses`](crate::guide::responses#what-grpc-clients-and-http11-clients-get).
    #[must_use]
    pub fn grpc_web(self, enabled: bool) -> Self {
        self.set(|s| s.grpc_web = enabled)
    }

    /// Answers denied HTTP requests with the response `f` makes from the decision and the
    /// request, instead of the layer's plain-text one. The layer still adds `Retry-After`,
    /// `Cache-Control: no-store` (each unless `f` set it) and the rate limit headers; gRPC
    /// requests keep their RESOURCE_EXHAUSTED answer. The body may be what an axum handler
    /// returns, or any body [`AnswerBody`](crate::layer::AnswerBody) lists;
    /// [`problem_details`](crate::layer::problem_details) makes RFC 9457 JSON. `f` runs for every
    /// denial: keep it cheap.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).on_limited(|decision, _head| {
    ///     let wait = decision.retry_after_secs().unwrap_or(0);
    ///     http::Response::builder()
    ///         .status(429)
    ///         .header("content-type", "text/html")
    ///         .body(format!("<p>Slow down: try again in {wait} s.</p>"))
    ///         .unwrap()
    /// });
    /// # let _ = layer;
    /// ```
    ///
    /// An axum JSON answer, and the rules:
    /// [`guide::responses`](crate::guide::responses#your-own-answers).
    #[must_use]
    pub fn on_limited<F, T>(self, f: F) -> Self
    where
        F: Fn(&Decision, RequestHead<'_>) -> Response<T> + Send + Sync + 'static,
        T: AnswerBody,
    {
        let f: Arc<OnLimited> =
            Arc::new(move |decision: &Decision, head: RequestHead<'_>| answer(f(decision, head)));
        self.set(|s| s.on_limited = Some(f))
    }

    /// Answers HTTP requests whose key cannot be found (the key extractor's [`KeyError`], such
    /// as a missing API key header) with the response `f` makes, instead of the layer's
    /// plain-text one with the error's status and message. `f` takes the same bodies as
    /// [`on_limited`](Self::on_limited). The layer adds `Cache-Control: no-store`, and to a 401
    /// the error's challenge ([`KeyError::challenge`]) in `WWW-Authenticate`, each unless `f`
    /// set it; gRPC requests keep their gRPC answer.
    ///
    /// ```
    /// use axum::{response::IntoResponse, Json};
    /// use tollgate::key::Header;
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60))
    ///     .key(Header::new("x-api-key"))
    ///     .on_key_error(|error, _head| {
    ///         let body = serde_json::json!({ "error": error.message() });
    ///         (error.status(), Json(body)).into_response()
    ///     });
    /// # let _ = layer;
    /// ```
    ///
    /// The rules: [`guide::responses`](crate::guide::responses#your-own-answers).
    #[must_use]
    pub fn on_key_error<F, T>(self, f: F) -> Self
    where
        F: Fn(&KeyError, RequestHead<'_>) -> Response<T> + Send + Sync + 'static,
        T: AnswerBody,
    {
        let f: Arc<OnKeyError> =
            Arc::new(move |error: &KeyError, head: RequestHead<'_>| answer(f(error, head)));
        self.set(|s| s.on_key_error = Some(f))
    }

    /// Never denies: every request goes on, with the would-be decision in its extensions and
    /// rate limit headers (so `remaining` shows 0 where a request would have been refused), and
    /// each would-be denial logged at info level (feature `tracing`). For trying a limit on
    /// real traffic before enforcing it. Allowed requests still use up the quota, as they would.
    #[must_use]
    pub fn dry_run(self, enabled: bool) -> Self {
        self.set(|s| s.dry_run = enabled)
    }
}
