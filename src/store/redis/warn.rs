//! The warning a failing store logs: at most one every ten seconds per policy.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

/// How often a failing store logs its warning, at most: once per this many ns.
const WARN_EVERY: u64 = 10_000_000_000;

/// When a policy last logged a failure.
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    /// When the last failure was logged (the limiter's time, ns), plus one; 0 for never.
    warned: AtomicU64,
}

impl Warnings {
    /// Logs `error` of the policy `policy`, failing `on_failure`, unless one was logged less
    /// than ten seconds before `now`. The message names the policy, never a key.
    pub(crate) fn warn(&self, error: &Error, now: u64, policy: &str, on_failure: &'static str) {
        if self.due(now) {
            self.log(error, policy, on_failure);
        }
    }

    /// Whether a warning is due at `now` (none logged in the ten seconds before); if so, the
    /// caller logs it ([`log`](Self::log)) and the next is due ten seconds later.
    pub(crate) fn due(&self, now: u64) -> bool {
        let last = self.warned.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last - 1) >= WARN_EVERY;
        due && self
            .warned
            .compare_exchange(
                last,
                now.saturating_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Logs `error` of the policy `policy`, failing `on_failure`. The message names the
    /// policy, never a key.
    pub(crate) fn log(&self, error: &Error, policy: &str, on_failure: &'static str) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            policy,
            on_failure,
            kind = ?error.kind(),
            "Redis rate limit store failed ({error}); failing {on_failure} until it answers \
             again (logged at most every 10 s)"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = (error, policy, on_failure);
    }
}
