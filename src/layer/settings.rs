//! How a layer answers, as its builder set it: headers, the status of denials, answers of
//! your own, gRPC, dry runs and which responses count.

use std::sync::Arc;

use http::{Response, StatusCode};

use super::answer::Answer;
use super::headers::Headers;
use super::observe::Denials;
use crate::key::{KeyError, RequestHead};
use crate::Decision;

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
