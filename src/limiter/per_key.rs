//! Per-key quotas: one layer, a plan picked for each request (such as a customer's plan), and
//! the limiters made for the plans picked lately.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use foldhash::fast::RandomState;

use super::ban::Ban;
use super::bind::Recipe;
use super::held::guarded;
#[cfg(feature = "redis")]
use super::live::gate::gated;
use super::live::Live;
use super::object::Limiter;
use super::plan::Select;
use crate::key::RequestHead;
use crate::store::Role;
use crate::{Key, Quota};

/// How many plans one layer keeps limiters for at once. Past this, the least recently used
/// one is dropped to make room; its state stays in the store, where the limiter made for it
/// the next time finds it.
pub(crate) const MAX_PLANS: usize = 256;

/// How many plans dropped from the layer's [`MAX_PLANS`] it keeps the limiters of (a few
/// hundred bytes each), so that a handle's reset and block still reach them. Past this, a
/// warning, and a handle's reset and block answer an error: a selector that makes quotas up
/// from request data should be bounded.
pub(crate) const MAX_EVICTED_PLANS: usize = 4096;

/// A limiter for one plan, and what the layer answers its requests with (`R`: the header
/// writer made for its quotas).
pub(crate) struct Policy<R> {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) responder: R,
    /// The limiter without the bans and blocks around it, which new quotas take over from.
    pub(super) bare: Arc<dyn Limiter>,
    /// The ban's count of denials, kept across a change of the plan's quotas.
    pub(super) counter: Option<Arc<dyn Limiter>>,
    /// This policy as answered until the fleet's record is read once (its requests wait for
    /// the record): made by the first such request, shared by the others.
    #[cfg(feature = "redis")]
    gated: std::sync::OnceLock<Arc<Policy<R>>>,
}

/// A plan's policy, and when it was last used (the count of plans made by then).
pub(super) struct Entry<R> {
    pub(super) policy: Arc<Policy<R>>,
    used: AtomicU64,
}

/// The plan a request picked: its policy, `None` for the layer's own quotas, or an error when
/// the store refuses the plan.
pub(crate) type Picked<R> = Result<Option<Arc<Policy<R>>>, crate::Error>;

/// The policies made for plans, by their quotas.
pub(super) struct Made<R> {
    /// Those of the plans picked lately.
    pub(super) held: HashMap<Box<[Quota]>, Entry<R>, RandomState>,
    /// Those of the plans dropped from `held` to make room, and not made again since: their
    /// state stays in the store, where a handle's reset and block must still reach it.
    pub(super) evicted: HashMap<Box<[Quota]>, Arc<Policy<R>>, RandomState>,
}

/// Makes what the layer answers a plan's requests with, for the plan's limiter.
pub(crate) type Respond<R> = dyn Fn(&Arc<dyn Limiter>) -> R + Send + Sync;

/// How a layer makes the limiter of a plan: its algorithm and options, store and clock, and
/// what it answers the plan's requests with.
pub(crate) struct Maker<R> {
    pub(crate) recipe: Recipe,
    /// Makes what the layer answers a plan's requests with, for the plan's limiter.
    pub(crate) responder: Arc<Respond<R>>,
    /// Whether the layer refunds admissions (`count_if`): each plan's store is told so.
    pub(crate) expect_refunds: bool,
    /// Whether the layer is a dry run: bans only report.
    pub(crate) dry_run: bool,
    /// The layer's bans, applied to each plan under the plan's policy.
    pub(crate) ban: Option<Ban>,
    /// The layer's live part: the keys blocked through its handle, which every plan denies,
    /// the quotas in force for the plans changed live, and the servers sharing its Redis,
    /// whose record a plan's first requests wait for.
    pub(crate) live: Arc<Live>,
}

/// The plan selector and the limiters made for the plans it picked lately.
pub(crate) struct PerKey<R> {
    select: Arc<Select>,
    maker: Maker<R>,
    made_for: RwLock<Made<R>>,
    /// Whether some plan was dropped past [`MAX_EVICTED_PLANS`]: a reset or block may miss it.
    pub(super) forgot: AtomicBool,
    /// How many policies have been made: entries used since the last one share its count.
    made: AtomicU64,
    warned_evicting: AtomicBool,
    warned_empty: AtomicBool,
    warned_refused: AtomicBool,
}

impl<R> fmt::Debug for PerKey<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerKey").finish_non_exhaustive()
    }
}

impl<R: Clone + Send + Sync + 'static> PerKey<R> {
    pub(crate) fn new(select: Arc<Select>, maker: Maker<R>) -> Self {
        Self {
            select,
            maker,
            made_for: RwLock::new(Made {
                held: HashMap::default(),
                evicted: HashMap::default(),
            }),
            forgot: AtomicBool::new(false),
            made: AtomicU64::new(0),
            warned_evicting: AtomicBool::new(false),
            warned_empty: AtomicBool::new(false),
            warned_refused: AtomicBool::new(false),
        }
    }

    /// Logs `message` the first time `flag` is raised: at error level when `error`, else as a
    /// warning.
    fn log_once(flag: &AtomicBool, _error: bool, _message: &str) {
        if !flag.swap(true, Ordering::Relaxed) {
            #[cfg(feature = "tracing")]
            match _error {
                true => tracing::error!("tollgate: {_message}"),
                false => tracing::warn!("tollgate: {_message}"),
            }
        }
    }

    /// The bare limiter of `quotas` for a plan: shared under its name, or its text when
    /// unnamed, when `shared` (a limiter made again for the plan after its eviction finds the
    /// state this one leaves).
    pub(super) fn bind(
        &self,
        quotas: &[Quota],
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, crate::Error> {
        let limiter = self.maker.recipe.bind_for(quotas, Role::Plan, shared)?;
        // Told of refunds as the layer's own limiter is.
        if self.maker.expect_refunds {
            limiter.expect_refunds();
        }
        Ok(limiter)
    }

    /// The policy of the plan `plan` decided by `quotas` (those in force for it): its
    /// limiter, with the layer's options, bans and the handle's blocks, carrying over what
    /// each key used under the plan as built when the two differ.
    fn make(&self, plan: &[Quota], quotas: &[Quota]) -> Result<Policy<R>, crate::Error> {
        let maker = &self.maker;
        let mut bare = self.bind(plan, true)?;
        let counter = maker.ban.map(|ban| ban.bind(&bare, &maker.recipe, true));
        let counter = counter.transpose()?;
        if plan != quotas {
            bare = self.bind(quotas, false)?.inherit(&*bare)?.settled();
        }
        Ok(self.policy_of(bare, counter))
    }

    /// The policy of `bare` with the layer's bans (counted by `counter`) and the handle's
    /// blocks around it, and its answers.
    pub(super) fn policy_of(
        &self,
        bare: Arc<dyn Limiter>,
        counter: Option<Arc<dyn Limiter>>,
    ) -> Policy<R> {
        let maker = &self.maker;
        let bans = maker
            .ban
            .zip(counter.clone())
            .map(|(b, c)| (b, c, maker.dry_run));
        let limiter = guarded(&bans, &maker.live.held, bare.clone());
        let responder = (maker.responder)(&limiter);
        Policy {
            limiter,
            responder,
            bare,
            counter,
            #[cfg(feature = "redis")]
            gated: std::sync::OnceLock::new(),
        }
    }

    /// The policies made, read.
    pub(super) fn read(&self) -> RwLockReadGuard<'_, Made<R>> {
        self.made_for.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The policies made, to change.
    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Made<R>> {
        self.made_for
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The policy of this request's plan, made on first use with the layer's algorithm
    /// options, store, clock and answers; `None`: the layer's own quotas apply. An error when
    /// the store refuses the plan (a quota too large for it): the request is refused, never
    /// given the layer's own quotas, which may be looser than the plan's.
    pub(crate) fn policy(self: &Arc<Self>, key: &Key, head: RequestHead<'_>) -> Picked<R> {
        let mut policy = Ok(None);
        (self.select)(key, head, &mut |quotas| {
            policy = self.lookup(quotas);
            // Until the fleet's record was read, the plan's quotas may be about to change:
            // the request waits for it.
            #[cfg(feature = "redis")]
            if let (Ok(Some(picked)), Some(fleet)) = (&policy, &self.maker.live.fleet) {
                if !fleet.ready() {
                    let gated = picked
                        .gated
                        .get_or_init(|| self.gated(fleet, picked, quotas));
                    policy = Ok(Some(gated.clone()));
                }
            }
        });
        policy
    }

    /// `picked`, the policy of the plan `plan`, as answered until `fleet`'s record is read
    /// once: each request waits for the record, then is decided by the plan's limiter in
    /// force. It reaches the plans weakly: the plans hold it.
    #[cfg(feature = "redis")]
    fn gated(
        self: &Arc<Self>,
        fleet: &Arc<super::live::fleet::Fleet>,
        picked: &Policy<R>,
        plan: &[Quota],
    ) -> Arc<Policy<R>> {
        let per_key = Arc::downgrade(self);
        let plan: Box<[Quota]> = plan.into();
        let then = move || Some(per_key.upgrade()?.lookup(&plan).ok()??.limiter.clone());
        let limiter = gated(fleet, picked.limiter.clone(), then, false);
        // Answered for the gated limiter: the layer checks by its responder's.
        let responder = (self.maker.responder)(&limiter);
        Arc::new(Policy {
            limiter,
            responder,
            bare: picked.bare.clone(),
            counter: None,
            gated: std::sync::OnceLock::new(),
        })
    }

    /// A plan of the quotas the layer was built with is the layer's limiter (which follows
    /// [`Handle::set_quotas`](crate::layer::Handle::set_quotas)). A plan equal to quotas set
    /// live is not: its keys keep their plan's limiter and what they used there, rather than
    /// moving to the layer's, which never saw them.
    pub(crate) fn lookup(&self, quotas: &[Quota]) -> Picked<R> {
        if *quotas == *self.maker.recipe.spec.quotas {
            return Ok(None);
        }
        // A hit: a read lock, and a write to the entry once per policy made.
        let made = self.made.load(Ordering::Relaxed);
        let evicted = {
            let made_for = self.read();
            if let Some(entry) = made_for.held.get(quotas) {
                if entry.used.load(Ordering::Relaxed) != made {
                    entry.used.store(made, Ordering::Relaxed);
                }
                return Ok(Some(entry.policy.clone()));
            }
            // A plan dropped to make room comes back with its limiter (and what its keys used).
            made_for.evicted.get(quotas).cloned()
        };
        if quotas.is_empty() {
            Self::log_once(
                &self.warned_empty,
                false,
                "quota_for picked a plan with no quota; such requests get the layer's own quotas",
            );
            return Ok(None);
        }
        let in_force = self.maker.live.plan_quotas(quotas);
        let make = || self.make(quotas, &in_force).map(Arc::new);
        // A plan the store cannot keep (a quota too large for Redis): its requests are refused
        // as by a store that fails closed, never given the layer's own quotas, which may be
        // looser than the plan's.
        let dropped = evicted.clone();
        let policy = evicted.map_or_else(make, Ok).inspect_err(|refused| {
            Self::log_once(
                &self.warned_refused,
                true,
                &format!("quota_for picked a plan its store refuses; such requests are refused: {refused}"),
            );
        })?;
        let mut made_for = self.write();
        if let Some(entry) = made_for.held.get(quotas) {
            return Ok(Some(entry.policy.clone()));
        }
        // The plan's quotas changed meanwhile (a dropped plan's limiter is replaced by the
        // change, after its quotas are): made again with them.
        let replaced = dropped.is_some_and(|dropped| {
            let now = made_for.evicted.get(quotas);
            !now.is_some_and(|now| Arc::ptr_eq(now, &dropped))
        });
        if replaced || self.maker.live.plan_quotas(quotas) != in_force {
            drop(made_for);
            return self.lookup(quotas);
        }
        let Made { held, evicted } = &mut *made_for;
        if held.len() >= MAX_PLANS {
            Self::log_once(
                &self.warned_evicting,
                false,
                "quota_for picked more than 256 distinct plans; the least recently used \
                 plans' limiters are made again when next needed (their state is kept in \
                 the store). If the selector makes quotas up from request data, bound it",
            );
            let oldest = held
                .iter()
                .min_by_key(|(_, entry)| entry.used.load(Ordering::Relaxed))
                .map(|(quotas, _)| quotas.clone());
            if let Some((oldest, entry)) = oldest.and_then(|q| held.remove_entry(&q)) {
                if evicted.len() < MAX_EVICTED_PLANS {
                    evicted.insert(oldest, entry.policy);
                } else {
                    // Warned once: when the layer first forgets a plan.
                    Self::log_once(
                        &self.forgot,
                        false,
                        "quota_for picked more than 4352 distinct plans; a handle's reset and \
                         block no longer reach every plan dropped to make room. If the \
                         selector makes quotas up from request data, bound it",
                    );
                }
            }
        }
        evicted.remove(quotas);
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Entry {
            policy: policy.clone(),
            used: AtomicU64::new(made),
        };
        held.insert(quotas.into(), entry);
        Ok(Some(policy))
    }
}
