//! Time sources: [`SystemClock`] for production, [`ManualClock`] for tests and simulation.
//!
//! A limiter asks its clock for the time once per decision. Every algorithm works in integer
//! nanoseconds since the clock's origin, so a decision depends only on the clock's readings.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::clock::{Clock, ManualClock};
//!
//! let clock = ManualClock::new();
//! let view = clock.clone(); // clones share one time
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(view.now(), Duration::from_millis(1500));
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A monotonic source of time for a limiter.
pub trait Clock: Send + Sync + 'static {
    /// The time elapsed since the clock's origin. Must never go backwards.
    fn now(&self) -> Duration;

    /// [`now`](Self::now) in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
    #[inline]
    fn now_nanos(&self) -> u64 {
        let now = self.now();
        now.as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(now.subsec_nanos()))
    }
}

/// The operating system's monotonic clock ([`std::time::Instant`]).
///
/// All `SystemClock`s in a process share one origin, so limiters that share a store agree on
/// the time. It never goes backwards and does not read the processor's time-stamp counter
/// directly, which on some machines differs between cores.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(origin())
    }
}

/// A clock that moves only when told to: exact, instant tests and simulations.
///
/// It starts at zero. Clones share the same time, so a test keeps one clone and gives another
/// to the limiter.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the clock to `to` since its origin, unless that is earlier than the current time:
    /// the clock never goes backwards.
    pub fn set(&self, to: Duration) {
        let to = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(to, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Acquire))
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

impl<C: Clock> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> Duration {
        (**self).now()
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_never_goes_backwards() {
        let c = ManualClock::new();
        c.advance(Duration::from_secs(5));
        c.set(Duration::from_secs(2));
        assert_eq!(c.now(), Duration::from_secs(5));
        c.set(Duration::from_secs(7));
        assert_eq!(c.now_nanos(), 7_000_000_000);
        c.advance(Duration::MAX);
        assert_eq!(c.now_nanos(), u64::MAX);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock;
        let mut last = c.now_nanos();
        for _ in 0..10_000 {
            let now = c.now_nanos();
            assert!(now >= last);
            last = now;
        }
    }
}
