//! Reading a sliding-window state at one instant: the estimate, and the waits it implies.
//!
//! Time is counted in *units* of `1/k` ns from the state's base, so that every sub-window is
//! exactly `period` units long, whatever `period / k` leaves over; all products stay in `u128`.

use std::time::Duration;

use super::{SlidingWindow, SlidingWindowState};

/// A state read at one instant. Time is measured in *units* of `1/k` ns from the state's
/// `base`, so that each sub-window is exactly `period` units long.
pub(super) struct Frame<'a> {
    /// The counters in the window: `live[0]` straddles the window's start, `live[k]` (when
    /// present) is the current sub-window. Counters past the end of the slice are zero.
    pub(super) live: &'a [u64],
    /// The current sub-window's index from `base`.
    pub(super) index: u128,
    /// How far into the current sub-window, in units: `0..period`.
    pub(super) offset: u128,
}

impl Frame<'_> {
    /// A fresh state's frame: no counters, at the start of its first sub-window.
    pub(super) const FRESH: Self = Frame {
        live: &[],
        index: 0,
        offset: 0,
    };
}

impl SlidingWindow {
    pub(super) fn k(&self) -> u128 {
        // At most 64.
        self.sub_windows as u128
    }

    /// `state` read at `now`, or `None` when it is fresh: no admitted request weighs in the
    /// estimate any more (or the counters are another configuration's).
    #[inline]
    pub(super) fn frame<'a>(&self, state: &'a SlidingWindowState, now: u64) -> Option<Frame<'a>> {
        if state.counts.len() != self.sub_windows + 1 {
            return None;
        }
        let (k, p) = (self.k(), u128::from(self.period));
        let at = now.max(state.last);
        let units = u128::from(at.saturating_sub(state.base)) * k;
        let (index, offset) = div_rem(units, p);
        let last_index = div_rem(u128::from(state.last.saturating_sub(state.base)) * k, p).0;
        // Sub-windows passed since the newest counter's.
        let passed = usize::try_from(index - last_index).ok()?;
        let live = state.counts.get(passed..)?;
        live.iter().any(|&c| c > 0).then_some(Frame {
            live,
            index,
            offset,
        })
    }

    /// The counter straddling the window's start and the sum of those wholly inside, `ahead`
    /// sub-windows from the frame's.
    /// Which of `state`'s counters holds the requests counted at `at` (a time in the
    /// sub-window they were added to), when that counter is still live in `frame`.
    pub(super) fn counter_of(
        &self,
        state: &SlidingWindowState,
        frame: &Frame<'_>,
        at: u64,
    ) -> Option<usize> {
        let (k, p) = (self.k() as i128, i128::from(self.period));
        // Times before the base (which moves up by whole periods) fall in sub-windows of
        // negative index.
        let index = |t: u64| {
            let units = (i128::from(t) - i128::from(state.base)) * k;
            units.div_euclid(p)
        };
        let back = index(state.last) - index(at);
        let counter = i128::try_from(self.sub_windows).ok()? - back;
        let first_live = state.counts.len() - frame.live.len();
        usize::try_from(counter)
            .ok()
            .filter(|&c| c >= first_live && c < state.counts.len())
    }

    pub(super) fn split(&self, frame: &Frame<'_>, ahead: usize) -> (u128, u128) {
        let partial = frame.live.get(ahead).copied().map_or(0, u128::from);
        let full = frame
            .live
            .get(ahead + 1..)
            .unwrap_or_default()
            .iter()
            .map(|&c| u128::from(c))
            .sum();
        (partial, full)
    }

    /// Whether a request of `cost` passes with `partial` weighing `weight / period` and `full`
    /// counting in full: `partial × weight + (full + cost) × period ≤ limit × period`.
    pub(super) fn fits(&self, partial: u128, weight: u128, full: u128, cost: u64) -> bool {
        let (limit, p) = (u128::from(self.limit), u128::from(self.period));
        let Some(room) = limit.checked_sub(full + u128::from(cost)) else {
            return false;
        };
        // Both sides are below 2^128.
        partial * weight <= room * p
    }

    /// `⌊limit − estimate⌋` for the frame, with `extra` just admitted in the current sub-window.
    pub(super) fn remaining(&self, frame: &Frame<'_>, extra: u64) -> u64 {
        let p = u128::from(self.period);
        let (partial, full) = self.split(frame, 0);
        let (whole, part) = div_rem(partial * (p - frame.offset), p);
        let weighed = whole + u128::from(part > 0);
        let left = u128::from(self.limit).saturating_sub(full + u128::from(extra) + weighed);
        u64::try_from(left).unwrap_or(0)
    }

    /// The wait from `now` until `units` past `base`: the first nanosecond at or after it.
    pub(super) fn until(&self, base: u64, units: u128, now: u64) -> Duration {
        let (whole, part) = div_rem(units, self.k());
        crate::algorithm::until(u128::from(base) + whole + u128::from(part > 0), now)
    }

    /// The wait until the frame is fresh: when its newest non-zero counter (or the current
    /// sub-window, when `extra` was just admitted there) leaves the estimate.
    pub(super) fn reset_after(
        &self,
        base: u64,
        frame: &Frame<'_>,
        extra: u64,
        now: u64,
    ) -> Duration {
        let newest = if extra > 0 {
            Some(self.sub_windows)
        } else {
            frame.live.iter().rposition(|&c| c > 0)
        };
        newest.map_or(Duration::ZERO, |newest| {
            let leaves = frame.index + newest as u128 + 1;
            self.until(base, leaves * u128::from(self.period), now)
        })
    }

    /// The wait until a request of `cost` (at most `limit`) passes, when it does not now.
    pub(super) fn retry_after(
        &self,
        base: u64,
        frame: &Frame<'_>,
        cost: u64,
        now: u64,
    ) -> Duration {
        let (limit, p) = (u128::from(self.limit), u128::from(self.period));
        // Sub-window by sub-window: the estimate only falls within one (the straddling counter
        // weighs less and less) and from one to the next (that counter leaves, the next
        // straddles). `k + 1` sub-windows on, nothing is left and the request passes.
        for ahead in 0..=self.sub_windows + 1 {
            let (partial, full) = self.split(frame, ahead);
            let Some(room) = limit.checked_sub(full + u128::from(cost)) else {
                continue;
            };
            // It passes once the straddling counter's weight `period − offset` is at most this.
            // (Always, when nothing straddles or the product is past 2^128.)
            let weight = (room.checked_mul(p))
                .and_then(|r| checked_div(r, partial))
                .unwrap_or(p);
            // In the current sub-window this is past the frame's offset, as the request does
            // not pass now.
            let offset = p.saturating_sub(weight);
            if offset < p {
                let units = (frame.index + ahead as u128) * p + offset;
                return self.until(base, units, now);
            }
        }
        // Unreachable for a cost of at most `limit`: the last sub-window holds nothing.
        Duration::ZERO
    }
}

/// `(n / d, n % d)`, without a division where a compare answers (`d` is 1, or `n` is less
/// than `2 × d`: a time within the current sub-window or the next, the common case), else by a
/// 64-bit division when both fit in 64 bits (always, but for periods or times past 2⁶⁴ / 64
/// ns, some 9 years): a 128-bit division is a call into a slow routine, and even a 64-bit one
/// takes longer than the rest of a check's arithmetic.
#[inline]
pub(super) fn div_rem(n: u128, d: u128) -> (u128, u128) {
    if d == 1 {
        return (n, 0);
    }
    if n < d {
        return (0, n);
    }
    if n - d < d {
        return (1, n - d);
    }
    match (u64::try_from(n), u64::try_from(d)) {
        (Ok(n), Ok(d)) if d > 0 => (u128::from(n / d), u128::from(n % d)),
        _ => (n / d, n % d),
    }
}

/// `n / d` rounded down, `None` when `d` is 0: [`div_rem`]'s quotient.
#[inline]
pub(super) fn checked_div(n: u128, d: u128) -> Option<u128> {
    (d > 0).then(|| div_rem(n, d).0)
}
