//! A per-key plan's quotas changed live ([`Handle::set_plan_quotas`](crate::layer::Handle::set_plan_quotas)):
//! the plan's limiter is replaced by one of the new quotas that takes over from it, each key
//! keeping what it used, wherever the layer keeps it (held, or dropped to make room).

use std::sync::Arc;

use super::live::LivePlans;
use super::object::Limiter;
use super::per_key::{Made, PerKey, Policy};
use crate::Quota;

impl<R: Clone + Send + Sync + 'static> PerKey<R> {
    /// Puts `quotas` in force for `plan`, if a limiter was made for it: each key keeps what
    /// it used ([`Handle::set_plan_quotas`](crate::layer::Handle::set_plan_quotas)).
    pub(crate) fn change(&self, plan: &[Quota], quotas: &[Quota]) -> Result<(), crate::Error> {
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
    fn change(&self, plan: &[Quota], quotas: &[Quota]) -> Result<(), crate::Error> {
        PerKey::change(self, plan, quotas)
    }

    fn limiter(&self, plan: &[Quota]) -> Result<Option<Arc<dyn Limiter>>, crate::Error> {
        Ok(self.lookup(plan)?.map(|policy| policy.limiter.clone()))
    }

    fn limiters(&self) -> (Vec<Arc<dyn Limiter>>, Result<(), crate::Error>) {
        PerKey::limiters(self)
    }
}
