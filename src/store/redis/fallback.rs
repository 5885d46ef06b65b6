//! What a check answers when Redis could not: the failure policy ([`OnFailure`]) at work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use super::algorithms::RedisAlgorithm;
use super::OnFailure;
use crate::store::{MemoryStore, MemoryTable, Store};
use crate::{Decision, Error, Key};

/// What a call that Redis failed asked for, which the failure policy answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A request of a cost (0: a peek).
    Check,
    /// A refund of what an admission took.
    Refund,
    /// A charge of a cost whatever the key has left (a debt).
    Charge,
}

impl Asked {
    /// A refund when `refund`, else a check.
    pub(crate) fn check_or_refund(refund: bool) -> Self {
        if refund {
            Self::Refund
        } else {
            Self::Check
        }
    }
}

/// One policy's failure policy, ready to answer: for a table, `L` is its [`Local`] table; for
/// the slots of a limit on requests in flight, local slots.
pub(crate) enum Fallback<L> {
    Open,
    Closed,
    Local(L),
}

impl<L> Fallback<L> {
    /// The fallback of `on_failure`, its local part made by `local`.
    pub(crate) fn of(
        on_failure: &OnFailure,
        local: impl FnOnce(&MemoryStore) -> Result<L, Error>,
    ) -> Result<Self, Error> {
        Ok(match on_failure {
            OnFailure::Open => Self::Open,
            OnFailure::Closed => Self::Closed,
            OnFailure::Local(memory) => Self::Local(local(memory)?),
        })
    }

    /// The policy's name in logs and metrics: `open`, `closed` or `local`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Local(_) => "local",
        }
    }
}

/// The local table of a failure policy, and while its quotas change, the same table still
/// carrying over what keys used in the table of the quotas before: it lets that table go
/// once it has carried over every key ([`settle`](Fallback::settle)), and a check then reads
/// no shared pointer.
pub(crate) struct Local<A: RedisAlgorithm> {
    table: MemoryTable<A>,
    carrying: ArcSwapOption<MemoryTable<A>>,
    /// Whether `carrying` may hold a table: read first, so that a settled table costs a check
    /// one relaxed load.
    is_carrying: AtomicBool,
}

impl<A: RedisAlgorithm> Local<A> {
    fn new(table: MemoryTable<A>) -> Self {
        let carries = table.carries();
        Self {
            table: table.detached(),
            carrying: ArcSwapOption::new(carries.then(|| Arc::new(table))),
            is_carrying: AtomicBool::new(carries),
        }
    }

    /// Runs `f` on the table that decides now.
    #[inline]
    fn with<T>(&self, f: impl FnOnce(&MemoryTable<A>) -> T) -> T {
        if self.is_carrying.load(Ordering::Acquire) {
            if let Some(carrying) = self.carrying.load().as_deref() {
                return f(carrying);
            }
        }
        f(&self.table)
    }
}

impl<A: RedisAlgorithm> Fallback<Local<A>> {
    /// The fallback of `on_failure` for the policy `policy` decided by `algorithm`; with
    /// `previous`, the fallback of the table of the quotas before, a local table carries over
    /// what each key used there.
    pub(crate) fn new(
        on_failure: &OnFailure,
        policy: &str,
        shared: bool,
        algorithm: &A,
        previous: Option<&Self>,
    ) -> Result<Self, Error> {
        Self::of(on_failure, |memory| {
            let table = match previous {
                Some(Self::Local(p)) => {
                    p.with(|p| Store::<A>::succeed(memory, policy, p, algorithm, 0))
                }
                _ => Store::<A>::table(memory, policy, shared, algorithm),
            };
            Ok(Local::new(table?))
        })
    }

    /// Carries over every key the local table has not taken over yet, and lets the table of
    /// the quotas before go ([`MemoryTable::settled`]).
    pub(crate) fn settle(&self, now: u64) {
        if let Self::Local(local) = self {
            if let Some(carrying) = local.carrying.load_full() {
                // The table that carries over and `local.table` share their keys.
                carrying.settled(now);
                local.is_carrying.store(false, Ordering::Release);
                local.carrying.store(None);
            }
        }
    }

    /// Forgets `key`'s state and block in the local table, if the policy has one.
    pub(crate) fn reset(&self, key: &Key, now: u64) {
        if let Self::Local(local) = self {
            local.with(|table| table.reset(key, now));
        }
    }

    /// Blocks `key` in the local table, if the policy has one, so that the block holds here
    /// while Redis is away.
    pub(crate) fn block(&self, key: &Key, now: u64, duration: Duration) {
        if let Self::Local(local) = self {
            local.with(|table| table.block(key, now, duration));
        }
    }

    /// The answer to what was `asked` (a request, a refund or a charge) of `cost` for `key` at
    /// `now` that Redis failed with `error` (made only when answered), for tiers reporting
    /// `limits`.
    ///
    /// A charge that Redis could not record is answered with the error, the local policy
    /// aside: it charges its own table, which decides the key's next requests while Redis is
    /// away (the debt counts there), and answers the key's standing in it.
    #[inline]
    pub(crate) fn answer(
        &self,
        error: impl FnOnce() -> Error,
        limits: &[u64],
        key: Key,
        now: u64,
        cost: u64,
        asked: Asked,
    ) -> Result<Decision, Error> {
        match self {
            Self::Closed => Err(error()),
            Self::Open if asked == Asked::Charge => Err(error()),
            Self::Open => {
                // Allowed, reported as if every tier were fresh.
                let fresh = |&limit: &u64| Decision::allow(limit, limit, Duration::ZERO);
                if A::TIERED {
                    let tiers: Vec<Decision> = limits.iter().map(fresh).collect();
                    Ok(Decision::from_tiers(tiers.into()))
                } else {
                    limits.first().map(fresh).ok_or_else(error)
                }
            }
            // The admission's receipt is in Redis's terms, which the local table cannot read:
            // a refund while Redis is away gives nothing back (the request keeps counting),
            // and reports the local standing.
            // An admission decided here carries no receipt: a refund of it that reaches Redis
            // once it is back must not take back an admission Redis made (the request keeps
            // counting, here and there).
            Self::Local(local) => {
                let mut decision = local.with(|table| match asked {
                    Asked::Check => table.decide(key, now, cost),
                    Asked::Refund => table.decide(key, now, 0),
                    Asked::Charge => table.charge(key, now, cost),
                });
                decision.forget_receipts();
                Ok(decision)
            }
        }
    }
}
