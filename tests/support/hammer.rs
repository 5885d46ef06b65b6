//! Many limiters on one key at once, as many servers would be.
#![allow(dead_code)]

use tollgate::algorithm::Gcra;
use tollgate::store::RedisStore;
use tollgate::RateLimiter;

/// Runs `attempts` checks of `key` on every limiter at once (one task each) and returns how
/// many were allowed in all.
pub async fn admitted_together(
    limiters: Vec<RateLimiter<Gcra, RedisStore>>,
    key: &'static str,
    attempts: usize,
) -> u64 {
    let tasks: Vec<_> = limiters
        .into_iter()
        .map(|limiter| {
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..attempts {
                    if limiter.check(key).await.unwrap().allowed {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    admitted
}
