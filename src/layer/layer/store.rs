//! Where the layer keeps state and reads time: its store, the store's failure policy, and its
//! clock.

use std::sync::Arc;

use super::RateLimitLayer;
use crate::clock::Clock;
use crate::limiter::{Bind, Binder, LayerClock, LayerStore, Recipe};
#[cfg(doc)]
use crate::store::MemoryStore;

/// The store `failed` is when given the failure policy `on_failure` (by the method of
/// `layer`), or a panic when it has none: it is not a `RedisStore`.
#[cfg(feature = "redis")]
#[track_caller]
pub(crate) fn failing<T: ?Sized>(
    failed: Option<Arc<T>>,
    layer: &str,
    on_failure: &crate::store::OnFailure,
) -> Arc<T> {
    match failed {
        Some(store) => store,
        None => panic!(
            "{layer}::on_failure({on_failure:?}): the layer's store is not a RedisStore, and \
             only a RedisStore can fail (a MemoryStore never does); set .store(redis) before \
             .on_failure(..), or leave on_failure out"
        ),
    }
}

impl RateLimitLayer {
    /// Keeps state in `store`: a [`MemoryStore`] shared with other layers, or a store shared
    /// between servers (`RedisStore`). Any store that keeps every algorithm of the crate
    /// ([`LayerStore`]) fits.
    ///
    /// # Panics
    ///
    /// When `store` cannot keep this layer's quotas (the Redis store refuses figures its scripts
    /// cannot decide exactly, naming the figure and the fix), or the layer was made by
    /// [`from_limiter`](Self::from_limiter).
    #[must_use]
    #[track_caller]
    pub fn store<St: LayerStore>(self, store: St) -> Self {
        let recipe = self.recipe_for("store");
        let store: Arc<dyn Bind> = Arc::new(Binder(store));
        #[cfg(feature = "redis")]
        let store = match &self.on_failure {
            Some(on_failure) => failing(store.failing(on_failure), "RateLimitLayer", on_failure),
            None => store,
        };
        self.rebuilt("store", Recipe { store, ..recipe })
    }

    /// Answers as `on_failure` says when the layer's `RedisStore` fails or does not answer
    /// in time, in place of the store's own policy: on one store, a login limit can fail
    /// [`Closed`](crate::store::OnFailure::Closed) while a global limit falls back
    /// [`Local`](crate::store::OnFailure::Local). A Redis out of memory admits nothing,
    /// whatever the policy ([`ErrorKind::Full`](crate::ErrorKind::Full)).
    ///
    /// ```no_run
    /// use tollgate::store::{OnFailure, RedisStore};
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// # async fn run() -> Result<(), tollgate::Error> {
    /// let redis = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let logins = RateLimitLayer::fixed_window(Quota::per_hour(5).named("login"))
    ///     .store(redis.clone())
    ///     .on_failure(OnFailure::Closed);
    /// # let _ = logins;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When the store is not a `RedisStore` (the memory store never fails: set the store
    /// first), or the layer was made by [`from_limiter`](Self::from_limiter).
    #[cfg(feature = "redis")]
    #[must_use]
    #[track_caller]
    pub fn on_failure(mut self, on_failure: crate::store::OnFailure) -> Self {
        let recipe = self.recipe_for("on_failure");
        let store = recipe.store.failing(&on_failure);
        let store = failing(store, "RateLimitLayer", &on_failure);
        self.on_failure = Some(on_failure);
        self.rebuilt("on_failure", Recipe { store, ..recipe })
    }

    /// Reads time from `clock`, such as a [`ManualClock`](crate::clock::ManualClock) in tests.
    ///
    /// # Panics
    ///
    /// When the layer was made by [`from_limiter`](Self::from_limiter): set the clock on the
    /// limiter instead.
    #[must_use]
    #[track_caller]
    pub fn clock<C: Clock + Clone>(self, clock: C) -> Self {
        let recipe = self.recipe_for("clock");
        let clock = LayerClock::Other(Arc::new(clock));
        self.rebuilt("clock", Recipe { clock, ..recipe })
    }
}
