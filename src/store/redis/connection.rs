//! The store's connection (one Redis, a Redis Cluster, or the primary behind Sentinel), and
//! what its calls share: locks that outlive a panic, tasks spawned when a runtime runs, and
//! guards that act when a call is dropped.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::cluster::Cluster;
use super::sentinel::SentinelConnection;

/// A store's connection; clones share it.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(Cluster),
    Sentinel(SentinelConnection),
}

impl Connection {
    /// `cmd`'s reply.
    pub(crate) async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> redis::RedisResult<T> {
        cmd.query_async(&mut self.clone()).await
    }

    /// Calls found Redis silent (`why`): behind Sentinel, the primary is dropped and the
    /// sentinels are asked again (a frozen host keeps the connection open and never answers).
    pub(crate) fn stalled(&self, why: &str) {
        if let Self::Sentinel(c) = self {
            c.stalled(why);
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => {
                let mut c = c.current();
                Box::pin(async move { c.req_packed_command(cmd).await })
            }
            Self::Sentinel(c) => {
                c.on_primary(move |mut c| async move { c.req_packed_command(cmd).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => {
                let mut c = c.current();
                Box::pin(async move { c.req_packed_commands(pipeline, offset, count).await })
            }
            Self::Sentinel(c) => c.on_primary(move |mut c| async move {
                c.req_packed_commands(pipeline, offset, count).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.db(),
            Self::Sentinel(c) => c.db(),
        }
    }
}

/// `mutex`, locked: what a panic left behind is still the state.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `task` on the current tokio runtime; nothing runs without one.
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

/// Runs its action when dropped, unless [`defused`](Self::defuse) first.
pub(crate) struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub(crate) fn new(action: F) -> Self {
        Self(Some(action))
    }

    /// Drops the guard without its action.
    pub(crate) fn defuse(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(action) = self.0.take() {
            action();
        }
    }
}
