//! What a policy does with the failures its failure policy answered: counts them in
//! `tollgate_store_failures_total{policy, on_failure}` (feature `metrics`), registered once per
//! recorder rather than per failure, so that a check answered while Redis is down does not build
//! the counter's key and labels; and logs a warning, at most one every ten seconds.

use std::borrow::Borrow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::Error;

/// How often a failing store logs its warning, at most: once per this many ns.
const WARN_EVERY: u64 = 10_000_000_000;

/// The failures of one policy and its failure policy.
pub(crate) struct FailureCounter {
    policy: Arc<str>,
    on_failure: &'static str,
    /// When the last failure was logged (the limiter's time, ns), plus one; 0 for never.
    warned: AtomicU64,
    /// The counter as each of the first recorders it met registered it, beside the
    /// recorder's address: the one in force before a recorder is installed, the global one
    /// installed later, local ones. A recorder met after these has its counter registered
    /// on each failure.
    #[cfg(feature = "metrics")]
    registered: [std::sync::OnceLock<Registered>; 4],
    /// The count of failures Redis refused as full, answered `closed` whatever the failure
    /// policy: `None` when that is this one's.
    #[cfg(feature = "metrics")]
    full: Option<Box<FailureCounter>>,
}

#[cfg(feature = "metrics")]
struct Registered {
    recorder: usize,
    counter: metrics::Counter,
}

impl FailureCounter {
    /// The failures of `policy` answered by `on_failure` (`open`, `closed` or `local`).
    pub(crate) fn new(policy: &Arc<str>, on_failure: &'static str) -> Self {
        Self {
            policy: Arc::clone(policy),
            on_failure,
            warned: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            registered: Default::default(),
            #[cfg(feature = "metrics")]
            full: (on_failure != "closed").then(|| Box::new(Self::new(policy, "closed"))),
        }
    }

    /// The policy's name.
    pub(crate) fn policy(&self) -> &Arc<str> {
        &self.policy
    }

    /// Counts a failure at `now` and logs `error` (made only when logged), unless a failure
    /// was logged less than ten seconds before.
    #[inline]
    pub(crate) fn note<E: Borrow<Error>>(&self, now: u64, error: impl FnOnce() -> E) {
        self.increment();
        if self.due(now) {
            self.log(error().borrow(), self.on_failure);
        }
    }

    /// Counts a failure that Redis refused as full (`closed`, whatever the failure policy),
    /// and logs it as [`note`](Self::note) does.
    pub(crate) fn note_full(&self, now: u64, error: &Error) {
        #[cfg(feature = "metrics")]
        self.full.as_deref().unwrap_or(self).increment();
        if self.due(now) {
            self.log(error, "closed");
        }
    }

    /// Whether a warning is due at `now` (none logged in the ten seconds before); if so, the
    /// next is due ten seconds later.
    fn due(&self, now: u64) -> bool {
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

    /// Logs `error`, failing `on_failure`. The message names the policy, never a key.
    fn log(&self, error: &Error, on_failure: &str) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            policy = &*self.policy,
            on_failure,
            kind = ?error.kind(),
            "Redis rate limit store failed ({error}); failing {on_failure} until it answers \
             again (logged at most every 10 s)"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = (error, on_failure);
    }

    /// The counter, registered with the recorder in force.
    #[cfg(feature = "metrics")]
    fn register(&self) -> metrics::Counter {
        metrics::counter!(
            "tollgate_store_failures_total",
            "policy" => metrics::SharedString::from_shared(Arc::clone(&self.policy)),
            "on_failure" => self.on_failure
        )
    }

    /// Counts one failure with the recorder in force.
    #[inline]
    fn increment(&self) {
        #[cfg(feature = "metrics")]
        metrics::with_recorder(|recorder| {
            // The recorder's address tells recorders apart: the global one lives for the
            // program, and a local one for the scope that installed it.
            let at = std::ptr::from_ref(recorder).cast::<()>() as usize;
            for slot in &self.registered {
                let registered = slot.get_or_init(|| Registered {
                    recorder: at,
                    counter: self.register(),
                });
                if registered.recorder == at {
                    registered.counter.increment(1);
                    return;
                }
            }
            self.register().increment(1);
        });
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    fn count(recorder: &DebuggingRecorder) -> Vec<u64> {
        recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "tollgate_store_failures_total")
            .map(|(key, _, _, value)| {
                let labels: Vec<_> = key.key().labels().map(|l| l.value().to_owned()).collect();
                assert_eq!(labels, ["login", "local"]);
                match value {
                    DebugValue::Counter(n) => n,
                    other => panic!("not a counter: {other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn each_recorder_counts_the_failures_made_while_it_is_in_force() {
        let counter = FailureCounter::new(&Arc::from("login"), "local");
        // Counted with no recorder: nowhere.
        counter.increment();
        let first = DebuggingRecorder::new();
        metrics::with_local_recorder(&first, || {
            counter.increment();
            counter.increment();
        });
        let second = DebuggingRecorder::new();
        metrics::with_local_recorder(&second, || counter.increment());
        metrics::with_local_recorder(&first, || counter.increment());
        assert_eq!(count(&first), [3]);
        assert_eq!(count(&second), [1]);
        // Past the recorders the counter keeps: counted all the same.
        let later: Vec<DebuggingRecorder> = (0..6).map(|_| DebuggingRecorder::new()).collect();
        for (i, recorder) in later.iter().enumerate() {
            for _ in 0..=i {
                metrics::with_local_recorder(recorder, || counter.increment());
            }
        }
        for (i, recorder) in later.iter().enumerate() {
            assert_eq!(count(recorder), [i as u64 + 1]);
        }
        // A snapshot drains the counters: one more since the last.
        metrics::with_local_recorder(&second, || counter.increment());
        assert_eq!(count(&second), [1]);
    }

    #[test]
    fn failures_redis_refused_as_full_count_as_closed() {
        let counter = FailureCounter::new(&Arc::from("login"), "local");
        let recorder = DebuggingRecorder::new();
        let full = Error::new(crate::ErrorKind::Full, "OOM command not allowed");
        metrics::with_local_recorder(&recorder, || {
            counter.note_full(0, &full);
            counter.note_full(1, &full);
            counter.increment();
        });
        let mut counts: Vec<(Vec<String>, u64)> = recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let labels = key.key().labels().map(|l| l.value().to_owned()).collect();
                let DebugValue::Counter(n) = value else {
                    panic!("not a counter: {value:?}")
                };
                (labels, n)
            })
            .collect();
        counts.sort();
        assert_eq!(
            counts,
            [
                (vec!["login".to_owned(), "closed".to_owned()], 2),
                (vec!["login".to_owned(), "local".to_owned()], 1),
            ]
        );
    }
}
