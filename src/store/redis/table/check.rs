//! How a [`RedisTable`] decides a request: from a lease of this server's, a denial
//! remembered here, the failure policy while Redis is down, or one round trip; and how it
//! charges a key (a cost settled above its reservation).

use std::time::{Duration, Instant};

use super::round_trip::Mode;
use super::RedisTable;
use crate::clock::saturating_nanos;
use crate::store::redis::algorithms::RedisAlgorithm;
use crate::store::redis::connection::OnDrop;
use crate::store::redis::fallback::Asked;
use crate::store::redis::future::RedisFuture;
use crate::store::redis::leases::{LeaseBook, Plan};
use crate::store::redis::reply;
use crate::{Decision, Error, Key};

impl<A: RedisAlgorithm> RedisTable<A> {
    /// Charges `key` `cost` more, whatever it has left (a debt), in one script call, and
    /// answers with its standing afterwards. An algorithm that carries no debt, or a cost of 0,
    /// is answered with the standing alone (a peek), as in memory.
    ///
    /// A charge only makes the key more limited; so that no state kept here admits what Redis
    /// now denies, it forgets the key's remembered denial (which may end before the debt's
    /// wait) and its slice on this server, and stops the table's leases, as a refund does: its
    /// keys are decided in Redis from then on. Slices other servers took before the charge
    /// were counted in Redis before it (see [`Leases`](crate::store::Leases)).
    pub(crate) fn charge(&self, key: Key, now: u64, cost: u64) -> RedisFuture {
        let inner = &self.inner;
        if cost == 0 || !inner.settles {
            return self.run(key, now, 0, None);
        }
        self.decide_exactly();
        inner.leases.iter().for_each(|book| book.forget(&key));
        inner.denials.remove(&key);
        if let Some(health) = inner.store.health.down(&key) {
            let answer = inner.answered_down(&health, key, now, cost, Asked::Charge);
            return RedisFuture::ready(answer);
        }
        let table = self.clone();
        RedisFuture::pending(Box::pin(async move {
            let inner = &table.inner;
            let reply = table.round_trip(&key, now, Mode::Charge(cost)).await;
            let result = reply.and_then(|reply| reply::decision(&reply, &inner.limits, A::TIERED));
            // A denial remembered while the charge was on its way waits less than the debt.
            inner.denials.remove(&key);
            result.or_else(|error| inner.failed(error, key, now, cost, Asked::Charge))
        }))
    }

    /// Checks a request of `cost` for `key`; or, with `refund` (each tier's receipt from the
    /// admission), gives back what that admission took.
    #[inline]
    pub(crate) fn run(
        &self,
        key: Key,
        now: u64,
        cost: u64,
        refund: Option<Vec<u64>>,
    ) -> RedisFuture {
        let inner = &self.inner;
        // Leases are kept out of a table that carries usage over, and of one whose refunds may
        // start a window again: their keys are decided exactly.
        let book = inner.leases.as_ref().filter(|_| inner.leasing());
        if let Some(book) = book {
            let local = match &refund {
                Some(receipts) => book.refund(&key, receipts, now, cost),
                None if cost > 0 => book.spend(&key, now, cost),
                None => None,
            };
            if let Some(decision) = local {
                return RedisFuture::ready(Ok(decision));
            }
        }
        if refund.is_some() {
            inner.denials.remove(&key);
        } else if cost == 1 {
            if let Some(denied) = inner.denials.get(&key, now) {
                return RedisFuture::ready(Ok(denied));
            }
        }
        // While Redis is known to be down, the failure policy answers at once.
        if let Some(health) = inner.store.health.down(&key) {
            let asked = Asked::check_or_refund(refund.is_some());
            return RedisFuture::ready(inner.answered_down(&health, key, now, cost, asked));
        }
        self.remote(key, now, cost, refund, book)
    }

    /// [`run`](Self::run) once neither a lease, a remembered denial nor Redis known down
    /// answers: one round trip.
    #[inline(never)]
    fn remote(
        &self,
        key: Key,
        now: u64,
        cost: u64,
        refund: Option<Vec<u64>>,
        book: Option<&LeaseBook>,
    ) -> RedisFuture {
        let plan = match book {
            Some(book) if refund.is_none() && cost > 0 => book.plan(&key, now, false),
            _ => Plan::Exact,
        };
        // A call that takes a slice ends in the book whatever becomes of it, even when its
        // future is dropped before it is first polled.
        let done = self.done(&key, &plan);
        let table = self.clone();
        RedisFuture::pending(Box::pin(async move {
            let _done = done;
            let result = match plan {
                Plan::Exact => table.call(&key, now, cost, refund.as_deref()).await,
                plan => table.leased(&key, now, cost, plan).await,
            };
            let inner = &table.inner;
            match result {
                Ok(decision) => {
                    if cost == 1 && refund.is_none() && !decision.allowed {
                        inner.denials.insert(key, now, &decision);
                    }
                    Ok(decision)
                }
                Err(error) => {
                    let asked = Asked::check_or_refund(refund.is_some());
                    inner.failed(error, key, now, cost, asked)
                }
            }
        }))
    }

    /// When `plan`'s call takes a slice, a guard that ends it in the book when dropped.
    fn done(&self, key: &Key, plan: &Plan) -> Option<OnDrop<impl FnOnce() + Send>> {
        let Plan::Lease { ticket, .. } = *plan else {
            return None;
        };
        let (table, key) = (self.clone(), key.clone());
        Some(OnDrop::new(move || {
            if let Some(book) = &table.inner.leases {
                book.done(&key, ticket);
            }
        }))
    }

    /// One round trip: the script, bounded by the timeout.
    async fn call(
        &self,
        key: &Key,
        now: u64,
        cost: u64,
        refund: Option<&[u64]>,
    ) -> Result<Decision, Error> {
        let mode = match refund {
            Some(receipts) => Mode::Refund(cost, receipts),
            None => Mode::Check(cost),
        };
        let reply = self.round_trip(key, now, mode).await?;
        reply::decision(&reply, &self.inner.limits, A::TIERED)
    }

    /// A request of `cost` for a hot key: after waiting for the slice another call is taking
    /// (spent from it when it holds enough), a lease or an exact check. A lease is one round
    /// trip that decides the request and takes a slice of up to `want` units of what is left
    /// on top (giving `back` an ended slice's units first), kept in the table's book.
    async fn leased(&self, key: &Key, now: u64, cost: u64, plan: Plan) -> Result<Decision, Error> {
        let inner = &self.inner;
        let Some(book) = inner.leases.as_ref() else {
            return self.call(key, now, cost, None).await;
        };
        // A lease planned in `run` has its guard there; one planned here after a wait gets its
        // own below.
        let (plan, _done) = match plan {
            Plan::Wait(mut slice) => {
                let waiting = Instant::now();
                // The other call ends within the timeout: it is bounded by it.
                let _ = tokio::time::timeout(inner.store.timeout, slice.changed()).await;
                // The slice is spent no later than its end, counting the time that passed
                // meanwhile. (The call below still names `now`: it began then.)
                let waited = saturating_nanos(waiting.elapsed());
                let later = now.saturating_add(waited);
                if let Some(decision) = book.spend(key, later, cost) {
                    return Ok(decision);
                }
                // Leases may have stopped meanwhile (refunds told of).
                if !inner.leasing() {
                    return self.call(key, now, cost, None).await;
                }
                let plan = book.plan(key, later, true);
                // Whatever becomes of the call (an error, a drop mid-way), the checks that wait
                // for it wake.
                let done = self.done(key, &plan);
                (plan, done)
            }
            plan => (plan, None),
        };
        let Plan::Lease { back, ticket, want } = plan else {
            return self.call(key, now, cost, None).await;
        };
        let share = book.leases.share;
        let back = back.as_ref();
        let mode = Mode::Lease {
            cost,
            want,
            share,
            back,
        };
        let sent = Instant::now();
        let reply = self.round_trip(key, now, mode).await?;
        let figures = 6 * inner.limits.len();
        // A blocked key's reply has no slice.
        let (decision, units, life) = match reply.len() {
            n if n == figures + 2 => {
                let tail = |i: usize| u64::try_from(reply[figures + i].0).ok();
                let bad = || Error::protocol("unexpected lease in the Redis script's reply");
                (
                    reply::decision(&reply[..figures], &inner.limits, A::TIERED)?,
                    tail(0).ok_or_else(bad)?,
                    tail(1).ok_or_else(bad)?,
                )
            }
            _ => (reply::decision(&reply, &inner.limits, A::TIERED)?, 0, 0),
        };
        // Spent here no later than the slice's end in Redis: the call left at `now`, before
        // Redis began the slice's life. On Redis's clock, a margin of a thousandth for the
        // rates of the two clocks.
        let (life, deadline) = if inner.store.caller_clock {
            (life, None)
        } else {
            let life = life - life / 1024;
            (life, sent.checked_add(Duration::from_nanos(life)))
        };
        Ok(book.granted(key, ticket, now, deadline, decision, units, life))
    }
}
