//! [`OnFailure`]: what a check answers when Redis fails or does not answer in time.

use crate::store::MemoryStore;

/// What a check does when Redis fails or does not answer within the timeout.
///
/// A charge (a cost settled above its reservation, [`RateLimiter::settle`](crate::RateLimiter::settle))
/// that Redis fails is answered with the error under `Open` and `Closed`: the debt is not
/// recorded, and the layer logs it. Under `Local` the local store is charged, so that it
/// counts the debt in the decisions it makes while Redis is away, and its standing is the
/// answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum OnFailure {
    /// Allow the request (fail open): availability before the limit.
    Open,
    /// Answer with an error (fail closed): the layer answers `503 Service Unavailable`
    /// (gRPC `UNAVAILABLE`) without calling the service.
    Closed,
    /// Decide in this local store (the default, with a new [`MemoryStore`]): each server
    /// limits on its own until Redis answers again.
    Local(MemoryStore),
}

impl Default for OnFailure {
    fn default() -> Self {
        Self::Local(MemoryStore::new())
    }
}
