//! Which requests count, and how much: the key, plans, costs, `count_if`, and the requests
//! left unlimited.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::RateLimitLayer;
use crate::key::{Allow, IpList, KeyError, KeyExtractor, RequestHead, Skip};
use crate::limiter::{plan, Plan};
use crate::Key;
#[cfg(doc)]
use crate::{Quota, RateLimiter};

impl RateLimitLayer {
    /// Counts requests against the key `extractor` finds, instead of the peer IP.
    #[must_use]
    pub fn key<K: KeyExtractor>(self, extractor: K) -> Self {
        self.keyed(Arc::new(extractor))
    }

    /// Counts requests against the key `extractor` finds.
    pub(crate) fn keyed(mut self, extractor: Arc<dyn KeyExtractor>) -> Self {
        self.key = extractor;
        self.changed()
    }

    /// Picks the quotas of each request's plan, such as a customer's plan found from its API
    /// key: a [`Quota`], or for a layer built with tiers several quotas that must all allow the
    /// request (see [`Plan`](crate::layer::Plan)). Each plan gets its own limiter (the layer's
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
        self.live.picks_plans.store(true, Ordering::Relaxed);
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
        self.set(|s| s.count_if = Some(Arc::new(counts)))
    }

    /// Settles each request's cost once its response is known: for costs counted as the
    /// answer goes out, such as an LLM's tokens or a download's bytes. The layer reserves the
    /// request's [`cost`](Self::cost) (1 unless set) before the handler and puts a
    /// [`Usage`](crate::Usage) in the request's extensions; the handler (or a layer inside)
    /// reports the true cost through it, and the layer settles when the response body ends or
    /// is dropped: a lower cost is given back, a higher one charged. A key charged past its
    /// quota is in debt, denied until the debt is paid back at the quota's rate.
    ///
    /// ```
    /// use axum::{routing::post, Extension, Router};
    /// use tollgate::key::Header;
    /// use tollgate::{Key, Quota, RateLimitLayer, Usage};
    ///
    /// async fn chat(Extension(usage): Extension<Usage>) -> &'static str {
    ///     usage.set(180); // the tokens the answer used
    ///     "..."
    /// }
    ///
    /// let tokens = RateLimitLayer::gcra([
    ///     Quota::per_minute(100_000).named("tpm"),
    ///     Quota::per_day(5_000_000).named("tpd"),
    /// ])
    /// .key(Header::new("x-api-key"))
    /// .cost(|_key: &Key, _head| 500) // an estimate
    /// .settle();
    /// let app: Router = Router::new().route("/v1/chat/completions", post(chat)).layer(tokens);
    /// # let _ = app;
    /// ```
    ///
    /// Reserve low but at least 1 (the prompt's tokens, a lower bound; 0 would let a key at its
    /// limit start any number of requests): a cost above the reservation is
    /// charged in full, while one below it is given back only while no later request of the
    /// key was admitted ([`RateLimiter::settle`](crate::RateLimiter::settle)). Headers show
    /// the reservation, the next response the settled state. With
    /// [`count_if`](Self::count_if), a response that does not count gives its whole
    /// reservation back. The bound on what a key can overspend, and what a body dropped
    /// early settles: [`guide::costs`](crate::guide::costs).
    ///
    /// # Panics
    ///
    /// When the layer's algorithm cannot carry a debt: the fixed and sliding windows, the
    /// sliding log and the hybrid forget a window's count when it closes, so a key's debt
    /// would be forgiven there. Use gcra, token_bucket or leaky_bucket (tiers of them too).
    #[must_use]
    #[track_caller]
    pub fn settle(self) -> Self {
        assert!(
            self.limiter.settles(),
            "RateLimitLayer::settle: this layer's algorithm cannot carry a debt past the window \
             that counted it, so a cost above the reservation would be forgiven; use gcra, \
             token_bucket or leaky_bucket with settle"
        );
        self.limiter.expect_refunds();
        self.set(|s| s.settle = true)
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
    /// # Ok::<(), tollgate::key::ParseIpNetError>(())
    /// ```
    #[must_use]
    pub fn allow(mut self, list: IpList) -> Self {
        self.key = Arc::new(Allow::new(DynKey(self.key), list));
        self.changed()
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
