//! The `key` of a configured limit: one extractor, or a list of 2 to 4 for a composite key.

use std::fmt;

use http::HeaderName;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer, StrDeserializer};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::key::{
    ipv6_prefix, trusted_hops, BearerToken, ClientIp, DynTuple, ForwardedHeader, Global, Header,
    KeyExtractor, Method, PeerIp, Route,
};
use crate::RateLimitLayer;

/// What a configured limit counts requests against: `"peer_ip"` (the default), one of the
/// other [`KeyPart`]s, or a list of 2 to 4 of them for a composite key, which gives exactly
/// the key of the tuple written in code (`["route", "peer_ip"]` keys as `(Route, PeerIp)`).
///
/// ```
/// use tollgate::config::{KeyConfig, KeyPart};
///
/// #[derive(serde::Deserialize)]
/// struct File {
///     key: KeyConfig,
/// }
///
/// let file: File = toml::from_str(r#"key = { header = "x-api-key" }"#)?;
/// assert_eq!(file.key, KeyConfig::One(KeyPart::Header("x-api-key".into())));
///
/// let file: File = toml::from_str(r#"key = ["route", "peer_ip"]"#)?;
/// assert_eq!(file.key, KeyConfig::Tuple(vec![KeyPart::Route, KeyPart::PeerIp]));
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KeyConfig {
    /// One extractor.
    One(KeyPart),
    /// A composite key: every part's key together, as a tuple of 2 to 4 extractors in code.
    Tuple(Vec<KeyPart>),
}

impl Default for KeyConfig {
    fn default() -> Self {
        Self::One(KeyPart::PeerIp)
    }
}

/// One key extractor, by name: `"peer_ip"`, `"bearer_token"`, `"route"`, `"method"`,
/// `"global"`, `{ header = "x-api-key" }`, or `{ client_ip = { ... } }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KeyPart {
    /// The connection's peer address ([`PeerIp`](struct@PeerIp)), IPv6 grouped by `/64`.
    PeerIp,
    /// The token of `Authorization: Bearer` ([`BearerToken`]).
    BearerToken,
    /// The matched route ([`Route`]).
    Route,
    /// The request method ([`Method`]).
    Method,
    /// One key for every request ([`Global`]).
    Global,
    /// One header's value, such as an API key ([`Header`]): the header's name.
    Header(String),
    /// The client's address behind trusted proxies ([`ClientIp`]).
    ClientIp(ClientIpConfig),
}

/// [`ClientIp`] in configuration: exactly one of `trusted` (the proxies' networks) and
/// `trusted_hops` (how many proxies every request comes through), and optionally the
/// `header` the proxies set (`x-forwarded-for` by default; `forwarded`, `x-real-ip`, or the
/// name of a header holding one address such as `cf-connecting-ip`) and the `ipv6_prefix`
/// (1 to 128 bits, 64 by default).
///
/// ```toml
/// key = { client_ip = { trusted = ["10.0.0.0/8"], header = "x-forwarded-for", ipv6_prefix = 64 } }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ClientIpConfig {
    /// The trusted proxies: networks in CIDR notation or single addresses
    /// ([`ClientIp::trusting`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted: Option<Vec<String>>,
    /// How many proxies every request comes through ([`ClientIp::trusted_hops`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_hops: Option<usize>,
    /// The one header read ([`ClientIp::header`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The IPv6 prefix a client's address is cut to ([`ClientIp::ipv6_prefix`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix: Option<u8>,
}

impl KeyConfig {
    /// `layer` keyed as configured; `field` is where this key was read (`key`).
    pub(crate) fn apply(
        &self,
        layer: RateLimitLayer,
        field: &str,
    ) -> Result<RateLimitLayer, ConfigError> {
        match self {
            Self::One(part) => Ok(layer.keyed(part.extractor(field)?.into())),
            Self::Tuple(parts) => {
                let parts = parts.iter().enumerate();
                let parts = parts.map(|(i, part)| part.extractor(&format!("{field}[{i}]")));
                let parts: Vec<_> = parts.collect::<Result<_, _>>()?;
                let count = parts.len();
                let tuple = DynTuple::new(parts).ok_or_else(|| {
                    let max = DynTuple::MAX_PARTS;
                    let reason = format!(
                        "a composite key has 2 to {max} parts, as a tuple in code; this one has \
                         {count}: write one part without a list, or combine at most {max}"
                    );
                    ConfigError::missing(field, reason)
                })?;
                Ok(layer.key(tuple))
            }
        }
    }
}

impl KeyPart {
    fn extractor(&self, field: &str) -> Result<Box<dyn KeyExtractor>, ConfigError> {
        Ok(match self {
            Self::PeerIp => Box::new(PeerIp),
            Self::BearerToken => Box::new(BearerToken),
            Self::Route => Box::new(Route),
            Self::Method => Box::new(Method),
            Self::Global => Box::new(Global),
            Self::Header(name) => {
                header_name(&format!("{field}.header"), name)?;
                Box::new(Header::new(name))
            }
            Self::ClientIp(config) => Box::new(config.extractor(&format!("{field}.client_ip"))?),
        })
    }
}

impl ClientIpConfig {
    fn extractor(&self, field: &str) -> Result<ClientIp, ConfigError> {
        let mut client_ip = match (&self.trusted, self.trusted_hops) {
            (Some(trusted), None) => ClientIp::trusting(trusted).map_err(|e| {
                let at = trusted.iter().position(|t| t == e.value()).unwrap_or(0);
                let field = format!("{field}.trusted[{at}]");
                ConfigError::text(field, e.value(), "not a trusted network").caused_by(e)
            })?,
            (None, Some(hops)) => {
                let refused = |why| ConfigError::bare(format!("{field}.trusted_hops"), hops, why);
                ClientIp::trusted_hops(trusted_hops(hops).map_err(refused)?)
            }
            (Some(_), Some(_)) => return Err(ConfigError::missing(field, BOTH_TRUSTED)),
            (None, None) => return Err(ConfigError::missing(field, NO_TRUSTED)),
        };
        if let Some(name) = &self.header {
            client_ip = client_ip.header(forwarded_header(&format!("{field}.header"), name)?);
        }
        let Some(bits) = self.ipv6_prefix else {
            return Ok(client_ip);
        };
        let refused = |why| ConfigError::bare(format!("{field}.ipv6_prefix"), bits, why);
        Ok(client_ip.ipv6_prefix(ipv6_prefix(bits).map_err(refused)?))
    }
}

const BOTH_TRUSTED: &str = "set either `trusted` (the proxies' networks) or `trusted_hops` (how \
     many proxies every request comes through), not both";
const NO_TRUSTED: &str = "set `trusted` to the networks of your proxies, such as \
     [\"10.0.0.0/8\"], or `trusted_hops` to how many proxies every request comes through; with \
     no proxy in front, use the key \"peer_ip\"";

/// The header named `name`, or an error naming `field`.
fn header_name(field: &str, name: &str) -> Result<HeaderName, ConfigError> {
    crate::key::header_name(name).map_err(|why| ConfigError::text(field, name, why))
}

/// The forwarding header named `name`: the list headers and `X-Real-IP` by their names, any
/// other as a header holding one address.
fn forwarded_header(field: &str, name: &str) -> Result<ForwardedHeader, ConfigError> {
    let name = header_name(field, name)?;
    Ok(match name.as_str() {
        "x-forwarded-for" => ForwardedHeader::XForwardedFor,
        "forwarded" => ForwardedHeader::Forwarded,
        "x-real-ip" => ForwardedHeader::XRealIp,
        _ => ForwardedHeader::Single(name),
    })
}

/// One part, or a list of parts: read by hand so that a bad part's error is the part's own
/// (an untagged enum would only say that nothing matched).
impl<'de> Deserialize<'de> for KeyConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a key such as \"peer_ip\", { header = \"x-api-key\" }, or a list of 2 to 4 \
                     keys such as [\"route\", \"peer_ip\"]",
                )
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<KeyConfig, E> {
                KeyPart::deserialize(StrDeserializer::<E>::new(name)).map(KeyConfig::One)
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<KeyConfig, M::Error> {
                KeyPart::deserialize(MapAccessDeserializer::new(map)).map(KeyConfig::One)
            }

            fn visit_seq<S: SeqAccess<'de>>(self, seq: S) -> Result<KeyConfig, S::Error> {
                Vec::<KeyPart>::deserialize(SeqAccessDeserializer::new(seq)).map(KeyConfig::Tuple)
            }
        }

        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use http::Request;
    use proptest::prelude::*;

    use super::*;
    use crate::key::{KeyError, PeerAddr, RequestHead};
    use crate::Key;

    /// An extractor chosen at run time but used through the static tuple impls: `(P, P)`
    /// is the code path of `(Route, PeerIp)` and the like, whichever parts `P` stands for.
    #[derive(Debug, Clone)]
    enum P {
        PeerIp,
        BearerToken,
        Route,
        Method,
        Global,
        Header,
        ClientIp,
    }

    const PARTS: [P; 7] = [
        P::PeerIp,
        P::BearerToken,
        P::Route,
        P::Method,
        P::Global,
        P::Header,
        P::ClientIp,
    ];

    fn client_ip() -> ClientIp {
        ClientIp::trusting(["10.0.0.0/8"]).unwrap()
    }

    impl KeyExtractor for P {
        fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
            match self {
                P::PeerIp => PeerIp.extract(req),
                P::BearerToken => BearerToken.extract(req),
                P::Route => Route.extract(req),
                P::Method => Method.extract(req),
                P::Global => Global.extract(req),
                P::Header => Header::new("x-api-key").extract(req),
                P::ClientIp => client_ip().extract(req),
            }
        }
    }

    impl P {
        fn config(&self) -> KeyPart {
            match self {
                P::PeerIp => KeyPart::PeerIp,
                P::BearerToken => KeyPart::BearerToken,
                P::Route => KeyPart::Route,
                P::Method => KeyPart::Method,
                P::Global => KeyPart::Global,
                P::Header => KeyPart::Header("x-api-key".into()),
                P::ClientIp => KeyPart::ClientIp(ClientIpConfig {
                    trusted: Some(vec!["10.0.0.0/8".into()]),
                    ..ClientIpConfig::default()
                }),
            }
        }
    }

    /// The key of the static tuple of `parts`.
    fn static_key(parts: &[P], req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        match parts {
            [a, b] => (a.clone(), b.clone()).extract(req),
            [a, b, c] => (a.clone(), b.clone(), c.clone()).extract(req),
            [a, b, c, d] => (a.clone(), b.clone(), c.clone(), d.clone()).extract(req),
            _ => unreachable!("2 to 4 parts"),
        }
    }

    /// The key of the tuple configured as `parts`.
    fn configured_key(parts: &[P], req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        let boxed = parts
            .iter()
            .map(|p| p.config().extractor("key").unwrap())
            .collect();
        DynTuple::new(boxed).unwrap().extract(req)
    }

    fn request(
        peer: &str,
        path: &str,
        method: &str,
        api_key: Option<&[u8]>,
        auth: Option<&[u8]>,
        xff: Option<&str>,
    ) -> Request<()> {
        let mut req = Request::builder().uri(path).method(method);
        if let Some(v) = api_key {
            req = req.header("x-api-key", v);
        }
        if let Some(v) = auth {
            req = req.header("authorization", v);
        }
        if let Some(v) = xff {
            req = req.header("x-forwarded-for", v);
        }
        let mut req = req.body(()).unwrap();
        req.extensions_mut()
            .insert(PeerAddr(peer.parse::<SocketAddr>().unwrap()));
        req
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A configured composite key is the static tuple's key, for any parts in any order
        /// and any request: the same key, the same `None`, the same error.
        #[test]
        fn configured_tuples_key_as_static_tuples(
            parts in prop::collection::vec(0..PARTS.len(), 2..=4),
            peer in prop::sample::select(vec![
                "192.0.2.1:1", "10.0.0.2:5000", "[2001:db8::1]:80", "[::ffff:10.1.1.1]:9",
            ]),
            path in "/[a-z]{0,3}(/[a-z0-9]{0,70})?",
            method in prop::sample::select(vec!["GET", "POST", "DELETE", "PATCH"]),
            api_key in prop::option::of(prop::collection::vec(0x20u8..0x7f, 0..80)),
            auth in prop::option::of(prop::sample::select(vec![
                &b"Bearer abc"[..], b"Bearer ", b"Basic x", b"bearer 192.0.2.1",
            ])),
            xff in prop::option::of(prop::sample::select(vec![
                "203.0.113.9", "6.6.6.6, 10.0.0.1", "garbage", "2001:db8::7",
            ])),
        ) {
            let parts: Vec<P> = parts.into_iter().map(|i| PARTS[i].clone()).collect();
            let req = request(peer, &path, method, api_key.as_deref(), auth, xff);
            let head = RequestHead::new(&req);
            prop_assert_eq!(configured_key(&parts, head), static_key(&parts, head));
        }
    }

    #[test]
    fn one_part_keys_as_itself() {
        let req = request("192.0.2.1:1", "/a", "GET", Some(b"k"), None, None);
        let head = RequestHead::new(&req);
        for p in PARTS {
            let configured = p.config().extractor("key").unwrap();
            assert_eq!(configured.extract(head), p.extract(head), "{p:?}");
        }
    }
}
