//! The keyed hash of a [`Key`] for every table a client's key reaches: the memory store's
//! states and blocks, and the Redis store's deny cache.

use std::hash::{BuildHasher, Hash, Hasher};

use crate::Key;

/// The memory store's hash of a [`Key`], keyed with 128 random bits per map.
///
/// Keys that clients choose freely (byte strings, tuples, integers from your own extractors,
/// IPv6 addresses and their `/64` groups) are hashed with SipHash-1-3 (the standard library's
/// `RandomState`), a keyed function designed so that whoever does not know the key cannot
/// find inputs that collide, even after watching the program answer (timing). IPv4 addresses
/// are hashed with foldhash, which is several times faster but only "minimally DoS-resistant":
/// a client cannot choose its IPv4 address (the TCP handshake proves it, and a trusted proxy
/// reports the one it saw), so it cannot pick, among addresses, the ones that collide.
pub(crate) struct KeyHasher {
    keyed: std::hash::RandomState,
    fast: foldhash::fast::RandomState,
}

impl KeyHasher {
    pub(crate) fn new() -> Self {
        Self {
            keyed: std::hash::RandomState::new(),
            fast: foldhash::fast::RandomState::default(),
        }
    }

    /// `hash_one` by hand: `hash_one` itself is not inlined into the lookup, and the call
    /// costs a tenth of a check's instructions.
    #[inline]
    #[allow(clippy::manual_hash_one)]
    pub(crate) fn hash(&self, key: &Key) -> u64 {
        if key.is_ipv4() {
            let mut hasher = self.fast.build_hasher();
            key.hash(&mut hasher);
            hasher.finish()
        } else {
            let mut hasher = self.keyed.build_hasher();
            key.hash(&mut hasher);
            hasher.finish()
        }
    }
}
