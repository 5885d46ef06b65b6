//! [`IpNet`]: an IP network in CIDR notation, and [`ParseIpNetError`] for one that does not parse.
//!
//! The networks and their containment are the `ipnet` crate's; what this module adds is the
//! strictness a trust list needs (host bits past the prefix are an error, not masked away;
//! IPv4-mapped IPv6 networks are the IPv4 networks they map; zone ids are dropped) and errors
//! that name the bad value and say how to fix it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet as Net, Ipv4Net, Ipv6Net};

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
///   form ([`Ipv6Addr::to_canonical`](std::net::Ipv6Addr::to_canonical)).
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

impl IpNet {
    /// The network of `addr` with a `prefix_len`-bit prefix.
    ///
    /// Fails when the prefix is longer than the address (32 bits for IPv4, 128 for IPv6) or
    /// when `addr` has bits set past the prefix.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Self, ParseIpNetError> {
        let error = |reason: String| ParseIpNetError::new(format!("{addr}/{prefix_len}"), reason);
        // An IPv4-mapped network of prefix 96 or longer is the IPv4 network it maps.
        let (ip, bits) = match addr {
            IpAddr::V6(v6) if prefix_len >= 96 => v6
                .to_ipv4_mapped()
                .map_or((addr, prefix_len), |v4| (IpAddr::V4(v4), prefix_len - 96)),
            _ => (addr, prefix_len),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let too_long = format!("the prefix length is longer than the address ({max} bits)");
        let net = Net::new(ip, bits).map_err(|_| error(too_long))?;
        // The one check `ipnet` leaves to its caller: it keeps host bits, and `trunc` drops
        // them. A trust list must not quietly widen a mistyped address to its network.
        if net.trunc() != net {
            let (network, host) = (Self(net.trunc()), Self::host(addr));
            return Err(error(format!(
                "bits are set after the prefix; write {network} for the network or {host} for the one address"
            )));
        }
        Ok(Self(net))
    }

    /// The network of the one address `addr` (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Self {
        Self(Net::from(addr.to_canonical()))
    }

    /// The network's first address (its prefix, with every host bit zero).
    pub fn addr(&self) -> IpAddr {
        self.0.network()
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Whether `ip` is in this network. IPv4-mapped IPv6 addresses count as IPv4.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

/// A set of networks, laid out for the membership test on every forwarded entry: the networks
/// of each family apart, so an address is compared with its own family's only.
#[derive(Debug, Clone, Default)]
pub(super) struct NetSet {
    v4: Box<[Ipv4Net]>,
    v6: Box<[Ipv6Net]>,
}

impl NetSet {
    /// Whether `ip`, already canonical (no IPv4-mapped IPv6), is in one of the networks.
    #[inline]
    pub(super) fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => self.v4.iter().any(|net| net.contains(&v4)),
            IpAddr::V6(v6) => self.v6.iter().any(|net| net.contains(&v6)),
        }
    }
}

impl FromIterator<IpNet> for NetSet {
    fn from_iter<I: IntoIterator<Item = IpNet>>(nets: I) -> Self {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for net in nets {
            match net.0 {
                Net::V4(net) => v4.push(net),
                Net::V6(net) => v6.push(net),
            }
        }
        Self {
            v4: v4.into(),
            v6: v6.into(),
        }
    }
}

/// The address a client is keyed by: an IPv4 address as it is; an IPv6 address that carries
/// an IPv4 client's (IPv4-mapped, NAT64's well-known prefix, 6to4, Teredo) as that IPv4
/// address; one of the local-use NAT64 prefix whole; any other cut to its first `prefix`
/// bits (at most 128).
///
/// A translator gives each IPv4 client one IPv6 address inside one of its /64s: grouped by
/// the /64, every client behind it would share one key. A 6to4 holder has a /48 of its own
/// (65 536 /64s) for the one IPv4 address it holds.
#[inline]
pub(super) fn group_v6(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => carried_v4(v6).unwrap_or_else(|| {
            Ipv6Net::new(v6, prefix).map_or(ip, |net| IpAddr::V6(net.network()))
        }),
        v4 => v4,
    }
}

/// The IPv4 client an IPv6 address carries, if any: that IPv4 address, or the IPv6 address
/// whole where its network's prefix length puts the IPv4 one (RFC 6052 §2.2); `None` for a
/// native IPv6 address.
#[inline]
fn carried_v4(v6: Ipv6Addr) -> Option<IpAddr> {
    let bits = u128::from(v6);
    let low = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let v4 = match v6.segments() {
        // IPv4-mapped (`::ffff:a.b.c.d`).
        [0, 0, 0, 0, 0, 0xffff, _, _] => low,
        // NAT64's well-known prefix, `64:ff9b::/96` (RFC 6052).
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => low,
        // NAT64's local-use prefix, `64:ff9b:1::/48` (RFC 8215): the operator's prefix may be
        // /48 to /96, so where the IPv4 address sits is not known here.
        [0x64, 0xff9b, 1, ..] => return Some(IpAddr::V6(v6)),
        // 6to4, `2002:a.b.c.d::/48` (RFC 3056).
        [0x2002, hi, lo, ..] => Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)),
        // Teredo, `2001:0::/32` (RFC 4380): the client's public address, inverted, last.
        [0x2001, 0, ..] => Ipv4Addr::from(!((bits & 0xffff_ffff) as u32)),
        _ => return None,
    };
    Some(IpAddr::V4(v4))
}

impl From<IpAddr> for IpNet {
    fn from(addr: IpAddr) -> Self {
        Self::host(addr)
    }
}

impl FromStr for IpNet {
    type Err = ParseIpNetError;

    fn from_str(text: &str) -> Result<Self, ParseIpNetError> {
        let error = |reason: &str| ParseIpNetError::new(text, reason);
        let mut parts = text.trim().splitn(2, '/');
        let (addr, prefix) = (parts.next().unwrap_or_default(), parts.next());
        // A zone id names an interface, not part of the network.
        let addr = match addr.split_once('%') {
            Some((addr, zone)) if !zone.is_empty() && addr.contains(':') => addr,
            _ => addr,
        };
        let not_an_address =
            "expected an IP address or a CIDR network such as 10.0.0.0/8 or 2001:db8::/32";
        let addr: IpAddr = addr.parse().map_err(|_| error(not_an_address))?;
        let Some(prefix) = prefix else {
            return Ok(Self::host(addr));
        };
        let digits = !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_digit());
        match prefix.parse::<u8>() {
            Ok(prefix) if digits => Self::new(addr, prefix).map_err(|e| error(&e.reason)),
            _ => Err(error("the prefix length after '/' is not a number of bits")),
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.prefix_len())
    }
}

/// An IP network that does not parse (a trust list's entry, an allow list's): names the offending
/// value and says what is wrong with it.
///
/// ```
/// use tollgate::key::ClientIp;
///
/// let err = ClientIp::trusting(["10.0.0.0/8", "10.0.0.0/33"]).unwrap_err();
/// assert_eq!(err.value(), "10.0.0.0/33");
/// assert!(err.to_string().contains("\"10.0.0.0/33\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseIpNetError {
    value: String,
    /// What is wrong with it, and how to fix it.
    reason: String,
}

impl ParseIpNetError {
    fn new(value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// The value that was rejected, as it was given.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for ParseIpNetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid IP network {:?}: {}", self.value, self.reason)
    }
}

impl std::error::Error for ParseIpNetError {}

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

    fn net_err(text: &str) -> ParseIpNetError {
        text.parse::<IpNet>().unwrap_err()
    }

    proptest::proptest! {
        /// `ipnet`'s own parser is laxer: it reads host bits past the prefix (keeping them) and
        /// octets with leading zeros, which a trust list refuses. Past those two, the two read
        /// the same IPv4 networks.
        #[test]
        fn ipv4_networks_read_as_ipnet_reads_them_but_strictly(
            text in "((0|0|[1-9][0-9]?|0[0-9]{1,2}|[12][0-9]{2}|[0-9]{4})\\.){3}\
                     (0|0|[1-9][0-9]?|0[0-9]{1,2}|[12][0-9]{2}|[0-9]{4})/(32|32|0|8|16|24|[1-9][0-9]?)",
        ) {
            let ours = text.parse::<IpNet>().ok();
            let theirs = text.parse::<Net>().ok();
            match (ours, theirs) {
                (Some(ours), theirs) => proptest::prop_assert_eq!(Some(ours.0), theirs, "{}", text),
                (None, Some(theirs)) => {
                    let leading_zero = text
                        .split(['.', '/'])
                        .any(|part| part.len() > 1 && part.starts_with('0'));
                    proptest::prop_assert!(theirs.trunc() != theirs || leading_zero, "{}", text);
                }
                (None, None) => {}
            }
        }
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
    fn ipv6_addresses_group_by_prefix() {
        assert_eq!(
            group_v6(ip("2001:db8:1:2:3:4:5:6"), 64),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            group_v6(ip("2001:db8:1:2:3:4:5:6"), 128),
            ip("2001:db8:1:2:3:4:5:6")
        );
        assert_eq!(group_v6(ip("2001:db8:1:2:3:4:5:6"), 0), ip("::"));
        assert_eq!(group_v6(ip("192.0.2.7"), 64), ip("192.0.2.7"));
    }
}
