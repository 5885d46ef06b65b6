//! What the oracle tests share: durations as integer nanoseconds, a `Decision` compared field
//! by field, and proptest settings that keep no regression files.
#![allow(dead_code)]

use std::time::Duration;

use proptest::test_runner::Config;
use tollgate::Decision;

/// `d` in nanoseconds, the unit the algorithms work in.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("duration fits in u64 ns")
}

/// The expected decision, field by field (`Decision` is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset_after: Duration,
    pub retry_after: Option<Duration>,
    pub delay: Duration,
}

impl From<Decision> for Expected {
    fn from(d: Decision) -> Self {
        Self {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after: d.reset_after,
            retry_after: d.retry_after,
            delay: d.delay,
        }
    }
}

/// `cases` cases a property, and no regression files: the oracles' failures are replayed from
/// the seed printed with them.
pub fn cases(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}
