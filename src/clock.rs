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

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
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

    /// A future that completes once `duration` has passed on this clock: the layer waits on it
    /// before passing on a request whose decision has a [`delay`](crate::Decision::delay)
    /// (the leaky bucket, and shaping with `max_delay`).
    ///
    /// The default sleeps on the tokio timer, so delayed requests need a tokio runtime (axum,
    /// tonic and hyper-util servers run in one). [`ManualClock`] overrides it to wake when the
    /// clock is advanced.
    fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::new(tokio::time::sleep(duration))
    }
}

/// The future returned by [`Clock::sleep`].
#[must_use = "a sleep does nothing unless polled"]
pub struct Sleep {
    inner: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Sleep {
    /// Wraps a future that completes when the time is up.
    pub fn new(sleep: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(sleep),
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.as_mut().poll(cx)
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").finish_non_exhaustive()
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
/// to the limiter. Its [`sleep`](Clock::sleep) completes when the clock is moved past the end
/// of the sleep, so requests a layer delays pass exactly when the test says.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    nanos: AtomicU64,
    /// Sleeps that have not ended, by the time they end.
    sleepers: Mutex<Vec<(u64, Waker)>>,
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
            .shared
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(by))
            });
        self.wake();
    }

    /// Sets the clock to `to` since its origin, unless that is earlier than the current time:
    /// the clock never goes backwards.
    pub fn set(&self, to: Duration) {
        let to = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        self.shared.nanos.fetch_max(to, Ordering::AcqRel);
        self.wake();
    }

    /// Wakes the sleeps that have ended.
    fn wake(&self) {
        let now = self.now_nanos();
        let ended: Vec<Waker> = {
            let mut sleepers = self.sleepers();
            let (ended, waiting) = std::mem::take(&mut *sleepers)
                .into_iter()
                .partition(|(until, _)| *until <= now);
            *sleepers = waiting;
            ended.into_iter().map(|(_, waker)| waker).collect()
        };
        ended.into_iter().for_each(Waker::wake);
    }

    fn sleepers(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Waker)>> {
        self.shared
            .sleepers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        self.shared.nanos.load(Ordering::Acquire)
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let duration = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let until = self.now_nanos().saturating_add(duration);
        let clock = self.clone();
        Sleep::new(std::future::poll_fn(move |cx| {
            if clock.now_nanos() >= until {
                return Poll::Ready(());
            }
            let mut sleepers = clock.sleepers();
            sleepers.retain(|(_, waker)| !waker.will_wake(cx.waker()));
            sleepers.push((until, cx.waker().clone()));
            drop(sleepers);
            // The clock may have moved between the first look and the registration.
            if clock.now_nanos() >= until {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }))
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

    fn sleep(&self, duration: Duration) -> Sleep {
        (**self).sleep(duration)
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
    fn manual_sleeps_end_when_the_clock_passes_them() {
        let clock = ManualClock::new();
        let mut short = clock.sleep(Duration::from_millis(100));
        let mut long = clock.sleep(Duration::from_millis(300));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut short).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut long).poll(&mut cx).is_pending());
        clock.advance(Duration::from_millis(100));
        assert!(Pin::new(&mut short).poll(&mut cx).is_ready());
        assert!(Pin::new(&mut long).poll(&mut cx).is_pending());
        clock.set(Duration::from_millis(300));
        assert!(Pin::new(&mut long).poll(&mut cx).is_ready());
        assert!(clock.sleepers().is_empty());
        let mut zero = clock.sleep(Duration::ZERO);
        assert!(Pin::new(&mut zero).poll(&mut cx).is_ready());
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
