//! What a layer's handles and services share ([`Live`]): how to make its limiters, the limiter
//! of now, the quotas of the plans changed live, and, with Redis, the fleet that hears of
//! changes made through other servers.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::limiter::bind::Recipe;
use crate::limiter::object::Limiter;
use crate::limiter::plan::PlanBook;
use crate::store::{Blocks, Role};
use crate::{Error, Quota};

#[cfg(feature = "redis")]
pub(crate) mod fleet;
#[cfg(feature = "redis")]
pub(crate) mod gate;

#[cfg(feature = "redis")]
use self::fleet::Fleet;

/// How many keys a layer's handle holds blocked at once
/// ([`Handle::block`](crate::layer::Handle::block)); past that, the blocks that have ended go
/// first, then those that end soonest (the blocks written to the stores stay).
const MAX_HELD: usize = 100_000;

/// What a layer's handle and services share: how to make the limiter, the limiter of now, and
/// the services to hand a new one to.
pub(crate) struct Live {
    /// How the layer makes its limiters; `None` for a limiter built by hand.
    pub(crate) recipe: Option<Recipe>,
    /// The keys blocked through a handle, which every limiter of the layer checks first
    /// ([`Handle::block`](crate::layer::Handle::block)): the layer's own, and every plan's.
    pub(crate) held: Arc<Blocks>,
    now: Mutex<Now>,
    /// Whether a handle was taken: the layer may then no longer make itself a new limiter
    /// (a new store, clock or algorithm option), which the handle would not reach.
    pub(crate) handed_out: AtomicBool,
    /// Whether the layer picks plans (`quota_for`).
    pub(crate) picks_plans: AtomicBool,
    pub(crate) plans: Arc<PlanBook>,
    /// The servers sharing the layer's Redis, `None` for other stores.
    #[cfg(feature = "redis")]
    pub(crate) fleet: Option<Arc<Fleet>>,
}

/// A service of a live layer (the part its services share), as the layer hands it the
/// limiters it makes.
pub(crate) trait Serve: Send + Sync {
    /// Puts `limiter` in force for the requests that come next.
    fn put(&self, limiter: Arc<dyn Limiter>);

    /// The limiter in force, with what the service puts around it (bans, the handle's blocks).
    fn in_force(&self) -> Arc<dyn Limiter>;

    /// The service's per-key plans, when the layer picks plans.
    fn plans(&self) -> Option<Arc<dyn LivePlans>>;
}

/// The plans of a layer's service, as its live part reaches them
/// ([`Live`]), whatever the service answers with.
pub(crate) trait LivePlans: Send + Sync {
    /// Puts `quotas` in force for `plan` (`PerKey::change`).
    fn change(&self, plan: &[Quota], quotas: &[Quota]) -> Result<(), crate::Error>;

    /// The limiter of `plan` (`PerKey::lookup`); `None`: the layer's own.
    fn limiter(&self, plan: &[Quota]) -> Result<Option<Arc<dyn Limiter>>, crate::Error>;

    /// The limiters of every plan made (`PerKey::limiters`).
    fn limiters(&self) -> (Vec<Arc<dyn Limiter>>, Result<(), crate::Error>);
}

pub(crate) struct Now {
    pub(crate) limiter: Arc<dyn Limiter>,
    /// The services made so far (their shared part), to be handed the next limiter.
    services: Vec<Weak<dyn Serve>>,
}

impl Live {
    pub(crate) fn new(limiter: Arc<dyn Limiter>, recipe: Option<Recipe>) -> Arc<Self> {
        Arc::new_cyclic(|_live: &Weak<Live>| Self {
            #[cfg(feature = "redis")]
            fleet: Fleet::of(_live.clone(), recipe.as_ref()),
            recipe,
            held: Arc::new(Blocks::new(MAX_HELD)),
            now: Mutex::new(Now {
                limiter,
                services: Vec::new(),
            }),
            handed_out: AtomicBool::new(false),
            picks_plans: AtomicBool::new(false),
            plans: Arc::default(),
        })
    }

    /// The limiter of now and the services; with Redis, the fleet's record is read from
    /// then on (once inside a runtime).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Now> {
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.fleet {
            fleet.start();
        }
        self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the services' shared part with the limiter of now (`make`, given it as the
    /// services decide by it), and keeps it to hand it the next limiter.
    pub(crate) fn serve<S: Serve + 'static>(
        &self,
        make: impl FnOnce(Arc<dyn Limiter>) -> Arc<S>,
    ) -> Arc<S> {
        let mut now = self.lock();
        let shared = make(self.serving(now.limiter.clone()));
        now.services.retain(|s| s.strong_count() > 0);
        let service: Weak<S> = Arc::downgrade(&shared);
        now.services.push(service);
        shared
    }

    /// `limiter` as the services decide by it: until the fleet's record was read, each
    /// request waits for it first.
    fn serving(&self, limiter: Arc<dyn Limiter>) -> Arc<dyn Limiter> {
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.fleet {
            // The services' own: replaced there on a change, so `limiter` stays in force.
            let own = fleet.clone();
            return self::gate::gated(fleet, limiter, move || own.own(), true);
        }
        limiter
    }

    /// Puts `limiter` in force for every service.
    fn put(&self, now: &mut Now, limiter: Arc<dyn Limiter>) {
        let serving = self.serving(limiter.clone());
        let put = |shared: Arc<dyn Serve>| shared.put(serving.clone());
        now.services
            .retain(|service| service.upgrade().map(put).is_some());
        now.limiter = limiter;
    }

    /// Puts `quotas` in force for the layer's own limiter (as [`set_own`](Self::set_own))
    /// and, with Redis, for every server of the layer.
    pub(crate) fn change_own(&self, quotas: &[Quota]) -> Result<(), Error> {
        self.change(None, quotas, || self.set_own(quotas))
    }

    /// Puts `quotas` in force for `plan` (as [`set_plan`](Self::set_plan)) and, with Redis,
    /// for every server of the layer.
    pub(crate) fn change_plan(&self, plan: &[Quota], quotas: &[Quota]) -> Result<(), Error> {
        self.change(Some(plan), quotas, || self.set_plan(plan, quotas))
    }

    /// `set`, which puts `quotas` in force for `plan` (the layer's own when `None`) here;
    /// with Redis, under the fleet's lock, then written for the other servers.
    fn change(
        &self,
        _plan: Option<&[Quota]>,
        _quotas: &[Quota],
        set: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.fleet {
            let _changing = fleet.changing();
            set()?;
            fleet.publish(_plan, _quotas);
            return Ok(());
        }
        set()
    }

    /// Puts `quotas` in force for the layer's own limiter, each key keeping what it used;
    /// nothing to do when they are in force already.
    pub(crate) fn set_own(&self, quotas: &[Quota]) -> Result<(), Error> {
        let Some(recipe) = &self.recipe else {
            let why = if self.lock().limiter.in_flight().is_some() {
                "an in-flight limit has slots, not quotas; its number of slots is set where the \
                 layer is built (InFlightLayer::new)"
            } else {
                "this layer was made by RateLimitLayer::from_limiter, which keeps its limiter \
                 as it was built; build the layer with an algorithm constructor such as \
                 RateLimitLayer::gcra to change its quotas live"
            };
            return Err(Error::misconfigured(format!("Handle::set_quotas: {why}")));
        };
        if self.lock().limiter.quotas() == quotas {
            // The quotas in force (a configuration applied again): every key keeps its state
            // as it is, not converted to whole requests.
            return Ok(());
        }
        // Bound privately: the next limiter reads the old one's keys, never another layer's.
        let next = recipe.bind_for(quotas, Role::Own, false)?;
        let mut now = self.lock();
        let next = next.inherit(&*now.limiter)?;
        // In force at once: a key's first request carries its usage over.
        self.put(&mut now, next.clone());
        // Then every other key's, and the old states go.
        self.put(&mut now, next.settled());
        Ok(())
    }

    /// Checks that `plan` may be given `quotas` ([`Handle::set_plan_quotas`](crate::layer::Handle::set_plan_quotas)),
    /// and gives the recipe of the plan's limiters.
    pub(crate) fn check_plan(&self, plan: &[Quota], quotas: &[Quota]) -> Result<&Recipe, Error> {
        let fail = |why: &str| {
            Err(Error::misconfigured(format!(
                "Handle::set_plan_quotas: {why}"
            )))
        };
        let Some(recipe) = &self.recipe else {
            return fail("this layer (an InFlightLayer, or made by RateLimitLayer::from_limiter) picks no plans; build it with an algorithm constructor and quota_for");
        };
        if !self.picks_plans.load(Ordering::Relaxed) {
            return fail("unknown plan: this layer picks no plans; give it a selector with RateLimitLayer::quota_for, or change its own quotas with set_quotas");
        }
        if plan.is_empty() {
            return fail("unknown plan: a plan with no quota gets the layer's own quotas; change those with set_quotas");
        }
        if quotas.is_empty() {
            return fail("no quota given; give at least one");
        }
        let spec = &recipe.spec;
        if plan == &*spec.quotas {
            return fail("this plan is the layer's own quotas (those it was built with); change them with set_quotas");
        }
        if !spec.tiered && (plan.len() > 1) != (quotas.len() > 1) {
            return fail("a plan of one quota takes one quota, and a plan of tiers takes tiers (several quotas), on a layer built with one quota");
        }
        Ok(recipe)
    }

    /// Puts `quotas` in force for `plan` on every service, each key keeping what it used
    /// there; the plans made later take them too.
    pub(crate) fn set_plan(&self, plan: &[Quota], quotas: &[Quota]) -> Result<(), Error> {
        let recipe = self.check_plan(plan, quotas)?;
        // Refused here when the store cannot keep them, before anything changes.
        recipe.bind_for(quotas, Role::Plan, false)?;
        {
            let mut book = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
            if *book.get(plan).map_or(plan, |before| &**before) == *quotas {
                return Ok(());
            }
            if plan == quotas {
                book.remove(plan);
            } else {
                book.insert(plan.into(), quotas.into());
            }
        }
        // Every service's plans change, whichever refuses.
        let mut outcome = Ok(());
        for plans in self.plan_pickers() {
            outcome = outcome.and(plans.change(plan, quotas));
        }
        outcome
    }

    /// The plan pickers of the services made so far, taken out of the lock.
    fn plan_pickers(&self) -> Vec<Arc<dyn LivePlans>> {
        let now = self.lock();
        let services = now.services.iter().filter_map(Weak::upgrade);
        services.filter_map(|s| s.plans()).collect()
    }

    /// The quotas in force for `plan`.
    pub(crate) fn plan_quotas(&self, plan: &[Quota]) -> Arc<[Quota]> {
        let book = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        book.get(plan).cloned().unwrap_or_else(|| plan.into())
    }

    /// The limiter `plan`'s keys are decided by: a service's, or, before any service is
    /// made, one made for the purpose (it reads the store the plan's limiter will).
    pub(crate) fn plan_limiter(&self, plan: &[Quota]) -> Result<Arc<dyn Limiter>, Error> {
        let Some(recipe) = &self.recipe else {
            return Err(Error::misconfigured(
                "Handle::peek_plan: this layer (an InFlightLayer, or made by RateLimitLayer::from_limiter) picks no plans",
            ));
        };
        if plan.is_empty() || *plan == *recipe.spec.quotas {
            return Ok(self.lock().own());
        }
        if let Some(per_key) = self.plan_pickers().first() {
            return Ok(per_key.limiter(plan)?.unwrap_or_else(|| self.lock().own()));
        }
        recipe.bind_for(&self.plan_quotas(plan), Role::Plan, true)
    }
}

impl Now {
    /// The limiter the layer's own quotas are decided by: a service's (with its bans and the
    /// handle's blocks), or the bare one while no service is made.
    pub(crate) fn own(&self) -> Arc<dyn Limiter> {
        self.services
            .iter()
            .find_map(Weak::upgrade)
            .map_or_else(|| self.limiter.clone(), |s| s.in_force())
    }

    /// Every limiter a key of the layer may be decided by, each once: the layer's own (with
    /// its bans), and each plan's made so far by any of its services (those dropped to make
    /// room included). `Err` when a service forgot some plan: a reset or block through these
    /// may miss a client of it.
    pub(crate) fn limiters(&self) -> (Vec<Arc<dyn Limiter>>, Result<(), Error>) {
        let mut all: Vec<Arc<dyn Limiter>> = Vec::new();
        let mut seen = HashSet::new();
        let mut add = |limiter: Arc<dyn Limiter>| {
            if seen.insert(Arc::as_ptr(&limiter).cast::<()>()) {
                all.push(limiter);
            }
        };
        add(self.own());
        let mut known = Ok(());
        for shared in self.services.iter().filter_map(Weak::upgrade) {
            add(shared.in_force());
            if let Some(per_key) = shared.plans() {
                let (limiters, all_known) = per_key.limiters();
                limiters.into_iter().for_each(&mut add);
                known = known.and(all_known);
            }
        }
        (all, known)
    }
}
