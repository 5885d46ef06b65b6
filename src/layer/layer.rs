use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use tower_layer::Layer;

use super::handle::{Handle, Live};
use super::response::Responder;
use super::response::Settings;
use super::shared::{Cost, Shared};
use super::RateLimit;
use crate::key::KeyExtractor;
use crate::key::PeerIp;
use crate::limiter::{Ban, Limiter};
use crate::limiter::{Maker, PerKey, Recipe, Select};
use crate::Quota;

/// Applies a rate limit to every request of a service. See the [module docs](super).
///
/// Built with one constructor per algorithm, such as [`RateLimitLayer::gcra`], then adjusted with
/// builder methods: [`key`](Self::key) (default [`PeerIp`](struct@crate::key::PeerIp)), [`store`](Self::store) (default a
/// new [`MemoryStore`](crate::store::MemoryStore)) and [`clock`](Self::clock) (default [`SystemClock`](crate::clock::SystemClock)).
///
/// One type, whatever the algorithm, key, store and clock: layers can be kept in a `Vec`, a
/// struct field or a map, and chosen at run time (from a configuration file, say).
///
/// ```
/// use tollgate::key::Header;
/// use tollgate::{Quota, RateLimitLayer};
///
/// let q = Quota::per_minute(60);
/// let layers: Vec<RateLimitLayer> = vec![
///     RateLimitLayer::gcra(q.clone()),
///     RateLimitLayer::sliding_window(q).key(Header::new("x-api-key")),
/// ];
/// # let _ = layers;
/// ```
///
/// All services made by one layer (and its clones) share one limiter, so in axum
/// `Router::layer`, which wraps each route separately, a client's requests to every route count
/// against the same limit.
#[derive(Clone)]
pub struct RateLimitLayer {
    /// The limiter as the layer was built (its quotas may have changed since: `live`).
    limiter: Arc<dyn Limiter>,
    /// The limiter of now and how it is made, shared with the layer's [`Handle`]s and
    /// services; made again when the algorithm, store or clock change.
    live: Arc<Live>,
    key: Arc<dyn KeyExtractor>,
    settings: Settings,
    select: Option<Arc<Select>>,
    cost: Option<Arc<Cost>>,
    /// Bans of repeat offenders, with the limiter that counts the denials.
    ban: Option<(Ban, Arc<dyn Limiter>)>,
    /// What the services share, made by the first [`Layer::layer`] call and kept for the
    /// others (and for clones of this layer).
    built: Arc<OnceLock<Arc<Shared>>>,
    /// The layer's own failure policy, in place of its store's.
    #[cfg(feature = "redis")]
    on_failure: Option<crate::store::OnFailure>,
}

mod algorithms;
mod options;
mod requests;
mod responses;

#[cfg(feature = "redis")]
pub(crate) use self::options::failing;

impl RateLimitLayer {
    /// A layer deciding by `limiter`, made by `recipe` (`None`: a limiter the layer cannot
    /// make again, built by hand).
    pub(crate) fn new(limiter: Arc<dyn Limiter>, recipe: Option<Recipe>) -> Self {
        Self {
            live: Live::new(limiter.clone(), recipe),
            limiter,
            key: Arc::new(PeerIp),
            settings: Settings::default(),
            select: None,
            cost: None,
            ban: None,
            built: Arc::default(),
            #[cfg(feature = "redis")]
            on_failure: None,
        }
    }

    /// The recipe of this layer's limiter, for a builder method that makes it again.
    #[track_caller]
    fn recipe_for(&self, method: &str) -> Recipe {
        match &self.live.recipe {
            Some(recipe) => recipe.clone(),
            None => panic!(
                "RateLimitLayer::{method}: this layer was made by from_limiter, which keeps the \
                 limiter as it was built; set the store and clock on the RateLimiter \
                 (with_store, with_clock, max_delay, sub_windows, aligned) before from_limiter, or build \
                 the layer with an algorithm constructor such as RateLimitLayer::gcra"
            ),
        }
    }

    /// The same layer whose limiter is made from `recipe`.
    #[track_caller]
    fn rebuilt(self, method: &str, recipe: Recipe) -> Self {
        let method = format!("RateLimitLayer::{method}");
        let mut layer = self.remade(&method, Some(recipe.clone()), || bound(&recipe));
        if layer.settings.refunds() {
            layer.limiter.expect_refunds();
        }
        if layer.select.is_some() {
            layer.live.picks_plans.store(true, Ordering::Relaxed);
        }
        if let Some((ban, _)) = layer.ban.take() {
            let counter = ban_counter(&ban, &layer.limiter, &recipe);
            layer.ban = Some((ban, counter));
        }
        layer
    }

    /// The same layer deciding by the limiter `make` makes (made by `recipe`; `None`: not
    /// made again by the layer's options), `method` naming what made it.
    ///
    /// # Panics
    ///
    /// When a handle was taken before: it would not reach the new limiter.
    #[track_caller]
    pub(crate) fn remade(
        mut self,
        method: &str,
        recipe: Option<Recipe>,
        make: impl FnOnce() -> Arc<dyn Limiter>,
    ) -> Self {
        assert!(
            !self.live.handed_out.load(Ordering::Relaxed),
            "{method}: a Handle was taken from this layer before, and would not reach the \
             limiter this makes (its changes and blocks would do nothing); take the handle \
             after the algorithm's options, the store and the clock are set"
        );
        self.limiter = make();
        self.live = Live::new(self.limiter.clone(), recipe);
        self.changed()
    }

    /// The same layer, with what its services share to be made again.
    fn changed(mut self) -> Self {
        self.built = Arc::default();
        self
    }

    /// The same layer with its settings changed by `change`.
    fn set(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        change(&mut self.settings);
        self.changed()
    }
    /// The policy name shown to clients and used to separate state in the store, as the layer
    /// was built ([`Handle::policy`] once its quotas change live).
    pub fn policy(&self) -> &str {
        self.limiter.policy()
    }

    /// The quotas the layer was built with: one, or each tier in order. Those in force once
    /// changed live are [`Handle::quotas`].
    pub fn quotas(&self) -> &[Quota] {
        self.limiter.quotas()
    }

    /// The layer's [`Handle`]: its quotas changed live, for every service it made and makes.
    ///
    /// Take it once the algorithm, its options, the store and the clock are set: those make a
    /// new limiter, which a handle taken before would not reach, so setting them afterwards
    /// panics, naming the method. The key, answers, headers, bans and the other settings may
    /// change after. Clones of the layer share it, as they share state.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60));
    /// let handle = layer.handle();
    /// // `.layer(..)` the layer into a router, keep `handle` for an admin route:
    /// handle.set_quotas(Quota::per_minute(600))?;
    /// assert_eq!(handle.quotas(), [Quota::per_minute(600)]);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn handle(&self) -> Handle {
        self.live.handed_out.store(true, Ordering::Relaxed);
        Handle {
            live: self.live.clone(),
        }
    }

    /// What the services of this layer share, made on first use.
    fn shared(&self) -> Arc<Shared> {
        let settings = &self.settings;
        let make = |limiter| {
            let bans = self.ban.as_ref();
            let bans = bans.map(|(ban, counter)| (*ban, counter.clone(), settings.dry_run));
            let plans = self.select.as_ref().zip(self.live.recipe.as_ref());
            let per_key = plans.map(|(select, recipe)| {
                let answers = settings.clone();
                let maker = Maker {
                    recipe: recipe.clone(),
                    responder: Arc::new(move |limiter| {
                        Arc::new(Responder::for_limit(limiter, answers.clone()))
                    }),
                    expect_refunds: settings.refunds(),
                    dry_run: settings.dry_run,
                    ban: self.ban.as_ref().map(|(ban, _)| *ban),
                    live: self.live.clone(),
                };
                Arc::new(PerKey::new(select.clone(), maker))
            });
            let responder = Shared::responder(&bans, &self.live, limiter, settings.clone());
            Arc::new(Shared {
                active: ArcSwap::from_pointee(responder),
                key: self.key.clone(),
                per_key,
                cost: self.cost.clone(),
                bans,
                live: self.live.clone(),
            })
        };
        self.built.get_or_init(|| self.live.serve(make)).clone()
    }
}

/// The limiter of `recipe`, or a panic naming why the store refuses it.
#[track_caller]
fn bound(recipe: &Recipe) -> Arc<dyn Limiter> {
    match recipe.bind() {
        Ok(limiter) => limiter,
        Err(error) => panic!("RateLimitLayer: {error}"),
    }
}

/// The limiter that counts `limiter`'s denials for `ban`, over `store`, or a panic naming why
/// the store refuses it.
#[track_caller]
fn ban_counter(ban: &Ban, limiter: &Arc<dyn Limiter>, recipe: &Recipe) -> Arc<dyn Limiter> {
    match ban.bind(limiter, recipe, recipe.spec.named()) {
        Ok(counter) => counter,
        Err(error) => panic!("RateLimitLayer::ban: {error}"),
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policy", &self.limiter.policy())
            .field("quotas", &self.limiter.quotas())
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.shared())
    }
}
