use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

pub(crate) use self::tuple::PART_MAX;

mod tuple;

/// The longest byte string kept inline in the key itself.
const INLINE: usize = 22;

/// The bit of [`Repr::Inline`]'s `len` that marks a tuple's encoding (lengths need five bits).
const INLINE_TUPLE: u8 = 0x80;

/// The bytes of a SHA-256 digest.
const DIGEST: usize = 32;

/// The identity a limit is counted against: a client IP, an API key, a user id, ...
///
/// Owned and cheap to clone. IP addresses, integers and byte strings of up to 22 bytes are
/// stored inline, so making, cloning or dropping such a key never allocates; longer keys share
/// one reference-counted buffer.
///
/// **Long keys.** A byte string longer than [`Key::MAX_LEN`] keeps its bytes *and* its SHA-256
/// digest: [`as_bytes`](Key::as_bytes) gives what the extractor found, whatever its length (so
/// `quota_for`, `skip`, `on_limited`, cost functions and your own extractors see the key as it
/// was sent), while the stores only ever see the digest ([`as_digest`](Key::as_digest)): the
/// memory store keeps 32 bytes for such a key, never the long value, and Redis stores the digest
/// in hex. Two long keys are equal (and hash alike) when their digests are; the digest is the
/// same in every process, so a limit shared between servers still sees one key. The bytes a key
/// holds while a request is handled are whatever the extractor read: header values are bounded
/// by your HTTP server's limit on the size of a request head, and a closure that builds its own
/// keys is responsible for bounding them.
///
/// **Kinds never meet.** Keys of different kinds are never equal: the IP `10.0.0.1`, the string
/// `"10.0.0.1"` and the integer `167772161` are three keys. A tuple of extractors such as
/// `(Route, PeerIp)` makes a key of its own kind ([`is_tuple`](Key::is_tuple)), encoded so that
/// distinct parts (any kind, any length, nested tuples included) always give distinct keys, and
/// never equal to a plain byte string, whatever its bytes. The encoding of a tuple is bounded
/// (a long part enters it as its digest): at most 66 bytes per part.
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use tollgate::Key;
///
/// let ip = Key::from(IpAddr::V4(Ipv4Addr::LOCALHOST));
/// assert_eq!(ip.as_ip(), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
/// assert_ne!(ip, Key::from("127.0.0.1"));
/// assert_eq!(Key::from("user-1"), Key::from(String::from("user-1")));
///
/// // A long key keeps its bytes for your callbacks; stores see its digest.
/// let jwt = format!("pro_{}", "x".repeat(80));
/// let key = Key::from(jwt.as_str());
/// assert_eq!(key.as_bytes(), Some(jwt.as_bytes()));
/// assert!(key.as_bytes().is_some_and(|k| k.starts_with(b"pro_")));
/// assert!(key.as_digest().is_some());
/// ```
#[derive(Clone)]
pub struct Key(Repr);

/// What a byte string stands for: bytes from the request, or the encoding of a tuple's parts.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Domain {
    Bytes,
    Tuple,
}

// IP addresses are kept as aligned words, not byte arrays: a key is usually built just before it
// is hashed and compared, and word-sized stores that the hash then reads back as the same words
// are forwarded to those loads, where byte arrays at odd offsets make the processor wait for the
// stores to reach the cache.
#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// The octets in memory order (`u32::from_ne_bytes`).
    V4(u32),
    /// The address's bits ([`Ipv6Addr::to_bits`]), the high half first.
    V6([u64; 2]),
    U64(u64),
    /// At most [`INLINE`] bytes; `len` carries [`INLINE_TUPLE`] for a tuple. Bytes past `len`
    /// are zero.
    Inline {
        len: u8,
        buf: [u8; INLINE],
    },
    /// More than [`INLINE`] bytes, at most [`Key::MAX_LEN`].
    Shared(Domain, Arc<[u8]>),
    /// More than [`Key::MAX_LEN`] bytes: the digest of the bytes, then the bytes.
    Long(Domain, Arc<[u8]>),
    /// A long key as the memory store keeps it: its digest alone.
    Digest(Domain, Arc<[u8; DIGEST]>),
}

impl Key {
    /// The longest byte string whose bytes the stores keep as they are; a longer one is
    /// stored as its SHA-256 digest ([`as_digest`](Key::as_digest)).
    pub const MAX_LEN: usize = 64;

    /// The IP address, when the key is one.
    #[inline]
    pub fn as_ip(&self) -> Option<IpAddr> {
        match self.0 {
            Repr::V4(w) => Some(IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes()))),
            Repr::V6(words) => Some(IpAddr::V6(v6(words))),
            _ => None,
        }
    }

    /// What kind of key this is, for logs and metrics that must not show the key itself:
    /// `"ipv4"`, `"ipv6"`, `"u64"`, `"bytes"`, `"digest"` (a byte string longer than
    /// [`Key::MAX_LEN`], which stores see as its digest) or `"tuple"` (made by a tuple of
    /// extractors).
    pub fn kind(&self) -> &'static str {
        match (&self.0, self.domain()) {
            (Repr::V4(_), _) => "ipv4",
            (Repr::V6(_), _) => "ipv6",
            (Repr::U64(_), _) => "u64",
            (_, Some(Domain::Tuple)) => "tuple",
            (Repr::Long(..) | Repr::Digest(..), _) => "digest",
            _ => "bytes",
        }
    }

    /// Whether the key was made by a tuple of extractors, such as `(Route, PeerIp)`. Its
    /// [`as_bytes`](Key::as_bytes) are then the encoding of its parts, which never equals a
    /// plain byte string's key: a store that writes keys out must mark tuples apart.
    #[inline]
    pub fn is_tuple(&self) -> bool {
        self.domain() == Some(Domain::Tuple)
    }

    /// The SHA-256 digest that stands for the key in stores: `Some` exactly for a byte string
    /// (or a tuple's encoding) longer than [`Key::MAX_LEN`] bytes.
    pub fn as_digest(&self) -> Option<&[u8; 32]> {
        match &self.0 {
            Repr::Long(_, long) => long.first_chunk(),
            Repr::Digest(_, digest) => Some(digest),
            _ => None,
        }
    }

    /// The bytes, when the key was made from a string or bytes, at any length: for a key longer
    /// than [`Key::MAX_LEN`], the bytes as they were given, not their digest. For a tuple, the
    /// encoding of its parts.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Repr::Inline { len, buf } => buf.get(..usize::from(len & !INLINE_TUPLE)),
            Repr::Shared(_, bytes) => Some(bytes),
            Repr::Long(_, long) => long.get(DIGEST..),
            _ => None,
        }
    }

    /// The integer, when the key was made from one.
    #[inline]
    pub fn as_u64(&self) -> Option<u64> {
        match self.0 {
            Repr::U64(n) => Some(n),
            _ => None,
        }
    }

    /// The key as a store keeps it: a long key without its bytes (its digest alone), so that
    /// a store holds at most [`Key::MAX_LEN`] bytes per key. Equal to `self`.
    pub(crate) fn stored(self) -> Self {
        match &self.0 {
            Repr::Long(domain, long) => match long.first_chunk::<DIGEST>() {
                Some(digest) => Self(Repr::Digest(*domain, Arc::new(*digest))),
                None => self,
            },
            _ => self,
        }
    }

    #[inline]
    fn domain(&self) -> Option<Domain> {
        match &self.0 {
            Repr::Inline { len, .. } if len & INLINE_TUPLE != 0 => Some(Domain::Tuple),
            Repr::Inline { .. } => Some(Domain::Bytes),
            Repr::Shared(domain, _) | Repr::Long(domain, _) | Repr::Digest(domain, _) => {
                Some(*domain)
            }
            _ => None,
        }
    }

    /// Whether the key is an IPv4 address: the one kind whose values clients cannot choose
    /// freely (see the memory store's hasher).
    #[inline]
    pub(crate) fn is_ipv4(&self) -> bool {
        matches!(self.0, Repr::V4(_))
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        Self::from_bytes_in(Domain::Bytes, bytes)
    }

    fn from_bytes_in(domain: Domain, bytes: &[u8]) -> Self {
        if bytes.len() > Self::MAX_LEN {
            let digest: [u8; DIGEST] = Sha256::digest(bytes).into();
            let mut long = Vec::with_capacity(DIGEST + bytes.len());
            long.extend_from_slice(&digest);
            long.extend_from_slice(bytes);
            Self(Repr::Long(domain, long.into()))
        } else if bytes.len() <= INLINE {
            let mut buf = [0; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            // The length fits in the low five bits: INLINE < 32.
            let tuple = INLINE_TUPLE * u8::from(domain == Domain::Tuple);
            Self(Repr::Inline {
                len: bytes.len() as u8 | tuple,
                buf,
            })
        } else {
            Self(Repr::Shared(domain, bytes.into()))
        }
    }
}

/// Long keys are equal when their kinds and digests are (with or without their bytes); other
/// keys when their kinds and values are.
impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Long(..) | Repr::Digest(..), Repr::Long(..) | Repr::Digest(..)) => {
                self.domain() == other.domain() && self.as_digest() == other.as_digest()
            }
            // The unused bytes of an inline key are zero: comparing whole buffers compares the
            // values.
            (a, b) => a == b,
        }
    }
}

impl Eq for Key {}

/// Hashes the value alone, in one or two word-sized writes for the common IP keys, and a long
/// key by its digest. Keys of different kinds may hash alike; they still never compare equal.
impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        match &self.0 {
            Repr::V4(w) => state.write_u32(*w),
            Repr::V6([hi, lo]) => {
                state.write_u64(*hi);
                state.write_u64(*lo);
            }
            Repr::U64(n) => state.write_u64(*n),
            Repr::Long(..) | Repr::Digest(..) => {
                hash_bytes(self.as_digest().map_or(&[][..], |d| &d[..]), state);
            }
            Repr::Inline { .. } | Repr::Shared(..) => {
                hash_bytes(self.as_bytes().unwrap_or_default(), state);
            }
        }
    }
}

/// The byte-string arm of [`Key`]'s hash, kept out of line so that the word-sized arms inline
/// into the lookup without the byte loop.
#[inline(never)]
fn hash_bytes<H: Hasher>(bytes: &[u8], state: &mut H) {
    state.write_usize(bytes.len());
    state.write(bytes);
}

impl From<IpAddr> for Key {
    #[inline]
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::from(v4),
            IpAddr::V6(v6) => Self::from(v6),
        }
    }
}

impl From<Ipv4Addr> for Key {
    #[inline]
    fn from(ip: Ipv4Addr) -> Self {
        Self(Repr::V4(u32::from_ne_bytes(ip.octets())))
    }
}

impl From<Ipv6Addr> for Key {
    #[inline]
    fn from(ip: Ipv6Addr) -> Self {
        let bits = ip.to_bits();
        Self(Repr::V6([(bits >> 64) as u64, bits as u64]))
    }
}

/// The address of an IPv6 key's words.
#[inline]
fn v6([hi, lo]: [u64; 2]) -> Ipv6Addr {
    Ipv6Addr::from_bits(u128::from(hi) << 64 | u128::from(lo))
}

impl From<u64> for Key {
    #[inline]
    fn from(n: u64) -> Self {
        Self(Repr::U64(n))
    }
}

/// Byte strings and text: their bytes, whatever their length.
macro_rules! from_bytes {
    ($($ty:ty),*) => {$(
        impl From<$ty> for Key {
            fn from(bytes: $ty) -> Self {
                Self::from_bytes(AsRef::<[u8]>::as_ref(&bytes))
            }
        }
    )*};
}

from_bytes!(&[u8], &str, String, &String);

impl From<&Key> for Key {
    fn from(key: &Key) -> Self {
        key.clone()
    }
}

/// Shows IP addresses, integers and short byte strings; a long key shows the start of its
/// digest, never its bytes, and a tuple its encoding in hex.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let tuple = if self.is_tuple() { "tuple " } else { "" };
        let bytes = self.as_bytes().unwrap_or_default();
        match (self.as_ip(), self.as_u64(), self.as_digest()) {
            (Some(ip), ..) => write!(f, "Key({ip})"),
            (_, Some(n), _) => write!(f, "Key({n})"),
            (.., Some(digest)) => write!(f, "Key({tuple}sha256:{}…)", hex(&digest[..8])),
            _ if self.is_tuple() => write!(f, "Key(tuple {})", hex(bytes)),
            _ => write!(f, "Key({:?})", String::from_utf8_lossy(bytes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_three_words() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
    }

    #[test]
    fn kinds_round_trip() {
        let long = "an-api-key-longer-than-twenty-two-bytes";
        assert_eq!(Key::from(long).as_bytes(), Some(long.as_bytes()));
        assert_eq!(Key::from("short").as_bytes(), Some(&b"short"[..]));
        assert_eq!(Key::from(&b""[..]).as_bytes(), Some(&b""[..]));
        assert_eq!(Key::from(7u64).as_u64(), Some(7));
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(Key::from(v6).as_ip(), Some(v6));
        assert_eq!(format!("{:?}", Key::from(v6)), "Key(2001:db8::1)");
        for key in [Key::from(v6), Key::from(7u64), Key::from(long)] {
            assert!(!key.is_tuple());
            assert_eq!(key.as_digest(), None);
        }
    }

    fn hex(digest: &[u8; 32]) -> String {
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn long_keys_keep_their_bytes_and_are_stored_as_digests() {
        let at_bound = "x".repeat(Key::MAX_LEN);
        let key = Key::from(at_bound.as_str());
        assert_eq!(key.as_bytes(), Some(at_bound.as_bytes()));
        assert_eq!(key.as_digest(), None);
        assert_eq!(key.kind(), "bytes");

        let over = "x".repeat(Key::MAX_LEN + 1);
        let key = Key::from(over.as_str());
        assert_eq!(key.as_bytes(), Some(over.as_bytes()));
        assert_eq!(key.kind(), "digest");
        // SHA-256 of 65 'x' bytes, as `printf 'x%.0s' $(seq 65) | sha256sum` prints it.
        assert_eq!(
            hex(key.as_digest().unwrap()),
            "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"
        );
        assert_eq!(key, Key::from(over.clone().into_bytes().as_slice()));
        assert_ne!(key, Key::from("x".repeat(Key::MAX_LEN + 2).as_str()));

        // What a store keeps: the digest alone, equal to the full key and hashed alike.
        let stored = key.clone().stored();
        assert_eq!(stored.as_bytes(), None);
        assert_eq!(stored.as_digest(), key.as_digest());
        assert_eq!(stored.kind(), "digest");
        assert_eq!(stored, key);
        assert_eq!(key, stored);
        let state = std::hash::RandomState::new();
        assert_eq!(
            std::hash::BuildHasher::hash_one(&state, &stored),
            std::hash::BuildHasher::hash_one(&state, &key)
        );
        // Short keys are stored as they are.
        for short in [
            Key::from("k"),
            Key::from(at_bound.as_str()),
            Key::from(1u64),
        ] {
            let stored = short.clone().stored();
            assert_eq!(stored.as_bytes(), short.as_bytes());
            assert_eq!(stored, short);
        }
        // A 64 KiB value: its bytes while the request is handled, 32 bytes once stored.
        let huge = "k".repeat(64 * 1024);
        let key = Key::from(huge.as_str());
        assert_eq!(key.as_bytes().map(<[u8]>::len), Some(huge.len()));
        assert_eq!(key.stored().as_bytes(), None);
    }

    #[test]
    fn debug_never_shows_a_long_key() {
        let secret = format!("secret-{}", "s".repeat(100));
        let shown = format!("{:?}", Key::from(secret.as_str()));
        assert!(shown.starts_with("Key(sha256:"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn lengths_at_the_inline_boundary_stay_distinct() {
        let a = Key::from("x".repeat(INLINE).as_str());
        let b = Key::from("x".repeat(INLINE + 1).as_str());
        assert_ne!(a, b);
        assert_ne!(Key::from("a"), Key::from("a\0"));
    }
}
