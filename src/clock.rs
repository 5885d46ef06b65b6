//! Time sources: [`SystemClock`] for production (the processor's time-stamp counter where the
//! kernel trusts it, else the OS clock), [`OsClock`] (the OS clock always), [`ManualClock`] for
//! tests and simulation.
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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic source of time for a limiter.
///
/// The memory store reads the clock ([`now`](Self::now), [`now_nanos`](Self::now_nanos), or
/// [`wall_nanos`](Self::wall_nanos) for calendar windows) while it holds the read lock of a
/// key's shard, once it has found the key, so that the reading overlaps the lookup. So a
/// clock must answer at once and must never call into a limiter: one that checks a key of the
/// same store could wait on that lock for ever. A limiter reads its clock once when it is
/// built, so that a first reading that takes long (the [`SystemClock`] calibrates) happens
/// there.
pub trait Clock: Send + Sync + 'static {
    /// The time elapsed since the clock's origin. One thread's readings must never go
    /// backwards; readings on different cores may be out of order by a little, as the
    /// [`SystemClock`]'s are (its docs bound what that costs).
    fn now(&self) -> Duration;

    /// [`now`](Self::now) in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
    #[inline]
    fn now_nanos(&self) -> u64 {
        saturating_nanos(self.now())
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

    /// The wall-clock time: nanoseconds since the UNIX epoch in UTC, saturating at 0 and at
    /// `u64::MAX` (the year 2554). Read only by calendar windows
    /// ([`FixedWindow::aligned`](crate::algorithm::FixedWindow::aligned)), whose windows start
    /// at whole multiples of their period since the epoch, so that "1000 a day" resets at
    /// midnight UTC.
    ///
    /// Unlike [`now`](Self::now) it may jump either way (the system's time being set, NTP
    /// stepping it). The default reads [`SystemTime`]; [`ManualClock`] overrides it to move with
    /// the clock and to be set by hand.
    #[inline]
    fn wall_nanos(&self) -> u64 {
        since_epoch(SystemTime::now())
    }

    /// Whether this clock reads the system's time, as [`SystemClock`] and [`OsClock`] do (the
    /// default is `false`). A store that decides on its server's own clock (a `RedisStore`
    /// reads Redis `TIME`) ignores the limiter's clock, so a limiter or layer refuses to be
    /// built on such a store with a clock that does not: the store is then built to decide
    /// on the caller's clock (`RedisStore::with_caller_clock`), or the clock is left out.
    fn follows_system_time(&self) -> bool {
        false
    }
}

/// Nanoseconds from the UNIX epoch to `t` (0 before it, `u64::MAX` past the range).
#[inline]
fn since_epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, saturating_nanos)
}

/// `d` in nanoseconds, `u64::MAX` for a duration longer than some 584 years.
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The future returned by [`Clock::sleep`].
#[must_use = "a sleep does nothing unless polled"]
pub struct Sleep(Pin<Box<dyn Future<Output = ()> + Send>>);

impl Sleep {
    /// Wraps a future that completes when the time is up.
    pub fn new(sleep: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Box::pin(sleep))
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").finish_non_exhaustive()
    }
}

/// The default clock: the processor's time-stamp counter where the operating system trusts
/// it, the OS monotonic clock elsewhere.
///
/// One time source serves the whole process, chosen and calibrated once (the first reading, or
/// [`SystemClock::calibrate`]), so every `SystemClock` shares one origin and limiters that share
/// a store agree on the time. That origin is [`OsClock`]'s: the two clocks read the same time
/// (up to the calibration's drift, parts per million), so limiters on either may share a
/// store and a policy. Reading it costs one `rdtsc` and a multiply (about 11 ns on the
/// reference machine, against 32 ns for the OS clock: BENCHMARKS.md, "`check` on the memory
/// store").
///
/// **Where the counter is used.** On Linux on x86-64, when the kernel's own clock source is the
/// TSC (`/sys/devices/system/clocksource/clocksource0/current_clocksource` reads `tsc`): the
/// kernel has then checked at boot (and at CPU hot-plug) that the counters of all cores are
/// synchronized and tick at a constant rate, and switches away from the TSC when it finds
/// otherwise. The counter is read through [`quanta`](https://docs.rs/quanta), calibrated once
/// against the OS clock; `quanta` itself reads the OS clock instead when the processor lacks an
/// invariant TSC. Everywhere else (other systems, other architectures, a kernel on `hpet`,
/// `acpi_pm` or `kvm-clock`) this clock reads the OS monotonic clock, as [`OsClock`] does.
///
/// **Cost of the first reading.** Calibration runs once per process, on the first reading or on
/// [`SystemClock::calibrate`]: usually 10 to 20 ms, never more than 200 ms. Call `calibrate`
/// at start-up to keep that off the first request.
///
/// **Readings across cores.** One thread's readings never go backwards. A reading on one core
/// may be earlier, by a small `J`, than one taken an instant before on another core: the
/// counters are synchronized, but `rdtsc` is not a serializing instruction and may run a few
/// dozen cycles early, and the kernel tolerates a residual offset between cores (`J` is tens of
/// nanoseconds on a sound machine, under a microsecond on any the kernel accepts). Every
/// algorithm of this crate treats a time earlier than its key's state as no time elapsed, so a
/// backward reading never gives extra budget: with readings up to `J` early, every
/// algorithm admits, in any interval of true time, at most what it admits on a perfect clock
/// in an interval `J` longer. For GCRA, the token and leaky buckets: at most
/// `burst + (D + J) / T` requests in any interval of length `D` (with `T = period / limit`),
/// that is at most `⌈J / T⌉` more than a perfect clock, and none more while `J < T` (a limit
/// below a million per second, for `J` under a microsecond); for the sliding log, at most
/// `limit` in any window of `period − J`; for the fixed and sliding windows and the hybrid, at
/// most `limit` per window of the key's own windows, as on a perfect clock. `tests/algorithms/clock_jitter.rs`
/// checks these bounds for all seven algorithms, and tiers of them, with readings up to `J` early
/// at random.
///
/// Like `quanta`, the counter does not count time the machine spends suspended. The choice of
/// source is made once per process: if the kernel later stops trusting the TSC (its watchdog
/// finds it unstable), or the counter is reset (a resume from suspend on some platforms),
/// this clock keeps reading it; a reading behind the origin counts as the origin, which only
/// denies longer, never admits more. On such machines use [`OsClock`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// Chooses the process's time source and calibrates it now, rather than on the first
    /// reading (up to 200 ms the first time; nothing afterwards).
    pub fn calibrate() {
        let _ = counter();
    }

    /// Whether this process's `SystemClock` reads the processor's time-stamp counter (`true`) or
    /// the OS monotonic clock (`false`). Calibrates on the first call.
    pub fn reads_counter() -> bool {
        counter().is_some()
    }
}

/// The TSC through `quanta`, its raw reading at `origin`, and [`OsClock`]'s reading at that
/// moment (`offset`): the counter's readings are counted from `OsClock`'s origin, so the two
/// clocks agree (up to the calibration's drift) and may share a store.
struct Counter {
    clock: quanta::Clock,
    origin: u64,
    offset: u64,
}

/// The process's counter, or `None` where `SystemClock` reads the OS monotonic clock.
fn counter() -> Option<&'static Counter> {
    static COUNTER: OnceLock<Option<Counter>> = OnceLock::new();
    let counter = || {
        let clock = quanta::Clock::new();
        // `OsClock`'s reading, then the counter's, in this order.
        let (offset, origin) = (OsClock.now_nanos(), clock.raw());
        Counter {
            clock,
            origin,
            offset,
        }
    };
    COUNTER
        .get_or_init(|| kernel_trusts_tsc().then(counter))
        .as_ref()
}

/// Whether the kernel keeps time with the TSC (only ever on x86-64 Linux): it then found the
/// counters synchronized across cores and invariant, and it stops using them when it finds
/// otherwise.
fn kernel_trusts_tsc() -> bool {
    cfg!(all(target_os = "linux", target_arch = "x86_64"))
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        match counter() {
            // Zero for a counter behind the origin's (a core whose counter lags the first one
            // read): no time elapsed, never a wrap.
            Some(c) => c
                .offset
                .saturating_add(c.clock.delta_as_nanos(c.origin, c.clock.raw())),
            None => OsClock.now_nanos(),
        }
    }

    fn follows_system_time(&self) -> bool {
        true
    }
}

/// The operating system's monotonic clock ([`std::time::Instant`]) on every reading.
///
/// [`SystemClock`] reads the same clock where the processor's time-stamp counter is not to be
/// trusted; `OsClock` reads it everywhere, at some 20 to 40 ns a reading on x86-64 Linux
/// (vDSO `clock_gettime`). It never goes backwards, across cores either. All `OsClock`s in a
/// process share one origin.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsClock;

impl Clock for OsClock {
    #[inline]
    fn now(&self) -> Duration {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        Instant::now().saturating_duration_since(*ORIGIN.get_or_init(Instant::now))
    }

    fn follows_system_time(&self) -> bool {
        true
    }
}

/// A clock that moves only when told to: exact, instant tests and simulations.
///
/// It starts at zero. Clones share the same time, so a test keeps one clone and gives another
/// to the limiter. Its wall-clock time ([`Clock::wall_nanos`], read by calendar windows) starts
/// at the UNIX epoch and moves with it; [`set_wall_time`](Self::set_wall_time) sets it, either
/// way, as a system's time can be set. Its [`sleep`](Clock::sleep) completes when the clock is moved past the end
/// of the sleep, so requests a layer delays pass exactly when the test says.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    nanos: AtomicU64,
    /// The wall-clock time less `nanos`, wrapping: the wall-clock time is `nanos + wall`.
    wall: AtomicU64,
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
        let by = saturating_nanos(by);
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
        let to = saturating_nanos(to);
        self.shared.nanos.fetch_max(to, Ordering::AcqRel);
        self.wake();
    }

    /// Sets the wall-clock time ([`Clock::wall_nanos`]) to `to`, leaving [`now`](Clock::now)
    /// where it is: later readings of both move together again. It may go backwards, as a
    /// system's time may be set back; a time before the UNIX epoch reads as the epoch.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use tollgate::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(86_400)); // 1970-01-02, midnight
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(clock.wall_nanos(), 86_405_000_000_000);
    /// assert_eq!(clock.now(), Duration::from_secs(5));
    /// ```
    pub fn set_wall_time(&self, to: SystemTime) {
        let to = since_epoch(to);
        let now = self.now_nanos();
        self.shared
            .wall
            .store(to.wrapping_sub(now), Ordering::Release);
    }

    /// Wakes the sleeps that have ended.
    fn wake(&self) {
        let now = self.now_nanos();
        let mut ended = Vec::new();
        self.sleepers().retain(|(until, waker)| {
            *until > now || {
                ended.push(waker.clone());
                false
            }
        });
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

    #[inline]
    fn wall_nanos(&self) -> u64 {
        let wall = self.shared.wall.load(Ordering::Acquire);
        self.now_nanos().wrapping_add(wall)
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let until = self.now_nanos().saturating_add(saturating_nanos(duration));
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

    #[inline]
    fn wall_nanos(&self) -> u64 {
        (**self).wall_nanos()
    }

    fn follows_system_time(&self) -> bool {
        (**self).follows_system_time()
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
    fn system_and_os_clocks_are_monotonic_on_one_thread() {
        for clock in [&SystemClock as &dyn Clock, &OsClock] {
            let mut last = clock.now_nanos();
            for _ in 0..10_000 {
                let now = clock.now_nanos();
                assert!(now >= last);
                last = now;
            }
        }
    }

    #[test]
    fn the_system_clock_keeps_pace_with_the_os_clock() {
        SystemClock::calibrate();
        // A system reading between two OS readings at most 50 µs apart (a thread preempted in
        // between tries again), and the OS reading half-way.
        let paired = || loop {
            let before = OsClock.now_nanos();
            let system = SystemClock.now_nanos();
            let after = OsClock.now_nanos();
            if after - before < 50_000 {
                return (system, before + (after - before) / 2);
            }
        };
        let (s0, o0) = paired();
        let mut spin = 0u64;
        while OsClock.now_nanos() - o0 < 20_000_000 {
            spin = std::hint::black_box(spin + 1);
        }
        let (s1, o1) = paired();
        // Over 20 ms both measure the same time, within calibration error (parts per million)
        // and the pairing's 50 µs, whichever source the system clock reads.
        let (system, os) = (s1 - s0, o1 - o0);
        assert!(
            system.abs_diff(os) < os / 100 + 100_000,
            "{system} ns against {os} ns"
        );
    }
}
