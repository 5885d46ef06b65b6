use super::{RedisAlgorithm, RedisTier};
use crate::algorithm::{Gcra, LeakyBucket};

/// GCRA's script keeps times relative to the current second in doubles: with every figure at
/// most 2^52 ns (52 days), a TAT up to a second plus the bound ahead stays exact.
const MAX_FIGURE: u64 = 1 << 52;

impl RedisAlgorithm for Gcra {
    const LUA: &'static str = include_str!("../lua/gcra.lua");
    const MAX_FIGURE: u64 = MAX_FIGURE;

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, self.parts()));
    }
}

impl RedisAlgorithm for LeakyBucket {
    const LUA: &'static str = include_str!("../lua/gcra.lua");
    const MAX_FIGURE: u64 = MAX_FIGURE;

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, self.gcra().parts()));
    }
}
