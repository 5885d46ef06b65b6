use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::key::{IpList, KeyError, KeyExtractor, RequestHead};
#[cfg(feature = "redis")]
use crate::layer::layer::failing;
use crate::layer::{AnswerBody, Handle, HeaderPlacement, HeaderStyle, RateLimit, RateLimitLayer};
use crate::limiter::in_flight::{
    InFlight, DEFAULT_LEASE_TTL, DEFAULT_NAME, MAX_LEASE_TTL, MIN_LEASE_TTL,
};
use crate::limiter::Limiter;
use crate::store::{MemoryStore, SlotStore};
use crate::{Decision, Key};

/// Limits each client IP to `limit` requests in flight at once, in memory: a request holds a
/// slot from the moment it is let through until its response has been sent to the end (or
/// the request, the response or its body is dropped), and one that finds its key's slots all
/// taken is refused at once, with no `Retry-After`. Its services are [`RateLimit`]s, as a
/// [`RateLimitLayer`]'s, and the two stack: with the rate limit outside, a request it refuses
/// never takes a slot. An upgraded connection holds its slot through the
/// [`InFlightSlot`](crate::InFlightSlot) its handler keeps.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::{routing::post, Router};
/// use tollgate::key::Header;
/// use tollgate::InFlightLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // At most 2 uploads in progress per API key.
/// let uploads = InFlightLayer::new(2).policy_name("uploads").key(Header::new("x-api-key"));
/// let app: Router = Router::new().route("/upload", post(|| async { "stored" })).layer(uploads);
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// # tokio::spawn(async move { axum::serve(listener, app).await });
/// # let mut stream = tokio::net::TcpStream::connect(addr).await?;
/// # use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// # stream.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nx-api-key: k1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await?;
/// # let mut text = String::new();
/// # stream.read_to_string(&mut text).await?;
/// # assert!(text.starts_with("HTTP/1.1 200"), "{text}");
/// # assert!(text.contains("ratelimit-policy: \"uploads\";q=2;qu=\"concurrent-requests\""), "{text}");
/// # assert!(text.contains("ratelimit: \"uploads\";r=1\r\n"), "{text}");
/// # Ok(())
/// # }
/// ```
///
/// When slots come back, answers and headers, upgrades, memory, stacking and Redis leases:
/// [`guide::algorithms`](crate::guide::algorithms#requests-in-flight).
#[derive(Clone)]
pub struct InFlightLayer {
    /// The middleware: the key, answers, handle and services, deciding by the slots.
    layer: RateLimitLayer,
    slots: Slots,
}

/// What the limiter is made of.
#[derive(Clone)]
struct Slots {
    limit: u64,
    policy: Arc<str>,
    lease_ttl: Duration,
    store: Arc<dyn SlotStore>,
    clock: Arc<dyn Clock>,
    /// The layer's own failure policy, in place of its store's.
    #[cfg(feature = "redis")]
    on_failure: Option<crate::store::OnFailure>,
}

/// Builder methods that change the middleware's settings alone, passed on to it.
macro_rules! pass_on {
    ($($(#[$attr:meta])* fn $name:ident<$($g:ident),*>($arg:ident: $ty:ty) [$($bounds:tt)*];)+) => {$(
        $(#[$attr])*
        #[must_use]
        pub fn $name<$($g),*>(mut self, $arg: $ty) -> Self where $($bounds)* {
            self.layer = self.layer.$name($arg);
            self
        }
    )+};
}

impl InFlightLayer {
    /// At most `limit` requests of each client IP in flight at once, in memory. See
    /// [`InFlightLayer`].
    ///
    /// # Panics
    ///
    /// When `limit` is 0: no request could ever pass.
    #[track_caller]
    pub fn new(limit: u64) -> Self {
        if let Err(why) = Self::limit(limit) {
            panic!("InFlightLayer::new({limit}): {why}");
        }
        let slots = Slots {
            limit,
            policy: DEFAULT_NAME.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            store: Arc::new(MemoryStore::new()),
            clock: Arc::new(SystemClock),
            #[cfg(feature = "redis")]
            on_failure: None,
        };
        let layer = RateLimitLayer::new(slots.bound("new"), None);
        Self { layer, slots }
    }

    /// The policy name, shown to clients in the headers and naming the slots in a shared
    /// store (default `in-flight`): in Redis, in-flight layers with the same name and limit on
    /// every server share one set of slots per key, and layers with different names or limits
    /// never share.
    ///
    /// # Panics
    ///
    /// When `name` is not 1 to 64 printable ASCII characters.
    #[must_use]
    #[track_caller]
    pub fn policy_name(mut self, name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        match crate::quota::policy_name(name) {
            Ok(name) => self.slots.policy = name.into(),
            Err(why) => panic!("InFlightLayer::policy_name({name:?}): {why}"),
        }
        self.rebuilt("policy_name")
    }

    /// How long a slot lasts in a `RedisStore` unless renewed (30 s by default; from 1 s to
    /// 24 h). The memory store keeps no leases and ignores it. A server renews its leases every
    /// third of the TTL while the request runs, so a request may last any time, and a server that
    /// dies gives its slots back within one TTL. A request whose lease could not be renewed for a
    /// whole TTL may be counted as finished while it still runs: choose a TTL well above the
    /// longest Redis outage you want to ride out. Leases and failure policies:
    /// [`guide::algorithms`](crate::guide::algorithms#requests-in-flight).
    ///
    /// # Panics
    ///
    /// When `ttl` is below 1 s or above 24 h.
    #[must_use]
    #[track_caller]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        match Self::lease(ttl) {
            Ok(ttl) => self.slots.lease_ttl = ttl,
            Err(why) => panic!("InFlightLayer::lease_ttl({ttl:?}): {why}"),
        }
        self.rebuilt("lease_ttl")
    }

    /// Keeps the slots in `store`: a [`MemoryStore`] (its [`max_keys`](MemoryStore::max_keys)
    /// bounds the keys holding slots at once), or a `RedisStore` shared between servers.
    ///
    /// # Panics
    ///
    /// When the store cannot keep the slots, naming why (a `RedisStore` keeps at most 2^53
    /// per key, and reads Redis's clock unless built `with_caller_clock`).
    #[must_use]
    #[track_caller]
    pub fn store<St: SlotStore>(mut self, store: St) -> Self {
        self.slots.store = Arc::new(store);
        #[cfg(feature = "redis")]
        self.slots.fail();
        self.rebuilt("store")
    }

    /// Answers as `on_failure` says when the layer's `RedisStore` fails or does not answer in
    /// time, in place of the store's own policy ([`RateLimitLayer::on_failure`]).
    ///
    /// # Panics
    ///
    /// When the store is not a `RedisStore` (the memory store never fails: set the store
    /// first).
    #[cfg(feature = "redis")]
    #[must_use]
    #[track_caller]
    pub fn on_failure(mut self, on_failure: crate::store::OnFailure) -> Self {
        self.slots.on_failure = Some(on_failure);
        self.slots.fail();
        self.rebuilt("on_failure")
    }

    /// Reads time from `clock`, such as a [`ManualClock`](crate::clock::ManualClock) in tests:
    /// it times the headers, and with a `RedisStore` built `with_caller_clock`, the leases.
    #[must_use]
    #[track_caller]
    pub fn clock<C: Clock + Clone>(mut self, clock: C) -> Self {
        self.slots.clock = Arc::new(clock);
        self.rebuilt("clock")
    }

    /// `limit` requests in flight per key, when any request could pass; else why not.
    pub(crate) fn limit(limit: u64) -> Result<u64, String> {
        let why = "no request could ever pass; allow at least 1 request in flight per key";
        (limit > 0).then_some(limit).ok_or_else(|| why.into())
    }

    /// `ttl`, when it can be a lease's; else why not.
    pub(crate) fn lease(ttl: Duration) -> Result<Duration, String> {
        let why = "a lease lasts from 1 s to 24 h: long enough to be renewed (every third of it) \
                   while a request runs, short enough that a server that dies gives its slots \
                   back soon";
        let fits = (MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl);
        fits.then_some(ttl).ok_or_else(|| why.into())
    }

    /// The same layer, its limiter made again after `method` changed how.
    #[track_caller]
    fn rebuilt(mut self, method: &str) -> Self {
        let (slots, name) = (&self.slots, format!("InFlightLayer::{method}"));
        self.layer = self.layer.remade(&name, None, || slots.bound(method));
        self
    }

    /// The same layer with `f` applied to its middleware's settings, or `f`'s error.
    #[cfg(feature = "serde")]
    pub(crate) fn try_with<E>(
        mut self,
        f: impl FnOnce(RateLimitLayer) -> Result<RateLimitLayer, E>,
    ) -> Result<Self, E> {
        self.layer = f(self.layer)?;
        Ok(self)
    }

    pass_on! {
        /// Counts requests against the key `extractor` finds, instead of the peer IP
        /// ([`RateLimitLayer::key`]).
        fn key<K>(extractor: K) [K: KeyExtractor];
        /// Leaves the requests `predicate` picks unlimited ([`RateLimitLayer::skip`]).
        fn skip<P>(predicate: P) [P: Fn(RequestHead<'_>) -> bool + Send + Sync + 'static];
        /// Leaves clients whose key is an IP address in `list` unlimited
        /// ([`RateLimitLayer::allow`]).
        fn allow<>(list: IpList) [];
        /// Takes `cost` slots for each request instead of 1 ([`RateLimitLayer::cost`], whose
        /// warning holds: the cost must not be the client's choice).
        fn cost<F>(cost: F) [F: Fn(&Key, RequestHead<'_>) -> u64 + Send + Sync + 'static];
        /// Writes the headers in `style` ([`RateLimitLayer::headers`]).
        fn headers<>(style: HeaderStyle) [];
        /// Writes the headers only on some responses ([`RateLimitLayer::headers_on`]).
        fn headers_on<>(placement: HeaderPlacement) [];
        /// Answers refused HTTP requests with `status` ([`RateLimitLayer::status`]).
        ///
        /// # Panics
        ///
        /// When `status` is not a client or server error (4xx or 5xx).
        #[track_caller]
        fn status<>(status: StatusCode) [];
        /// Whether gRPC requests get gRPC answers (on by default; [`RateLimitLayer::grpc`]).
        fn grpc<>(enabled: bool) [];
        /// Whether gRPC-Web requests get gRPC answers too ([`RateLimitLayer::grpc_web`]).
        fn grpc_web<>(enabled: bool) [];
        /// Answers refused HTTP requests with the response `f` makes
        /// ([`RateLimitLayer::on_limited`]).
        fn on_limited<F, T>(f: F) [
            F: Fn(&Decision, RequestHead<'_>) -> Response<T> + Send + Sync + 'static,
            T: AnswerBody,
        ];
        /// Answers requests whose key cannot be found with the response `f` makes
        /// ([`RateLimitLayer::on_key_error`]).
        fn on_key_error<F, T>(f: F) [
            F: Fn(&KeyError, RequestHead<'_>) -> Response<T> + Send + Sync + 'static,
            T: AnswerBody,
        ];
        /// Never refuses: a request that finds no free slot goes on without taking one, and
        /// the would-be refusal is logged ([`RateLimitLayer::dry_run`]).
        fn dry_run<>(enabled: bool) [];
    }

    /// The policy name shown to clients and naming the slots in the store.
    pub fn policy(&self) -> &str {
        &self.slots.policy
    }

    /// The layer's [`Handle`]: blocks and resets of keys, for every service it made and
    /// makes. Take it once the store and clock are set ([`RateLimitLayer::handle`]).
    pub fn handle(&self) -> Handle {
        self.layer.handle()
    }
}

impl Slots {
    /// Puts the layer's own failure policy, if it has one, around the store, or panics when
    /// the store cannot fail.
    #[cfg(feature = "redis")]
    #[track_caller]
    fn fail(&mut self) {
        if let Some(on_failure) = &self.on_failure {
            let failed = self.store.failing(on_failure);
            self.store = failing(failed, "InFlightLayer", on_failure);
        }
    }

    /// The limiter of the slots over the store, or a panic naming `method` and why the store
    /// cannot keep them.
    #[track_caller]
    fn bound(&self, method: &str) -> Arc<dyn Limiter> {
        let (limit, policy, clock) = (self.limit, &*self.policy, &self.clock);
        let slots = self
            .store
            .slots(policy, limit, self.lease_ttl, clock.clone());
        match slots {
            Ok(slots) => Arc::new(InFlight::new(slots, limit, policy, clock.clone())),
            Err(error) => panic!("InFlightLayer::{method}: {error}"),
        }
    }
}

impl fmt::Debug for InFlightLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightLayer")
            .field("policy", &self.slots.policy)
            .field("limit", &self.slots.limit)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        self.layer.layer(inner)
    }
}
