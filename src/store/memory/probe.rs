//! A key as the shard tables hold it: IP addresses and integers as plain words.

use std::net::{IpAddr, Ipv6Addr};

use crate::Key;

/// A key as its table holds it.
pub(super) enum Probe<'k> {
    V4(u32),
    V6([u64; 2]),
    Int(u64),
    Other(&'k Key),
}

impl<'k> Probe<'k> {
    #[inline]
    pub(super) fn of(key: &'k Key) -> Self {
        if let Some(n) = key.as_u64() {
            return Self::Int(n);
        }
        match key.as_ip() {
            Some(IpAddr::V4(ip)) => Self::V4(u32::from_ne_bytes(ip.octets())),
            Some(IpAddr::V6(ip)) => {
                let octets = ip.octets();
                let (hi, lo) = octets.split_at(8);
                Self::V6([word(hi), word(lo)])
            }
            None => Self::Other(key),
        }
    }
}

/// Eight bytes as a native-endian word.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(bytes);
    u64::from_ne_bytes(w)
}

/// The key a [`Probe::V6`] was made from.
pub(super) fn v6_key(w: [u64; 2]) -> Key {
    let mut octets = [0; 16];
    octets[..8].copy_from_slice(&w[0].to_ne_bytes());
    octets[8..].copy_from_slice(&w[1].to_ne_bytes());
    Key::from(Ipv6Addr::from(octets))
}
