use std::sync::Arc;

use super::response::Responder;
use crate::algorithm::Algorithm;
use crate::store::Store;
use crate::RateLimiter;

/// Everything a [`RateLimit`](super::RateLimit) service needs besides its inner service.
pub(crate) struct Config<A: Algorithm, K, St: Store<A>, C> {
    pub(crate) limiter: RateLimiter<A, St, C>,
    pub(crate) key: K,
    pub(crate) responder: Arc<Responder>,
}

impl<A: Algorithm, K: Clone, St: Store<A>, C: Clone> Clone for Config<A, K, St, C> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            responder: self.responder.clone(),
        }
    }
}
