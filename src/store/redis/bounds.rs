//! The figures each algorithm's script decides exactly, and the refusal of a policy beyond
//! them: a misconfiguration, reported where the limiter is built.

use super::algorithms::{RedisAlgorithm, RedisTier};
use crate::Error;

/// Why a policy decided by `algorithm` cannot be kept in Redis (a figure too large for its
/// script, a sliding log too long): an error of kind
/// [`Misconfigured`](crate::ErrorKind::Misconfigured) whose message says how to fix it.
pub(crate) fn check<A: RedisAlgorithm>(policy: &str, algorithm: &A) -> Result<(), Error> {
    if let Some(message) = algorithm.refusal() {
        return Err(Error::misconfigured(message));
    }
    let mut tiers: Vec<RedisTier> = Vec::new();
    algorithm.redis_tiers(&mut tiers);
    figures::<A>(policy, &tiers).map_err(Error::misconfigured)
}

/// Refuses a policy that a figure makes too large for `A`'s script, with a message that names
/// the figure, its value, the bound and how to bring it within.
fn figures<A: RedisAlgorithm>(policy: &str, tiers: &[RedisTier]) -> Result<(), String> {
    let max = A::MAX_FIGURE;
    for (n, tier) in tiers.iter().enumerate() {
        let named = tier.params.iter().enumerate().map(|(i, &value)| {
            let (figure, fix) = A::FIGURES
                .get(i)
                .copied()
                .unwrap_or(("parameter", "a shorter period or a smaller limit"));
            (figure, fix, value)
        });
        let limit = (
            "reported limit (burst)",
            "a smaller burst or limit",
            tier.limit,
        );
        for (figure, fix, value) in named.chain([limit]) {
            if value > max {
                let tier = if A::TIERED {
                    format!(" (tier {n})")
                } else {
                    String::new()
                };
                return Err(format!(
                    "tollgate::RedisStore: the policy {policy:?}{tier} cannot be kept in Redis: its \
                     {alg} {figure} is {value}, above the bound of {max} ({days} days) within \
                     which the Redis script decides exactly; choose {fix} so that it is at most \
                     {max}, or keep this limit in a MemoryStore",
                    alg = A::NAME,
                    days = max / 86_400_000_000_000,
                ));
            }
        }
    }
    Ok(())
}
