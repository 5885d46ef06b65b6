//! What a check answers when Redis could not: the failure policy ([`OnFailure`]) at work.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::algorithms::RedisAlgorithm;
use super::OnFailure;
use crate::store::{MemoryTable, Store};
use crate::{Decision, Error, Key};

/// One policy's failure policy, ready to answer.
pub(crate) enum Fallback<A: RedisAlgorithm> {
    Open,
    Closed,
    /// The local table; a new one once it has carried over what keys used in the table of
    /// the quotas before ([`settle`](Self::settle)).
    Local(ArcSwap<MemoryTable<A>>),
}

impl<A: RedisAlgorithm> Fallback<A> {
    /// The fallback of `on_failure` for the policy `policy` decided by `algorithm`.
    pub(crate) fn new(
        on_failure: &OnFailure,
        policy: &str,
        shared: bool,
        algorithm: &A,
    ) -> Result<Self, Error> {
        Ok(match on_failure {
            OnFailure::Open => Self::Open,
            OnFailure::Closed => Self::Closed,
            OnFailure::Local(memory) => {
                Self::local(Store::<A>::table(memory, policy, shared, algorithm)?)
            }
        })
    }

    fn local(table: MemoryTable<A>) -> Self {
        Self::Local(ArcSwap::from_pointee(table))
    }

    /// The fallback of a table of new quotas (`algorithm`) that takes over from the one
    /// `self` belongs to: a local table carries over what each key used in `self`'s.
    pub(crate) fn succeeded(
        &self,
        on_failure: &OnFailure,
        policy: &str,
        shared: bool,
        algorithm: &A,
    ) -> Result<Self, Error> {
        match (self, on_failure) {
            (Self::Local(previous), OnFailure::Local(memory)) => Ok(Self::local(
                Store::<A>::succeed(memory, policy, &previous.load(), algorithm, 0)?,
            )),
            _ => Self::new(on_failure, policy, shared, algorithm),
        }
    }

    /// Carries over every key the local table has not taken over yet, and lets the table of
    /// the quotas before go ([`MemoryTable::settled`]).
    pub(crate) fn settle(&self, now: u64) {
        if let Self::Local(table) = self {
            table.store(Arc::new(table.load().settled(now)));
        }
    }

    /// The policy's name in logs and metrics: `open`, `closed` or `local`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Local(_) => "local",
        }
    }

    /// Forgets `key`'s state and block in the local table, if the policy has one.
    pub(crate) fn reset(&self, key: &Key, now: u64) {
        if let Self::Local(table) = self {
            table.load().reset(key, now);
        }
    }

    /// Blocks `key` in the local table, if the policy has one, so that the block holds here
    /// while Redis is away.
    pub(crate) fn block(&self, key: &Key, now: u64, duration: Duration) {
        if let Self::Local(table) = self {
            table.load().block(key, now, duration);
        }
    }

    /// The answer to a request (or, with `refund`, a refund) of `cost` for `key` at `now`
    /// that Redis failed with `error` (made only when answered), for tiers reporting `limits`.
    pub(crate) fn answer(
        &self,
        error: impl FnOnce() -> Error,
        limits: &[u64],
        key: Key,
        now: u64,
        cost: u64,
        refund: bool,
    ) -> Result<Decision, Error> {
        match self {
            Self::Closed => Err(error()),
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
            Self::Local(table) => {
                let decision = table.load().decide(key, now, if refund { 0 } else { cost });
                Ok(decision.without_receipts())
            }
        }
    }
}
