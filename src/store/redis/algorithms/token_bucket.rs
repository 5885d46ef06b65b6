use super::{bucket_lifetime, Figure, Leasing, RedisAlgorithm, RedisTier};
use super::{CAPACITY, INTERVAL, WITH_DELAY};
use crate::algorithm::TokenBucket;

/// Every token bucket the store accepts (interval, capacity and capacity plus `max_delay` at
/// most 2^53 ns) decides exactly as in memory: the deficit and the costs that fit are exact
/// doubles, and the absolute times are wide integers (`wide.lua`).
impl RedisAlgorithm for TokenBucket {
    const LUA: &'static str = concat!(
        include_str!("../lua/wide.lua"),
        "\n",
        include_str!("../lua/debt.lua"),
        "\n",
        include_str!("../lua/token_bucket.lua")
    );
    const NAME: &'static str = "token_bucket";
    const LEASING: Leasing = Leasing::Bucket;
    const FIGURES: &'static [Figure] = &[
        INTERVAL,
        CAPACITY,
        ("capacity plus max_delay (in ns)", WITH_DELAY),
        (
            "tokens in the capacity plus max_delay",
            "a smaller burst or a shorter max_delay",
        ),
    ];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        // The interval, the capacity, the bound (capacity and longest wait) and the largest
        // cost that fits in the bound, in nanoseconds and tokens.
        let (interval, bound) = (self.interval_nanos(), self.bound_nanos());
        let params = [interval, self.capacity_nanos(), bound, bound / interval];
        tiers.push(RedisTier::new(self, params));
    }

    /// The deficit never exceeds the bound, and refills at one ns per ns; a lease margin holds
    /// at most its own length past the refill.
    fn lifetime(&self) -> u64 {
        bucket_lifetime(self.interval_nanos(), self.bound_nanos())
    }
}
