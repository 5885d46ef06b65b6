use super::{Figure, Leasing, RedisAlgorithm, RedisTier, LIMIT, PERIOD};
use crate::algorithm::{FixedWindow, SlidingLog, SlidingWindow};

/// The window scripts keep counts and times (relative to the current second) in doubles, exact
/// to 2^53. With every figure below 2^53, a cost that is not exact as a number (2^53 + 1 reads
/// as 2^53) is still above every limit, as it should be.
const MAX_FIGURE: u64 = (1 << 53) - 1;

/// Parameters: the limit and the period (ns), each below 2^53 (104 days), and 1 for calendar
/// windows ([`FixedWindow::aligned`]; the period is then at least 1 ms), else 0.
///
/// The script is exact while a key's window starts at most 2^53 ns, less the period, after the
/// clock's reading (it always does on one clock that does not jump back by weeks); a window
/// further ahead is refused with an error rather than decided on rounded figures.
impl RedisAlgorithm for FixedWindow {
    const LUA: &'static str = concat!(
        include_str!("../lua/windows.lua"),
        "\n",
        include_str!("../lua/wide.lua"),
        "\n",
        include_str!("../lua/fixed_window.lua")
    );
    const MAX_FIGURE: u64 = MAX_FIGURE;
    const NAME: &'static str = "fixed_window";
    /// Calendar windows start at multiples of the period, whatever a refund does.
    const LEASING: Leasing = Leasing::Window { calendar: true };
    const FIGURES: &'static [Figure] = &[LIMIT, PERIOD, ("calendar flag", "no calendar windows")];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        let aligned = u64::from(self.is_aligned());
        tiers.push(RedisTier::new(
            self,
            [self.limit(), self.period_nanos(), aligned],
        ));
    }

    /// A window ends a period after it starts.
    fn lifetime(&self) -> u64 {
        self.period_nanos()
    }
}

/// Parameters: the limit, the period (ns), the sub-windows `k`, and the horizon
/// `period + ⌈period / k⌉`: how long an admitted request weighs in the estimate, and so the
/// longest `reset_after` and `retry_after` the script answers.
///
/// The horizon is a parameter so that the store's bound applies to it: it must stay below 2^53
/// ns (104 days), which takes the period below 2^53 × k / (k + 1) (52 days for the two-window
/// estimate); a longer one is refused rather than answered with a rounded wait. The script
/// reproduces the reference's 128-bit products exactly (in 24-bit limbs). It is exact while a
/// key's newest request is at most 2^53 ns, less the horizon, after the clock's reading; a
/// state further ahead is refused with an error.
impl RedisAlgorithm for SlidingWindow {
    const LUA: &'static str = concat!(
        include_str!("../lua/windows.lua"),
        "\n",
        include_str!("../lua/sliding_window.lua")
    );
    const MAX_FIGURE: u64 = MAX_FIGURE;
    const NAME: &'static str = "sliding_window";
    const LEASING: Leasing = Leasing::Window { calendar: false };
    const FIGURES: &'static [Figure] = &[
        LIMIT,
        PERIOD,
        ("sub-window count", "fewer sub-windows"),
        (
            "horizon (period + period / sub-windows, in ns)",
            "a shorter period or more sub-windows",
        ),
    ];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        let (limit, period) = (self.limit(), self.period_nanos());
        // At most 64.
        let k = self.sub_window_count() as u64;
        let horizon = period.saturating_add(period.div_ceil(k));
        tiers.push(RedisTier::new(self, [limit, period, k, horizon]));
    }

    /// An admitted request weighs in the estimate for the horizon, `period + ⌈period / k⌉`.
    fn lifetime(&self) -> u64 {
        let period = self.period_nanos();
        period.saturating_add(period.div_ceil(self.sub_window_count() as u64))
    }
}

/// The largest sliding log limit the Redis store keeps: a log holds at most `limit` entries,
/// and a call that rewrites it (a refund, or an admission that moves the log's base) stays
/// under a millisecond at this size (BENCHMARKS.md, "Sliding log in Redis").
pub(crate) const MAX_LOG_LIMIT: u64 = 500;

/// Parameters: the limit (at most `MAX_LOG_LIMIT`, 500) and the period (ns, below 2^53: 104
/// days). The log is one string of 16 bytes per entry, read where needed: a check costs a copy
/// of the live entries and `O(log k)` reads, a refund rewrites up to half of them.
///
/// The script is exact while a key's newest request is at most 2^53 ns, less the period,
/// after the clock's reading; a log further ahead is refused with an error.
impl RedisAlgorithm for SlidingLog {
    const LUA: &'static str = concat!(
        include_str!("../lua/windows.lua"),
        "\n",
        include_str!("../lua/sliding_log.lua")
    );
    const MAX_FIGURE: u64 = MAX_FIGURE;
    const NAME: &'static str = "sliding_log";
    const FIGURES: &'static [Figure] = &[LIMIT, PERIOD];

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        tiers.push(RedisTier::new(self, [self.limit(), self.period_nanos()]));
    }

    /// A logged request weighs for a period.
    fn lifetime(&self) -> u64 {
        self.period_nanos()
    }

    /// A limit above `MAX_LOG_LIMIT` (500): the store is being built with a quota it cannot
    /// keep within its time bound.
    fn refusal(&self) -> Option<String> {
        let limit = self.limit();
        (limit > MAX_LOG_LIMIT).then(|| {
            format!(
                "tollgate::RedisStore: a sliding_log limit of {limit} cannot be kept in Redis: the \
                 bound is {MAX_LOG_LIMIT} requests per period, within which every Redis call on a \
                 log stays under a millisecond; use sliding_window for this limit (fixed memory and \
                 time per key, an estimate of the same window), or keep the sliding log in a \
                 MemoryStore"
            )
        })
    }
}
