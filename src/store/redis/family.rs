//! A layer's family in Redis: one block per client for the whole layer, which every plan's
//! script reads, and the list of the layer's tables (`<prefix>:plans:<layer>`), which a reset
//! through the layer's own table reads to delete the client's keys under every plan, those
//! its server never made included.
//!
//! Each table of a layer adds the ends of its keys (what follows the client's part, from the
//! closing brace: its states' and its block's) to the list before its first call, once per
//! server. A reset then deletes `<prefix>:{<client>` followed by each end listed: every key in
//! the client's hash slot, so it works on a Redis Cluster too (the list lives in a slot of its
//! own and is read first).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::store::{Role, Tie};

/// The most key ends a layer's list holds: past it, tables made later are not listed (a reset
/// through a server that never made them does not reach them). A layer of 256 plans of 4 tiers
/// with bans lists some 2 000.
pub(crate) const MAX_LISTED: usize = 65_536;

/// How many keys one `DEL` of a reset names at most.
pub(crate) const DEL_BATCH: usize = 512;

/// Adds the ends (ARGV after the bound) to the list (KEYS[1]) while it holds fewer than the
/// bound (ARGV[1]).
const LIST: &str = "if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end \
                    return redis.call('SADD', KEYS[1], unpack(ARGV, 2))";

/// A table's part in its layer's family.
#[derive(Debug)]
pub(crate) struct Family {
    /// `<prefix>:plans:<layer>`: the list's Redis key.
    pub(crate) list: Vec<u8>,
    /// This table's key ends.
    ends: Vec<Vec<u8>>,
    /// Whether the ends are listed (by this server).
    listed: AtomicBool,
    /// Whether a reset through this table deletes the keys under every end listed: the
    /// layer's own table's.
    resets_all: bool,
}

impl Family {
    pub(crate) fn new(prefix: &str, tie: &Tie, ends: Vec<Vec<u8>>) -> Self {
        Self {
            list: format!("{prefix}:plans:{}", tie.layer).into_bytes(),
            ends,
            listed: AtomicBool::new(false),
            resets_all: tie.role == Role::Own,
        }
    }

    /// The call that lists this table's ends, until one has succeeded.
    pub(crate) fn listing(&self) -> Option<redis::Cmd> {
        if self.listed.load(Ordering::Relaxed) {
            return None;
        }
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(LIST).arg(1).arg(&self.list).arg(MAX_LISTED);
        cmd.arg(&self.ends);
        Some(cmd)
    }

    /// The ends are listed.
    pub(crate) fn listed(&self) {
        self.listed.store(true, Ordering::Relaxed);
    }

    /// The call that reads the list, for a reset through the layer's own table; `None` for the
    /// other tables.
    pub(crate) fn reading(&self) -> Option<redis::Cmd> {
        self.resets_all.then(|| {
            let mut cmd = redis::cmd("SMEMBERS");
            cmd.arg(&self.list);
            cmd
        })
    }
}
