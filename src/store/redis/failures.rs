//! The count of failures the failure policy answered, `tollgate_store_failures_total{policy,
//! on_failure}` (feature `metrics`): registered once per recorder rather than per failure, so
//! that a check answered while Redis is down does not build the counter's key and labels.

use std::sync::Arc;

/// The failure counter of one policy and its failure policy.
pub(crate) struct FailureCounter {
    #[cfg(feature = "metrics")]
    policy: Arc<str>,
    #[cfg(feature = "metrics")]
    on_failure: &'static str,
    /// The counter as each of the first recorders it met registered it, beside the
    /// recorder's address: the one in force before a recorder is installed, the global one
    /// installed later, local ones. A recorder met after these has its counter registered
    /// on each failure.
    #[cfg(feature = "metrics")]
    registered: [std::sync::OnceLock<Registered>; 4],
}

#[cfg(feature = "metrics")]
struct Registered {
    recorder: usize,
    counter: metrics::Counter,
}

impl FailureCounter {
    /// The counter of failures of `policy` answered by `on_failure` (`open`, `closed` or
    /// `local`).
    pub(crate) fn new(policy: &Arc<str>, on_failure: &'static str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = (policy, on_failure);
        Self {
            #[cfg(feature = "metrics")]
            policy: Arc::clone(policy),
            #[cfg(feature = "metrics")]
            on_failure,
            #[cfg(feature = "metrics")]
            registered: Default::default(),
        }
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
    pub(crate) fn increment(&self) {
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
}
