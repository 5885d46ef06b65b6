use super::{bucket_lifetime, Figure, Leasing, RedisAlgorithm, RedisTier};
use super::{CAPACITY, INTERVAL, SHORTER_OR_SMALLER, WITH_DELAY};
use crate::algorithm::{Gcra, LeakyBucket};

/// GCRA's script keeps times relative to the current second in doubles: with every figure at
/// most 2^52 ns (52 days), a TAT up to a second plus the bound ahead stays exact. A debt (a
/// charge past the bound) may take the TAT further: it is kept as a wide integer.
const MAX_FIGURE: u64 = 1 << 52;

/// GCRA's module, after `make_debts()`: the wide integers and the debts it keeps with them,
/// defined by the calls that meet a debt only (see `gcra.lua`).
const LUA: &str = concat!(
    "local function make_debts()\n",
    include_str!("../lua/wide.lua"),
    "\n",
    include_str!("../lua/debt.lua"),
    "\nreturn { wide = wide, wadd = wadd, wsub = wsub, wlt = wlt, wnum = wnum, wnorm = wnorm, \
     wparse = wparse, wformat = wformat, wttl = wttl, wcost = wcost, wtimes = wtimes, \
     charged_end = charged_end, in_debt = in_debt, owed_units = owed_units }\nend\n",
    include_str!("../lua/gcra.lua")
);

impl RedisAlgorithm for Gcra {
    const LUA: &'static str = LUA;
    const MAX_FIGURE: u64 = MAX_FIGURE;
    const NAME: &'static str = "gcra";
    const LEASING: Leasing = Leasing::Bucket;
    const FIGURES: &'static [Figure] = &[
        INTERVAL,
        ("tolerance (interval x burst, in ns)", SHORTER_OR_SMALLER),
        ("tolerance plus max_delay (in ns)", WITH_DELAY),
        CAPACITY,
    ];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, params(self)));
    }

    /// No admission sets the TAT further than the bound ahead; a lease margin holds at most
    /// its own length past the TAT.
    fn lifetime(&self) -> u64 {
        bucket_lifetime(self.interval_nanos(), self.bound_nanos())
    }
}

const QUEUE: Figure = ("queue length (interval x burst, in ns)", SHORTER_OR_SMALLER);

impl RedisAlgorithm for LeakyBucket {
    const LUA: &'static str = LUA;
    const MAX_FIGURE: u64 = MAX_FIGURE;
    const NAME: &'static str = "leaky_bucket";
    const FIGURES: &'static [Figure] = &[INTERVAL, INTERVAL, QUEUE, QUEUE];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, params(self.gcra())));
    }

    fn lifetime(&self) -> u64 {
        self.gcra().bound_nanos()
    }
}

/// The interval, the tolerance, the bound (tolerance and longest wait) and the capacity that
/// `remaining` counts against, in nanoseconds: what the script decides with.
fn params(gcra: &Gcra) -> [u64; 4] {
    [
        gcra.interval_nanos(),
        gcra.tolerance_nanos(),
        gcra.bound_nanos(),
        gcra.capacity_nanos(),
    ]
}
