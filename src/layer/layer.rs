use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use tower_layer::Layer;

use super::config::Config;
use super::headers::{HeaderPlacement, HeaderStyle, Headers};
use super::per_key::{self, PerKey, Plan};
use super::response::Responder;
use super::response::{OnLimited, Settings};
use super::RateLimit;
use crate::algorithm::{
    Algorithm, FixedWindow, Gcra, Hybrid, LeakyBucket, Quotas, Shaping, SlidingLog, SlidingWindow,
    SubWindows, TokenBucket,
};
use crate::clock::{Clock, SystemClock};
use crate::key::{Allow, IpList, KeyExtractor, PeerIp, RequestHead, Skip};
use crate::store::{MemoryAlgorithm, MemoryStore, Store};
#[cfg(doc)]
use crate::Quota;
use crate::{Decision, Key, RateLimiter};

/// Applies a rate limit to every request of a service. See the [module docs](super).
///
/// Built with one constructor per algorithm, such as [`RateLimitLayer::gcra`], then adjusted with
/// builder methods: [`key`](Self::key) (default [`PeerIp`](struct@crate::key::PeerIp)), [`store`](Self::store) (default a
/// new [`MemoryStore`]) and [`clock`](Self::clock) (default [`SystemClock`]).
///
/// All services made by one layer share one limiter, so in axum `Router::layer`, which wraps
/// each route separately, a client's requests to every route count against the same limit.
pub struct RateLimitLayer<A = Gcra, K = PeerIp, St = MemoryStore, C = SystemClock>
where
    A: Algorithm,
    St: Store<A>,
{
    config: Config<A, K, St, C>,
}

impl RateLimitLayer<Gcra> {
    /// Limits each client IP with GCRA over `quotas` (one [`Quota`], or several that must all
    /// allow a request), in memory.
    ///
    /// A smooth rate with bursts: a fresh client may make `burst` requests at once, then one
    /// every `period / limit`. See [`Gcra`].
    pub fn gcra<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<Gcra>>
    where
        Q::Algorithm<Gcra>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::gcra(quotas))
    }

    /// Limits each client IP with a leaky bucket over `quotas`, in memory: requests reach the
    /// service one every `period / limit`, never in a burst. A request that finds others
    /// queued waits its turn in the layer before the service is called; one that finds the
    /// queue of `burst` places full is refused. If the client goes away while waiting, its
    /// request never reaches the service. A waiting request holds nothing of the inner
    /// service's readiness (see [the module docs](super#the-inner-services-readiness)). See
    /// [`LeakyBucket`].
    pub fn leaky_bucket<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<LeakyBucket>>
    where
        Q::Algorithm<LeakyBucket>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::leaky_bucket(quotas))
    }

    /// Limits each client IP with a token bucket over `quotas`, in memory; the same decisions
    /// as [`gcra`](Self::gcra). See [`RateLimiter::token_bucket`].
    pub fn token_bucket<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<TokenBucket>>
    where
        Q::Algorithm<TokenBucket>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::token_bucket(quotas))
    }

    /// Limits each client IP to `limit` per window, the window starting at the client's first
    /// request, in memory. See [`RateLimiter::fixed_window`].
    pub fn fixed_window<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<FixedWindow>>
    where
        Q::Algorithm<FixedWindow>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::fixed_window(quotas))
    }

    /// Limits each client IP with a sliding window estimate, in memory. See
    /// [`RateLimiter::sliding_window`].
    pub fn sliding_window<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<SlidingWindow>>
    where
        Q::Algorithm<SlidingWindow>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::sliding_window(quotas))
    }

    /// Limits each client IP to exactly `limit` in any `period`, in memory. See
    /// [`RateLimiter::sliding_log`].
    pub fn sliding_log<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<SlidingLog>>
    where
        Q::Algorithm<SlidingLog>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::sliding_log(quotas))
    }

    /// Limits each client IP with the hybrid quota-linear limiter, in memory. See
    /// [`RateLimiter::hybrid`].
    pub fn hybrid<Q: Quotas>(quotas: Q) -> RateLimitLayer<Q::Algorithm<Hybrid>>
    where
        Q::Algorithm<Hybrid>: MemoryAlgorithm,
    {
        RateLimitLayer::from_limiter(RateLimiter::hybrid(quotas))
    }
}

impl<A, K, St, C> RateLimitLayer<A, K, St, C>
where
    A: SubWindows,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    /// Keeps `k` counters per period in a sliding window (1 to 64). See
    /// [`RateLimiter::sub_windows`].
    ///
    /// # Panics
    ///
    /// When `k` is 0 or above 64.
    #[must_use]
    #[track_caller]
    pub fn sub_windows(self, k: usize) -> Self {
        RateLimitLayer {
            config: self.config.map_limiter(|limiter| limiter.sub_windows(k)),
        }
    }
}

impl<A, K, St, C> RateLimitLayer<A, K, St, C>
where
    A: Shaping,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    /// Shapes instead of rejecting (nginx's `burst` without `nodelay`): a request that could
    /// pass within `max_delay` waits in the layer for its turn and then goes on; only requests
    /// that would wait longer are refused. For GCRA and the token bucket.
    ///
    /// A waiting request holds nothing of the inner service: it gives back the readiness
    /// `poll_ready` took, and readies the inner service again when its turn comes (see
    /// [the module docs](super#the-inner-services-readiness)). It does hold its connection
    /// and the request itself, so keep `max_delay` short where clients can open many
    /// connections.
    #[must_use]
    pub fn max_delay(self, max_delay: std::time::Duration) -> Self {
        RateLimitLayer {
            config: self
                .config
                .map_limiter(|limiter| limiter.max_delay(max_delay)),
        }
    }
}

impl<A: Algorithm, St: Store<A>, C: Clock + Clone> RateLimitLayer<A, PeerIp, St, C> {
    /// Limits each client IP with a limiter built by hand.
    pub fn from_limiter(limiter: RateLimiter<A, St, C>) -> Self {
        let responder = Arc::new(Responder::for_limiter(&limiter, Settings::default()));
        Self {
            config: Config {
                limiter,
                key: PeerIp,
                responder,
                per_key: None,
                cost: None,
            },
        }
    }
}

impl<A, K, St, C> RateLimitLayer<A, K, St, C>
where
    A: Algorithm,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    /// Counts requests against the key `extractor` finds, instead of the peer IP.
    #[must_use]
    pub fn key<K2: KeyExtractor>(self, extractor: K2) -> RateLimitLayer<A, K2, St, C> {
        RateLimitLayer {
            config: self.config.map_key(|_| extractor),
        }
    }

    /// Picks the quotas of each request's plan, such as a customer's plan found from its API
    /// key: a [`Quota`], or for a layer built with tiers several quotas that must all allow the
    /// request (see [`Plan`](super::Plan)). Requests the selector gives the layer's own quotas
    /// use the layer's limiter.
    ///
    /// Each plan gets its own limiter: the layer's algorithm with its options (shaping,
    /// sub-windows) for each of the plan's quotas, the layer's store and clock, and its own
    /// policy name in the headers and the store. Name each plan's quotas (`Quota::named`).
    /// Limiters are made on first use and kept for the 256 plans used most recently; past
    /// that, the least recently used one is dropped and made again when its plan comes back
    /// (a warning is logged once). Its state is not lost with it: a plan's state lives in the
    /// store under the plan's policy name, or under its text form (such as `100/min`) when the
    /// plan's quotas are unnamed, and the limiter made again finds it. So clients on an unnamed
    /// plan share its state with every layer on the same store that picks the same unnamed
    /// plan; name plans to keep them apart.
    ///
    /// The selector runs for every limited request: keep it cheap. Returning a clone of a
    /// `Quota` (or of an `Arc<[Quota]>` for tiers) allocates nothing, nor does finding the
    /// plan's limiter.
    ///
    /// ```
    /// use tollgate::key::Header;
    /// use tollgate::{Key, Quota, RateLimitLayer};
    ///
    /// let free = Quota::per_minute(60).named("free");
    /// let pro = Quota::per_minute(600).named("pro");
    /// let layer = RateLimitLayer::gcra(free.clone())
    ///     .key(Header::new("x-api-key"))
    ///     .quota_for(move |key: &Key, _head| {
    ///         let is_pro = key.as_bytes().is_some_and(|k| k.starts_with(b"pro_"));
    ///         if is_pro { pro.clone() } else { free.clone() }
    ///     });
    /// # let _ = layer;
    /// ```
    ///
    /// Plans with tiers, on a layer built with tiers:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::key::Header;
    /// use tollgate::{Key, Quota, RateLimitLayer};
    ///
    /// let free: Arc<[Quota]> = Arc::new([
    ///     Quota::per_second(1).named("free-s"),
    ///     Quota::per_day(100).named("free-d"),
    /// ]);
    /// let pro: Arc<[Quota]> = Arc::new([
    ///     Quota::per_second(10).named("pro-s"),
    ///     Quota::per_day(1000).named("pro-d"),
    /// ]);
    /// let layer = RateLimitLayer::gcra(free.to_vec())
    ///     .key(Header::new("x-api-key"))
    ///     .quota_for(move |key: &Key, _head| {
    ///         let is_pro = key.as_bytes().is_some_and(|k| k.starts_with(b"pro_"));
    ///         if is_pro { pro.clone() } else { free.clone() }
    ///     });
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn quota_for<F, P>(mut self, select: F) -> Self
    where
        F: Fn(&Key, RequestHead<'_>) -> P + Send + Sync + 'static,
        P: Plan<A>,
    {
        self.config.per_key = Some(Arc::new(PerKey::new(per_key::select(select))));
        self
    }

    /// Charges each request what `cost` says, instead of 1: the cost of a request from its key
    /// and its head (route, method, a header a trusted layer set), such as 10 for a bulk
    /// export. A request passes only if the whole cost is available, and then takes all of it.
    ///
    /// - Cost 0 takes nothing: the request passes and its headers show the key's standing (a
    ///   peek). It is never held back by shaping.
    /// - A cost above what the quota ever allows (its burst) is refused with no `Retry-After`
    ///   (gRPC: `grpc-retry-pushback-ms: -1`), since no wait would let it pass.
    /// - It applies to every tier, to per-key quotas ([`quota_for`](Self::quota_for)) and to
    ///   shaping (a request of cost 3 waits as long as 3 requests). With
    ///   [`count_if`](Self::count_if), a response that does not count gives the same cost back.
    ///
    /// **The cost must not be the client's choice.** A cost read from the request (a header, a
    /// query parameter, the body's announced length) lets a client pick it: 0 makes every
    /// request free. Compute the cost from what the server decides (the route and method, or
    /// a header a trusted layer in front of this one set and clients cannot send), or, when it
    /// must come from the client, clamp it to at least 1 (`n.max(1)`), and to at most what a
    /// request may cost.
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
    #[must_use]
    pub fn cost<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync + 'static,
    {
        self.config.cost = Some(Arc::new(cost));
        self
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
        let mut settings = self.config.responder.settings().clone();
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
        let mut settings = self.config.responder.settings().clone();
        settings.headers = Headers {
            placement,
            ..settings.headers
        };
        self.with_settings(settings)
    }

    /// Answers denied HTTP requests with `status` instead of `429 Too Many Requests`, such as
    /// `503 Service Unavailable` as nginx does. gRPC requests still get RESOURCE_EXHAUSTED.
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
        let mut settings = self.config.responder.settings().clone();
        settings.status = Some(status);
        self.with_settings(settings)
    }

    /// Whether gRPC requests get gRPC answers (on by default): HTTP 200 with `grpc-status`
    /// (RESOURCE_EXHAUSTED for a denial), in the request's content type. gRPC is recognised by
    /// `application/grpc[+subtype]` over HTTP/2, and gRPC-Web by `application/grpc-web[-text]`
    /// over any version; `application/grpc` over HTTP/1.1 is plain HTTP and gets a 429.
    ///
    /// Turn it off on a service that serves no gRPC: then every request gets the plain HTTP
    /// answers (429, `on_limited`, the key errors' statuses), whatever its content type.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let rest_only = RateLimitLayer::gcra(Quota::per_minute(60)).grpc(false);
    /// # let _ = rest_only;
    /// ```
    #[must_use]
    pub fn grpc(self, enabled: bool) -> Self {
        let mut settings = self.config.responder.settings().clone();
        settings.grpc = enabled;
        self.with_settings(settings)
    }

    /// Answers denied HTTP requests with the response `f` makes from the decision and the
    /// request, instead of the layer's plain-text one. The layer still adds `Retry-After` (unless
    /// `f` set it) and the rate limit headers. gRPC requests keep their RESOURCE_EXHAUSTED
    /// answer, which gRPC clients understand. [`problem_details`](super::problem_details) is a
    /// ready-made `f` for RFC 9457 JSON.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60)).on_limited(|decision, _head| {
    ///     let wait = decision.retry_after.map_or(0, |d| d.as_secs());
    ///     http::Response::builder()
    ///         .status(429)
    ///         .header("content-type", "text/html")
    ///         .body(format!("<p>Slow down: try again in {wait} s.</p>"))
    ///         .unwrap()
    /// });
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn on_limited<F, T>(self, f: F) -> Self
    where
        F: Fn(&Decision, RequestHead<'_>) -> Response<T> + Send + Sync + 'static,
        T: Into<Bytes>,
    {
        let mut settings = self.config.responder.settings().clone();
        let f: Arc<OnLimited> = Arc::new(move |decision: &Decision, head: RequestHead<'_>| {
            f(decision, head).map(Into::into)
        });
        settings.on_limited = Some(f);
        self.with_settings(settings)
    }

    /// Never denies: every request goes on, with the would-be decision in its extensions and
    /// rate limit headers (so `remaining` shows 0 where a request would have been refused), and
    /// each would-be denial logged at info level (feature `tracing`). For trying a limit on
    /// real traffic before enforcing it. Allowed requests still use up the quota, as they would.
    #[must_use]
    pub fn dry_run(self, enabled: bool) -> Self {
        let mut settings = self.config.responder.settings().clone();
        settings.dry_run = enabled;
        self.with_settings(settings)
    }

    /// Counts only the requests whose response `counts` picks; the others give their capacity
    /// back once answered. For limiting failures, not attempts: 5 failed logins per 15 minutes,
    /// while successful logins cost nothing.
    ///
    /// A request is still checked before the handler runs, and refused there once the quota is
    /// spent, so a client that has used up its failures never reaches the handler. Requests in
    /// flight together are each checked before any has answered: a quota of 5 lets 5 concurrent
    /// attempts through, never more.
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
    /// A request that does not count gives back only what its own admission took, and only
    /// while that still counts (see [`RateLimiter::refund`]): the requests that count never
    /// exceed the quota in any window or burst, whatever the order in which responses finish.
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
            self.config.limiter.algorithm().refunds(),
            "RateLimitLayer::count_if: this layer's algorithm (the hybrid) cannot give capacity \
             back, so every request would count; use gcra, token_bucket, leaky_bucket, \
             fixed_window, sliding_window or sliding_log with count_if"
        );
        let mut settings = self.config.responder.settings().clone();
        settings.count_if = Some(Arc::new(counts));
        self.with_settings(settings)
    }

    fn with_settings(mut self, settings: Settings) -> Self {
        self.config.responder = Arc::new(Responder::for_limiter(&self.config.limiter, settings));
        // Policies of per-key quotas hold their own responders: start them over (their state
        // lives in the store, so nothing is lost).
        self.config.per_key = self.config.per_key.map(|p| Arc::new(p.fresh()));
        self
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
    pub fn skip<P>(self, predicate: P) -> RateLimitLayer<A, Skip<K, P>, St, C>
    where
        P: Fn(RequestHead<'_>) -> bool + Clone + Send + Sync + 'static,
    {
        RateLimitLayer {
            config: self.config.map_key(|key| Skip::new(key, predicate)),
        }
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
    pub fn allow(self, list: IpList) -> RateLimitLayer<A, Allow<K>, St, C> {
        RateLimitLayer {
            config: self.config.map_key(|key| Allow::new(key, list)),
        }
    }

    /// Keeps state in `store`: a [`MemoryStore`] shared with other layers, or a store shared
    /// between servers.
    ///
    /// # Panics
    ///
    /// When `store` cannot keep this layer's quotas: the Redis store refuses figures its scripts
    /// cannot decide exactly, naming the figure and the fix.
    #[must_use]
    pub fn store<St2: Store<A>>(self, store: St2) -> RateLimitLayer<A, K, St2, C> {
        RateLimitLayer {
            config: self.config.map_limiter(|limiter| limiter.with_store(store)),
        }
    }

    /// Reads time from `clock`, such as a [`ManualClock`](crate::clock::ManualClock) in tests.
    #[must_use]
    pub fn clock<C2: Clock + Clone>(self, clock: C2) -> RateLimitLayer<A, K, St, C2> {
        RateLimitLayer {
            config: self.config.map_limiter(|limiter| limiter.with_clock(clock)),
        }
    }

    /// The limiter this layer's services share.
    pub fn limiter(&self) -> &RateLimiter<A, St, C> {
        &self.config.limiter
    }
}

impl<A: Algorithm, K: Clone, St: Store<A>, C: Clone> Clone for RateLimitLayer<A, K, St, C> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<A: Algorithm, K, St: Store<A>, C> std::fmt::Debug for RateLimitLayer<A, K, St, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policy", &self.config.limiter.policy())
            .field("quota", self.config.limiter.quota())
            .finish_non_exhaustive()
    }
}

impl<S, A, K, St, C> Layer<S> for RateLimitLayer<A, K, St, C>
where
    A: Algorithm,
    K: KeyExtractor,
    St: Store<A>,
    C: Clock + Clone,
{
    type Service = RateLimit<S, A, K, St, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::new(self.config.clone()))
    }
}
