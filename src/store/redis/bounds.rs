//! The figures each algorithm's script decides exactly, and the refusal of a policy beyond
//! them: a misconfiguration, reported where the limiter is built.

use super::algorithms::{RedisAlgorithm, RedisTier};
use crate::Error;

/// The tiers of `algorithm` as its script decides them; or why a policy so decided cannot be
/// kept in Redis (a sliding log too long, a figure too large for its script): an error of kind
/// [`Misconfigured`](crate::ErrorKind::Misconfigured) whose message names the figure, its
/// value, the bound and how to bring it within.
pub(crate) fn tiers<A: RedisAlgorithm>(
    policy: &str,
    algorithm: &A,
) -> Result<Vec<RedisTier>, Error> {
    if let Some(message) = algorithm.refusal() {
        return Err(Error::misconfigured(message));
    }
    let mut tiers: Vec<RedisTier> = Vec::new();
    algorithm.redis_tiers(&mut tiers);
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
                return Err(Error::misconfigured(format!(
                    "tollgate::RedisStore: the policy {policy:?}{tier} cannot be kept in Redis: its \
                     {alg} {figure} is {value}, above the bound of {max} ({days} days) within \
                     which the Redis script decides exactly; choose {fix} so that it is at most \
                     {max}, or keep this limit in a MemoryStore",
                    alg = A::NAME,
                    days = max / 86_400_000_000_000,
                )));
            }
        }
    }
    Ok(tiers)
}
