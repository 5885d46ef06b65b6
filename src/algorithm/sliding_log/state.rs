use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

/// A key's [`SlidingLog`](super::SlidingLog) state: its admitted requests, oldest first, one
/// entry per instant.
///
/// Each entry holds its time and the running total of the cost logged up to and including it,
/// so the cost between any two entries is one subtraction: a check reads the cost in the window
/// without summing it, and finds how much must leave the window before a denied request could
/// pass by a search, not a scan.
///
/// 40 bytes per key, plus 16 bytes per entry of the log's capacity on the heap: at most `limit`
/// entries are in use (every entry holds a cost of at least 1 and the window at most `limit`),
/// and the capacity grows by doubling. The default (an empty log) is the fresh state and holds
/// no heap memory. Entries that have left the window are dropped when the next request is
/// admitted. Two states are equal when they hold the same `(time, cost)` entries.
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct SlidingLogState {
    /// `(time in ns, running total of the cost up to and including this entry)`, oldest first.
    ///
    /// The totals wrap at 2^64. The costs in a log add up to less than 2^64 (an admission
    /// leaves at most `limit` in the log, and refunds only take away), so the wrapping
    /// difference of two totals is the exact cost between them.
    entries: VecDeque<(u64, u64)>,
    /// The running total before the first entry.
    base: u64,
}

impl SlidingLogState {
    /// A log of `(time, cost)` entries, oldest first, with distinct times and costs of at
    /// least 1 (for tests).
    #[cfg(test)]
    pub(super) fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut state = Self::default();
        for (t, cost) in entries {
            state.push(t, cost);
        }
        state
    }

    /// The log's `(time in nanoseconds, cost)` entries, oldest first. Entries that have left the
    /// window may remain until the next admitted request.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        let mut before = self.base;
        self.entries.iter().map(move |&(t, total)| {
            let cost = total.wrapping_sub(before);
            before = total;
            (t, cost)
        })
    }

    /// How many entries the log holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The newest entry's time.
    #[inline]
    pub(super) fn newest(&self) -> Option<u64> {
        self.entries.back().map(|&(t, _)| t)
    }

    /// The time of the entry at `index`.
    #[inline]
    pub(super) fn time(&self, index: usize) -> Option<u64> {
        self.entries.get(index).map(|&(t, _)| t)
    }

    /// The running total before the entry at `index` (`index` at most `len()`).
    #[inline]
    fn total_before(&self, index: usize) -> u64 {
        let before = index.checked_sub(1).and_then(|i| self.entries.get(i));
        before.map_or(self.base, |&(_, total)| total)
    }

    /// The running total after the newest entry.
    #[inline]
    fn total(&self) -> u64 {
        self.entries.back().map_or(self.base, |&(_, total)| total)
    }

    /// The cost of the entries from `index` on.
    #[inline]
    pub(super) fn cost_from(&self, index: usize) -> u64 {
        self.total().wrapping_sub(self.total_before(index))
    }

    /// The index of the oldest entry at `at` or later whose time is within `period` before
    /// `at` (`len()` when none is). Amortised by where it lies: `O(log k)` for the `k`-th
    /// entry, so `O(1)` when the oldest entry is still in the window.
    #[inline]
    pub(super) fn first_live(&self, at: u64, period: u64) -> usize {
        self.first_where(0, |t, _| at.saturating_sub(t) < period)
    }

    /// The index of the oldest entry from `from` on by which the entries from `from` have
    /// logged at least `cost` (`len()` when they never do). `O(log k)` for the `k`-th entry
    /// after `from`.
    #[inline]
    pub(super) fn covering(&self, from: usize, cost: u64) -> usize {
        let before = self.total_before(from);
        self.first_where(from, |_, total| total.wrapping_sub(before) >= cost)
    }

    /// The first index from `from` on whose entry meets `found`, for a `found` that is false
    /// up to some index and true from there on: a galloping search from `from`, so the work
    /// grows with the logarithm of the distance, not of the log.
    #[inline]
    pub(super) fn first_where(&self, from: usize, found: impl Fn(u64, u64) -> bool) -> usize {
        let n = self.entries.len();
        let meets = |i: usize| {
            let (t, total) = self.entries[i];
            found(t, total)
        };
        // Every index below `lo` misses; `hi` meets, or is `n`.
        let (mut lo, mut hi, mut step) = (from, from, 1usize);
        while hi < n && !meets(hi) {
            lo = hi + 1;
            hi = hi.saturating_add(step).min(n);
            step = step.saturating_mul(2);
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if meets(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Drops the entries before `index`.
    #[inline]
    pub(super) fn drop_before(&mut self, index: usize) {
        if index == 0 {
            return;
        }
        self.base = self.total_before(index);
        self.entries.drain(..index);
    }

    /// Logs `cost` at `at`, not before the newest entry: added to the newest entry when it is
    /// at `at`. Allocates only when the log outgrows its capacity.
    #[inline]
    pub(super) fn push(&mut self, at: u64, cost: u64) {
        let total = self.total().wrapping_add(cost);
        match self.entries.back_mut() {
            Some((t, last)) if *t == at => *last = total,
            _ => self.entries.push_back((at, total)),
        }
    }

    /// The index of the entry at exactly `at`, searched from `from`.
    pub(super) fn find(&self, from: usize, at: u64) -> Option<usize> {
        let index = self.first_where(from, |t, _| t >= at);
        (self.time(index)? == at).then_some(index)
    }

    /// Takes up to `cost` from the entry at `index` (dropped when nothing is left of it).
    ///
    /// Only differences of totals count, so either the totals from `index` on go down or
    /// those before it (and the base) go up: the shorter side moves, in time in the entries
    /// on that side, at most half the log.
    pub(super) fn take(&mut self, index: usize, cost: u64) {
        let Some(&(_, total)) = self.entries.get(index) else {
            return;
        };
        let own = total.wrapping_sub(self.total_before(index));
        let taken = own.min(cost);
        if index < self.entries.len() - index {
            self.base = self.base.wrapping_add(taken);
            for (_, total) in self.entries.range_mut(..index) {
                *total = total.wrapping_add(taken);
            }
        } else {
            for (_, total) in self.entries.range_mut(index..) {
                *total = total.wrapping_sub(taken);
            }
        }
        if taken == own {
            self.entries.remove(index);
        }
    }
}

impl PartialEq for SlidingLogState {
    fn eq(&self, other: &Self) -> bool {
        self.entries().eq(other.entries())
    }
}

impl Eq for SlidingLogState {}

impl Hash for SlidingLogState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        for entry in self.entries() {
            entry.hash(state);
        }
    }
}
