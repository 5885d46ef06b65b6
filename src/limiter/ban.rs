//! Bans of repeat offenders ([`RateLimitLayer::ban`](crate::layer::RateLimitLayer::ban)): a
//! key denied too often is blocked for a while, through the limiter's own store.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use super::bind::Recipe;
use super::object::{BoxedDecision, DecisionFuture, Limiter};
use super::spec::{AlgorithmKind, Spec};
use crate::store::{Role, Tie, Update};
use crate::{Decision, Error, Key, Quota};

/// A layer's bans ([`RateLimitLayer::ban`](crate::layer::RateLimitLayer::ban)): the figures, the
/// limiter that counts denials, and whether the layer is a dry run.
pub(crate) type Bans = (Ban, Arc<dyn Limiter>, bool);

/// When a layer bans a key: more than [`denials`](Self::denials) denials within
/// [`within`](Self::within) block it for [`duration`](Self::duration). See
/// [`RateLimitLayer::ban`](crate::layer::RateLimitLayer::ban).
///
/// ```
/// use std::time::Duration;
/// use tollgate::layer::Ban;
///
/// // More than 20 denials within a minute: blocked for 15 minutes.
/// let ban = Ban::new(20, Duration::from_secs(60), Duration::from_secs(15 * 60));
/// assert_eq!(ban.denials(), 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ban {
    denials: u64,
    within: Duration,
    duration: Duration,
}

impl Ban {
    /// Blocks a key for `duration` once it has been denied more than `denials` times within a
    /// window of `within`. The figures are checked where the layer is built
    /// ([`RateLimitLayer::ban`](crate::layer::RateLimitLayer::ban)).
    pub const fn new(denials: u64, within: Duration, duration: Duration) -> Self {
        Self {
            denials,
            within,
            duration,
        }
    }

    /// How many denials within [`within`](Self::within) a key may get without being banned.
    pub const fn denials(&self) -> u64 {
        self.denials
    }

    /// The window in which denials are counted.
    pub const fn within(&self) -> Duration {
        self.within
    }

    /// How long a banned key is blocked.
    pub const fn duration(&self) -> Duration {
        self.duration
    }

    /// The reason these figures cannot work, naming the figure, its value and the fix.
    pub(crate) fn refusal(&self) -> Option<String> {
        let Ban {
            denials,
            within,
            duration,
        } = *self;
        if denials == 0 {
            Some(format!(
                "RateLimitLayer::ban: denials is 0 (Ban::new(0, {within:?}, {duration:?})); a ban \
                 comes after more than `denials` denials, so give at least 1"
            ))
        } else if within.is_zero() {
            Some(format!(
                "RateLimitLayer::ban: within is zero (Ban::new({denials}, 0s, {duration:?})); \
                 give the window in which denials are counted, such as Duration::from_secs(60)"
            ))
        } else if within.as_nanos() > u128::from(u64::MAX) {
            Some(format!(
                "RateLimitLayer::ban: within is {within:?}, longer than u64::MAX nanoseconds; \
                 give a window of at most some 584 years"
            ))
        } else if duration.is_zero() {
            Some(format!(
                "RateLimitLayer::ban: duration is zero (Ban::new({denials}, {within:?}, 0s)); \
                 give how long a banned key stays blocked, such as Duration::from_secs(600)"
            ))
        } else {
            None
        }
    }

    /// The spec of the limiter that counts the denials of the policy named `policy`: a
    /// fixed window of `denials` per `within`, under its own name beside the policy's.
    /// Counted for the layer of `tie`.
    fn counter(&self, policy: &str, tie: &Tie) -> Spec {
        let quota = Quota::new(self.denials, self.within).named(counter_name(policy));
        let mut spec = Spec::new(AlgorithmKind::FixedWindow, vec![quota], false);
        spec.tie = tie.clone();
        spec.in_role(Role::Counter)
    }

    /// The limiter that counts the denials of `limiter`, made as `recipe` makes the layer's.
    pub(crate) fn bind(
        &self,
        limiter: &Arc<dyn Limiter>,
        recipe: &Recipe,
        shared: bool,
    ) -> Result<Arc<dyn Limiter>, Error> {
        let counter = self.counter(limiter.policy(), &recipe.spec.tie);
        let counter = recipe.store.bind(&counter, &recipe.clock, shared)?;
        // Counted exactly: a ban comes after the stated number of denials on every server.
        counter.decide_exactly();
        Ok(counter)
    }

    /// The judge of `limiter`'s denials under this ban, counted by `counter` (from
    /// [`bind`](Self::bind)).
    pub(crate) fn judge(
        &self,
        limiter: &Arc<dyn Limiter>,
        counter: Arc<dyn Limiter>,
        dry_run: bool,
    ) -> Arc<Judge> {
        Arc::new(Judge {
            limiter: limiter.clone(),
            counter,
            duration: self.duration,
            dry_run,
            policy: limiter.policy().into(),
        })
    }
}

/// The name of the counter of the policy `policy`: `<policy>:ban`, or for a policy name too
/// long to take the suffix within a quota name's 64 characters, `ban:` and 16 hex digits of
/// its SHA-256.
fn counter_name(policy: &str) -> String {
    if policy.len() + 4 <= 64 {
        return format!("{policy}:ban");
    }
    let digest = Sha256::digest(policy.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("ban:{hex}")
}

/// Counts a limiter's denials, and blocks its repeat offenders.
pub(crate) struct Judge {
    limiter: Arc<dyn Limiter>,
    counter: Arc<dyn Limiter>,
    duration: Duration,
    dry_run: bool,
    /// The policy name, for what a ban tells operators.
    policy: Arc<str>,
}

impl Judge {
    /// Decides a request as the limiter does, counting its denial.
    #[inline]
    pub(crate) fn check(self: &Arc<Self>, key: Key, now: u64, cost: u64) -> DecisionFuture {
        let offender = key.clone();
        match self.limiter.check(key, now, cost) {
            DecisionFuture::Ready(Some(Ok(decision))) => self.judge(offender, now, decision),
            DecisionFuture::Waiting(checking) => {
                let judge = Arc::clone(self);
                DecisionFuture::Waiting(Box::pin(async move {
                    let decision = checking.await?;
                    judge.judge(offender, now, decision).await
                }))
            }
            answered => answered,
        }
    }

    /// Resets the key and its count of denials.
    pub(crate) fn reset(&self, key: Key) -> Update {
        // Both started now, as the limiter's own reset is (the memory store resets at once):
        // a reset awaited later still reaches the table in force when it was asked for.
        let counted = self.counter.reset(key.clone());
        let reset = self.limiter.reset(key);
        Box::pin(async move {
            let counted = counted.await;
            reset.await?;
            counted
        })
    }

    /// Counts `decision` against `key` when it is a denial by the quota (a blocked key's
    /// denials do not count: a client banned for `duration` is back after it, whatever it
    /// sent meanwhile), and bans the key when it is one too many.
    fn judge(self: &Arc<Self>, key: Key, now: u64, decision: Decision) -> DecisionFuture {
        if decision.allowed || decision.is_blocked() {
            return DecisionFuture::Ready(Some(Ok(decision)));
        }
        match self.counter.check(key.clone(), now, 1) {
            // A counter that fails (its store's failure policy closed) bans no one.
            DecisionFuture::Ready(Some(Ok(count))) if !count.allowed => {
                let judge = Arc::clone(self);
                let banning: BoxedDecision =
                    Box::pin(async move { Ok(judge.ban(key, decision).await) });
                // The memory store answers at once: no task has to come back for it.
                DecisionFuture::of(banning)
            }
            DecisionFuture::Ready(_) => DecisionFuture::Ready(Some(Ok(decision))),
            DecisionFuture::Waiting(counting) => {
                let judge = Arc::clone(self);
                DecisionFuture::Waiting(Box::pin(async move {
                    match counting.await {
                        Ok(count) if !count.allowed => Ok(judge.ban(key, decision).await),
                        _ => Ok(decision),
                    }
                }))
            }
        }
    }

    /// Bans `key`, denied by `decision` once too often: blocks it (but in a dry run), logs and
    /// counts the ban, and starts its count of denials afresh. The answer is `decision` as the
    /// block's first denial, or `decision` itself when the block failed or in a dry run.
    async fn ban(&self, key: Key, decision: Decision) -> Decision {
        // A block that fails bans no one: the store logs and counts its failures.
        let banned = self.dry_run || self.limiter.block(key.clone(), self.duration).await.is_ok();
        if banned {
            self.banned(&key);
        }
        let _ = self.counter.reset(key).await;
        match banned && !self.dry_run {
            true => decision.blocked_for(self.duration),
            false => decision,
        }
    }

    /// Counts and logs one ban of `key` (in a dry run, one that would have been) in
    /// `tollgate_bans_total{policy, outcome}` (features `metrics` and `tracing`): at info
    /// level with the key's kind, the key itself only at trace level.
    fn banned(&self, key: &Key) {
        let outcome = if self.dry_run {
            "dry_run_banned"
        } else {
            "banned"
        };
        #[cfg(feature = "metrics")]
        metrics::counter!("tollgate_bans_total", "policy" => metrics::SharedString::from_shared(self.policy.clone()), "outcome" => outcome)
            .increment(1);
        #[cfg(feature = "tracing")]
        {
            let (policy, duration) = (&*self.policy, self.duration);
            tracing::info!(
                policy,
                key_kind = key.kind(),
                ?duration,
                outcome,
                "rate limit ban: a key denied too often is blocked"
            );
            tracing::trace!(key = ?key, policy, outcome, "rate limit ban key");
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (key, outcome, &self.policy);
    }
}
