//! A layer's limiter until its fleet's record is read once ([`Fleet`]): each request waits
//! for the read, then is decided by the limiter in force, so that a server started after a
//! change never decides on the figures it was built with.

use std::sync::Arc;
use std::time::Duration;

use super::fleet::Fleet;
use crate::limiter::object::{DecisionFuture, Limiter};
use crate::store::Update;
use crate::{Decision, Key};

/// `inner` (the layer's own limiter when `in_force`, else a plan's), which first waits for the
/// record (until read once) then decides by what `then` gives (`inner` when nothing).
pub(crate) fn gated(
    fleet: &Arc<Fleet>,
    inner: Arc<dyn Limiter>,
    then: impl Fn() -> Option<Arc<dyn Limiter>> + Send + Sync + 'static,
    in_force: bool,
) -> Arc<dyn Limiter> {
    if fleet.ready() {
        return inner;
    }
    Arc::new(Gate {
        inner,
        fleet: fleet.clone(),
        then: Arc::new(then),
        in_force,
    })
}

/// A limiter whose requests wait for the fleet's record to be read once, then are decided
/// by what `then` gives.
struct Gate {
    inner: Arc<dyn Limiter>,
    fleet: Arc<Fleet>,
    then: Arc<dyn Fn() -> Option<Arc<dyn Limiter>> + Send + Sync>,
    /// Whether `inner` stays the limiter in force once the record is read (the services'
    /// own, replaced there on a change), so that a check then takes no lock.
    in_force: bool,
}

impl Gate {
    /// The limiter in force now. The services' own is `inner` (replaced there on a change):
    /// asked without a lock, as a handle may hold the layer's while it resets or blocks.
    fn now_in_force(&self) -> Arc<dyn Limiter> {
        if self.in_force {
            return self.inner.clone();
        }
        (self.then)().unwrap_or_else(|| self.inner.clone())
    }

    /// `ask` of the limiter in force, once the record was read; at once when it was, or
    /// when no runtime can read it.
    fn waiting(
        &self,
        ask: impl FnOnce(Arc<dyn Limiter>) -> DecisionFuture + Send + 'static,
    ) -> DecisionFuture {
        if self.fleet.ready() {
            return ask(self.now_in_force());
        }
        if !self.fleet.start() {
            return ask(self.inner.clone());
        }
        let (fleet, then, inner) = (self.fleet.clone(), self.then.clone(), self.inner.clone());
        DecisionFuture::Waiting(Box::pin(async move {
            fleet.first_read().await;
            ask(then().unwrap_or(inner)).await
        }))
    }
}

impl Limiter for Gate {
    fn inner(&self) -> &dyn Limiter {
        &*self.inner
    }

    fn check(&self, key: Key, now: u64, cost: u64) -> DecisionFuture {
        if self.in_force && self.fleet.ready() {
            return self.inner.check(key, now, cost);
        }
        self.waiting(move |limiter| limiter.check(key, now, cost))
    }

    fn refund(&self, key: Key, admission: &Decision, cost: u64) -> DecisionFuture {
        self.now_in_force().refund(key, admission, cost)
    }

    fn charge(&self, key: Key, cost: u64) -> DecisionFuture {
        self.now_in_force().charge(key, cost)
    }

    fn peek(&self, key: Key) -> DecisionFuture {
        self.waiting(move |limiter| limiter.peek(key))
    }

    fn reset(&self, key: Key) -> Update {
        self.now_in_force().reset(key)
    }

    fn block(&self, key: Key, duration: Duration) -> Update {
        self.now_in_force().block(key, duration)
    }
}
