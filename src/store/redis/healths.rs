//! What a store knows of whether Redis answers, for each call: of the one Redis (or the
//! primary behind Sentinel), or, on a Redis Cluster, of the master that serves the call's slot
//! (from the slot map the store reads, `CLUSTER SLOTS`), each with a [`Health`] of its own, so
//! that a master known down sends its keys to the failure policy at once while the other
//! masters go on deciding theirs.
//!
//! A key's slot is the CRC16 of its hash tag modulo 16 384, as Redis computes it; the store's
//! keys hold the encoded client key as their tag ([`keys`](super::keys)). When the slot map
//! changes (a replica promoted, slots moved), the slots follow their new master: a master
//! that stays one keeps what is known of it, and a new one starts up.

use std::borrow::Cow;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::health::{Health, Master};
use super::keys::encode_key;
use crate::Key;

/// How many slots a Redis Cluster has.
const SLOTS: u16 = 16_384;

/// What a store knows of whether Redis answers.
#[derive(Clone)]
pub(crate) enum Healths {
    /// Nothing: each call asks Redis (a Redis Cluster connection the caller made).
    Unknown,
    /// One Redis, or the primary behind Sentinel.
    One(Arc<Health>),
    /// Each master of a Redis Cluster, by the slots it serves.
    Masters(Nodes),
}

impl Healths {
    /// The health that a call for `key` finds and tells: of the one Redis, or of the master of
    /// the key's slot (none when the slot map names none).
    pub(crate) fn of(&self, key: &Key) -> Option<Cow<'_, Arc<Health>>> {
        self.at(|| slot(key))
    }

    /// The health of `key`'s Redis, when it is known down.
    pub(crate) fn down(&self, key: &Key) -> Option<Cow<'_, Arc<Health>>> {
        // The slot is computed only while some master is down.
        if matches!(self, Self::Masters(nodes) if !nodes.load().any_down()) {
            return None;
        }
        self.of(key).filter(|health| health.is_down())
    }

    /// The health of the Redis that holds the Redis key `name` (a key of no client's: a
    /// layer's list of its tables, its live record), when it is known down.
    pub(crate) fn down_at(&self, name: &[u8]) -> Option<Cow<'_, Arc<Health>>> {
        self.at(|| slot_of_name(name))
            .filter(|health| health.is_down())
    }

    /// The health of the one Redis, or of the master of the slot `slot` tells.
    fn at(&self, slot: impl FnOnce() -> u16) -> Option<Cow<'_, Arc<Health>>> {
        match self {
            Self::Unknown => None,
            Self::One(health) => Some(Cow::Borrowed(health)),
            Self::Masters(nodes) => nodes.load().of(slot()).cloned().map(Cow::Owned),
        }
    }
}

/// The masters of a cluster as the store last read them, shared by the store's clones and
/// replaced by a master's probe when the slot map changes.
pub(crate) type Nodes = Arc<ArcSwap<NodeMap>>;

/// Each slot range and the health of the master that serves it.
#[derive(Default)]
pub(crate) struct NodeMap {
    /// First and last slot of each range, and its master's index in `masters`, in slot order.
    ranges: Vec<(u16, u16, usize)>,
    masters: Vec<Arc<Health>>,
}

impl NodeMap {
    /// The map of `ranges` (each slot range and its master), keeping what `previous` knows of
    /// a master at an address it still lists; a master new to it starts up.
    pub(crate) fn new(
        ranges: impl IntoIterator<Item = (i64, i64, Box<dyn Master>)>,
        previous: &NodeMap,
    ) -> Self {
        let mut map = Self::default();
        for (first, last, master) in ranges {
            let (Ok(first), Ok(last)) = (u16::try_from(first), u16::try_from(last)) else {
                continue;
            };
            let known =
                |m: &Arc<Health>| m.master().is_some_and(|m| m.address() == master.address());
            let index = match map.masters.iter().position(&known) {
                Some(index) => index,
                None => {
                    let health = match previous.masters.iter().find(|m| known(m)) {
                        Some(health) => Arc::clone(health),
                        None => Arc::new(Health::of_master(master)),
                    };
                    map.masters.push(health);
                    map.masters.len() - 1
                }
            };
            map.ranges.push((first, last, index));
        }
        map.ranges.sort_unstable();
        map
    }

    /// The health of the master that serves `slot`, when the map names one.
    pub(crate) fn of(&self, slot: u16) -> Option<&Arc<Health>> {
        let at = self.ranges.partition_point(|&(_, last, _)| last < slot);
        let &(first, _, master) = self.ranges.get(at)?;
        (first <= slot).then(|| &self.masters[master])
    }

    /// Whether a master is known down.
    pub(crate) fn any_down(&self) -> bool {
        self.masters.iter().any(|m| m.is_down())
    }
}

/// The Redis Cluster slot of every Redis key of `key` (their hash tag is the encoded key).
pub(crate) fn slot(key: &Key) -> u16 {
    let mut tag = Vec::with_capacity(2 * Key::MAX_LEN + 2);
    encode_key(key, &mut tag);
    crc(&tag)
}

/// The slot of the Redis key `name`: of its hash tag (what lies between its first `{` and the
/// first `}` after it, when not empty), else of the whole name.
pub(crate) fn slot_of_name(name: &[u8]) -> u16 {
    let tag = name.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &name[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc(tag.unwrap_or(name))
}

fn crc(bytes: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(bytes) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        // The Redis Cluster specification's example, and `CLUSTER KEYSLOT` answers.
        assert_eq!(slot_of_name(b"123456789"), 12_739);
        assert_eq!(slot_of_name(b"foo"), 12_182);
        assert_eq!(
            slot_of_name(b"{user1000}.following"),
            slot_of_name(b"user1000")
        );
        assert_eq!(slot_of_name(b"foo{}{bar}"), crc(b"foo{}{bar}"));
        assert_ne!(slot_of_name(b"foo{}{bar}"), slot_of_name(b"bar"));
        assert_eq!(slot_of_name(b"foo{{bar}}zap"), slot_of_name(b"{bar"));
        // A key's Redis keys all hash to its slot.
        let key = Key::from("user-1");
        let mut name = b"tollgate:{".to_vec();
        encode_key(&key, &mut name);
        name.extend_from_slice(b"}:api:gcra.0123");
        assert_eq!(slot(&key), slot_of_name(&name));
        assert_eq!(slot(&key), slot_of_name(b"s:user-1"));
    }

    #[derive(Debug)]
    struct At(String);

    impl Master for At {
        fn address(&self) -> &str {
            &self.0
        }

        fn probe(
            &self,
            _: std::time::Duration,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
            Box::pin(async { true })
        }
    }

    fn range(first: i64, last: i64, port: u16) -> (i64, i64, Box<dyn Master>) {
        (first, last, Box::new(At(format!("127.0.0.1:{port}"))))
    }

    #[test]
    fn slots_follow_their_master_and_a_new_master_starts_up() {
        let map = NodeMap::new(
            [
                range(5461, 10922, 7001),
                range(0, 5460, 7000),
                range(10923, 16383, 7002),
            ],
            &NodeMap::default(),
        );
        let address =
            |map: &NodeMap, slot| map.of(slot).unwrap().master().unwrap().address().to_owned();
        assert_eq!(address(&map, 0), "127.0.0.1:7000");
        assert_eq!(address(&map, 5460), "127.0.0.1:7000");
        assert_eq!(address(&map, 5461), "127.0.0.1:7001");
        assert_eq!(address(&map, 16383), "127.0.0.1:7002");
        assert!(map.of(16384).is_none());
        assert!(!map.any_down());

        // 7000 replaced by 8000; 7001 kept, with what is known of it.
        let next = NodeMap::new(
            [
                range(0, 5460, 8000),
                range(5461, 10922, 7001),
                range(10923, 16383, 7002),
            ],
            &map,
        );
        assert_eq!(address(&next, 1), "127.0.0.1:8000");
        assert!(Arc::ptr_eq(next.of(6000).unwrap(), map.of(6000).unwrap()));
        assert!(!Arc::ptr_eq(next.of(1).unwrap(), map.of(1).unwrap()));

        // A gap in the map names no master.
        let gap = NodeMap::new([range(100, 200, 7000)], &NodeMap::default());
        assert!(gap.of(99).is_none() && gap.of(201).is_none());
        assert!(gap.of(100).is_some() && gap.of(200).is_some());
    }
}
