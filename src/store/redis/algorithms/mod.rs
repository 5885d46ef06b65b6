//! What the Redis store needs of each algorithm: its Lua module, and each tier's parameters.

mod gcra;
mod hybrid;
mod token_bucket;
mod windows;

use crate::algorithm::{Algorithm, Tiered};
use crate::store::MemoryAlgorithm;

mod sealed {
    /// How a module's tiers may be leased ([`Leases`](crate::store::Leases)).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Leasing {
        /// Never: every request is decided in Redis.
        Never,
        /// To the end of the (sub-)window a slice was counted in; with `calendar`, a tier
        /// whose third parameter is 1 has calendar-aligned windows, which no refund moves.
        Window { calendar: bool },
        /// Within the lease margin of a bucket (the module has `ALG.lease_life` and
        /// `margin(p)`), unless it shapes.
        Bucket,
    }
}

pub(crate) use self::sealed::Leasing;

/// An algorithm the [`RedisStore`](super::RedisStore) can run: every algorithm of this crate,
/// and tiers of them.
///
/// Each has a Lua module that decides exactly as its Rust reference (the crate's tests run
/// both on the same random sequences and compare every decision). The methods are the store's
/// own business, and the trait is sealed: only the crate's algorithms are
/// [`Algorithm`]s.
#[doc(hidden)]
pub trait RedisAlgorithm: MemoryAlgorithm {
    /// The Lua module that defines `ALG`, between the shared prelude and driver.
    #[doc(hidden)]
    const LUA: &'static str;

    /// Whether and how a server may spend a slice of a key's budget after Redis counted it
    /// ([`Leases`](crate::store::Leases)): the module has `ALG.lease_life`.
    #[doc(hidden)]
    const LEASING: Leasing = Leasing::Never;

    /// Whether decisions list one decision per tier ([`Tiered`]).
    #[doc(hidden)]
    const TIERED: bool = false;

    /// The largest parameter or limit the module decides with exactly (Lua numbers are
    /// doubles); the store refuses a policy with a larger one when it is built.
    #[doc(hidden)]
    const MAX_FIGURE: u64 = 1 << 53;

    /// The algorithm's name in the Redis keys of its states (`gcra`, `fixed_window`, ...): two
    /// algorithms never read each other's state.
    #[doc(hidden)]
    const NAME: &'static str;

    /// What each of a tier's parameters is and how to make it smaller, for the message that
    /// refuses a policy whose figures are too large: `(figure, fix)`.
    #[doc(hidden)]
    const FIGURES: &'static [(&'static str, &'static str)];

    /// Appends each tier's parameters, in order.
    #[doc(hidden)]
    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>);

    /// The longest a key's state takes to become fresh again after the request that last
    /// changed it, in ns: an upper bound on how long what a key used there matters, and so on
    /// how long a table taken over by new quotas still holds it. (A key is kept longer, by up
    /// to two spans, so that Redis's `volatile-ttl` evicts the least limited first; what it
    /// holds past this bound is fresh.)
    #[doc(hidden)]
    fn lifetime(&self) -> u64;

    /// Why the store cannot keep this algorithm's state within its time bound, beyond the
    /// bound on figures; `None` when it can.
    #[doc(hidden)]
    fn refusal(&self) -> Option<String> {
        None
    }
}

/// A figure of a tier and how to make it smaller, for the message that refuses a policy whose
/// figures are too large ([`RedisAlgorithm::FIGURES`]).
type Figure = (&'static str, &'static str);
const LIMIT: Figure = ("limit", "a smaller limit");
const PERIOD: Figure = ("period (in ns)", "a shorter period");
const INTERVAL: Figure = ("emission interval (period / limit, in ns)", SHORTER_OR_MORE);
const CAPACITY: Figure = ("capacity (interval x burst, in ns)", SHORTER_OR_SMALLER);
const SHORTER_OR_MORE: &str = "a shorter period or a larger limit";
const SHORTER_OR_SMALLER: &str = "a shorter period or a smaller burst";
const WITH_DELAY: &str = "a shorter period, a smaller burst or a shorter max_delay";

/// The lease margin of a bucket whose emission interval is `interval` ns and bound `bound` ns:
/// a sixteenth of the bound, at most 1 s, rounded down to whole intervals (`margin(p)` in
/// `gcra.lua` and `token_bucket.lua`). 0 when that is less than one interval: such a bucket is
/// not leased.
pub(crate) fn bucket_margin(interval: u64, bound: u64) -> u64 {
    let margin = (bound / 16).min(1_000_000_000);
    margin - margin % interval.max(1)
}

/// The longest a bucket's state lives: its bound, and the lease margin past it.
pub(crate) fn bucket_lifetime(interval: u64, bound: u64) -> u64 {
    bound.saturating_add(bucket_margin(interval, bound))
}

/// One tier as the script sees it: its parameters, and the `limit` its decisions report.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct RedisTier {
    pub(crate) params: Vec<u64>,
    pub(crate) limit: u64,
}

impl RedisTier {
    /// Whether this tier of a module leased as `leasing` may be leased: never a bucket that
    /// shapes (the bound is more than the tolerance: `max_delay`; a request taken from a slice
    /// would pass without the wait the algorithm gives it), nor one whose margin is less than
    /// one interval (a burst below 16, or an interval over 1 s).
    pub(crate) fn leasable(&self, leasing: Leasing) -> bool {
        match leasing {
            Leasing::Never => false,
            Leasing::Window { .. } => true,
            Leasing::Bucket => self.params[1] == self.params[2] && self.lease_margin(leasing) > 0,
        }
    }

    /// The margin the tier is decided with while slices of it may be out, in ns (0 for none):
    /// a bucket's slice lives no longer, and its bound is that much smaller meanwhile
    /// (`margin(p)` in the module; GCRA's and the token bucket's parameters are the interval,
    /// the tolerance or capacity, the bound, ...).
    pub(crate) fn lease_margin(&self, leasing: Leasing) -> u64 {
        match leasing {
            Leasing::Bucket => bucket_margin(self.params[0], self.params[2]),
            _ => 0,
        }
    }

    /// Whether the tier may still be leased when its admissions are refunded: no refund moves
    /// its windows (calendar-aligned fixed windows). Elsewhere a refund that empties a key
    /// starts its window again at the next admission, which Redis cannot see while slices
    /// are out.
    pub(crate) fn leases_with_refunds(&self, leasing: Leasing) -> bool {
        leasing == (Leasing::Window { calendar: true }) && self.params[2] == 1
    }

    /// A tier of `algorithm` decided by the script with `params`.
    pub(crate) fn new<A: Algorithm>(algorithm: &A, params: impl Into<Vec<u64>>) -> Self {
        // Every decision of one algorithm reports the same limit; a peek at a fresh key tells it.
        let limit = algorithm.check(&A::State::default(), 0, 0).decision.limit;
        Self {
            params: params.into(),
            limit,
        }
    }
}

impl<A: RedisAlgorithm> RedisAlgorithm for Tiered<A> {
    const LUA: &'static str = A::LUA;
    const TIERED: bool = true;
    const LEASING: Leasing = A::LEASING;
    const MAX_FIGURE: u64 = A::MAX_FIGURE;
    const NAME: &'static str = A::NAME;
    const FIGURES: &'static [(&'static str, &'static str)] = A::FIGURES;

    fn redis_tiers(&self, tiers: &mut Vec<RedisTier>) {
        for tier in self.tiers() {
            tier.redis_tiers(tiers);
        }
    }

    fn lifetime(&self) -> u64 {
        self.tiers().iter().map(A::lifetime).max().unwrap_or(0)
    }

    fn refusal(&self) -> Option<String> {
        self.tiers().iter().find_map(A::refusal)
    }
}
