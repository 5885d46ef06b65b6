//! What makes the layer's limiter again: the algorithm's options (sub-windows, calendar
//! windows, shaping), where the layer keeps state and reads time (its store, the store's
//! failure policy, its clock), and bans of repeat offenders.

use std::sync::Arc;

use super::{ban_counter, RateLimitLayer};
use crate::clock::Clock;
use crate::limiter::{Ban, Bind, Binder, LayerClock, LayerStore, Recipe, Spec};
#[cfg(doc)]
use crate::{store::MemoryStore, RateLimiter};

impl RateLimitLayer {
    /// Bans repeat offenders: a key denied more than [`Ban::denials`] times within
    /// [`Ban::within`] is blocked for [`Ban::duration`] ([`RateLimiter::block`]): every request
    /// it makes is refused until then, with `Retry-After` what is left of the ban. Then it
    /// stands as its quota says, as if the ban had never been. Denials are counted, and bans
    /// kept, in the layer's store (across every server with a `RedisStore`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::layer::Ban;
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// // More than 20 denials within a minute: refused for 15 minutes.
    /// let layer = RateLimitLayer::gcra(Quota::per_second(10))
    ///     .ban(Ban::new(20, Duration::from_secs(60), Duration::from_secs(15 * 60)));
    /// # let _ = layer;
    /// ```
    ///
    /// How denials are counted, logs and metrics, dry runs, plans and tiers, the memory store's
    /// bound and store failures:
    /// [`guide::operating`](crate::guide::operating#ban-repeat-offenders).
    ///
    /// # Panics
    ///
    /// When a figure of `ban` is zero (or `within` is longer than `u64::MAX` nanoseconds),
    /// naming it; when the store cannot keep the count (the Redis store refuses a window past
    /// its exact bound, naming it); when the layer was made by
    /// [`from_limiter`](Self::from_limiter).
    #[must_use]
    #[track_caller]
    pub fn ban(mut self, ban: Ban) -> Self {
        if let Some(refusal) = ban.refusal() {
            panic!("{refusal}");
        }
        let recipe = self.recipe_for("ban");
        let counter = ban_counter(&ban, &self.limiter, &recipe);
        self.ban = Some((ban, counter));
        self.changed()
    }

    /// Keeps `k` counters per period in a sliding window (1 to 64). See
    /// [`RateLimiter::sub_windows`].
    ///
    /// # Panics
    ///
    /// When `k` is 0 or above 64, or the layer's algorithm is not the sliding window.
    #[must_use]
    #[track_caller]
    pub fn sub_windows(self, k: usize) -> Self {
        let call = format!("sub_windows({k})");
        self.option("sub_windows", &call, |spec| spec.with_sub_windows(k))
    }

    /// Calendar windows for a fixed window: every window starts at a whole multiple of its
    /// period since the UNIX epoch in UTC, the same instant for every client, so
    /// `Quota::per_day(1000)` resets at midnight UTC and the headers' `t` counts down to it.
    /// Time is then the wall clock (the Redis server's `TIME` with a [`RedisStore`]). See
    /// [`FixedWindow::aligned`](crate::algorithm::FixedWindow::aligned).
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let daily = RateLimitLayer::fixed_window(Quota::per_day(1000)).aligned();
    /// # let _ = daily;
    /// ```
    ///
    /// # Panics
    ///
    /// When the layer's algorithm is not the fixed window, or a period is shorter than a
    /// millisecond.
    ///
    /// [`RedisStore`]: crate::store
    #[must_use]
    #[track_caller]
    pub fn aligned(self) -> Self {
        self.option("aligned", "aligned", Spec::with_aligned)
    }

    /// Shapes instead of rejecting (nginx's `burst` without `nodelay`): a request that could
    /// pass within `max_delay` waits in the layer for its turn and then goes on; only requests
    /// that would wait longer are refused. For GCRA and the token bucket.
    ///
    /// A waiting request holds nothing of the inner service: it gives back the readiness
    /// `poll_ready` took, and readies the inner service again when its turn comes (see
    /// [the module docs](crate::layer#the-inner-services-readiness)). It does hold its connection
    /// and the request itself, so keep `max_delay` short where clients can open many
    /// connections.
    ///
    /// # Panics
    ///
    /// When the layer's algorithm cannot shape (it is not GCRA or the token bucket).
    #[must_use]
    #[track_caller]
    pub fn max_delay(self, max_delay: std::time::Duration) -> Self {
        let call = format!("max_delay({max_delay:?})");
        self.option("max_delay", &call, |spec| spec.shaping(max_delay))
    }

    /// The same layer with its algorithm's options changed by `set`, or a panic naming the
    /// `call` and why the algorithm has no such option.
    #[track_caller]
    fn option<F>(self, method: &str, call: &str, set: F) -> Self
    where
        F: FnOnce(Spec) -> Result<Spec, String>,
    {
        let recipe = self.recipe_for(method);
        match set(recipe.spec.clone()) {
            Ok(spec) => self.rebuilt(method, Recipe { spec, ..recipe }),
            Err(why) => panic!("RateLimitLayer::{call}: {why}"),
        }
    }

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
