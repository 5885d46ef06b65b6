//! A request on its way through the layer ([`Ticket`]), and how an allowed request that did
//! not count gives its capacity back ([`Refund`]).

use std::sync::Arc;

use http::Request;

use crate::limiter::Limiter;
use crate::Key;

/// Gives back what an allowed request took when its response does not count (`count_if`).
pub(crate) struct Refund {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) key: Key,
    pub(crate) cost: u64,
}

/// A request on its way through the layer, and what its decision is acted on with.
pub(crate) struct Ticket<B> {
    pub(crate) req: Request<B>,
    pub(crate) cost: u64,
    pub(crate) key_kind: &'static str,
    /// When the request was decided, on the limiter's clock.
    pub(crate) decided_at: u64,
    /// For an in-flight limit, the key whose slots the request holds once let through.
    pub(crate) hold: Option<Key>,
    /// Whether the layer is an in-flight limit (a request of cost 0 holds nothing there, but
    /// a handler that keeps its slot still finds one).
    pub(crate) in_flight: bool,
}
