//! A per-key plan's quotas changed live ([`Handle::set_plan_quotas`](crate::layer::Handle::set_plan_quotas)):
//! the plan's limiter is replaced by one of the new quotas that takes over from it, each key
//! keeping what it used, wherever the layer keeps it (held, or dropped to make room).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::live::LivePlans;
use super::object::Limiter;
use super::per_key::{Made, PerKey, Policy};
use crate::Quota;

impl<R: Clone + Send + Sync + 'static> PerKey<R> {
    /// The policy made for `plan`, held or dropped to make room.
    fn made(&self, plan: &[Quota]) -> Option<Arc<Policy<R>>> {
        let made = self.read();
        let held = made.held.get(plan).map(|entry| entry.policy.clone());
        held.or_else(|| made.evicted.get(plan).cloned())
    }

    /// Puts `next` in `current`'s place for `plan`, unless another took it meanwhile.
    fn replace(&self, plan: &[Quota], current: &Arc<Policy<R>>, next: Arc<Policy<R>>) {
        let mut made = self.write();
        let Made { held, evicted } = &mut *made;
        let policy = match held.get_mut(plan) {
            Some(entry) => Some(&mut entry.policy),
            None => evicted.get_mut(plan),
        };
        if let Some(policy) = policy.filter(|policy| Arc::ptr_eq(policy, current)) {
            *policy = next;
        }
    }
}

impl<R: Clone + Send + Sync + 'static> LivePlans for PerKey<R> {
    /// Puts `quotas` in force for `plan`, if a limiter was made for it: each key keeps what
    /// it used ([`Handle::set_plan_quotas`](crate::layer::Handle::set_plan_quotas)).
    fn change(&self, plan: &[Quota], quotas: &[Quota]) -> Result<(), crate::Error> {
        let Some(current) = self.made(plan) else {
            return Ok(());
        };
        let next = self.bind(quotas, false)?.inherit(&*current.bare)?;
        // In force at once: a key's first request carries its usage over; then every other
        // key's, and the old states go.
        let counter = current.counter.clone();
        self.replace(
            plan,
            &current,
            Arc::new(self.policy_of(next.clone(), counter.clone())),
        );
        if let Some(now) = self.made(plan) {
            self.replace(
                plan,
                &now,
                Arc::new(self.policy_of(next.settled(), counter)),
            );
        }
        Ok(())
    }

    fn limiter(&self, plan: &[Quota]) -> Result<Option<Arc<dyn Limiter>>, crate::Error> {
        Ok(self.lookup(plan)?.map(|policy| policy.limiter.clone()))
    }

    /// The limiters of every plan made (for a handle's reset and block): those held, and
    /// those of the plans dropped to make room, whose clients' state stays in the store.
    /// `Err` when some plan was dropped past
    /// [`MAX_EVICTED_PLANS`](super::per_key::MAX_EVICTED_PLANS): the limiters are those
    /// known, and a reset or block through them may miss a client of a forgotten plan.
    fn limiters(&self) -> (Vec<Arc<dyn Limiter>>, Result<(), crate::Error>) {
        let made = self.read();
        let held = made.held.values().map(|entry| &entry.policy);
        let all = held.chain(made.evicted.values());
        let limiters = all.map(|policy| policy.limiter.clone()).collect();
        if !self.forgot.load(Ordering::Relaxed) {
            return (limiters, Ok(()));
        }
        let forgot = crate::Error::misconfigured(
            "quota_for picked more than 4352 distinct plans, and the layer forgot some: a reset \
             or block may not reach their clients. Bound the plans the selector makes (it \
             should not make quotas up from request data)",
        );
        (limiters, Err(forgot))
    }
}
