//! A key as the shard tables hold it: IP addresses and integers as plain words.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
                let w = u128::from_ne_bytes(ip.octets());
                Self::V6([w as u64, (w >> 64) as u64])
            }
            None => Self::Other(key),
        }
    }
}

/// What one of the tables holds a key as: the key it was made from can be rebuilt (to rehash
/// it as it hashed when it went in, and to list it).
pub(super) trait Word: PartialEq {
    fn key(&self) -> Key;
}

impl Word for u32 {
    fn key(&self) -> Key {
        Key::from(Ipv4Addr::from(self.to_ne_bytes()))
    }
}

impl Word for [u64; 2] {
    fn key(&self) -> Key {
        let w = u128::from(self[0]) | u128::from(self[1]) << 64;
        Key::from(Ipv6Addr::from(w.to_ne_bytes()))
    }
}

impl Word for u64 {
    fn key(&self) -> Key {
        Key::from(*self)
    }
}

impl Word for Key {
    fn key(&self) -> Key {
        self.clone()
    }
}
