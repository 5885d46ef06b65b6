//! Per-key quotas: one layer, a quota picked for each request (such as a customer's plan).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use foldhash::fast::RandomState;

use super::response::Responder;
use super::response::Settings;
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::key::RequestHead;
use crate::store::Store;
use crate::{Key, Quota, RateLimiter};

/// How many distinct quotas one layer keeps limiters for. A selector that makes up quotas from
/// request data would otherwise grow the cache without bound; past this, requests get the
/// layer's own quota.
pub(crate) const MAX_QUOTAS: usize = 256;

/// A limiter and the header writer for one quota.
pub(crate) struct Policy<A: Algorithm, St: Store<A>, C> {
    pub(crate) limiter: RateLimiter<A, St, C>,
    pub(crate) responder: Arc<Responder>,
}

impl<A: Algorithm, St: Store<A>, C: Clock> Policy<A, St, C> {
    /// The policy of `limiter`, whose headers follow the layer's settings.
    pub(crate) fn new(limiter: RateLimiter<A, St, C>, settings: Settings) -> Self {
        let responder = Arc::new(Responder::new(limiter.quotas(), limiter.policy(), settings));
        Self { limiter, responder }
    }
}

/// Each quota picked so far, with its policy.
type Policies<A, St, C> = HashMap<Quota, Arc<Policy<A, St, C>>, RandomState>;

pub(crate) type Select = dyn Fn(&Key, RequestHead<'_>) -> Quota + Send + Sync;

/// The quota selector and the limiters made for the quotas it picked so far.
pub(crate) struct PerKey<A: Algorithm, St: Store<A>, C> {
    select: Arc<Select>,
    policies: RwLock<Policies<A, St, C>>,
    warned: AtomicBool,
}

impl<A: Algorithm, St: Store<A>, C> fmt::Debug for PerKey<A, St, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerKey").finish_non_exhaustive()
    }
}

impl<A: Algorithm, St: Store<A>, C> PerKey<A, St, C> {
    pub(crate) fn new(select: Arc<Select>) -> Self {
        Self {
            select,
            policies: RwLock::new(HashMap::default()),
            warned: AtomicBool::new(false),
        }
    }

    /// The same selector with no limiters yet, for a layer whose store or clock changed.
    pub(crate) fn fresh<St2: Store<A>, C2>(&self) -> PerKey<A, St2, C2> {
        PerKey::new(self.select.clone())
    }
}

impl<A: Algorithm, St: Store<A>, C: Clock + Clone> PerKey<A, St, C> {
    /// The policy for this request's quota, made on first use with `base`'s algorithm options,
    /// store and clock and the layer's header settings; `None`: the layer's own quota applies.
    pub(crate) fn policy(
        &self,
        key: &Key,
        head: RequestHead<'_>,
        base: &RateLimiter<A, St, C>,
        settings: &Settings,
    ) -> Option<Arc<Policy<A, St, C>>> {
        let quota = (self.select)(key, head);
        if quota == *base.quota() {
            return None;
        }
        if let Some(policy) = self
            .policies
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&quota)
        {
            return Some(policy.clone());
        }
        let mut policies = self
            .policies
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(policy) = policies.get(&quota) {
            return Some(policy.clone());
        }
        if policies.len() >= MAX_QUOTAS {
            if !self.warned.swap(true, Ordering::Relaxed) {
                #[cfg(feature = "tracing")]
                tracing::warn!(
                    "tollgate: quota_for picked more than {MAX_QUOTAS} distinct quotas; \
                     further ones get the layer's own quota"
                );
            }
            return None;
        }
        let algorithm = base.algorithm().with_quota(&quota);
        let limiter = RateLimiter::bind(
            Arc::new([quota.clone()]),
            algorithm,
            base.store().clone(),
            base.clock().clone(),
        );
        let policy = Arc::new(Policy::new(limiter, settings.clone()));
        policies.insert(quota, policy.clone());
        Some(policy)
    }
}
