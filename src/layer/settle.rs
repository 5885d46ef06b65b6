//! Costs settled after the response ([`RateLimitLayer::settle`](super::RateLimitLayer::settle)):
//! the [`Usage`] a handler reports a request's true cost through, and the settlement the
//! response body carries until it ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::shared::Shared;
use crate::limiter::{DecisionFuture, Limiter};
use crate::{Decision, Key};

/// A request's true cost, reported by its handler (or a layer inside) once known: the
/// tokens an LLM's answer used, the bytes a download sent. A layer with
/// [`settle`](super::RateLimitLayer::settle) puts one in each request's extensions; take it
/// with axum's `Extension<Usage>` or `req.extensions().get::<Usage>()`.
///
/// Report at any time until the response body ends: the layer settles then (or when the
/// body is dropped) with what was reported last. A request whose usage was never reported
/// keeps its reservation. Clones report to the same request. `Usage::default()` reports to
/// no layer: for testing what reports through it.
///
/// ```
/// use axum::Extension;
/// use tollgate::Usage;
///
/// async fn chat(Extension(usage): Extension<Usage>) -> String {
///     let answer = "four tokens of answer".to_owned();
///     usage.set(4); // read from the model's `usage` in a real handler
///     answer
/// }
/// # let _ = chat;
/// ```
#[derive(Clone, Default)]
pub struct Usage(Arc<Reported>);

/// What a request's handler reported (its cost, once `reported`). `outer` is the usage of a
/// settling layer around this one: what is reported here is reported there too (the
/// request's extensions hold one `Usage`, the innermost). `layer` is the layer's services and
/// how many resets its handle had made before the request was admitted: a refund across a
/// reset is dropped, and for a request decided by the layer's own quotas (`own`) a charge goes
/// to the quotas in force when it is made (they may have changed since, and taken the key over).
#[derive(Default)]
struct Reported {
    cost: AtomicU64,
    reported: AtomicBool,
    outer: Option<Usage>,
    layer: Option<Layer>,
}

/// The layer a usage reports to ([`Reported`]).
struct Layer {
    shared: Arc<Shared>,
    own: bool,
    resets: u64,
}

impl Usage {
    /// The usage of a request of the layer `shared` (its own quotas', when `own`), made
    /// before its check.
    pub(crate) fn new(shared: &Arc<Shared>, own: bool, outer: Option<Usage>) -> Self {
        let resets = shared.resets();
        let layer = Some(Layer {
            shared: shared.clone(),
            own,
            resets,
        });
        let reported = Reported {
            outer,
            layer,
            ..Reported::default()
        };
        Self(Arc::new(reported))
    }

    /// Reports the request's true cost: `cost` in all, replacing what was reported before.
    pub fn set(&self, cost: u64) {
        self.0.cost.store(cost, Ordering::Release);
        self.0.reported.store(true, Ordering::Release);
        if let Some(outer) = &self.0.outer {
            outer.set(cost);
        }
    }

    /// Adds `cost` to what was reported (from 0 when nothing was): for a body that counts as
    /// it streams.
    pub fn add(&self, cost: u64) {
        let add = |reported: u64| Some(reported.saturating_add(cost));
        // The closure always returns `Some`: the update cannot fail.
        let _ = self
            .0
            .cost
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, add);
        self.0.reported.store(true, Ordering::Release);
        if let Some(outer) = &self.0.outer {
            outer.add(cost);
        }
    }

    /// The cost reported so far; `None` when nothing was.
    pub fn get(&self) -> Option<u64> {
        let reported = self.0.reported.load(Ordering::Acquire);
        reported.then(|| self.0.cost.load(Ordering::Acquire))
    }
}

impl std::fmt::Debug for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Usage").field(&self.get()).finish()
    }
}

/// An admitted request's reservation, settled when dropped: with the response body, at its
/// end or when it is dropped first.
pub(crate) struct Settlement {
    /// The limiter that admitted the request: a refund goes back to it.
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) key: Key,
    pub(crate) admission: Decision,
    pub(crate) reserved: u64,
    pub(crate) usage: Usage,
}

impl Drop for Settlement {
    fn drop(&mut self) {
        let Some(actual) = self.usage.get() else {
            return;
        };
        let layer = self.usage.0.layer.as_ref();
        let settled = match actual.cmp(&self.reserved) {
            std::cmp::Ordering::Equal => return,
            // After a reset the admission's receipt may match a later admission's: nothing
            // is given back (the client loses, never gains).
            std::cmp::Ordering::Less if layer.is_some_and(|l| l.shared.resets() != l.resets) => {
                return
            }
            std::cmp::Ordering::Less => {
                let back = self.reserved - actual;
                self.limiter.refund(self.key.clone(), &self.admission, back)
            }
            std::cmp::Ordering::Greater => {
                // A charge goes to the layer's quotas in force for a request of its own
                // quotas, else to the limiter that admitted it.
                let (key, more) = (self.key.clone(), actual - self.reserved);
                match layer {
                    Some(layer) if layer.own => {
                        layer.shared.active.load().limiter.charge(key, more)
                    }
                    _ => self.limiter.charge(key, more),
                }
            }
        };
        match settled {
            DecisionFuture::Ready(Some(result)) => failed(result.err()),
            DecisionFuture::Ready(None) => {}
            DecisionFuture::Waiting(future) => finish_later(future),
        }
    }
}

/// Finishes a settlement that waits for its store (Redis) on the runtime of the caller. Only a
/// remote store's settlement waits, and only the Redis feature brings one (and tokio's `rt`).
fn finish_later(future: crate::limiter::BoxedDecision) {
    #[cfg(feature = "redis")]
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { failed(future.await.err()) });
        return;
    }
    drop(future);
    failed(Some(crate::Error::misconfigured(
        "a settlement that waits for its store needs a tokio runtime (with `rt`) to finish on",
    )));
}

/// Logs a settlement that failed: the request keeps its reservation.
fn failed(error: Option<crate::Error>) {
    #[cfg(feature = "tracing")]
    if let Some(error) = error {
        tracing::warn!(%error, "rate limit settlement failed: the reservation stands");
    }
    #[cfg(not(feature = "tracing"))]
    let _ = error;
}
