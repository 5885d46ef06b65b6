use super::{RedisAlgorithm, RedisTier};
use crate::algorithm::{Gcra, LeakyBucket};

impl RedisAlgorithm for Gcra {
    const LUA: &'static str = include_str!("../lua/gcra.lua");

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, self.parts()));
    }
}

impl RedisAlgorithm for LeakyBucket {
    const LUA: &'static str = include_str!("../lua/gcra.lua");

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, self.gcra().parts()));
    }
}
