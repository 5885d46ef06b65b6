//! The Redis keys of a policy's states: `<prefix>:{<client key>}:<policy>:<algorithm>.<fingerprint>`,
//! tiers adding `:<n>`.
//!
//! The braces are a Redis Cluster hash tag: a key's tiers share one slot, and the slot is chosen
//! by the client key alone. No client byte can end the tag early: the encoded client key never
//! holds `{` or `}`. The algorithm's name and a fingerprint of its parameters follow the policy,
//! so that two limiters read one state only when they decide it with the same math (two servers
//! with the same configuration share; a GCRA and a fixed window of the same quota, or one name
//! given to two quotas, do not).

use std::io::Write as _;

use percent_encoding::{percent_encode, AsciiSet, CONTROLS};
use sha2::{Digest as _, Sha256};

use super::algorithms::{RedisAlgorithm, RedisTier};
use crate::Key;

/// How many bytes of the SHA-256 of a policy's parameters name it (as hex): 64 bits, enough to
/// keep apart every configuration an application will ever have.
const FINGERPRINT: usize = 8;

/// The keys of one policy: everything but the client's part, computed once.
#[derive(Debug, Clone)]
pub(crate) struct KeyNames {
    /// `<prefix>:{`
    head: Vec<u8>,
    /// Each tier's end: `}:<policy>:<algorithm>.<fingerprint>`, then `:<n>` for tiers.
    tails: Vec<Vec<u8>>,
    /// The end of the key's block: `}:<policy>:block`. It names the policy alone, so a block
    /// outlives a change of the policy's figures; it never meets a state's key, which ends in
    /// hex digits or a tier's number.
    block_tail: Vec<u8>,
    /// The ends of the blocks kept under the names of the quotas a live layer had before
    /// (unnamed quotas are named by their figures): the name it was built with first, then
    /// the latest. Read and written with the policy's own, so that a block holds across a
    /// change of quotas, and on servers that have not changed yet.
    earlier_blocks: Vec<Vec<u8>>,
    /// The end of the block under the name the layer was built with: never dropped from
    /// `earlier_blocks`, however many changes follow, so that a block or ban made before
    /// them always holds.
    origin: Vec<u8>,
}

/// How many earlier names' blocks a table reads besides its own: the name it was built with,
/// and the latest others.
const MAX_EARLIER_BLOCKS: usize = 8;

impl KeyNames {
    pub(crate) fn new<A: RedisAlgorithm>(prefix: &str, policy: &str, tiers: &[RedisTier]) -> Self {
        let head = format!("{prefix}:{{").into_bytes();
        let identity = identity::<A>(tiers);
        let tails = (0..tiers.len())
            .map(|i| {
                let tier = if A::TIERED {
                    format!(":{i}")
                } else {
                    String::new()
                };
                format!("}}:{policy}:{identity}{tier}").into_bytes()
            })
            .collect();
        let block_tail = format!("}}:{policy}:block").into_bytes();
        Self {
            head,
            tails,
            origin: block_tail.clone(),
            block_tail,
            earlier_blocks: Vec::new(),
        }
    }

    /// These names, reading and writing too the blocks `previous` does (a table of the quotas
    /// before): under the name the layer was built with, and the latest others, at most
    /// [`MAX_EARLIER_BLOCKS`] names besides this one's.
    pub(crate) fn after(mut self, previous: &KeyNames) -> Self {
        self.origin.clone_from(&previous.origin);
        let earlier = [&previous.origin, &previous.block_tail]
            .into_iter()
            .chain(&previous.earlier_blocks);
        for tail in earlier {
            let known = *tail == self.block_tail || self.earlier_blocks.contains(tail);
            if !known && self.earlier_blocks.len() < MAX_EARLIER_BLOCKS {
                self.earlier_blocks.push(tail.clone());
            }
        }
        self
    }

    /// These names, reading and writing too the block of the layer named `layer` (a plan's
    /// table: a block through the layer's handle, under any plan, reaches every plan).
    pub(crate) fn reading_block_of(mut self, layer: &str) -> Self {
        let tail = format!("}}:{layer}:block").into_bytes();
        if tail != self.block_tail && !self.earlier_blocks.contains(&tail) {
            self.earlier_blocks.insert(0, tail);
        }
        self
    }

    /// The ends of this policy's keys for a client (each tier's and the block's), for a
    /// layer's list of its tables ([`family`](super::family)).
    pub(crate) fn ends(&self) -> Vec<Vec<u8>> {
        self.tails
            .iter()
            .chain([&self.block_tail])
            .cloned()
            .collect()
    }

    /// `key`'s Redis key under each of `ends` (from [`ends`](Self::ends)).
    pub(crate) fn under(&self, key: &Key, ends: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let client = client(key);
        ends.iter().map(|end| self.join(&client, end)).collect()
    }

    /// How many blocks under earlier names a call names before the policy's own.
    pub(crate) fn earlier_blocks(&self) -> usize {
        self.earlier_blocks.len()
    }

    /// Whether `self` and `other` name the same states (the same policy, algorithm and
    /// parameters).
    pub(crate) fn same_states(&self, other: &Self) -> bool {
        self.head == other.head && self.tails == other.tails
    }

    /// The Redis key of each tier for `key`.
    pub(crate) fn keys(&self, key: &Key) -> Vec<Vec<u8>> {
        self.under(key, &self.tails)
    }

    /// The Redis key of `key`'s block.
    pub(crate) fn block(&self, key: &Key) -> Vec<u8> {
        self.join(&client(key), &self.block_tail)
    }

    /// The keys one script call names for `key`, the client key encoded once: each tier's,
    /// then each tier's of `carried` (the tables carried over from, in order), then the blocks
    /// under earlier names and the policy's own last. All are in the key's slot.
    pub(crate) fn call_keys<'a>(
        &'a self,
        key: &Key,
        carried: impl Iterator<Item = &'a KeyNames>,
    ) -> Vec<Vec<u8>> {
        let client = &client(key);
        let tiers = std::iter::once(self).chain(carried).flat_map(|names| {
            let join = move |tail: &Vec<u8>| names.join(client, tail);
            names.tails.iter().map(join)
        });
        let blocks = self.earlier_blocks.iter().chain([&self.block_tail]);
        tiers
            .chain(blocks.map(|tail| self.join(client, tail)))
            .collect()
    }

    /// `<prefix>:{<client>` and `tail`.
    fn join(&self, client: &[u8], tail: &[u8]) -> Vec<u8> {
        [&self.head[..], client, tail].concat()
    }
}

/// `key` encoded for the inside of a key's hash tag ([`encode_key`]).
fn client(key: &Key) -> Vec<u8> {
    let mut client = Vec::with_capacity(2 * Key::MAX_LEN + 2);
    encode_key(key, &mut client);
    client
}

/// `<algorithm>.<fingerprint>`: the algorithm's name and the first bytes (as hex) of the
/// SHA-256 of everything that gives its state a meaning: whether it is tiered, and each tier's
/// parameters and reported limit, as little-endian words.
fn identity<A: RedisAlgorithm>(tiers: &[RedisTier]) -> String {
    let mut hash = Sha256::new();
    hash.update(b"tollgate redis state v1\0");
    hash.update(A::NAME.as_bytes());
    hash.update([0, u8::from(A::TIERED)]);
    hash.update((tiers.len() as u64).to_le_bytes());
    for tier in tiers {
        hash.update((tier.params.len() as u64).to_le_bytes());
        for param in &tier.params {
            hash.update(param.to_le_bytes());
        }
        hash.update(tier.limit.to_le_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest[..FINGERPRINT]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}.{hex}", A::NAME)
}

/// Writes `key` so that keys of different kinds never meet, no byte can end a hash tag, and
/// `redis-cli --scan` shows it legibly (printable ASCII only): `ip:` + the address, `n:` + the
/// integer, `h:` + the hex SHA-256 that stands for a long key, `s:` + the bytes with every byte
/// outside printable ASCII, the space and `%{}(),` written `%XX` (upper-case hex), and a tuple
/// as `t(` + its parts so written, joined by `,`, + `)` (`th:` + the digest for a long one).
/// Injective: the text reads back in one way only.
pub(crate) fn encode_key(key: &Key, out: &mut Vec<u8>) {
    if let Some(parts) = key.parts() {
        out.extend_from_slice(b"t(");
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            encode_key(part, out);
        }
        out.push(b')');
        return;
    }
    // A tuple is a kind of its own (`t`), so that it never meets a plain key whose bytes are
    // its encoding; a long one is named by its digest (its bytes must not reach Redis).
    if key.is_tuple() {
        out.push(b't');
        if key.as_digest().is_none() {
            // Bytes that are no tuple's encoding (never made by the crate): written as bytes,
            // apart from every other name (`ts:`).
            out.push(b's');
            out.push(b':');
            escape(key.as_bytes().unwrap_or_default(), out);
            return;
        }
    }
    if let Some(digest) = key.as_digest() {
        out.extend_from_slice(b"h:");
        for b in digest {
            let _ = write!(out, "{b:02x}");
        }
    } else if let Some(ip) = key.as_ip() {
        // Writes into a Vec cannot fail.
        let _ = write!(out, "ip:{ip}");
    } else if let Some(n) = key.as_u64() {
        let _ = write!(out, "n:{n}");
    } else if let Some(bytes) = key.as_bytes() {
        out.extend_from_slice(b"s:");
        escape(bytes, out);
    } else {
        // Every kind of key is handled above. A kind added later and not taught here would be
        // named by its kind alone: such clients would share one budget (stricter, never looser).
        let _ = write!(out, "?:{}", key.kind());
    }
}

/// Every byte that is not printable ASCII (non-ASCII bytes always are), the space and
/// `%{}(),`: written `%XX`, so the text is printable, never holds a brace nor a tuple's `(`,
/// `,` or `)`, and reads back in one way only (a `%` is always the start of an escape).
const ESCAPED: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'{')
    .add(b'}')
    .add(b'(')
    .add(b')')
    .add(b',');

/// Appends `bytes`, [`ESCAPED`].
fn escape(bytes: &[u8], out: &mut Vec<u8>) {
    for chunk in percent_encode(bytes, ESCAPED) {
        out.extend_from_slice(chunk.as_bytes());
    }
}

/// `text` with every occurrence of `key`'s encoded form replaced by `<key>`, for error messages
/// that come back from Redis: they must never carry a client's key into a log.
pub(crate) fn redact(text: &str, key: &Key) -> String {
    let mut encoded = Vec::new();
    encode_key(key, &mut encoded);
    let mut out = text.to_owned();
    if let Ok(encoded) = std::str::from_utf8(&encoded) {
        out = out.replace(encoded, "<key>");
    }
    // Raw bytes of a byte-string key, as far as they are text: long enough not to blank
    // unrelated words.
    if let Some(bytes) = key.as_bytes().filter(|b| b.len() >= 4) {
        if let Ok(raw) = std::str::from_utf8(bytes) {
            out = out.replace(raw, "<key>");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn encoded(key: Key) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(&key, &mut out);
        out
    }

    /// However many changes of unnamed quotas (named by their figures) a live layer goes
    /// through, a call names its block under the name the layer was built with, under the
    /// latest earlier ones, and its own last; never more than `MAX_EARLIER_BLOCKS` besides.
    #[test]
    fn the_name_a_layer_was_built_with_is_never_dropped() {
        let names = |n: u64| KeyNames::new::<crate::algorithm::Gcra>("p", &format!("{n}/min"), &[]);
        let block = |n: u64| format!("p:{{s:k}}:{n}/min:block").into_bytes();
        let key = Key::from("k");
        let mut table = names(2);
        for n in 3..40 {
            table = names(n).after(&table);
            let blocks = table.call_keys(&key, std::iter::empty());
            assert_eq!(blocks.len(), table.earlier_blocks() + 1);
            assert_eq!(blocks.last(), Some(&block(n)), "its own last");
            assert!(blocks.contains(&block(2)), "after {n}/min: {blocks:?}");
            let latest = (3..n).rev().take(MAX_EARLIER_BLOCKS - 1);
            assert!(latest.clone().all(|m| blocks.contains(&block(m))));
            assert_eq!(
                table.earlier_blocks(),
                (n as usize - 2).min(MAX_EARLIER_BLOCKS)
            );
        }
        // Back to the name it was built with: read once, as its own.
        table = names(2).after(&table);
        let blocks = table.call_keys(&key, std::iter::empty());
        assert_eq!(blocks.iter().filter(|b| **b == block(2)).count(), 1);
    }

    #[test]
    fn keys_of_different_kinds_never_meet() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(encoded(Key::from(ip)), b"ip:192.0.2.1");
        assert_eq!(encoded(Key::from("192.0.2.1")), b"s:192.0.2.1");
        assert_eq!(encoded(Key::from(7u64)), b"n:7");
        assert_eq!(encoded(Key::from("7")), b"s:7");
        assert_eq!(
            encoded(Key::from(&b"\xff{}%\x00 (a,b)~"[..])),
            b"s:%FF%7B%7D%25%00%20%28a%2Cb%29~"
        );
        let long = "x".repeat(100);
        let digest = encoded(Key::from(long.as_str()));
        assert!(digest.starts_with(b"h:"));
        assert_eq!(digest.len(), 2 + 64);
    }

    #[test]
    fn every_byte_is_named_as_it_always_was() {
        // Names in Redis outlive a release: each byte keeps its spelling. Kept: printable
        // ASCII but `%{}(),`; every other byte `%XX`, upper-case.
        for b in 0..=u8::MAX {
            let kept = (0x21..=0x7e).contains(&b) && !b"%{}(),".contains(&b);
            let mut expected = b"s:a".to_vec();
            match kept {
                true => expected.push(b),
                false => expected.extend_from_slice(format!("%{b:02X}").as_bytes()),
            }
            assert_eq!(
                encoded(Key::from(&[b'a', b][..])),
                expected,
                "byte {b:#04x}"
            );
        }
    }

    #[test]
    fn tuples_never_meet_plain_keys() {
        use crate::key::{KeyExtractor, RequestHead};
        let pair = |a: &'static str, b: &'static str| {
            let fa = move |_: RequestHead<'_>| Ok(Some(Key::from(a)));
            let fb = move |_: RequestHead<'_>| Ok(Some(Key::from(b)));
            (fa, fb)
                .extract(RequestHead::new(&http::Request::new(())))
                .unwrap()
                .unwrap()
        };
        let short = pair("a", "b");
        let long = pair("a", "y".repeat(100).leak());
        let wide = pair("x".repeat(60).leak(), "y".repeat(60).leak());
        assert_eq!(encoded(short.clone()), b"t(s:a,s:b)");
        // A long part by its digest; a tuple whose encoding is long by its own.
        assert!(encoded(long.clone()).starts_with(b"t(s:a,h:"));
        assert!(encoded(wide.clone()).starts_with(b"th:"));
        for tuple in [short, long, wide] {
            assert!(tuple.is_tuple());
            let enc = encoded(tuple.clone());
            assert_eq!(enc[0], b't', "{enc:?}");
            // A plain key of the same bytes, or of the same digest, is written apart.
            if let Some(bytes) = tuple.as_bytes() {
                assert_ne!(encoded(Key::from(bytes)), enc);
            }
            // Stored (without a long key's bytes), it is written the same.
            assert_eq!(encoded(tuple.clone().stored()), enc);
        }
    }

    #[test]
    fn redaction_hides_the_encoded_and_the_raw_key() {
        let key = Key::from("tok{en}-secret");
        let text =
            "tollgate: tollgate:{s:tok%7Ben%7D-secret}:p holds no gcra state, tok{en}-secret";
        let clean = redact(text, &key);
        assert!(!clean.contains("secret"), "{clean}");
        assert_eq!(
            clean,
            "tollgate: tollgate:{<key>}:p holds no gcra state, <key>"
        );
    }
}
