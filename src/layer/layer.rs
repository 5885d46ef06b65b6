use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

use http::{Response, StatusCode};
use tower_layer::Layer;

use super::answer::{answer, AnswerBody};
use super::handle::{Handle, Live};
use super::headers::{HeaderPlacement, HeaderStyle, Headers};
use super::response::Responder;
use super::settings::{OnKeyError, OnLimited, Settings};
use super::shared::{Cost, Shared};
use super::RateLimit;
use crate::algorithm::{Algorithm, Gcra, Quotas, Tiered};
use crate::clock::Clock;
use crate::key::{Allow, IpList, KeyError, KeyExtractor, PeerIp, RequestHead, Skip};
use crate::limiter::Ban;
use crate::limiter::Limiter;
use crate::limiter::{plan, Maker, PerKey, Plan, Select};
use crate::limiter::{AlgorithmKind, Bind, Binder, LayerClock, LayerStore, Spec};
use crate::store::{MemoryStore, Store};
use crate::{Decision, Key, Quota, RateLimiter};

/// Applies a rate limit to every request of a service. See the [module docs](super).
///
/// Built with one constructor per algorithm, such as [`RateLimitLayer::gcra`], then adjusted with
/// builder methods: [`key`](Self::key) (default [`PeerIp`](struct@crate::key::PeerIp)), [`store`](Self::store) (default a
/// new [`MemoryStore`]) and [`clock`](Self::clock) (default [`SystemClock`](crate::clock::SystemClock)).
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
    /// How the limiter is made; `None` for a limiter built by hand ([`from_limiter`](Self::from_limiter)).
    recipe: Option<Spec>,
    /// The limiter as the layer was built (its quotas may have changed since: `live`).
    limiter: Arc<dyn Limiter>,
    /// The limiter of now, shared with the layer's [`Handle`]s and services; made again when
    /// the algorithm, store or clock change.
    live: Arc<Live>,
    /// The store, as a maker of limiters (for a new clock, options, or plans).
    store: Option<Arc<dyn Bind>>,
    clock: LayerClock,
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

/// The quotas of `quotas`, and whether they are decided as tiers.
fn quota_list<Q: Quotas>(quotas: Q) -> (Vec<Quota>, bool) {
    let (quotas, algorithm) = quotas.build(Gcra::new);
    let tiered = (&algorithm as &dyn Any).is::<Tiered<Gcra>>();
    (quotas, tiered)
}

impl RateLimitLayer {
    /// Limits each client IP with GCRA over `quotas` (one [`Quota`], or several that must all
    /// allow a request), in memory.
    ///
    /// A smooth rate with bursts: a fresh client may make `burst` requests at once, then one
    /// every `period / limit`. See [`Gcra`].
    pub fn gcra<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::Gcra, quotas)
    }

    /// Limits each client IP with a leaky bucket over `quotas`, in memory: requests reach the
    /// service one every `period / limit`, never in a burst. A request that finds others
    /// queued waits its turn in the layer before the service is called; one that finds the
    /// queue of `burst` places full is refused. If the client goes away while waiting, its
    /// request never reaches the service. A waiting request holds nothing of the inner
    /// service's readiness (see [the module docs](super#the-inner-services-readiness)). See
    /// [`LeakyBucket`](crate::algorithm::LeakyBucket).
    pub fn leaky_bucket<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::LeakyBucket, quotas)
    }

    /// Limits each client IP with a token bucket over `quotas`, in memory; the same decisions
    /// as [`gcra`](Self::gcra). See [`RateLimiter::token_bucket`].
    pub fn token_bucket<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::TokenBucket, quotas)
    }

    /// Limits each client IP to `limit` per window, the window starting at the client's first
    /// request, in memory. See [`RateLimiter::fixed_window`].
    pub fn fixed_window<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::FixedWindow, quotas)
    }

    /// Limits each client IP with a sliding window estimate, in memory. See
    /// [`RateLimiter::sliding_window`].
    pub fn sliding_window<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::SlidingWindow, quotas)
    }

    /// Limits each client IP to exactly `limit` in any `period`, in memory. See
    /// [`RateLimiter::sliding_log`].
    pub fn sliding_log<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::SlidingLog, quotas)
    }

    /// Limits each client IP with the hybrid quota-linear limiter, in memory. See
    /// [`RateLimiter::hybrid`].
    pub fn hybrid<Q: Quotas>(quotas: Q) -> Self {
        Self::of(AlgorithmKind::Hybrid, quotas)
    }

    #[track_caller]
    fn of<Q: Quotas>(kind: AlgorithmKind, quotas: Q) -> Self {
        let (quotas, tiered) = quota_list(quotas);
        Self::from_recipe(Spec::new(kind, quotas, tiered).own())
    }

    /// A layer over `recipe`'s limiter, in a new memory store, on the system clock.
    #[track_caller]
    pub(crate) fn from_recipe(recipe: Spec) -> Self {
        let store: Arc<dyn Bind> = Arc::new(Binder(MemoryStore::new()));
        let clock = LayerClock::System;
        let limiter = bound(&*store, &recipe, &clock);
        let live = Live::new(
            limiter.clone(),
            Some(recipe.clone()),
            Some(store.clone()),
            clock.clone(),
        );
        Self {
            recipe: Some(recipe),
            limiter,
            live,
            store: Some(store),
            clock,
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

    /// Limits each client IP with a limiter built by hand: an algorithm of your own, or a store
    /// that keeps only some algorithms. The layer uses the limiter's store, clock and algorithm
    /// options as they are.
    ///
    /// Such a layer has no recipe to make its limiter again, so [`store`](Self::store),
    /// [`clock`](Self::clock), [`max_delay`](Self::max_delay),
    /// [`sub_windows`](Self::sub_windows) and [`quota_for`](Self::quota_for) panic on it:
    /// set the store and clock on the limiter (`with_store`, `with_clock`), or build the layer
    /// with an algorithm constructor such as [`RateLimitLayer::gcra`].
    pub fn from_limiter<A, St, C>(limiter: RateLimiter<A, St, C>) -> Self
    where
        A: Algorithm,
        St: Store<A>,
        C: Clock + Clone,
    {
        Self::from_limit(Arc::new(limiter))
    }

    /// A layer deciding by `limiter`, which it cannot make again.
    pub(crate) fn from_limit(limiter: Arc<dyn Limiter>) -> Self {
        Self {
            recipe: None,
            live: Live::new(limiter.clone(), None, None, LayerClock::System),
            limiter,
            store: None,
            clock: LayerClock::System,
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
    fn recipe_for(&self, method: &str) -> &Spec {
        match &self.recipe {
            Some(recipe) => recipe,
            None => panic!(
                "RateLimitLayer::{method}: this layer was made by from_limiter, which keeps the \
                 limiter as it was built; set the store and clock on the RateLimiter \
                 (with_store, with_clock, max_delay, sub_windows, aligned) before from_limiter, or build \
                 the layer with an algorithm constructor such as RateLimitLayer::gcra"
            ),
        }
    }

    /// The same layer whose limiter is made from `recipe`, over `store` on `clock`.
    #[track_caller]
    fn rebuilt(
        mut self,
        method: &str,
        recipe: Spec,
        store: Arc<dyn Bind>,
        clock: LayerClock,
    ) -> Self {
        self.recipe = Some(recipe.clone());
        self.store = Some(store.clone());
        self.clock = clock.clone();
        self = self.limited_by(&format!("RateLimitLayer::{method}"), || {
            bound(&*store, &recipe, &clock)
        });
        if self.settings.count_if.is_some() {
            self.limiter.expect_refunds();
        }
        if self.select.is_some() {
            self.live.picks_plans();
        }
        if let Some((ban, _)) = self.ban.take() {
            let counter = ban_counter(&ban, &self.limiter, &*store, &recipe, &clock);
            self.ban = Some((ban, counter));
        }
        self.changed()
    }

    /// The same layer deciding by the limiter `make` makes, `method` naming what made it.
    ///
    /// # Panics
    ///
    /// When a handle was taken before: it would not reach the new limiter.
    #[track_caller]
    pub(crate) fn limited_by(
        mut self,
        method: &str,
        make: impl FnOnce() -> Arc<dyn Limiter>,
    ) -> Self {
        assert!(
            !self.live.handed_out(),
            "{method}: a Handle was taken from this layer before, and would not reach the \
             limiter this makes (its changes and blocks would do nothing); take the handle \
             after the algorithm's options, the store and the clock are set"
        );
        self.limiter = make();
        self.live = Live::new(
            self.limiter.clone(),
            self.recipe.clone(),
            self.store.clone(),
            self.clock.clone(),
        );
        self.changed()
    }

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
        let recipe = self.recipe_for("ban").clone();
        let (store, clock) = self.parts();
        let counter = ban_counter(&ban, &self.limiter, &*store, &recipe, &clock);
        self.ban = Some((ban, counter));
        self.changed()
    }

    /// The same layer, with what its services share to be made again.
    fn changed(mut self) -> Self {
        self.built = Arc::default();
        self
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
        let recipe = self.recipe_for("sub_windows");
        assert!(
            recipe.kind == AlgorithmKind::SlidingWindow,
            "RateLimitLayer::sub_windows({k}): sub-windows are the sliding window's; this layer's \
             algorithm is {}",
            recipe.kind.name()
        );
        let recipe = Spec {
            sub_windows: Some(k),
            ..recipe.clone()
        };
        let (store, clock) = self.parts();
        self.rebuilt("sub_windows", recipe, store, clock)
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
        let recipe = self.recipe_for("aligned");
        assert!(
            recipe.kind == AlgorithmKind::FixedWindow,
            "RateLimitLayer::aligned: calendar windows are the fixed window's; this layer's \
             algorithm is {}",
            recipe.kind.name()
        );
        let recipe = Spec {
            aligned: true,
            ..recipe.clone()
        };
        let (store, clock) = self.parts();
        self.rebuilt("aligned", recipe, store, clock)
    }

    /// Shapes instead of rejecting (nginx's `burst` without `nodelay`): a request that could
    /// pass within `max_delay` waits in the layer for its turn and then goes on; only requests
    /// that would wait longer are refused. For GCRA and the token bucket.
    ///
    /// A waiting request holds nothing of the inner service: it gives back the readiness
    /// `poll_ready` took, and readies the inner service again when its turn comes (see
    /// [the module docs](super#the-inner-services-readiness)). It does hold its connection
    /// and the request itself, so keep `max_delay` short where clients can open many
    /// connections.
    ///
    /// # Panics
    ///
    /// When the layer's algorithm cannot shape (it is not GCRA or the token bucket).
    #[must_use]
    #[track_caller]
    pub fn max_delay(self, max_delay: std::time::Duration) -> Self {
        let recipe = self.recipe_for("max_delay");
        assert!(
            recipe.kind.shapes(),
            "RateLimitLayer::max_delay({max_delay:?}): only gcra and token_bucket shape; this \
             layer's algorithm is {} (the leaky bucket always queues: its burst is the queue)",
            recipe.kind.name()
        );
        let recipe = Spec {
            max_delay: Some(max_delay),
            ..recipe.clone()
        };
        let (store, clock) = self.parts();
        self.rebuilt("max_delay", recipe, store, clock)
    }

    /// The store and clock, for a layer with a recipe.
    fn parts(&self) -> (Arc<dyn Bind>, LayerClock) {
        let store = match &self.store {
            Some(store) => store.clone(),
            None => Arc::new(Binder(MemoryStore::new())),
        };
        (store, self.clock.clone())
    }

    /// Counts requests against the key `extractor` finds, instead of the peer IP.
    #[must_use]
    pub fn key<K: KeyExtractor>(mut self, extractor: K) -> Self {
        self.key = Arc::new(extractor);
        self.changed()
    }

    /// Picks the quotas of each request's plan, such as a customer's plan found from its API
    /// key: a [`Quota`], or for a layer built with tiers several quotas that must all allow the
    /// request (see [`Plan`](super::Plan)). Each plan gets its own limiter (the layer's
    /// algorithm, store and clock) and its own policy name: name each plan's quotas
    /// (`Quota::named`). The selector runs for every limited request: keep it cheap.
    ///
    /// The plan comes from what the server knows, never from what the client sent. Here an
    /// authentication layer in front checked the API key and put the customer's plan in the
    /// extensions:
    ///
    /// ```
    /// use tollgate::key::{Header, RequestHead};
    /// use tollgate::{Key, Quota, RateLimitLayer};
    ///
    /// #[derive(Clone, Copy)]
    /// enum Plan { Free, Pro }
    ///
    /// let free = Quota::per_minute(10).named("free");
    /// let pro = Quota::per_minute(100).named("pro");
    /// let layer = RateLimitLayer::gcra(free.clone())
    ///     .key(Header::new("x-api-key"))
    ///     .quota_for(move |_key: &Key, head: RequestHead<'_>| {
    ///         match head.extensions().get::<Plan>() {
    ///             Some(Plan::Pro) => pro.clone(),
    ///             _ => free.clone(),
    ///         }
    ///     });
    /// # let _ = layer;
    /// ```
    ///
    /// The rules (limiters made and dropped, unnamed plans, plans with tiers):
    /// [`guide::keys`](crate::guide::keys#plans-a-quota-per-customer); plans from a map of the
    /// keys a service issued:
    /// [`guide::recipes`](crate::guide::recipes#plans-from-a-map-or-from-what-authentication-found).
    ///
    /// # Panics
    ///
    /// When the layer was made by [`from_limiter`](Self::from_limiter): plans are made from
    /// the layer's algorithm, which a limiter built by hand does not give.
    #[must_use]
    #[track_caller]
    pub fn quota_for<F, P>(mut self, select: F) -> Self
    where
        F: Fn(&Key, RequestHead<'_>) -> P + Send + Sync + 'static,
        P: Plan,
    {
        self.recipe_for("quota_for");
        self.select = Some(plan::select(select));
        self.live.picks_plans();
        self.changed()
    }

    /// Charges each request what `cost` says, instead of 1: the cost of a request from its key
    /// and its head (route, method, a header a trusted layer set), such as 10 for a bulk
    /// export. A request passes only if the whole cost is available, and then takes all of it;
    /// cost 0 takes nothing (a peek). **The cost must not be the client's choice**: a cost read
    /// from the request lets a client send 0; clamp one that must come from the client to at
    /// least 1.
    ///
    /// ```
    /// use http::Method;
    /// use tollgate::{Key, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(100)).cost(|_key: &Key, head| {
    ///     match (head.method(), head.uri().path()) {
    ///         (&Method::POST, "/export") => 10,
    ///         _ => 1,
    ///     }
    /// });
    /// # let _ = layer;
    /// ```
    ///
    /// Costs above the burst, tiers, plans, shaping and [`count_if`](Self::count_if):
    /// [`guide::algorithms`](crate::guide::algorithms#costs).
    #[must_use]
    pub fn cost<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync + 'static,
    {
        self.cost = Some(Arc::new(cost));
        self.changed()
    }

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
        let mut settings = self.settings.clone();
        settings.headers = Headers {
            style,
            ..settings.headers
        };
        self.with_settings(settings)
    }

    /// Writes the rate limit headers only on some responses: allowed ones, denied ones, or all
    /// (the default). See [`HeaderPlacement`].
    #[must_use]
    pub fn headers_on(self, placement: HeaderPlacement) -> Self {
        let mut settings = self.settings.clone();
        settings.headers = Headers {
            placement,
            ..settings.headers
        };
        self.with_settings(settings)
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
        assert!(
            status.is_client_error() || status.is_server_error(),
            "RateLimitLayer::status({status}): denials must be answered with a 4xx or 5xx status"
        );
        let mut settings = self.settings.clone();
        settings.status = Some(status);
        self.with_settings(settings)
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
        let mut settings = self.settings.clone();
        settings.grpc = enabled;
        self.with_settings(settings)
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
        let mut settings = self.settings.clone();
        settings.grpc_web = enabled;
        self.with_settings(settings)
    }

    /// Answers denied HTTP requests with the response `f` makes from the decision and the
    /// request, instead of the layer's plain-text one. The layer still adds `Retry-After`,
    /// `Cache-Control: no-store` (each unless `f` set it) and the rate limit headers; gRPC
    /// requests keep their RESOURCE_EXHAUSTED answer. The body may be what an axum handler
    /// returns, or any body [`AnswerBody`](super::AnswerBody) lists;
    /// [`problem_details`](super::problem_details) makes RFC 9457 JSON. `f` runs for every
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
        let mut settings = self.settings.clone();
        let f: Arc<OnLimited> =
            Arc::new(move |decision: &Decision, head: RequestHead<'_>| answer(f(decision, head)));
        settings.on_limited = Some(f);
        self.with_settings(settings)
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
        let mut settings = self.settings.clone();
        let f: Arc<OnKeyError> =
            Arc::new(move |error: &KeyError, head: RequestHead<'_>| answer(f(error, head)));
        settings.on_key_error = Some(f);
        self.with_settings(settings)
    }

    /// Never denies: every request goes on, with the would-be decision in its extensions and
    /// rate limit headers (so `remaining` shows 0 where a request would have been refused), and
    /// each would-be denial logged at info level (feature `tracing`). For trying a limit on
    /// real traffic before enforcing it. Allowed requests still use up the quota, as they would.
    #[must_use]
    pub fn dry_run(self, enabled: bool) -> Self {
        let mut settings = self.settings.clone();
        settings.dry_run = enabled;
        self.with_settings(settings)
    }

    /// Counts only the requests whose response `counts` picks; the others give their capacity
    /// back once answered. For limiting failures, not attempts: 5 failed logins per 15 minutes,
    /// while successful logins cost nothing. A request is still checked before the handler runs,
    /// and the requests that count never exceed the quota in any window or burst (see
    /// [`RateLimiter::refund`]).
    ///
    /// ```
    /// use http::StatusCode;
    /// use std::time::Duration;
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let failed_logins = RateLimitLayer::gcra(Quota::new(5, Duration::from_secs(15 * 60)))
    ///     .count_if(|response| response.status == StatusCode::UNAUTHORIZED);
    /// # let _ = failed_logins;
    /// ```
    ///
    /// Concurrent requests and a failing inner service:
    /// [`guide::responses`](crate::guide::responses#counting-only-some-outcomes).
    ///
    /// # Panics
    ///
    /// When the layer's algorithm cannot give capacity back (the hybrid algorithm): its
    /// requests would all count, whatever `counts` says.
    #[must_use]
    #[track_caller]
    pub fn count_if<F>(self, counts: F) -> Self
    where
        F: Fn(&http::response::Parts) -> bool + Send + Sync + 'static,
    {
        assert!(
            self.limiter.refunds(),
            "RateLimitLayer::count_if: this layer's algorithm (the hybrid) cannot give capacity \
             back, so every request would count; use gcra, token_bucket, leaky_bucket, \
             fixed_window, sliding_window or sliding_log with count_if"
        );
        // A store that leases budgets stops where refunds could start a window again.
        self.limiter.expect_refunds();
        let mut settings = self.settings.clone();
        settings.count_if = Some(Arc::new(counts));
        self.with_settings(settings)
    }

    fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self.changed()
    }

    /// Leaves the requests `predicate` picks unlimited (no check, no rate limit headers), such
    /// as health checks or internal callers.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).skip(|head| head.uri().path() == "/healthz");
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn skip<P>(mut self, predicate: P) -> Self
    where
        P: Fn(RequestHead<'_>) -> bool + Send + Sync + 'static,
    {
        self.key = Arc::new(Skip::new(DynKey(self.key), predicate));
        self.changed()
    }

    /// Leaves clients whose key is an IP address in `list` unlimited: an office network,
    /// monitoring, your own services. The address is the key itself (the peer's with the default
    /// key, the client's behind proxies with `ClientIp`); see [`Allow`].
    ///
    /// ```
    /// use tollgate::key::IpList;
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).allow(IpList::new(["10.0.0.0/8"])?);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::key::ConfigError>(())
    /// ```
    #[must_use]
    pub fn allow(mut self, list: IpList) -> Self {
        self.key = Arc::new(Allow::new(DynKey(self.key), list));
        self.changed()
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
        let recipe = self.recipe_for("store").clone();
        let clock = self.clock.clone();
        let store: Arc<dyn Bind> = Arc::new(Binder(store));
        #[cfg(feature = "redis")]
        let store = match &self.on_failure {
            Some(on_failure) => failing(store.failing(on_failure), "RateLimitLayer", on_failure),
            None => store,
        };
        self.rebuilt("store", recipe, store, clock)
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
        let recipe = self.recipe_for("on_failure").clone();
        let (store, clock) = self.parts();
        let store = failing(store.failing(&on_failure), "RateLimitLayer", &on_failure);
        self.on_failure = Some(on_failure);
        self.rebuilt("on_failure", recipe, store, clock)
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
        let recipe = self.recipe_for("clock").clone();
        let (store, _) = self.parts();
        self.rebuilt("clock", recipe, store, LayerClock::Other(Arc::new(clock)))
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
        self.live.hand_out();
        Handle {
            live: self.live.clone(),
        }
    }

    /// What the services of this layer share, made on first use.
    fn shared(&self) -> Arc<Shared> {
        self.built
            .get_or_init(|| {
                let ban = self
                    .ban
                    .as_ref()
                    .map(|(ban, counter)| (*ban, counter.clone(), self.settings.dry_run));
                self.live.serve(|limiter| {
                    let per_key = match (&self.select, &self.recipe) {
                        (Some(select), Some(recipe)) => {
                            let (store, clock) = self.parts();
                            let settings = self.settings.clone();
                            let maker = Maker {
                                spec: recipe.clone(),
                                store,
                                clock,
                                responder: Arc::new(move |limiter| {
                                    Arc::new(Responder::for_limit(limiter, settings.clone()))
                                }),
                                expect_refunds: self.settings.count_if.is_some(),
                                dry_run: self.settings.dry_run,
                                ban: self.ban.as_ref().map(|(ban, _)| *ban),
                                held: self.live.held(),
                                book: self.live.plans.clone(),
                                #[cfg(feature = "redis")]
                                fleet: self.live.fleet.clone(),
                            };
                            Some(Arc::new(PerKey::new(select.clone(), maker)))
                        }
                        _ => None,
                    };
                    Arc::new(
                        Shared::new(
                            limiter,
                            self.settings.clone(),
                            self.key.clone(),
                            per_key,
                            self.cost.clone(),
                            ban,
                            self.live.held(),
                        )
                        .keeping(self.live.clone()),
                    )
                })
            })
            .clone()
    }
}

/// The limiter of `recipe` over `store`, or a panic naming why the store refuses it.
#[track_caller]
fn bound(store: &dyn Bind, recipe: &Spec, clock: &LayerClock) -> Arc<dyn Limiter> {
    match store.bind(recipe, clock, recipe.named()) {
        Ok(limiter) => limiter,
        Err(error) => panic!("RateLimitLayer: {error}"),
    }
}

/// The limiter that counts `limiter`'s denials for `ban`, over `store`, or a panic naming why
/// the store refuses it.
#[track_caller]
fn ban_counter(
    ban: &Ban,
    limiter: &Arc<dyn Limiter>,
    store: &dyn Bind,
    recipe: &Spec,
    clock: &LayerClock,
) -> Arc<dyn Limiter> {
    match ban.bind(limiter, store, clock, recipe.named(), recipe.tie.as_ref()) {
        Ok(counter) => counter,
        Err(error) => panic!("RateLimitLayer::ban: {error}"),
    }
}

/// A layer's key extractor, inside `skip` and `allow`.
struct DynKey(Arc<dyn KeyExtractor>);

impl KeyExtractor for DynKey {
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        self.0.extract(req)
    }

    #[inline]
    fn client_ip(&self, req: RequestHead<'_>) -> Option<std::net::IpAddr> {
        self.0.client_ip(req)
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
