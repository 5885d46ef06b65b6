//! Stores written for the tests.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tollgate::algorithm::Algorithm;
use tollgate::store::{MemoryStore, Sealed, Store};
use tollgate::{Decision, Error, Key};

/// A store that answers like a remote one: the check is pending once before it decides (from
/// an inner `MemoryStore`), or fails.
#[derive(Clone, Default)]
pub struct SlowStore {
    memory: MemoryStore,
    fail: bool,
}

impl SlowStore {
    /// A store whose every check fails, as when the remote store is down.
    pub fn failing() -> Self {
        Self {
            fail: true,
            ..Self::default()
        }
    }
}

/// A [`SlowStore`]'s table for one policy.
pub struct SlowTable<A: Algorithm>
where
    MemoryStore: Store<A>,
{
    memory: <MemoryStore as Store<A>>::Table,
    fail: bool,
}

impl<A: Algorithm> Clone for SlowTable<A>
where
    MemoryStore: Store<A>,
{
    fn clone(&self) -> Self {
        Self {
            memory: self.memory.clone(),
            fail: self.fail,
        }
    }
}

/// A [`SlowStore`]'s answer: pending once, then ready.
pub struct SlowCheck {
    yielded: bool,
    result: Option<Result<Decision, Error>>,
}

impl SlowCheck {
    fn after_a_yield(result: Result<Decision, Error>) -> Self {
        Self {
            yielded: false,
            result: Some(result),
        }
    }
}

impl Future for SlowCheck {
    type Output = Result<Decision, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.result.take().expect("polled after completion"))
    }
}

/// The result of a memory store's future, which is always ready at once.
fn at_once<F: Future + Unpin>(mut fut: F) -> F::Output {
    match Pin::new(&mut fut).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("a memory store's future is ready at once"),
    }
}

impl Sealed for SlowStore {}

/// Every algorithm the memory store keeps: a layer takes this store for any of them.
impl<A: Algorithm> Store<A> for SlowStore
where
    MemoryStore: Store<A>,
{
    type Table = SlowTable<A>;
    type Future = SlowCheck;

    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> Result<SlowTable<A>, Error> {
        Ok(SlowTable {
            memory: self.memory.table(policy, shared, algorithm)?,
            fail: self.fail,
        })
    }

    fn charge(table: &SlowTable<A>, key: Key, now: u64, cost: u64) -> SlowCheck {
        SlowCheck::after_a_yield(at_once(<MemoryStore as Store<A>>::charge(
            &table.memory,
            key,
            now,
            cost,
        )))
    }

    fn refund(
        table: &SlowTable<A>,
        key: Key,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> SlowCheck {
        SlowCheck::after_a_yield(at_once(<MemoryStore as Store<A>>::refund(
            &table.memory,
            key,
            admission,
            now,
            cost,
        )))
    }

    fn check(table: &SlowTable<A>, key: Key, now: u64, cost: u64) -> SlowCheck {
        let result = if table.fail {
            Err(Error::store("connection refused"))
        } else {
            at_once(<MemoryStore as Store<A>>::check(
                &table.memory,
                key,
                now,
                cost,
            ))
        };
        SlowCheck::after_a_yield(result)
    }

    fn succeed(
        &self,
        policy: &str,
        previous: &SlowTable<A>,
        algorithm: &A,
        now: u64,
    ) -> Result<SlowTable<A>, Error> {
        Ok(SlowTable {
            memory: self
                .memory
                .succeed(policy, &previous.memory, algorithm, now)?,
            fail: self.fail,
        })
    }

    fn settle(&self, table: &SlowTable<A>, now: u64) -> SlowTable<A> {
        SlowTable {
            memory: self.memory.settle(&table.memory, now),
            fail: table.fail,
        }
    }

    fn peek(table: &SlowTable<A>, key: Key, now: u64) -> SlowCheck {
        Self::check(table, key, now, 0)
    }

    fn reset(table: &SlowTable<A>, key: Key, now: u64) -> Update {
        <MemoryStore as Store<A>>::reset(&table.memory, key, now)
    }

    fn block(table: &SlowTable<A>, key: Key, now: u64, duration: Duration) -> Update {
        <MemoryStore as Store<A>>::block(&table.memory, key, now, duration)
    }
}

/// The future of a store's change to one key.
type Update = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'static>>;
