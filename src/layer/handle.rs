//! [`Handle`]: a layer's limits, operated while it serves.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Quotas;
pub(crate) use crate::limiter::Live;
use crate::limiter::{guarded, Limiter};
use crate::limiter::{sealed, Plan};
use crate::store::Update;
use crate::{Decision, Error, Key, Quota};

/// Operates a layer's limits while it serves: new quotas at once, without a restart and
/// without giving anyone a fresh budget.
///
/// Take it from the layer ([`RateLimitLayer::handle`](super::RateLimitLayer::handle)) before or
/// after `.layer(..)`: it reaches every service the layer (and its clones) made and will make.
/// Cheap to clone; `Send` and `Sync`, so an admin route or a configuration watcher can keep one.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::ManualClock;
/// use tollgate::{Quota, RateLimitLayer};
///
/// # fn main() -> Result<(), tollgate::Error> {
/// let layer = RateLimitLayer::gcra(Quota::per_minute(2)).clock(ManualClock::new());
/// let handle = layer.handle();
/// // ... serve with `layer`, then, from an admin route:
/// handle.set_quotas(Quota::per_minute(10))?;
/// assert_eq!(handle.quotas(), [Quota::per_minute(10)]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Handle {
    pub(crate) live: Arc<Live>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = self.live.lock();
        f.debug_struct("Handle")
            .field("policy", &now.limiter.policy())
            .field("quotas", &now.limiter.quotas())
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// `key`'s standing under the layer's quotas in force, consuming nothing: the decision a
    /// request of cost 0 would get ([`RateLimiter::peek`](crate::RateLimiter::peek)); a
    /// blocked key's is its denial ([`Decision::is_blocked`]). `key` is what the layer's key
    /// extractor makes of a request: for the default, the client's IP address
    /// ([`PeerIp::key_for`](crate::key::PeerIp::key_for) groups IPv6 by its prefix as the
    /// layer does); for a tuple such as `(Route, PeerIp)`, the key built from its parts,
    /// `Key::from(("/login", PeerIp.key_for(ip)))`.
    ///
    /// A key on a per-key plan ([`quota_for`](super::RateLimitLayer::quota_for)) is decided
    /// by its plan: [`peek_plan`](Self::peek_plan) reports its standing there.
    ///
    /// The future owns what it needs (`'static`): spawn it or await it where you like.
    ///
    /// # Errors
    ///
    /// When the store fails (a Redis store that cannot be reached: its failure policy
    /// answers).
    pub fn peek(
        &self,
        key: impl Into<Key>,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'static {
        // The limiter the layer's own quotas are decided by now, bans included, under the
        // handle's blocks (which the bare limiter, before any service is made, does not read).
        let limiter = guarded(&None, &self.live.held, self.live.lock().own());
        let key = key.into();
        async move { limiter.peek(key).await }
    }

    /// Makes `key` fresh again under the layer's quotas and every plan's made so far (those
    /// whose limiters the layer dropped to make room for newer plans included), in every
    /// tier: its state is forgotten, its block lifted, and its count of denials towards a ban
    /// ([`ban`](super::RateLimitLayer::ban)) started afresh
    /// ([`RateLimiter::reset`](crate::RateLimiter::reset)). With a shared store (Redis) the
    /// key is fresh for every server sharing it, under every plan of the layer, those this
    /// server never made included (each server lists the plans it makes in Redis, and the
    /// reset deletes the key's state under each); a server that denied the key a moment
    /// before may go on denying it for at most `RedisStore::DENY_CACHE_HOLD` (one second),
    /// the longest its deny cache remembers a denial. Local leases never deny.
    /// While servers disagree on unnamed quotas ([`set_quotas`](Self::set_quotas)), reset
    /// through a server that has changed: it deletes the key's blocks under every name, one
    /// not yet changed only under the names it knows.
    /// `key` is the layer's key for the client, as for [`peek`](Self::peek): a client IP through
    /// [`PeerIp::key_for`](crate::key::PeerIp::key_for), which groups IPv6 by its prefix as the
    /// layer does (`Key::from(ip)` would miss a client the layer keys by its /64).
    ///
    /// # Errors
    ///
    /// The first error of a store that fails or cannot reset keys; every limiter is reset
    /// that can be.
    pub fn reset(
        &self,
        key: impl Into<Key>,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let key = key.into();
        self.live.held.lift(&key);
        self.each(move |limiter| limiter.reset(key.clone()))
    }

    /// Denies every request of `key` for `duration` from now, under the layer's quotas and
    /// every plan's (per-key quotas), whatever its standing: each denial's `Retry-After` is
    /// what is left of the block ([`RateLimiter::block`](crate::RateLimiter::block)), and the
    /// key's state is as before once it ends. A block never shortens a longer one;
    /// [`reset`](Self::reset) lifts it. `key` is the layer's key for the client, as for
    /// [`peek`](Self::peek): for a client IP, [`PeerIp::key_for`](crate::key::PeerIp::key_for)
    /// (an IPv6 client is keyed by its /64, so `Key::from(ip)` would block nobody).
    ///
    /// - The block is written to the layer's store once for the whole layer (and under each
    ///   plan's this layer has made, for servers of earlier versions): with a shared store
    ///   (Redis) every plan reads it, so it holds on every server under every plan, those
    ///   this server never made and those made later included, while Redis answers (a server that decides by its failure policy meanwhile holds
    ///   only the blocks it made itself, and, with a local fallback, its bans).
    /// - The layer also holds it itself, in memory, before any limiter decides: under the
    ///   plans it makes later or picks for the key for the first time (a key cannot step out
    ///   of a block by landing on another plan), and whatever else fills the store's blocks
    ///   (bans of many other keys cannot crowd it out). It holds at most 100 000 such blocks:
    ///   past that, those that end soonest go first. Other servers hold it this way once
    ///   their handle is called too.
    /// - On a limit of requests in flight ([`InFlightLayer`](super::InFlightLayer)),
    ///   the layer's own hold is the block in memory; in Redis the block is also kept beside
    ///   the key's leases, so it holds on every server, and a [`reset`](Self::reset) lifts it
    ///   there.
    /// - A block survives [`set_quotas`](Self::set_quotas).
    ///
    /// # Errors
    ///
    /// The first error of a store that fails or cannot block keys; every limiter that can
    /// block the key does.
    pub fn block(
        &self,
        key: impl Into<Key>,
        duration: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let key = key.into();
        let nanos = crate::clock::saturating_nanos(duration);
        let at = self.live.lock().limiter.now();
        self.live.held.block(&key, at, at.saturating_add(nanos));
        self.each(move |limiter| limiter.block(key.clone(), duration))
    }

    /// Runs `update` on every limiter of the layer, its own and every plan's, one after the
    /// other, all of them whatever fails: the first error, if any. The layer's own hold denies
    /// a blocked key under every plan on this server, forgotten ones included; only the
    /// store's copy (for other servers) may miss one, which is an error.
    fn each(
        &self,
        update: impl Fn(&Arc<dyn Limiter>) -> Update,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let (limiters, known) = self.live.lock().limiters();
        let updates: Vec<Update> = limiters.iter().map(update).collect();
        async move {
            let mut outcome = Ok(());
            for update in updates {
                let result = update.await;
                if outcome.is_ok() {
                    outcome = result;
                }
            }
            outcome.and(known)
        }
    }

    /// The policy name the layer's limiter reports now.
    pub fn policy(&self) -> String {
        self.live.lock().limiter.policy().to_owned()
    }

    /// The quotas in force now: one, or each tier in order.
    pub fn quotas(&self) -> Vec<Quota> {
        self.live.lock().limiter.quotas().to_vec()
    }

    /// Puts `quotas` in force at once: the next request of every key is decided by them, and
    /// the headers show them. No request waits for it (it takes no `.await`).
    ///
    /// **Clients keep what they used, counted in requests**, not a fresh budget: a client that
    /// used 2 of 2 a minute and is moved to 10 a minute has 8 more at once; one that used 1 of
    /// 10 a minute and is moved to 2 a minute has 1 more; one that used 8 of 10 and is moved to
    /// 2 has none, and gets more as the new quota gives them back. Each key is converted on its
    /// next request, from the state it was left in ([`Algorithm::carried`](crate::algorithm::Algorithm::carried)):
    /// what it used is charged again at that moment under the new quota, up to what a fresh key
    /// may take at once, so no key ever gets more, across the change, than the old quota allowed
    /// before it and the new one allows after it. The call then carries over the keys that
    /// have not come back yet, in one pass over the layer's keys while requests go on (so it
    /// takes longer on a layer of many keys; it never blocks requests for more than one of
    /// the store's shards at a time), and any number of changes in a row keeps every key's
    /// usage. With tiers, every new tier is charged the most that any old tier shows
    /// the key used, up to what it allows at once: no tier starts fresh for a key that used
    /// anything, whatever the order or number of tiers, and a short tier charged with a long
    /// one's usage holds a busy key back for at most one of its own periods.
    ///
    /// The quotas in force given again (a configuration applied again) change nothing: every
    /// key's state stays as it is. The algorithm and its options (shaping, sub-windows,
    /// calendar windows), the store and the clock stay. A layer built with one quota takes
    /// one quota; a layer built with a list of quotas (tiers, even a list of one) takes any
    /// number.
    ///
    /// **With Redis**, the change reaches every server of the layer (one prefix, the layer built
    /// with the same quotas): it is written to the layer's record in Redis, which every server
    /// reads and applies by this same carry-over, within 250 ms and three calls (400 ms with the
    /// default timeout; see [Live quotas](crate::store::redis#live-quotas)); a server started later
    /// reads it before it decides its first request. Of two changes racing through two servers, the
    /// one Redis records last holds on every server; one made while Redis is down holds here, and
    /// is written once Redis answers. For as long as the old states may live (twice the longest an
    /// old state lives, and a second), each key's checks charge what the key used under the
    /// old quotas, what servers not yet changed admit there meanwhile included (a key whose old
    /// state expired first is charged nothing; it never gets more than the old quotas allowed
    /// before the change and the new ones after). A
    /// server started later carries over from the quotas it was built with, not from those between.
    /// Blocks and bans hold across the change, under the policy's new name and those it had before
    /// (the one it was built with and the latest 7 others). A policy carries over from at most 8
    /// earlier quotas at once: a ninth change within that time is refused (see Errors).
    ///
    /// In Redis, limiters of equal unnamed quotas and one algorithm share state (see
    /// [`RedisStore`](crate::store::RedisStore)): a change to unnamed quotas equal to another
    /// layer's or plan's makes the two share from then on, state, blocks and resets included;
    /// and blocks stay shared with layers of the unnamed quotas this one was built with, whose
    /// name it keeps reading and writing them under.
    /// Name the quotas ([`Quota::named`](crate::Quota::named)) to keep them apart.
    ///
    /// Per-key plans ([`quota_for`](super::RateLimitLayer::quota_for)) are changed by
    /// [`set_plan_quotas`](Self::set_plan_quotas). A plan equal to the quotas the layer
    /// was built with is the layer's own and follows the change; a plan equal to the new
    /// quotas keeps its own limiter, and its keys what they used there.
    ///
    /// # Errors
    ///
    /// An error of kind [`Misconfigured`](crate::ErrorKind::Misconfigured), and nothing
    /// changes, when `quotas` is empty, when it has several quotas for a layer built with one,
    /// when the layer was made by [`from_limiter`](super::RateLimitLayer::from_limiter) or is
    /// an [`InFlightLayer`](super::InFlightLayer), when the store cannot keep these quotas, or
    /// when a Redis policy still carries over from 8 earlier quotas (the message says when to
    /// try again).
    pub fn set_quotas<Q: Quotas>(&self, quotas: Q) -> Result<(), Error> {
        let quotas = quotas.into_quotas();
        if quotas.is_empty() {
            return Err(Error::misconfigured(
                "Handle::set_quotas: no quota given; give at least one",
            ));
        }
        self.live.change_own(&quotas)
    }

    /// Puts `quotas` in force for the per-key plan `plan` ([`quota_for`](super::RateLimitLayer::quota_for)):
    /// `plan` is what the selector returns for the plan (its quotas, as built), and from now
    /// on its keys are decided by `quotas`, as [`set_quotas`](Self::set_quotas) does for the
    /// layer's own quotas: **clients keep what they used** under the plan, and the call takes
    /// no `.await`. With Redis, the change reaches every server of the layer, as
    /// [`set_quotas`](Self::set_quotas)'s does. `plan` given as `quotas` puts the plan back as
    /// built.
    ///
    /// ```
    /// use tollgate::key::RequestHead;
    /// use tollgate::{Key, Quota, RateLimitLayer};
    ///
    /// let pro = Quota::per_minute(600).named("pro");
    /// let layer = RateLimitLayer::gcra(Quota::per_minute(60).named("free"))
    ///     .quota_for({
    ///         let pro = pro.clone();
    ///         move |key: &Key, _: RequestHead<'_>| pro.clone() // pick by key in practice
    ///     });
    /// let handle = layer.handle();
    /// handle.set_plan_quotas(pro.clone(), Quota::per_minute(1200).named("pro"))?;
    /// assert_eq!(handle.plan_quotas(pro), [Quota::per_minute(1200).named("pro")]);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// An error of kind [`Misconfigured`](crate::ErrorKind::Misconfigured), and nothing
    /// changes, when the layer picks no plans (no `quota_for`: an unknown plan), when `plan`
    /// is empty or the layer's own quotas (change those with `set_quotas`), when `quotas` is
    /// empty, when a layer built with one quota would move a plan between one quota and
    /// tiers, and for the reasons `set_quotas` gives.
    pub fn set_plan_quotas<P: Plan, Q: Quotas>(&self, plan: P, quotas: Q) -> Result<(), Error> {
        let plan = sealed::Sealed::quotas(&plan);
        let quotas = quotas.into_quotas();
        self.live.change_plan(plan, &quotas)
    }

    /// The quotas in force for the per-key plan `plan` (as the selector returns it): those
    /// [`set_plan_quotas`](Self::set_plan_quotas) gave it, or its own.
    pub fn plan_quotas<P: Plan>(&self, plan: P) -> Vec<Quota> {
        self.live
            .plan_quotas(sealed::Sealed::quotas(&plan))
            .to_vec()
    }

    /// `key`'s standing under the per-key plan `plan` (as the selector returns it), consuming
    /// nothing, as [`peek`](Self::peek) reports it under the layer's own quotas: by the
    /// plan's quotas in force, its blocks and bans included.
    ///
    /// # Errors
    ///
    /// When the store fails, or cannot keep the plan's quotas; an error of kind
    /// [`Misconfigured`](crate::ErrorKind::Misconfigured) for a layer made by
    /// [`from_limiter`](super::RateLimitLayer::from_limiter), or an in-flight one.
    pub fn peek_plan<P: Plan>(
        &self,
        plan: P,
        key: impl Into<Key>,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'static {
        let limiter = self.live.plan_limiter(sealed::Sealed::quotas(&plan));
        let key = key.into();
        async move { limiter?.peek(key).await }
    }
}
