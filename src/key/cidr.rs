//! [`IpNet`]: an IP network in CIDR notation, and [`ConfigError`] for one that does not parse.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 network: an address and a prefix length, as in `10.0.0.0/8` or
/// `2001:db8::/32`. A bare address is the network of that one host (`/32` or `/128`).
///
/// Parsing is strict, because a trust list that is wider than meant is a hole:
///
/// - **Host bits must be zero.** `10.1.2.3/8` is rejected (the error suggests `10.0.0.0/8` and
///   `10.1.2.3/32`) rather than quietly read as `10.0.0.0/8`: it is more often a mistyped
///   single address than a network.
/// - An IPv4-mapped IPv6 network of prefix 96 or longer (`::ffff:10.0.0.0/104`) is the IPv4
///   network it maps (`10.0.0.0/8`), since client addresses are compared in their canonical
///   form ([`Ipv6Addr::to_canonical`]).
/// - A zone id (`fe80::1%eth0`) is dropped; leading and trailing whitespace is ignored.
///
/// IPv4 addresses only ever match IPv4 networks and IPv6 addresses IPv6 networks.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::key::IpNet;
///
/// let net: IpNet = "10.0.0.0/8".parse().unwrap();
/// assert!(net.contains("10.200.0.1".parse::<IpAddr>().unwrap()));
/// assert!(!net.contains("192.0.2.1".parse::<IpAddr>().unwrap()));
///
/// let host: IpNet = "2001:db8::7".parse().unwrap();
/// assert_eq!(host.prefix_len(), 128);
///
/// let err = "10.1.2.3/8".parse::<IpNet>().unwrap_err();
/// assert!(err.to_string().contains("10.1.2.3/8"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet(Net);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Net {
    V4 { bits: u32, prefix: u8 },
    V6 { bits: u128, prefix: u8 },
}

impl IpNet {
    /// The network of `addr` with a `prefix_len`-bit prefix.
    ///
    /// Fails when the prefix is longer than the address (32 bits for IPv4, 128 for IPv6) or
    /// when `addr` has bits set past the prefix.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Self, ConfigError> {
        let value = || format!("{addr}/{prefix_len}");
        let net = match addr {
            IpAddr::V4(v4) => {
                if prefix_len > 32 {
                    return Err(ConfigError::new(value(), Reason::PrefixTooLong(32)));
                }
                Net::V4 {
                    bits: u32::from(v4),
                    prefix: prefix_len,
                }
            }
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if (96..=128).contains(&prefix_len) => Net::V4 {
                    bits: u32::from(v4),
                    prefix: prefix_len - 96,
                },
                _ => {
                    if prefix_len > 128 {
                        return Err(ConfigError::new(value(), Reason::PrefixTooLong(128)));
                    }
                    Net::V6 {
                        bits: u128::from(v6),
                        prefix: prefix_len,
                    }
                }
            },
        };
        let net = Self(net);
        if net.network_bits() != net.raw_bits() {
            return Err(ConfigError::new(
                value(),
                Reason::HostBits {
                    network: Self::masked(net),
                    host: Self::host(addr),
                },
            ));
        }
        Ok(net)
    }

    /// The network of the one address `addr` (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Self {
        match addr.to_canonical() {
            IpAddr::V4(v4) => Self(Net::V4 {
                bits: u32::from(v4),
                prefix: 32,
            }),
            IpAddr::V6(v6) => Self(Net::V6 {
                bits: u128::from(v6),
                prefix: 128,
            }),
        }
    }

    /// The network's first address (its prefix, with every host bit zero).
    pub fn addr(&self) -> IpAddr {
        match self.0 {
            Net::V4 { bits, .. } => IpAddr::V4(Ipv4Addr::from(bits)),
            Net::V6 { bits, .. } => IpAddr::V6(Ipv6Addr::from(bits)),
        }
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        match self.0 {
            Net::V4 { prefix, .. } | Net::V6 { prefix, .. } => prefix,
        }
    }

    /// Whether `ip` is in this network. IPv4-mapped IPv6 addresses count as IPv4.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.0, ip.to_canonical()) {
            (Net::V4 { bits, prefix }, IpAddr::V4(v4)) => u32::from(v4) & mask_v4(prefix) == bits,
            (Net::V6 { bits, prefix }, IpAddr::V6(v6)) => u128::from(v6) & mask_v6(prefix) == bits,
            _ => false,
        }
    }

    fn raw_bits(&self) -> u128 {
        match self.0 {
            Net::V4 { bits, .. } => u128::from(bits),
            Net::V6 { bits, .. } => bits,
        }
    }

    fn network_bits(&self) -> u128 {
        match self.0 {
            Net::V4 { bits, prefix } => u128::from(bits & mask_v4(prefix)),
            Net::V6 { bits, prefix } => bits & mask_v6(prefix),
        }
    }

    fn masked(self) -> Self {
        Self(match self.0 {
            Net::V4 { bits, prefix } => Net::V4 {
                bits: bits & mask_v4(prefix),
                prefix,
            },
            Net::V6 { bits, prefix } => Net::V6 {
                bits: bits & mask_v6(prefix),
                prefix,
            },
        })
    }
}

/// A set of networks, laid out for the membership test on every forwarded entry: network and
/// mask pairs per family, compared as integers.
#[derive(Debug, Clone, Default)]
pub(super) struct NetSet {
    v4: Box<[(u32, u32)]>,
    v6: Box<[(u128, u128)]>,
}

impl NetSet {
    /// Whether `ip`, already canonical (no IPv4-mapped IPv6), is in one of the networks.
    #[inline]
    pub(super) fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                self.v4.iter().any(|&(net, mask)| bits & mask == net)
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                self.v6.iter().any(|&(net, mask)| bits & mask == net)
            }
        }
    }
}

impl FromIterator<IpNet> for NetSet {
    fn from_iter<I: IntoIterator<Item = IpNet>>(nets: I) -> Self {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for net in nets {
            match net.0 {
                Net::V4 { bits, prefix } => v4.push((bits, mask_v4(prefix))),
                Net::V6 { bits, prefix } => v6.push((bits, mask_v6(prefix))),
            }
        }
        Self {
            v4: v4.into(),
            v6: v6.into(),
        }
    }
}

/// The mask of a `prefix`-bit IPv4 prefix; `prefix` is at most 32.
#[inline]
fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// The mask of a `prefix`-bit IPv6 prefix; `prefix` is at most 128.
#[inline]
pub(super) fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// `ip` with an IPv6 address cut to its first `prefix` bits; IPv4 unchanged.
#[inline]
pub(super) fn group_v6(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & mask_v6(prefix))),
        v4 => v4,
    }
}

impl From<IpAddr> for IpNet {
    fn from(addr: IpAddr) -> Self {
        Self::host(addr)
    }
}

impl FromStr for IpNet {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, ConfigError> {
        let trimmed = text.trim();
        let (addr, prefix) = match trimmed.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (trimmed, None),
        };
        // A zone id names an interface, not part of the network.
        let addr = match addr.split_once('%') {
            Some((addr, zone)) if !zone.is_empty() && addr.contains(':') => addr,
            _ => addr,
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| ConfigError::new(text, Reason::NotAnAddress))?;
        match prefix {
            None => Ok(Self::host(addr)),
            Some(prefix) => {
                let digits = !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_digit());
                let prefix = match prefix.parse::<u8>() {
                    Ok(prefix) if digits => prefix,
                    _ => return Err(ConfigError::new(text, Reason::BadPrefix)),
                };
                Self::new(addr, prefix).map_err(|e| ConfigError::new(text, e.reason))
            }
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.prefix_len())
    }
}

/// An invalid setting: names the offending value and says what is wrong with it.
///
/// ```
/// use tollgate::key::ClientIp;
///
/// let err = ClientIp::trusting(["10.0.0.0/8", "10.0.0.0/33"]).unwrap_err();
/// assert_eq!(err.value(), "10.0.0.0/33");
/// assert!(err.to_string().contains("\"10.0.0.0/33\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    value: String,
    reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reason {
    NotAnAddress,
    BadPrefix,
    PrefixTooLong(u8),
    HostBits { network: IpNet, host: IpNet },
}

impl ConfigError {
    fn new(value: impl Into<String>, reason: Reason) -> Self {
        Self {
            value: value.into(),
            reason,
        }
    }

    /// The value that was rejected, as it was given.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid IP network {:?}: ", self.value)?;
        match &self.reason {
            Reason::NotAnAddress => f.write_str(
                "expected an IP address or a CIDR network such as 10.0.0.0/8 or 2001:db8::/32",
            ),
            Reason::BadPrefix => f.write_str("the prefix length after '/' is not a number of bits"),
            Reason::PrefixTooLong(max) => {
                write!(f, "the prefix length is longer than the address ({max} bits)")
            }
            Reason::HostBits { network, host } => write!(
                f,
                "bits are set after the prefix; write {network} for the network or {host} for the one address"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn parses_networks_and_hosts() {
        assert_eq!(net("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(net(" 192.0.2.7 ").to_string(), "192.0.2.7/32");
        assert_eq!(net("2001:db8::/32").to_string(), "2001:db8::/32");
        assert_eq!(net("::1").to_string(), "::1/128");
        assert_eq!(net("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(net("::/0").to_string(), "::/0");
        assert_eq!(net("fe80::1%eth0").to_string(), "fe80::1/128");
        assert_eq!(net("::ffff:10.0.0.0/104").to_string(), "10.0.0.0/8");
        assert_eq!(net("::ffff:192.0.2.7").to_string(), "192.0.2.7/32");
    }

    #[test]
    fn contains_by_prefix() {
        let v4 = net("10.0.0.0/8");
        assert!(v4.contains(ip("10.0.0.0")));
        assert!(v4.contains(ip("10.255.255.255")));
        assert!(v4.contains(ip("::ffff:10.1.2.3")));
        assert!(!v4.contains(ip("11.0.0.0")));
        assert!(!v4.contains(ip("::a00:1")));
        let v6 = net("2001:db8::/32");
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        assert!(net("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(net("::/0").contains(ip("2001:db8::1")));
        assert!(net("192.0.2.7").contains(ip("192.0.2.7")));
        assert!(!net("192.0.2.7").contains(ip("192.0.2.8")));
    }

    #[test]
    fn rejects_with_the_value_named() {
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "10.0.0.0/08x",
            "10.0.0/8",
            "010.0.0.1",
            "example.com",
            "10.0.0.0/8/8",
            "1.2.3.4%eth0",
        ] {
            let err = bad.parse::<IpNet>().unwrap_err();
            assert_eq!(err.value(), bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let err = net_err("10.1.2.3/8");
        assert_eq!(
            err.to_string(),
            "invalid IP network \"10.1.2.3/8\": bits are set after the prefix; \
             write 10.0.0.0/8 for the network or 10.1.2.3/32 for the one address"
        );
        assert!(net_err("2001:db8::1/32")
            .to_string()
            .contains("2001:db8::/32"));
    }

    fn net_err(text: &str) -> ConfigError {
        text.parse::<IpNet>().unwrap_err()
    }

    #[test]
    fn net_sets_agree_with_their_networks() {
        let nets = [net("10.0.0.0/8"), net("192.0.2.7"), net("2001:db8::/32")];
        let set: NetSet = nets.iter().copied().collect();
        for text in [
            "10.1.2.3",
            "11.0.0.0",
            "192.0.2.7",
            "192.0.2.8",
            "2001:db8::1",
            "::1",
        ] {
            let ip = ip(text);
            assert_eq!(
                set.contains(ip),
                nets.iter().any(|n| n.contains(ip)),
                "{text}"
            );
        }
        assert!(!NetSet::default().contains(ip("10.0.0.1")));
    }

    #[test]
    fn masks() {
        assert_eq!(mask_v4(0), 0);
        assert_eq!(mask_v4(8), 0xff00_0000);
        assert_eq!(mask_v4(32), u32::MAX);
        assert_eq!(mask_v6(0), 0);
        assert_eq!(mask_v6(64), u128::MAX << 64);
        assert_eq!(mask_v6(128), u128::MAX);
    }
}
