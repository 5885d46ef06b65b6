//! The algorithm's options (sub-windows, calendar windows, shaping) and bans of repeat
//! offenders: each makes the layer's limiter again.

use super::{ban_counter, RateLimitLayer};
use crate::limiter::{Ban, Recipe, Spec};
#[cfg(doc)]
use crate::RateLimiter;

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
}
