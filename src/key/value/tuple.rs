//! A tuple's key: the encoding of its parts (`encode_part`), each written so that any
//! sequence of parts reads back one way only, and the parts read back (`parts`).

#[cfg(feature = "redis")]
use std::sync::Arc;

use super::{v6, Domain, Key, Repr, DIGEST};

/// The most bytes one key takes in a tuple's encoding: a tag, a length byte and at most
/// [`Key::MAX_LEN`] bytes (a longer key takes its tag and its digest).
pub(crate) const PART_MAX: usize = 2 + Key::MAX_LEN;

impl Key {
    /// The key of a tuple whose parts [`encode_part`](Key::encode_part) wrote into `encoding`.
    pub(crate) fn tuple(encoding: &[u8]) -> Self {
        Self::from_bytes_in(Domain::Tuple, encoding)
    }

    /// Writes the key as one part of a tuple at the start of `out`, which holds at least
    /// [`PART_MAX`] bytes, and returns how many bytes it took: a tag for its kind, then its
    /// value, so that any sequence of parts reads back in one way only. Integers and addresses
    /// take their fixed size; byte strings of at most [`Key::MAX_LEN`] bytes a length byte and
    /// the bytes; longer ones their digest.
    #[inline]
    pub(crate) fn encode_part(&self, out: &mut [u8]) -> usize {
        let mut put = |tag: u8, value: &[u8]| {
            out[0] = tag;
            out[1..=value.len()].copy_from_slice(value);
            1 + value.len()
        };
        match &self.0 {
            Repr::V4(w) => put(1, &w.to_ne_bytes()),
            Repr::V6(words) => put(2, &v6(*words).octets()),
            Repr::U64(n) => put(3, &n.to_be_bytes()),
            Repr::Long(domain, _) | Repr::Digest(domain, _) => {
                let tag = if *domain == Domain::Tuple { 7 } else { 5 };
                put(tag, self.as_digest().map_or(&[0; DIGEST], |d| d))
            }
            Repr::Inline { .. } | Repr::Shared(..) => {
                let bytes = self.as_bytes().unwrap_or_default();
                out[0] = if self.is_tuple() { 6 } else { 4 };
                // At most MAX_LEN (64) bytes: the length fits in a byte.
                out[1] = bytes.len() as u8;
                out[2..2 + bytes.len()].copy_from_slice(bytes);
                2 + bytes.len()
            }
        }
    }

    /// A tuple's parts read back from its encoding ([`encode_part`](Key::encode_part)), each
    /// the key it was made from (a long one as its digest); `None` for a key that is not a
    /// tuple, a tuple stored by its digest, or bytes that are no tuple's encoding.
    #[cfg(feature = "redis")]
    pub(crate) fn parts(&self) -> Option<Vec<Key>> {
        if !self.is_tuple() || self.as_digest().is_some() {
            return None;
        }
        let mut rest = self.as_bytes()?;
        let mut parts = Vec::new();
        while let Some((&tag, after)) = rest.split_first() {
            let domain = if tag >= 6 {
                Domain::Tuple
            } else {
                Domain::Bytes
            };
            let (part, next) = match tag {
                1 => {
                    let (octets, next) = after.split_first_chunk::<4>()?;
                    (Self::from(std::net::Ipv4Addr::from(*octets)), next)
                }
                2 => {
                    let (octets, next) = after.split_first_chunk::<16>()?;
                    (Self::from(std::net::Ipv6Addr::from(*octets)), next)
                }
                3 => {
                    let (n, next) = after.split_first_chunk::<8>()?;
                    (Self(Repr::U64(u64::from_be_bytes(*n))), next)
                }
                4 | 6 => {
                    let (&len, after) = after.split_first()?;
                    let (bytes, next) = after.split_at_checked(usize::from(len))?;
                    (Self::from_bytes_in(domain, bytes), next)
                }
                5 | 7 => {
                    let (digest, next) = after.split_first_chunk::<DIGEST>()?;
                    (Self(Repr::Digest(domain, Arc::new(*digest))), next)
                }
                _ => return None,
            };
            parts.push(part);
            rest = next;
        }
        Some(parts)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::super::INLINE;
    use super::*;

    #[test]
    fn tuples_are_never_plain_byte_strings() {
        for len in [
            0,
            1,
            INLINE,
            INLINE + 1,
            Key::MAX_LEN,
            Key::MAX_LEN + 1,
            300,
        ] {
            let bytes = vec![b'z'; len];
            let tuple = Key::tuple(&bytes);
            let plain = Key::from(bytes.as_slice());
            assert!(tuple.is_tuple() && !plain.is_tuple(), "{len}");
            assert_eq!(tuple.kind(), "tuple");
            assert_ne!(tuple, plain, "{len}");
            assert_ne!(tuple.clone().stored(), plain.clone().stored(), "{len}");
            assert_eq!(tuple.as_bytes(), Some(bytes.as_slice()), "{len}");
            assert_eq!(tuple.as_digest(), plain.as_digest(), "{len}");
            assert_eq!(tuple.clone().stored(), tuple, "{len}");
        }
    }

    #[test]
    fn parts_read_back_one_way() {
        let mut out = [0; PART_MAX];
        let long = Key::from("y".repeat(100).as_str());
        let cases: [(Key, usize); 8] = [
            (Key::from(Ipv4Addr::new(192, 0, 2, 1)), 5),
            (Key::from(Ipv6Addr::LOCALHOST), 17),
            (Key::from(9u64), 9),
            (Key::from(""), 2),
            (Key::from("x".repeat(Key::MAX_LEN).as_str()), PART_MAX),
            (long.clone(), 33),
            (long.stored(), 33),
            (Key::tuple(b"ab"), 4),
        ];
        for (key, len) in cases {
            assert_eq!(key.encode_part(&mut out), len, "{key:?}");
        }
        assert_eq!(
            Key::from(Ipv4Addr::new(192, 0, 2, 1)).encode_part(&mut out),
            5
        );
        assert_eq!(out[..5], [1, 192, 0, 2, 1]);
    }
}
