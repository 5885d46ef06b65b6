use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

const INLINE: usize = 22;

/// The identity a limit is counted against: a client IP, an API key, a user id, ...
///
/// Owned and cheap to clone. IP addresses, integers and byte strings of up to 22 bytes are
/// stored inline, so making, cloning or dropping such a key never allocates; longer keys share
/// one reference-counted buffer. Byte strings longer than [`Key::MAX_LEN`] are replaced by
/// their SHA-256 digest, so that clients cannot use long values (a 64 KiB header, say) to make
/// the store hold large keys; the digest is the same in every process, so a limit shared
/// between servers still sees one key. Keys of different kinds are never equal: the IP `10.0.0.1` and
/// the string `"10.0.0.1"` are different keys.
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use tollgate::Key;
///
/// let ip = Key::from(IpAddr::V4(Ipv4Addr::LOCALHOST));
/// assert_eq!(ip.as_ip(), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
/// assert_ne!(ip, Key::from("127.0.0.1"));
/// assert_eq!(Key::from("user-1"), Key::from(String::from("user-1")));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Repr);

// IP addresses are kept as aligned words, not byte arrays: a key is usually built just before it
// is hashed and compared, and word-sized stores that the hash then reads back as the same words
// are forwarded to those loads, where byte arrays at odd offsets make the processor wait for the
// stores to reach the cache.
#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// The octets in memory order (`u32::from_ne_bytes`).
    V4(u32),
    /// The octets in memory order, as two native-endian halves.
    V6([u64; 2]),
    U64(u64),
    Inline {
        len: u8,
        buf: [u8; INLINE],
    },
    Shared(Arc<[u8]>),
    Digest(Arc<[u8; 32]>),
}

impl Key {
    /// The longest byte string kept as it is; longer ones are replaced by their SHA-256 digest.
    pub const MAX_LEN: usize = 64;

    /// The IP address, when the key is one.
    #[inline]
    pub fn as_ip(&self) -> Option<IpAddr> {
        match self.0 {
            Repr::V4(w) => Some(IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes()))),
            Repr::V6([hi, lo]) => {
                let mut octets = [0; 16];
                octets[..8].copy_from_slice(&hi.to_ne_bytes());
                octets[8..].copy_from_slice(&lo.to_ne_bytes());
                Some(IpAddr::V6(Ipv6Addr::from(octets)))
            }
            _ => None,
        }
    }

    /// What kind of key this is, for logs and metrics that must not show the key itself:
    /// `"ipv4"`, `"ipv6"`, `"u64"`, `"bytes"` or `"digest"` (a long byte string, hashed).
    pub fn kind(&self) -> &'static str {
        match self.0 {
            Repr::V4(_) => "ipv4",
            Repr::V6(_) => "ipv6",
            Repr::U64(_) => "u64",
            Repr::Inline { .. } | Repr::Shared(_) => "bytes",
            Repr::Digest(_) => "digest",
        }
    }

    /// The SHA-256 digest that stands for a byte string longer than [`Key::MAX_LEN`].
    pub fn as_digest(&self) -> Option<&[u8; 32]> {
        match &self.0 {
            Repr::Digest(digest) => Some(digest),
            _ => None,
        }
    }

    /// The bytes, when the key was made from a string or bytes of at most [`Key::MAX_LEN`]
    /// bytes.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Repr::Inline { len, buf } => Some(&buf[..usize::from(*len)]),
            Repr::Shared(bytes) => Some(bytes),
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

    fn from_bytes(bytes: &[u8]) -> Self {
        if bytes.len() > Self::MAX_LEN {
            let digest: [u8; 32] = Sha256::digest(bytes).into();
            Self(Repr::Digest(Arc::new(digest)))
        } else if bytes.len() <= INLINE {
            let mut buf = [0; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            // The length fits: INLINE < 256.
            Self(Repr::Inline {
                len: bytes.len() as u8,
                buf,
            })
        } else {
            Self(Repr::Shared(bytes.into()))
        }
    }
}

/// Hashes the value alone, in one or two word-sized writes for the common IP keys. Keys of
/// different kinds may hash alike; they still never compare equal.
impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        match &self.0 {
            Repr::V4(w) => state.write_u32(*w),
            Repr::V6([hi, lo]) => state.write_u128(u128::from(*hi) << 64 | u128::from(*lo)),
            Repr::U64(n) => state.write_u64(*n),
            Repr::Digest(digest) => state.write(&digest[..]),
            Repr::Inline { .. } | Repr::Shared(_) => {
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
        let octets = ip.octets();
        let (hi, lo) = octets.split_at(8);
        Self(Repr::V6([word(hi), word(lo)]))
    }
}

/// Eight bytes as a native-endian word.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(bytes);
    u64::from_ne_bytes(w)
}

impl From<u64> for Key {
    #[inline]
    fn from(n: u64) -> Self {
        Self(Repr::U64(n))
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Self {
        Self::from_bytes(bytes)
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Self::from_bytes(s.as_bytes())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Self::from_bytes(s.as_bytes())
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Self::from_bytes(s.as_bytes())
    }
}

impl From<&Key> for Key {
    fn from(key: &Key) -> Self {
        key.clone()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.0, self.as_ip(), self.as_bytes()) {
            (_, Some(ip), _) => write!(f, "Key({ip})"),
            (_, _, Some(bytes)) => write!(f, "Key({:?})", String::from_utf8_lossy(bytes)),
            (Repr::U64(n), _, _) => write!(f, "Key({n})"),
            (Repr::Digest(d), _, _) => {
                f.write_str("Key(sha256:")?;
                d.iter().take(8).try_for_each(|b| write!(f, "{b:02x}"))?;
                f.write_str("…)")
            }
            _ => f.write_str("Key(?)"),
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
    }

    #[test]
    fn long_keys_become_digests() {
        let at_bound = "x".repeat(Key::MAX_LEN);
        assert_eq!(
            Key::from(at_bound.as_str()).as_bytes(),
            Some(at_bound.as_bytes())
        );
        let over = "x".repeat(Key::MAX_LEN + 1);
        let key = Key::from(over.as_str());
        assert_eq!(key.as_bytes(), None);
        // SHA-256 of 65 'x' bytes, as `printf 'x%.0s' $(seq 65) | sha256sum` prints it.
        let hex: String = key
            .as_digest()
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"
        );
        assert_eq!(key, Key::from(over.into_bytes().as_slice()));
        assert_ne!(key, Key::from("x".repeat(Key::MAX_LEN + 2).as_str()));
    }

    #[test]
    fn lengths_at_the_inline_boundary_stay_distinct() {
        let a = Key::from("x".repeat(INLINE).as_str());
        let b = Key::from("x".repeat(INLINE + 1).as_str());
        assert_ne!(a, b);
        assert_ne!(Key::from("a"), Key::from("a\0"));
    }
}
