use super::{RedisAlgorithm, RedisTier};
use crate::algorithm::TokenBucket;

/// Every token bucket the store accepts (interval, capacity and capacity plus `max_delay` at
/// most 2^53 ns) decides exactly as in memory: the deficit and the costs that fit are exact
/// doubles, and the absolute times are wide integers (`wide.lua`).
impl RedisAlgorithm for TokenBucket {
    const LUA: &'static str = concat!(
        include_str!("../lua/wide.lua"),
        "\n",
        include_str!("../lua/token_bucket.lua")
    );

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, self.parts()));
    }
}
