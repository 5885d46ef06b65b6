use super::{Figure, RedisAlgorithm, RedisTier, INTERVAL, LIMIT, PERIOD};
use crate::algorithm::Hybrid;

/// Every hybrid quota the store accepts (limit and period at most 2^53) decides exactly as in
/// memory: the whole quota of smooth tokens (`limit × T`, up to 2^54 ns), the negative
/// penalty, the times and the figures of the decision are wide integers (`wide.lua`), and
/// figures above 2^53 are replied as decimal text.
impl RedisAlgorithm for Hybrid {
    const LUA: &'static str = concat!(
        include_str!("../lua/wide.lua"),
        "\n",
        include_str!("../lua/hybrid.lua")
    );
    const NAME: &'static str = "hybrid";
    const FIGURES: &'static [Figure] = &[LIMIT, PERIOD, INTERVAL];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        let params = [self.limit(), self.period_nanos(), self.interval_nanos()];
        tiers.push(RedisTier::new(self, params));
    }

    /// A window lasts a period; the bucket after it lacks at most a period below empty, and
    /// refills a whole quota (`limit × T`) from there.
    fn lifetime(&self) -> u64 {
        let quota = self.limit().saturating_mul(self.interval_nanos());
        self.period_nanos().saturating_mul(2).saturating_add(quota)
    }
}
