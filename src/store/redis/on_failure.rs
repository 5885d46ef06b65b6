//! [`OnFailure`]: what a check answers when Redis fails or does not answer in time.

use crate::store::MemoryStore;

/// What a check does when Redis fails or does not answer within the timeout.
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
