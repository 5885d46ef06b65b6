//! The store's tables of named policies: one per name, algorithm and options, shared by every
//! limiter that names the same policy.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::blocks::Blocks;
use super::shards::Shards;
use super::{Held, MemoryAlgorithm};

/// One policy's keys and their cells.
pub(super) type Map<A> = Shards<<A as Held>::Cell>;

/// A named policy's identity: its name, its algorithm's type and that algorithm's options
/// (its `Debug` form: the quota's figures, sub-windows, shaping).
type Identity = (Box<str>, TypeId, Box<str>);

/// Each named policy's map (a `Map<A>` for the policy's algorithm `A`), by its identity.
type Maps = HashMap<Identity, Arc<dyn Any + Send + Sync>>;

/// Whose blocks: a policy's name, and whether its limiters read the wall clock.
type BlocksOf = (Box<str>, bool);

/// The maps of the named policies.
#[derive(Default)]
pub(super) struct Registry {
    maps: Mutex<Maps>,
    /// Each named policy's blocked keys, by name and time base (wall clock or not): a block
    /// outlives a change of the policy's quota or algorithm.
    blocks: Mutex<HashMap<BlocksOf, Arc<Blocks>>>,
}

impl Registry {
    /// How many named policies have a map.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The map of the policy named `policy` decided by `algorithm`, made with `make` the first
    /// time. One name used with another algorithm, quota or option gets a map of its own: a
    /// per-hour limit named "login" and a per-second one of the same name must never read or
    /// reset each other's state.
    pub(super) fn map<A: MemoryAlgorithm>(
        &self,
        policy: &str,
        algorithm: &A,
        make: impl FnOnce() -> Map<A>,
    ) -> Arc<Map<A>> {
        let identity = (
            policy.into(),
            TypeId::of::<A>(),
            format!("{algorithm:?}").into_boxed_str(),
        );
        let mut maps = self.lock();
        let slot = maps.entry(identity).or_insert_with(|| Arc::new(make()));
        // The slot's type is part of its key, so it always matches.
        let map = Arc::clone(slot).downcast::<Map<A>>();
        map.unwrap_or_else(|_| unreachable!("memory store table type mismatch"))
    }

    /// The blocked keys of the policy named `policy` whose limiters read the wall clock
    /// (`wall`: calendar windows) or not, made with `make` the first time. The two are kept
    /// apart: their blocks end at times on different clocks.
    pub(super) fn blocks(
        &self,
        policy: &str,
        wall: bool,
        make: impl FnOnce() -> Blocks,
    ) -> Arc<Blocks> {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = blocks
            .entry((policy.into(), wall))
            .or_insert_with(|| Arc::new(make()));
        Arc::clone(slot)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
