//! Layers of every algorithm, for the tests of live quotas (`Handle::set_quotas`).
#![allow(dead_code)]

use std::time::Duration;

use tollgate::algorithm::Quotas;
use tollgate::{Quota, RateLimitLayer};

/// The quotas the properties of live quotas pick from: periods of 500 ms to a minute,
/// intervals that are not whole ms (a third of a second, 60/7 s), bursts above and below
/// the limit.
pub fn pool() -> Vec<Quota> {
    vec![
        Quota::per_second(1),
        Quota::per_second(3),
        Quota::new(5, Duration::from_secs(2)),
        Quota::per_minute(7),
        Quota::new(2, Duration::from_millis(500)).with_burst(4),
        Quota::per_second(10).with_burst(2),
    ]
}

/// What [`layer_of`] builds, by kind.
pub const KINDS: [&str; 8] = [
    "gcra",
    "token_bucket",
    "leaky_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "hybrid",
    "aligned_fixed_window",
];

/// A layer of algorithm `kind` (an index into [`KINDS`]) over `quotas`, as tiers when
/// `tiered` (else over the first quota alone).
pub fn layer_of(kind: usize, quotas: Vec<Quota>, tiered: bool) -> RateLimitLayer {
    fn make<Q: Quotas>(kind: usize, q: Q) -> RateLimitLayer {
        match kind {
            0 => RateLimitLayer::gcra(q),
            1 => RateLimitLayer::token_bucket(q),
            2 => RateLimitLayer::leaky_bucket(q),
            3 => RateLimitLayer::fixed_window(q),
            4 => RateLimitLayer::sliding_window(q),
            5 => RateLimitLayer::sliding_log(q),
            6 => RateLimitLayer::hybrid(q),
            _ => RateLimitLayer::fixed_window(q).aligned(),
        }
    }
    if tiered {
        make(kind, quotas)
    } else {
        make(kind, quotas[0].clone())
    }
}
