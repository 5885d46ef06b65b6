//! Per-key quotas: one layer, a plan picked for each request (such as a customer's plan).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use foldhash::fast::RandomState;

use super::response::Responder;
use super::response::Settings;
use crate::algorithm::{Algorithm, Tiered};
use crate::clock::Clock;
use crate::key::RequestHead;
use crate::store::Store;
use crate::{Key, Quota, RateLimiter};

/// How many plans one layer keeps limiters for at once. Past this, the least recently used
/// one is dropped to make room; its state stays in the store, where the limiter made for it
/// the next time finds it.
pub(crate) const MAX_PLANS: usize = 256;

/// What a [`quota_for`](super::RateLimitLayer::quota_for) selector returns for a layer whose
/// algorithm is `A`: the quotas of the request's plan.
///
/// - A [`Quota`]: one quota, for any layer.
/// - Several quotas that must all allow a request (tiers, such as 10 a second and 1000 a day):
///   a `Vec<Quota>`, an array `[Quota; N]` or an `Arc<[Quota]>` (cloned without allocating),
///   for a layer built with tiers (its constructor given several quotas, or an array of one:
///   `RateLimitLayer::gcra([Quota::per_second(10)])`), whose algorithm is
///   [`Tiered`](crate::algorithm::Tiered).
///
/// Each tier of a plan is decided by the layer's algorithm with the layer's options (shaping,
/// sub-windows). A plan with no quota gets the layer's own quotas.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a plan for a layer of `{A}`",
    label = "the selector returns this",
    note = "any layer takes one `Quota` per request; plans of several quotas (tiers) need a layer \
            built with tiers, such as `RateLimitLayer::gcra([base])` or \
            `RateLimitLayer::gcra(vec![per_second, per_day])`"
)]
pub trait Plan<A>: sealed::Sealed<A> {}

pub(crate) mod sealed {
    use crate::Quota;

    /// How a plan is read: not for implementing outside the crate.
    #[allow(unreachable_pub)]
    pub trait Sealed<A> {
        /// The plan's quotas, in order.
        fn quotas(&self) -> &[Quota];

        /// The algorithm for `quotas`, with `base`'s options; `None` when there is no quota.
        fn algorithm(base: &A, quotas: &[Quota]) -> Option<A>;
    }
}

impl<A: Algorithm> Plan<A> for Quota {}

impl<A: Algorithm> sealed::Sealed<A> for Quota {
    fn quotas(&self) -> &[Quota] {
        std::slice::from_ref(self)
    }

    fn algorithm(base: &A, quotas: &[Quota]) -> Option<A> {
        quotas.first().map(|quota| base.with_quota(quota))
    }
}

/// The tiers `quotas` decided by `base`'s first tier's algorithm and options.
fn tiers<A: Algorithm>(base: &Tiered<A>, quotas: &[Quota]) -> Option<Tiered<A>> {
    let options = base.tiers().first()?;
    (!quotas.is_empty()).then(|| Tiered::new(quotas.iter().map(|q| options.with_quota(q))))
}

macro_rules! tiered_plan {
    ($([$($param:tt)*] $ty:ty;)*) => {$(
        impl<A: Algorithm, $($param)*> Plan<Tiered<A>> for $ty {}

        impl<A: Algorithm, $($param)*> sealed::Sealed<Tiered<A>> for $ty {
            fn quotas(&self) -> &[Quota] {
                self
            }

            fn algorithm(base: &Tiered<A>, quotas: &[Quota]) -> Option<Tiered<A>> {
                tiers(base, quotas)
            }
        }
    )*};
}

tiered_plan! {
    [] Vec<Quota>;
    [] Arc<[Quota]>;
    [const N: usize] [Quota; N];
}

/// A limiter and the header writer for one plan.
pub(crate) struct Policy<A: Algorithm, St: Store<A>, C> {
    pub(crate) limiter: RateLimiter<A, St, C>,
    pub(crate) responder: Arc<Responder>,
}

impl<A: Algorithm, St: Store<A>, C: Clock + Clone> Policy<A, St, C> {
    /// The policy of `limiter`, whose headers follow the layer's settings.
    pub(crate) fn new(limiter: RateLimiter<A, St, C>, settings: Settings) -> Self {
        let responder = Arc::new(Responder::for_limiter(&limiter, settings));
        Self { limiter, responder }
    }
}

/// A plan's policy, and when it was last used (the count of plans made by then).
struct Entry<A: Algorithm, St: Store<A>, C> {
    policy: Arc<Policy<A, St, C>>,
    used: AtomicU64,
}

/// The plan a request picked: its policy, `None` for the layer's own quotas, or an error when
/// the store refuses the plan.
pub(crate) type Picked<A, St, C> = Result<Option<Arc<Policy<A, St, C>>>, crate::Error>;

/// The policies of the plans picked lately, by their quotas.
type Policies<A, St, C> = HashMap<Box<[Quota]>, Entry<A, St, C>, RandomState>;

/// Builds the algorithm of a plan's quotas from the layer's.
type Make<A> = fn(&A, &[Quota]) -> Option<A>;

/// The selector, with its plan handed to `found` as quotas and the way to build their algorithm.
pub(crate) type Select<A> =
    dyn Fn(&Key, RequestHead<'_>, &mut dyn FnMut(&[Quota], Make<A>)) + Send + Sync;

/// `select` as the layer keeps it.
pub(crate) fn select<A, F, P>(select: F) -> Arc<Select<A>>
where
    A: Algorithm,
    F: Fn(&Key, RequestHead<'_>) -> P + Send + Sync + 'static,
    P: Plan<A>,
{
    Arc::new(move |key, head, found| {
        let plan = select(key, head);
        found(sealed::Sealed::quotas(&plan), P::algorithm);
    })
}

/// The plan selector and the limiters made for the plans it picked lately.
pub(crate) struct PerKey<A: Algorithm, St: Store<A>, C> {
    select: Arc<Select<A>>,
    policies: RwLock<Policies<A, St, C>>,
    /// How many policies have been made: entries used since the last one share its count.
    made: AtomicU64,
    warned_evicting: AtomicBool,
    warned_empty: AtomicBool,
    warned_refused: AtomicBool,
}

impl<A: Algorithm, St: Store<A>, C> fmt::Debug for PerKey<A, St, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerKey").finish_non_exhaustive()
    }
}

impl<A: Algorithm, St: Store<A>, C> PerKey<A, St, C> {
    pub(crate) fn new(select: Arc<Select<A>>) -> Self {
        Self {
            select,
            policies: RwLock::new(HashMap::default()),
            made: AtomicU64::new(0),
            warned_evicting: AtomicBool::new(false),
            warned_empty: AtomicBool::new(false),
            warned_refused: AtomicBool::new(false),
        }
    }

    /// The same selector with no limiters yet, for a layer whose store, clock, algorithm
    /// options or answers changed. Plans' state lives in the store: with the same store,
    /// the limiters made again find it.
    pub(crate) fn fresh<St2: Store<A>, C2>(&self) -> PerKey<A, St2, C2> {
        PerKey::new(self.select.clone())
    }

    /// Logs `message` at error level the first time `flag` is raised.
    fn error_once(flag: &AtomicBool, _message: &str) {
        if !flag.swap(true, Ordering::Relaxed) {
            #[cfg(feature = "tracing")]
            tracing::error!("tollgate: {_message}");
        }
    }

    /// Warns once, with `message`, on `flag`.
    fn warn_once(flag: &AtomicBool, _message: &str) {
        if !flag.swap(true, Ordering::Relaxed) {
            #[cfg(feature = "tracing")]
            tracing::warn!("tollgate: {_message}");
        }
    }
}

impl<A: Algorithm, St: Store<A>, C: Clock + Clone> PerKey<A, St, C> {
    /// The policy of this request's plan, made on first use with `base`'s algorithm options,
    /// store and clock and the layer's header settings; `None`: the layer's own quotas apply.
    /// An error when the store refuses the plan (a quota too large for it): the request is
    /// refused, never given the layer's own quotas, which may be looser than the plan's.
    pub(crate) fn policy(
        &self,
        key: &Key,
        head: RequestHead<'_>,
        base: &RateLimiter<A, St, C>,
        settings: &Settings,
    ) -> Picked<A, St, C> {
        let mut policy = Ok(None);
        (self.select)(key, head, &mut |quotas, make| {
            policy = self.lookup(quotas, make, base, settings);
        });
        policy
    }

    fn lookup(
        &self,
        quotas: &[Quota],
        make: Make<A>,
        base: &RateLimiter<A, St, C>,
        settings: &Settings,
    ) -> Picked<A, St, C> {
        if quotas == base.quotas() {
            return Ok(None);
        }
        // A hit: a read lock, and a write to the entry once per policy made.
        let made = self.made.load(Ordering::Relaxed);
        if let Some(entry) = self
            .policies
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(quotas)
        {
            if entry.used.load(Ordering::Relaxed) != made {
                entry.used.store(made, Ordering::Relaxed);
            }
            return Ok(Some(entry.policy.clone()));
        }
        let Some(algorithm) = make(base.algorithm(), quotas) else {
            Self::warn_once(
                &self.warned_empty,
                "quota_for picked a plan with no quota; such requests get the layer's own quotas",
            );
            return Ok(None);
        };
        // Shared under the plan's name, or its text when unnamed: a limiter made again for
        // this plan after its eviction finds the state this one leaves.
        let limiter = match RateLimiter::try_bind(
            Arc::from(quotas),
            algorithm,
            base.store().clone(),
            base.clock().clone(),
            true,
        ) {
            Ok(limiter) => limiter,
            Err(refused) => {
                // A plan the store cannot keep (a quota too large for Redis): its requests are
                // refused as by a store that fails closed, never given the layer's own quotas,
                // which may be looser than the plan's.
                Self::error_once(
                    &self.warned_refused,
                    &format!("quota_for picked a plan its store refuses; such requests are refused: {refused}"),
                );
                return Err(refused);
            }
        };
        let mut policies = self
            .policies
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = policies.get(quotas) {
            return Ok(Some(entry.policy.clone()));
        }
        if policies.len() >= MAX_PLANS {
            Self::warn_once(
                &self.warned_evicting,
                "quota_for picked more than 256 distinct plans; the least recently used \
                 plans' limiters are made again when next needed (their state is kept in \
                 the store). If the selector makes quotas up from request data, bound it",
            );
            let oldest = policies
                .iter()
                .min_by_key(|(_, entry)| entry.used.load(Ordering::Relaxed))
                .map(|(quotas, _)| quotas.clone());
            if let Some(oldest) = oldest {
                policies.remove(&oldest);
            }
        }
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        let policy = Arc::new(Policy::new(limiter, settings.clone()));
        let entry = Entry {
            policy: policy.clone(),
            used: AtomicU64::new(made),
        };
        policies.insert(quotas.into(), entry);
        Ok(Some(policy))
    }
}
