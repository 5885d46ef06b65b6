//! Denials remembered locally until they end, so a client that keeps knocking costs no round
//! trip to Redis until it may pass again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::{Decision, Key};

/// A denial and the limiter's time (ns) when it was decided.
struct Denial {
    decided: u64,
    until: u64,
    decision: Decision,
}

/// At most `capacity` denials of cost 1, each until its `retry_after`.
///
/// Serving them from here is correct on every server: a denial says the key may not pass
/// before `retry_after`, and no other server's requests can make that time come sooner (they
/// only ever push it further out). Only a refund gives capacity back early, and a refund
/// through this store forgets the key's denial.
pub(crate) struct DenyCache {
    capacity: usize,
    denials: Mutex<HashMap<Key, Denial>>,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            denials: Mutex::new(HashMap::new()),
        }
    }

    /// The denial of `key` that still holds at `now`, aged to `now`.
    pub(crate) fn get(&self, key: &Key, now: u64) -> Option<Decision> {
        if self.capacity == 0 {
            return None;
        }
        let mut denials = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
        let denial = denials.get(key)?;
        if denial.until <= now {
            denials.remove(key);
            return None;
        }
        Some(aged(&denial.decision, now.saturating_sub(denial.decided)))
    }

    /// Remembers a denial decided at `now`, when it says how long it holds.
    pub(crate) fn insert(&self, key: Key, now: u64, decision: &Decision) {
        let Some(retry_after) = decision.retry_after else {
            return;
        };
        if self.capacity == 0 || decision.allowed {
            return;
        }
        let wait = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
        let until = now.saturating_add(wait);
        let mut denials = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
        if denials.len() >= self.capacity && !denials.contains_key(&key) {
            denials.retain(|_, d| d.until > now);
            if denials.len() >= self.capacity {
                return;
            }
        }
        denials.insert(
            key,
            Denial {
                decided: now,
                until,
                decision: decision.clone(),
            },
        );
    }

    /// Forgets the denial of `key` (its capacity was given back).
    pub(crate) fn remove(&self, key: &Key) {
        if self.capacity > 0 {
            let mut denials = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
            denials.remove(key);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.denials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// `decision` as it stands `elapsed` ns later: every wait is that much shorter.
fn aged(decision: &Decision, elapsed: u64) -> Decision {
    let elapsed = Duration::from_nanos(elapsed);
    let age = |d: &Decision| {
        let mut d = d.clone();
        d.reset_after = d.reset_after.saturating_sub(elapsed);
        d.retry_after = d.retry_after.map(|r| r.saturating_sub(elapsed));
        d
    };
    let tiers = decision.tiers();
    if tiers.len() > 1 || !std::ptr::eq(&tiers[0], decision) {
        let tiers: Vec<Decision> = tiers.iter().map(age).collect();
        age(decision).with_tiers(tiers)
    } else {
        age(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_ms: u64) -> Decision {
        Decision::deny(
            5,
            0,
            Duration::from_millis(retry_ms + 100),
            Some(Duration::from_millis(retry_ms)),
        )
    }

    #[test]
    fn a_denial_holds_until_its_retry_after_and_ages() {
        let cache = DenyCache::new(10);
        let ms = 1_000_000;
        cache.insert(Key::from("a"), 1000 * ms, &denied(300));
        let d = cache.get(&Key::from("a"), 1100 * ms).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
        assert_eq!(d.reset_after, Duration::from_millis(300));
        assert!(cache.get(&Key::from("a"), 1300 * ms).is_none());
        assert_eq!(cache.len(), 0, "an ended denial is forgotten");
        assert!(cache.get(&Key::from("b"), 1000 * ms).is_none());
    }

    #[test]
    fn never_and_allowed_decisions_are_not_kept() {
        let cache = DenyCache::new(10);
        cache.insert(
            Key::from("never"),
            0,
            &Decision::deny(5, 0, Duration::ZERO, None),
        );
        cache.insert(
            Key::from("ok"),
            0,
            &Decision::allow(5, 4, Duration::from_secs(1)),
        );
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_cache_is_bounded_and_makes_room_from_ended_denials() {
        let cache = DenyCache::new(2);
        let ms = 1_000_000;
        cache.insert(Key::from(1u64), 0, &denied(10));
        cache.insert(Key::from(2u64), 0, &denied(1000));
        cache.insert(Key::from(3u64), 5 * ms, &denied(1000));
        assert_eq!(cache.len(), 2, "full: nothing has ended");
        assert!(cache.get(&Key::from(3u64), 5 * ms).is_none());
        cache.insert(Key::from(3u64), 20 * ms, &denied(1000));
        assert!(cache.get(&Key::from(3u64), 20 * ms).is_some());
        assert!(cache.get(&Key::from(2u64), 20 * ms).is_some());
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn tiered_denials_age_every_tier() {
        let cache = DenyCache::new(2);
        let ms = 1_000_000;
        let d = denied(300).with_tiers(vec![denied(300), denied(100)]);
        cache.insert(Key::from("t"), 0, &d);
        let got = cache.get(&Key::from("t"), 50 * ms).unwrap();
        assert_eq!(got.tiers()[1].retry_after, Some(Duration::from_millis(50)));
        assert_eq!(got.retry_after, Some(Duration::from_millis(250)));
    }

    #[test]
    fn a_zero_capacity_cache_keeps_nothing() {
        let cache = DenyCache::new(0);
        cache.insert(Key::from("a"), 0, &denied(300));
        assert!(cache.get(&Key::from("a"), 0).is_none());
    }
}
