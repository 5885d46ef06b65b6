//! A table that takes over from another while its quotas change: each key carries over what it
//! used there, on its first request or when the table settles.

use std::sync::Arc;

use super::{Forgetting, MemoryTable};
use crate::store::memory::registry::Map;
use crate::store::memory::{MemoryAlgorithm, StateCell};
use crate::Key;

impl<A: MemoryAlgorithm> MemoryTable<A> {
    /// A key's `state` in `previous`, converted to this table's quotas at `now`; `None` when
    /// the key used nothing.
    fn carry(&self, previous: &Self, state: &A::State, now: u64) -> Option<A::State> {
        let algorithm = &self.algorithm;
        Some(algorithm.carried(&previous.algorithm, state, now))
            .filter(|s| !algorithm.is_fresh(s, now))
    }

    /// What `key`, which this table does not hold, used in the table it takes over from,
    /// converted to this table's quotas (read, not moved: every caller that finds the key
    /// missing computes the same state, and the first to insert it wins); `None` when the
    /// table takes over from none or the key used nothing there.
    pub(super) fn carried(&self, key: &Key, now: u64) -> Option<A::State> {
        let previous = self.previous.as_ref()?;
        let state = previous
            .map
            .get_with(previous.map.hash(key), key, StateCell::state)?;
        self.carry(previous, &state, now)
    }

    /// A table for `algorithm` (new quotas of the same shape) that takes over from `self`:
    /// its own keys, and what each key used here carried over on its first request, until
    /// [`settled`](Self::settled) has carried over the rest.
    pub(crate) fn succeeded(&self, algorithm: &A, max_keys: usize) -> Self {
        MemoryTable {
            map: Arc::new(Map::<A>::bounded(Some(max_keys))),
            // A block outlives a change of quotas.
            blocks: self.blocks.clone(),
            algorithm: algorithm.clone(),
            previous: Some(Arc::new(self.detached())),
        }
    }

    /// Whether the table takes over from another, whose keys it still carries over.
    #[cfg(feature = "redis")]
    pub(crate) fn carries(&self) -> bool {
        self.previous.is_some()
    }

    /// The same table without its predecessor: what [`settled`](Self::settled) makes of it
    /// once every key is carried over.
    pub(crate) fn detached(&self) -> Self {
        MemoryTable {
            previous: None,
            ..self.clone()
        }
    }

    /// Carries every key of the table this one takes over from that it does not hold yet
    /// (and that used anything), then lets that table go: the same table without a
    /// predecessor.
    pub(crate) fn settled(&self, now: u64) -> Self {
        if let Some(previous) = &self.previous {
            let algorithm = &self.algorithm;
            let forget = Forgetting { algorithm, now };
            previous.map.for_each(StateCell::state, |key, state| {
                let Some(carried) = self.carry(previous, &state, now) else {
                    return;
                };
                let hash = self.map.hash(&key);
                let init = |cell: &A::Cell| cell.set_state(carried);
                self.map
                    .get_or_insert_from(hash, key, &forget, init, |_| ());
            });
        }
        self.detached()
    }
}
