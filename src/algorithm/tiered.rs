use std::sync::Arc;

use super::few::Few;
use super::{Algorithm, Outcome};
use crate::{Decision, Quota};

/// Several quotas on one key, such as 10 per second and 1000 per hour: a request passes only
/// if every quota allows it, and a denied request consumes from none of them.
///
/// Built by the limiter and layer constructors when they are given several quotas:
/// `RateLimiter::gcra([Quota::per_second(10), Quota::per_hour(1000)])`. Each quota is a *tier*
/// decided by the same algorithm; the tiers of one key are updated together, as one atomic step.
///
/// The decision reported is the most restrictive tier's: when allowed, the tier with the fewest
/// requests remaining (on a tie, the longest `reset_after`); when denied, the tier that makes
/// the client wait longest (a tier the request can never pass wins). Its `delay` is the longest
/// any tier asks for. [`Decision::tiers`] holds every tier's own decision, for response headers
/// with one item per quota; after a denial the tiers that would have allowed the request report
/// their standing unchanged.
///
/// A key's state is one state per tier: two tiers' states inline, more in one heap block. The list of per-tier
/// decisions is one allocation per thread, reused by the thread's next check once no decision
/// holds it any more: a tiered check allocates nothing while decisions are dropped before the
/// next check on the same thread.
#[derive(Debug, Clone)]
pub struct Tiered<A> {
    tiers: Arc<[A]>,
}

impl<A: Algorithm> Tiered<A> {
    /// The tiers, in order: each quota's algorithm.
    ///
    /// # Panics
    ///
    /// When `tiers` is empty: a limit with no quota would allow everything.
    pub fn new(tiers: impl IntoIterator<Item = A>) -> Self {
        let tiers: Arc<[A]> = tiers.into_iter().collect();
        assert!(!tiers.is_empty(), "tiered quotas need at least one quota");
        Self { tiers }
    }

    /// The tiers, in order.
    pub fn tiers(&self) -> &[A] {
        &self.tiers
    }

    /// `state` with each tier's state replaced by what `f` makes of it (given the tier's index
    /// and algorithm), where it makes anything; `None` when it makes nothing.
    fn each_tier(
        &self,
        state: &TieredState<A::State>,
        f: impl Fn(usize, &A, &A::State) -> Option<A::State>,
    ) -> Option<TieredState<A::State>> {
        let mut next = state.clone();
        let mut changed = false;
        let states = next.sized(self.tiers.len());
        for (i, (tier, s)) in self.tiers.iter().zip(states).enumerate() {
            if let Some(new) = f(i, tier, s) {
                *s = new;
                changed = true;
            }
        }
        changed.then_some(next)
    }
}

/// A key's state under [`Tiered`]: one state per tier. Empty (the default) is fresh.
///
/// Two tiers' states live in the state itself, so a check reads them without a second memory
/// access; three or more live in one heap block.
#[doc(hidden)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TieredState<S> {
    states: Few<S>,
}

impl<S> TieredState<S> {
    /// Each tier's state, in order; empty when the key is fresh.
    pub fn states(&self) -> &[S] {
        &self.states
    }
}

impl<S: Clone + Default> TieredState<S> {
    fn get<'a>(&'a self, tier: usize, fresh: &'a S) -> &'a S {
        self.states().get(tier).unwrap_or(fresh)
    }

    /// The states, one per tier, made fresh where missing.
    fn sized(&mut self, tiers: usize) -> &mut [S] {
        self.states.resize_with(tiers, S::default);
        &mut self.states
    }
}

impl<A: Algorithm> Algorithm for Tiered<A> {
    type State = TieredState<A::State>;

    fn check(&self, state: &Self::State, now: u64, cost: u64) -> Outcome<Self::State> {
        let mut next = state.clone();
        let decision = self.check_mut(&mut next, now, cost);
        let changed = decision.allowed && cost > 0;
        Outcome::new(decision, changed.then_some(next))
    }

    /// Decides a request and updates every tier of `state` in place when all allow it. A
    /// denial consumes from no tier, and the tiers that would have allowed it report their
    /// standing.
    ///
    /// Each tier is decided once on the state as it is; when all allow, each tier's own check
    /// in place then writes its state (its decisions are those already made). The list of
    /// tier decisions reuses the thread's previous list when no decision holds it any more, so
    /// a check allocates nothing once the key has its states.
    fn check_mut(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        let tiers = &self.tiers;
        let decisions = Decision::tier_list(tiers.len(), |decisions| {
            let fresh = A::State::default();
            let mut all_allow = true;
            for (i, (tier, d)) in tiers.iter().zip(decisions.iter_mut()).enumerate() {
                *d = tier.check(state.get(i, &fresh), now, cost).decision;
                all_allow &= d.allowed;
            }
            if !all_allow {
                for (i, (tier, d)) in tiers.iter().zip(decisions.iter_mut()).enumerate() {
                    if d.allowed {
                        *d = tier.check(state.get(i, &fresh), now, 0).decision;
                    }
                }
            } else if cost > 0 {
                let states = state.sized(tiers.len());
                for (tier, s) in tiers.iter().zip(states.iter_mut()) {
                    tier.check_mut(s, now, cost);
                }
            }
        });
        Decision::from_tiers(decisions)
    }

    fn refund(
        &self,
        state: &Self::State,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Option<Self::State> {
        let admitted = admission.tiers();
        if admitted.len() != self.tiers.len() {
            return None;
        }
        self.each_tier(state, |i, tier, s| tier.refund(s, &admitted[i], now, cost))
    }

    const REFUNDS: bool = A::REFUNDS;

    /// Every tier is charged: the key is in debt on each tier it overspent.
    fn charge(&self, state: &Self::State, now: u64, cost: u64) -> Option<Self::State> {
        self.each_tier(state, |_, tier, s| tier.charge(s, now, cost))
    }

    const SETTLES: bool = A::SETTLES;

    /// The largest debt of any tier.
    fn debt(&self, state: &Self::State, now: u64) -> u64 {
        let fresh = A::State::default();
        let tiers = self.tiers.iter().enumerate();
        tiers
            .map(|(i, tier)| tier.debt(state.get(i, &fresh), now))
            .max()
            .unwrap_or(0)
    }

    fn is_fresh(&self, state: &Self::State, now: u64) -> bool {
        let fresh = A::State::default();
        (0..self.tiers.len()).all(|i| self.tiers[i].is_fresh(state.get(i, &fresh), now))
    }

    fn wall_clock(&self) -> bool {
        self.tiers.iter().any(Algorithm::wall_clock)
    }

    /// Every tier is charged the most that any tier of `from` shows the key used, up to what
    /// it allows at once ([`Algorithm::carried`]): no tier starts fresh for a key that used
    /// anything, whatever the tiers' order or number. A short tier charged with a long one's
    /// usage holds a busy key back for at most one of its own periods.
    ///
    /// A tier of `from` in debt adds its debt to what it shows used ([`Algorithm::debt`]), and
    /// what a new tier cannot take at once of that is charged as a debt: a key in debt under
    /// a minute's tier owes it under the new minute's, paid back at the new rate.
    fn carried(&self, from: &Self, state: &Self::State, now: u64) -> Self::State {
        let fresh = A::State::default();
        let usage: Vec<(u64, u64)> = (0..from.tiers.len())
            .map(|i| {
                let (tier, state) = (&from.tiers[i], state.get(i, &fresh));
                (super::used(tier, state, now), tier.debt(state, now))
            })
            .collect();
        if usage.iter().all(|&usage| usage == (0, 0)) {
            return Self::State::default();
        }
        let mut next = Self::State::default();
        let states = next.sized(self.tiers.len());
        for (tier, s) in self.tiers.iter().zip(states.iter_mut()) {
            let room = tier.check(&fresh, now, 0).decision.remaining;
            let units = usage
                .iter()
                .map(|&(used, debt)| used.min(room).saturating_add(debt))
                .max()
                .unwrap_or(0);
            let used = units.min(room);
            *s = super::owing(tier, used, units - used, now);
        }
        next
    }
}

/// One quota, or several that must all allow a request ([`Tiered`]): what the limiter and
/// layer constructors accept.
///
/// ```
/// use tollgate::{Quota, RateLimiter};
///
/// let one = RateLimiter::gcra(Quota::per_second(10));
/// let tiered = RateLimiter::gcra([Quota::per_second(10), Quota::per_hour(1000)]);
/// # let _ = (one, tiered);
/// ```
///
/// The trait is sealed: `Quota`, `Vec<Quota>` and `[Quota; N]` implement it, nothing else can.
///
/// ```compile_fail,E0277
/// use tollgate::algorithm::{Algorithm, Quotas};
/// use tollgate::Quota;
///
/// struct Mine;
/// impl Quotas for Mine {
///     type Algorithm<A: Algorithm> = A;
///     fn build<A: Algorithm>(self, make: impl Fn(&Quota) -> A) -> (Vec<Quota>, A) {
///         let quota = Quota::per_second(1);
///         let algorithm = make(&quota);
///         (vec![quota], algorithm)
///     }
///     fn into_quotas(self) -> Vec<Quota> {
///         vec![Quota::per_second(1)]
///     }
/// }
/// ```
#[allow(private_bounds)]
pub trait Quotas: SealedQuotas {
    /// The algorithm that decides these quotas when each is decided by `A`: `A` itself for one
    /// quota, [`Tiered<A>`] for several.
    type Algorithm<A: Algorithm>: Algorithm;

    /// The quotas in order, and the algorithm that decides them, made by `make` per quota.
    ///
    /// # Panics
    ///
    /// When there is no quota.
    #[doc(hidden)]
    fn build<A: Algorithm>(self, make: impl Fn(&Quota) -> A) -> (Vec<Quota>, Self::Algorithm<A>);

    /// The quotas in order, with no algorithm made (an empty list is returned as it is).
    #[doc(hidden)]
    fn into_quotas(self) -> Vec<Quota>
    where
        Self: Sized;
}

/// Implemented by [`Quota`], `Vec<Quota>` and `[Quota; N]` only: what seals [`Quotas`].
pub(crate) trait SealedQuotas {}

impl SealedQuotas for Quota {}
impl SealedQuotas for Vec<Quota> {}
impl<const N: usize> SealedQuotas for [Quota; N] {}

impl Quotas for Quota {
    type Algorithm<A: Algorithm> = A;

    fn build<A: Algorithm>(self, make: impl Fn(&Quota) -> A) -> (Vec<Quota>, A) {
        let algorithm = make(&self);
        (vec![self], algorithm)
    }

    fn into_quotas(self) -> Vec<Quota> {
        vec![self]
    }
}

impl Quotas for Vec<Quota> {
    type Algorithm<A: Algorithm> = Tiered<A>;

    fn build<A: Algorithm>(self, make: impl Fn(&Quota) -> A) -> (Vec<Quota>, Tiered<A>) {
        let algorithm = Tiered::new(self.iter().map(make));
        (self, algorithm)
    }

    fn into_quotas(self) -> Vec<Quota> {
        self
    }
}

impl<const N: usize> Quotas for [Quota; N] {
    type Algorithm<A: Algorithm> = Tiered<A>;

    fn build<A: Algorithm>(self, make: impl Fn(&Quota) -> A) -> (Vec<Quota>, Tiered<A>) {
        Vec::from(self).build(make)
    }

    fn into_quotas(self) -> Vec<Quota> {
        Vec::from(self)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::Gcra;

    #[test]
    fn a_denied_request_consumes_from_no_tier() {
        // 2 per second and 3 per minute.
        let tiered = Tiered::new([
            Gcra::new(&Quota::per_second(2)),
            Gcra::new(&Quota::per_minute(3)),
        ]);
        let mut state = TieredState::default();
        let sec = 1_000_000_000;
        assert!(tiered.check_mut(&mut state, 0, 1).allowed);
        assert!(tiered.check_mut(&mut state, 0, 1).allowed);
        // The per-second tier is spent; the per-minute tier would allow but takes nothing.
        let denied = tiered.check_mut(&mut state, 0, 1);
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after, Some(Duration::from_millis(500)));
        assert_eq!(denied.tiers().len(), 2);
        assert_eq!(denied.tiers()[1].remaining, 1);
        assert!(denied.tiers()[1].allowed, "the per-minute tier's standing");
        // A second later the per-minute tier still has its last request.
        let third = tiered.check_mut(&mut state, sec, 1);
        assert!(third.allowed);
        assert_eq!(third.remaining, 0);
        let fourth = tiered.check_mut(&mut state, sec, 1);
        assert!(!fourth.allowed);
        // The per-minute tier frees its first slot 20 s after the first request.
        assert_eq!(fourth.retry_after, Some(Duration::from_secs(19)));
    }

    #[test]
    fn the_reported_decision_is_the_most_restrictive() {
        let tiered = Tiered::new([
            Gcra::new(&Quota::per_second(5)),
            Gcra::new(&Quota::per_minute(3)),
        ]);
        let out = tiered.check(&TieredState::default(), 0, 1);
        let d = out.decision;
        assert!(d.allowed);
        assert_eq!((d.limit, d.remaining), (3, 2));
        assert_eq!(d.tiers()[0].remaining, 4);
        let state = out.state.unwrap();
        assert_eq!(state.states().len(), 2);
        // A peek changes nothing and reports both tiers.
        let peek = tiered.check(&state, 0, 0);
        assert_eq!(peek.state, None);
        assert_eq!(peek.decision.remaining, 2);
        // A cost no tier can ever pass.
        let never = tiered.check(&state, 0, 4);
        assert_eq!(never.decision.retry_after, None);
        assert!(!never.decision.allowed);
    }

    #[test]
    fn a_charge_reaches_every_tier() {
        // 10 a second (burst 5) and 20 a minute: T = 100 ms and 3 s.
        let tiered = Tiered::new([
            Gcra::new(&Quota::per_second(10).with_burst(5)),
            Gcra::new(&Quota::per_minute(20)),
        ]);
        let ms = 1_000_000;
        let admitted = tiered.check(&TieredState::default(), 0, 2);
        let state = admitted.state.unwrap();
        // 7 more: 4 past the per-second tier's burst; 9 of 20 on the per-minute tier.
        let charged = tiered.charge(&state, 0, 7).unwrap();
        assert_eq!(charged.states(), [900 * ms, 27_000 * ms]);
        let peek = tiered.check(&charged, 0, 0).decision;
        assert!(!peek.allowed);
        assert_eq!(peek.retry_after, Some(Duration::from_millis(400)));
        assert!(!peek.tiers()[0].allowed);
        assert_eq!(peek.tiers()[1].remaining, 11);
        // A request of cost 2 waits for the per-second tier's debt and its 2 intervals.
        assert!(!tiered.check(&charged, 600 * ms - 1, 2).decision.allowed);
        assert!(tiered.check(&charged, 600 * ms, 2).decision.allowed);
        // A fresh key is charged on every tier; a charge of nothing changes nothing.
        let fresh = tiered.charge(&TieredState::default(), 0, 1).unwrap();
        assert_eq!(fresh.states(), [100 * ms, 3_000 * ms]);
        assert_eq!(tiered.charge(&charged, 0, 0), None);
        // A day tier in debt holds the key back past a minute tier's.
        let per_day = Tiered::new([
            Gcra::new(&Quota::per_minute(60)),
            Gcra::new(&Quota::per_day(1440)),
        ]);
        let owing = per_day.charge(&TieredState::default(), 0, 1500).unwrap();
        let peek = per_day.check(&owing, 0, 0).decision;
        // 1500 per day is 60 past the day's 1440: an hour, at one a minute.
        assert_eq!(peek.retry_after, Some(Duration::from_secs(3600)));
        assert!(tiered.settles() && per_day.settles());
    }

    #[test]
    fn new_tiers_keep_a_debt() {
        // 60 a minute (burst 10) and 1440 a day (burst 100): T = 1 s and 60 s.
        let old = Tiered::new([
            Gcra::new(&Quota::per_minute(60).with_burst(10)),
            Gcra::new(&Quota::per_day(1440).with_burst(100)),
        ]);
        // 40 charged at once: 30 past the minute's burst, 40 of the day's 100.
        let owing = old.charge(&TieredState::default(), 0, 40).unwrap();
        let peek = old.check(&owing, 0, 0).decision;
        assert_eq!(peek.retry_after, Some(Duration::from_secs(30)));
        // Tiers reordered: the same debt.
        let reordered = Tiered::new([old.tiers()[1], old.tiers()[0]]);
        let carried = reordered.carried(&old, &owing, 0);
        let peek = reordered.check(&carried, 0, 0).decision;
        assert!(!peek.allowed);
        assert_eq!(peek.retry_after, Some(Duration::from_secs(30)));
        // A minute tier of 120 (burst 20), paid back at 2 a second.
        let faster = Tiered::new([
            Gcra::new(&Quota::per_minute(120).with_burst(20)),
            Gcra::new(&Quota::per_day(1440).with_burst(100)),
        ]);
        let carried = faster.carried(&old, &owing, 0);
        let peek = faster.check(&carried, 0, 0).decision;
        // 40 used on the minute tier, as a key that used 40 under it: 20 past its burst.
        assert_eq!(peek.retry_after, Some(Duration::from_secs(10)));
        // The day tier keeps what the key used there: 40 of 100.
        assert_eq!(peek.tiers()[1].remaining, 60);
    }

    #[test]
    fn tiers_settle_only_when_every_tier_can() {
        use crate::algorithm::{FixedWindow, Hybrid, SlidingLog, SlidingWindow, TokenBucket};
        let quotas = [Quota::per_second(1), Quota::per_minute(5)];
        assert!(Tiered::new(quotas.iter().map(TokenBucket::new)).settles());
        assert!(Tiered::new(quotas.iter().map(super::super::LeakyBucket::new)).settles());
        let windows = Tiered::new(quotas.iter().map(FixedWindow::new));
        assert!(!windows.settles());
        assert_eq!(windows.charge(&TieredState::default(), 0, 3), None);
        assert!(!Tiered::new(quotas.iter().map(SlidingWindow::new)).settles());
        assert!(!Tiered::new(quotas.iter().map(SlidingLog::new)).settles());
        assert!(!Tiered::new(quotas.iter().map(Hybrid::new)).settles());
        // Tiers of tiers settle as their tiers do.
        let gcra = Tiered::new(quotas.iter().map(Gcra::new));
        assert!(Tiered::new([gcra.clone(), gcra]).settles());
        assert!(!Tiered::new([windows.clone(), windows]).settles());
    }

    #[test]
    fn refunds_reach_every_tier_and_freshness_needs_all() {
        let tiered = Tiered::new([
            Gcra::new(&Quota::per_second(1)),
            Gcra::new(&Quota::per_minute(2)),
        ]);
        let out = tiered.check(&TieredState::default(), 0, 1);
        let (state, admission) = (out.state.unwrap(), out.decision);
        assert!(!tiered.is_fresh(&state, 1_000_000_000));
        assert!(tiered.is_fresh(&state, 30_000_000_000));
        let refunded = tiered.refund(&state, &admission, 0, 1).unwrap();
        assert!(tiered.is_fresh(&refunded, 0));
        assert_eq!(tiered.refund(&refunded, &admission, 0, 1), None);
        // A decision of another shape (one tier) refunds nothing.
        let single = Gcra::new(&Quota::per_second(1)).check(&0, 0, 1).decision;
        assert_eq!(tiered.refund(&state, &single, 0, 1), None);
        assert!(tiered.refunds());
    }
}
