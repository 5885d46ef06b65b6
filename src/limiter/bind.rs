//! Stores as makers of a layer's limiters ([`Bind`]): any store that keeps every algorithm of
//! the crate ([`LayerStore`]) makes the limiter of a [`Spec`].

use std::sync::Arc;

use super::object::Limiter;
use super::spec::{AlgorithmKind, LayerClock, Spec};
use super::typed::RateLimiter;
use crate::algorithm::{
    Algorithm, FixedWindow, Gcra, Hybrid, LeakyBucket, SlidingLog, SlidingWindow, Tiered,
    TokenBucket,
};
use crate::store::{Role, Store, Tie};
use crate::{Error, Quota};

/// A store that keeps every algorithm of the crate, alone and in tiers: what
/// [`RateLimitLayer::store`](crate::layer::RateLimitLayer::store) takes. `MemoryStore` and
/// `RedisStore` are (`Store` is sealed).
pub trait LayerStore:
    Keeps<Gcra>
    + Keeps<TokenBucket>
    + Keeps<LeakyBucket>
    + Keeps<FixedWindow>
    + Keeps<SlidingWindow>
    + Keeps<SlidingLog>
    + Keeps<Hybrid>
{
}

impl<T> LayerStore for T where
    T: Keeps<Gcra>
        + Keeps<TokenBucket>
        + Keeps<LeakyBucket>
        + Keeps<FixedWindow>
        + Keeps<SlidingWindow>
        + Keeps<SlidingLog>
        + Keeps<Hybrid>
{
}

/// A store that keeps the algorithm `A` alone and in tiers.
#[doc(hidden)]
pub trait Keeps<A: Algorithm>: Store<A> + Store<Tiered<A>> {}

impl<A: Algorithm, T: Store<A> + Store<Tiered<A>>> Keeps<A> for T {}

/// Makes limiters from specs over one store.
pub(crate) trait Bind: Send + Sync + 'static {
    /// The limiter of `spec` on `clock`, its state shared under its policy name when
    /// `shared`; an error when the store cannot keep its quotas.
    fn bind(
        &self,
        spec: &Spec,
        clock: &LayerClock,
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, Error>;

    /// This store with `on_failure` as its failure policy; `None` for a store that has none
    /// (only a `RedisStore` fails over).
    #[cfg(feature = "redis")]
    fn failing(&self, on_failure: &crate::store::OnFailure) -> Option<Arc<dyn Bind>>;

    /// The record of the layer named `layer`'s quotas changed live, which every server
    /// sharing the store follows; `None` for a store of one server (only a `RedisStore` is
    /// shared).
    #[cfg(feature = "redis")]
    fn record(&self, layer: &str) -> Option<crate::store::LiveRecord>;
}

/// A copy of `store` whose tables serve `tie` (a `RedisStore`; other stores keep nothing of
/// it: a memory store is one server's, whose layer holds its blocks itself).
fn tied<St: Clone + 'static>(store: &St, tie: &Tie) -> St {
    #[allow(unused_mut)]
    let mut store = store.clone();
    #[cfg(feature = "redis")]
    if let Some(redis) =
        (&mut store as &mut dyn std::any::Any).downcast_mut::<crate::store::RedisStore>()
    {
        redis.tie(tie.clone());
    }
    #[cfg(not(feature = "redis"))]
    let _ = tie;
    store
}

/// A store, as a maker of limiters.
pub(crate) struct Binder<St>(pub(crate) St);

impl<St: LayerStore> Binder<St> {
    /// The limiter of `spec` over `store`, each quota decided by the algorithm `make` builds.
    fn limiter<A: Algorithm>(
        spec: &Spec,
        store: St,
        clock: LayerClock,
        shared: bool,
        make: impl Fn(&Quota) -> A,
    ) -> Result<Arc<dyn Limiter>, Error>
    where
        St: Keeps<A>,
    {
        let quotas = spec.quotas.clone();
        if spec.tiered {
            let algorithm = Tiered::new(quotas.iter().map(make));
            return Ok(Arc::new(RateLimiter::try_bind(
                quotas, algorithm, store, clock, shared,
            )?));
        }
        let algorithm = make(&quotas[0]);
        Ok(Arc::new(RateLimiter::try_bind(
            quotas, algorithm, store, clock, shared,
        )?))
    }
}

impl<St: LayerStore> Bind for Binder<St> {
    #[cfg(feature = "redis")]
    fn failing(&self, on_failure: &crate::store::OnFailure) -> Option<Arc<dyn Bind>> {
        let redis = (&self.0 as &dyn std::any::Any).downcast_ref::<crate::store::RedisStore>()?;
        let store = redis.clone().on_failure(on_failure.clone());
        Some(Arc::new(Binder(store)))
    }

    #[cfg(feature = "redis")]
    fn record(&self, layer: &str) -> Option<crate::store::LiveRecord> {
        let redis = (&self.0 as &dyn std::any::Any).downcast_ref::<crate::store::RedisStore>()?;
        Some(crate::store::LiveRecord::of(redis, layer))
    }

    fn bind(
        &self,
        spec: &Spec,
        clock: &LayerClock,
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, Error> {
        let (store, clock) = (tied(&self.0, &spec.tie), clock.clone());
        let Spec {
            max_delay,
            sub_windows,
            aligned,
            ..
        } = *spec;
        if aligned {
            // Plans and live changes bring quotas the builder never saw.
            super::spec::calendar_periods(&spec.quotas).map_err(Error::misconfigured)?;
        }
        match spec.kind {
            AlgorithmKind::Gcra => Self::limiter(spec, store, clock, shared, |q| {
                max_delay.map_or(Gcra::new(q), |d| Gcra::new(q).max_delay(d))
            }),
            AlgorithmKind::TokenBucket => Self::limiter(spec, store, clock, shared, |q| {
                let bucket = TokenBucket::new(q);
                max_delay.map_or(bucket, |d| bucket.max_delay(d))
            }),
            AlgorithmKind::LeakyBucket => {
                Self::limiter(spec, store, clock, shared, LeakyBucket::new)
            }
            AlgorithmKind::FixedWindow => Self::limiter(spec, store, clock, shared, |q| {
                let window = FixedWindow::new(q);
                if aligned {
                    window.aligned()
                } else {
                    window
                }
            }),
            AlgorithmKind::SlidingWindow => Self::limiter(spec, store, clock, shared, |q| {
                let window = SlidingWindow::new(q);
                sub_windows.map_or(window, |k| window.sub_windows(k))
            }),
            AlgorithmKind::SlidingLog => Self::limiter(spec, store, clock, shared, SlidingLog::new),
            AlgorithmKind::Hybrid => Self::limiter(spec, store, clock, shared, Hybrid::new),
        }
    }
}

/// How a layer makes its limiters: a spec, over a store, on a clock.
#[derive(Clone)]
pub(crate) struct Recipe {
    pub(crate) spec: Spec,
    pub(crate) store: Arc<dyn Bind>,
    pub(crate) clock: LayerClock,
}

impl Recipe {
    /// The layer's own limiter, or the store's refusal.
    pub(crate) fn bind(&self) -> Result<Arc<dyn Limiter>, Error> {
        self.store.bind(&self.spec, &self.clock, self.spec.named())
    }

    /// The limiter of the same algorithm for `quotas` in `role`, shared under its policy name
    /// when `shared`.
    pub(crate) fn bind_for(
        &self,
        quotas: &[Quota],
        role: Role,
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, Error> {
        let spec = self.spec.for_plan(quotas).in_role(role);
        self.store.bind(&spec, &self.clock, shared)
    }
}
