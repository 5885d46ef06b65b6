//! What the layer tells operators: `tracing` events (feature `tracing`) and `metrics` counters
//! and a histogram (feature `metrics`). Without either feature everything here compiles to
//! nothing.
//!
//! Metrics, each labelled with the policy name:
//! - `tollgate_decisions_total{policy, outcome}`, `outcome` one of `allowed`, `delayed` (allowed
//!   after a shaping delay), `denied`, `dry_run_denied` (would have been denied), `key_error`
//!   (no key could be found), `store_error`;
//! - `tollgate_store_latency_seconds{policy}`, a histogram of how long the store took to
//!   decide;
//! - `tollgate_bans_total{policy, outcome}`, `outcome` `banned` or `dry_run_banned` (would have
//!   been banned): the keys a layer's [`ban`](super::RateLimitLayer::ban) blocked, reported
//!   by the ban itself (`limiter/ban.rs`).
//!
//! Logs never show a key at `info` level or above: events name its kind (`ipv4`, `bytes`, ...);
//! the key itself appears only at `trace` level.
//!
//! Denials are reported at `info` level so that an operator sees a limit at work: the first
//! denial of a layer (its own quotas and every plan's) at once, then at most one report every
//! 10 s (on the layer's clock) with how many requests were denied since the last one. Every
//! decision is logged at `debug`.

use std::sync::atomic::Ordering;

use super::response::{Denials, Responder};
use crate::{Decision, Key};

/// How often, at most, a layer's denials are reported at `info` level, in nanoseconds.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
const REPORT_EVERY: u64 = 10_000_000_000;

#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
impl Denials {
    /// Counts one denial at `now`: how many to report when a report is due.
    fn record(&self, now: u64) -> Option<u64> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let next = self.next.load(Ordering::Relaxed);
        if now < next {
            return None;
        }
        let after = now.saturating_add(REPORT_EVERY).max(1);
        self.next
            .compare_exchange(next, after, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        Some(self.count.swap(0, Ordering::Relaxed))
    }
}

/// Each policy's instruments, read from its answers: its name, and the layer's dry run and
/// denials (shared by the layer's plans, so that plans made again after their eviction, or
/// many at once, do not multiply reports).
impl Responder {
    /// The policy name as a metrics label, shared (no copy of the name).
    #[cfg(feature = "metrics")]
    fn label(&self) -> metrics::SharedString {
        metrics::SharedString::from_shared(self.name.clone())
    }

    /// Counts one outcome.
    #[inline]
    pub(crate) fn count(&self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("tollgate_decisions_total", "policy" => self.label(), "outcome" => outcome)
            .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = outcome;
    }

    /// Records a decision: counted, and logged at debug level with the key's kind; a denial
    /// also counts in the layer's denials, reported at `info` level on the layer's clock
    /// (`now`, read only then).
    #[inline]
    pub(crate) fn observe(
        &self,
        decision: &Decision,
        key_kind: &'static str,
        now: impl FnOnce() -> u64,
    ) {
        let outcome = match (decision.allowed, self.settings.dry_run) {
            (true, _) if !decision.delay.is_zero() => "delayed",
            (true, _) => "allowed",
            (false, true) => "dry_run_denied",
            (false, false) => "denied",
        };
        self.count(outcome);
        #[cfg(feature = "tracing")]
        {
            tracing::debug!(
                policy = &*self.name,
                key_kind,
                outcome,
                remaining = decision.remaining,
                "rate limit decision"
            );
            if !decision.allowed && tracing::enabled!(tracing::Level::INFO) {
                self.denied(decision, key_kind, now());
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (key_kind, now);
    }

    /// Reports denials (in a dry run, those that would have been) at `info` level: the first
    /// at once, then at most one report every [`REPORT_EVERY`] for the layer, with the count
    /// since the last and the policy, key kind and wait of the denial that reports them. Out
    /// of line: denials only.
    #[cfg(feature = "tracing")]
    #[cold]
    #[inline(never)]
    fn denied(&self, decision: &Decision, key_kind: &'static str, now: u64) {
        let Some(denied) = self.settings.denials.record(now) else {
            return;
        };
        let retry_after_ms = decision.retry_after.map(crate::decision::ceil_millis);
        let what = if self.settings.dry_run {
            "dry run: requests would have been rate limited"
        } else {
            "requests rate limited"
        };
        tracing::info!(
            policy = &*self.name,
            denied,
            key_kind,
            retry_after_ms,
            "{what} (since the last report; reported at most every 10 s)"
        );
    }

    /// Runs `f` (the check and what follows from it) in a debug-level `rate_limit` span with
    /// the policy and the key's kind, so that events from the store nest under it.
    ///
    /// The span is made only when a `tracing` subscriber takes debug-level spans: without one,
    /// a disabled span still costs a few dozen nanoseconds a request (more when `tracing`'s
    /// `log` feature is on, as axum's default features turn it on), for nothing.
    #[inline]
    pub(crate) fn in_span<R>(&self, key_kind: &'static str, f: impl FnOnce() -> R) -> R {
        #[cfg(feature = "tracing")]
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            return tracing::debug_span!("rate_limit", policy = &*self.name, key_kind).in_scope(f);
        }
        let _ = key_kind;
        f()
    }

    /// Starts timing a store call.
    #[inline]
    pub(crate) fn start(&self) -> Timer {
        Timer {
            #[cfg(feature = "metrics")]
            start: std::time::Instant::now(),
        }
    }

    /// Records how long the store took since `timer` started.
    #[inline]
    pub(crate) fn finish(&self, timer: Timer) {
        #[cfg(feature = "metrics")]
        metrics::histogram!("tollgate_store_latency_seconds", "policy" => self.label())
            .record(timer.start.elapsed().as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = timer;
    }
}

/// When a store call started (nothing without the `metrics` feature).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    start: std::time::Instant,
}

/// Logs the key at trace level, the only level that shows keys.
#[inline]
pub(crate) fn trace_key(key: &Key) {
    #[cfg(feature = "tracing")]
    tracing::trace!(key = ?key, kind = key.kind(), "rate limit key");
    #[cfg(not(feature = "tracing"))]
    let _ = key;
}
