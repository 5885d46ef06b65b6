use super::value::PART_MAX;
use super::{Key, KeyError, KeyExtractor, RequestHead};

/// Tries one extractor, and another when the first finds no key: made by
/// [`KeyExtractor::or`].
///
/// The key is the one the branch found, unchanged, so one client has one budget whichever
/// branch found it, and callbacks (`quota_for`, the allow list, ...) see a plain key. Keys of
/// different kinds never meet (an address and an API key are always two keys); two branches
/// that find byte strings share one namespace. See [`KeyExtractor::or`] to keep them apart.
#[derive(Debug, Clone)]
pub struct Or<A, B> {
    pub(super) first: A,
    pub(super) second: B,
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        self.first
            .extract(req)
            .or_else(|_| self.second.extract(req))
    }

    /// The address of the extractor that finds the key.
    fn client_ip(&self, req: RequestHead<'_>) -> Option<std::net::IpAddr> {
        match self.first.extract(req) {
            Ok(_) => self.first.client_ip(req),
            Err(_) => self.second.client_ip(req),
        }
    }
}

/// Leaves the requests a predicate picks unlimited, and keys the rest with an inner extractor:
/// made by the layer's `skip`.
#[derive(Clone)]
pub struct Skip<K, P> {
    inner: K,
    predicate: P,
}

impl<K, P> Skip<K, P> {
    pub(crate) fn new(inner: K, predicate: P) -> Self {
        Self { inner, predicate }
    }
}

impl<K: std::fmt::Debug, P> std::fmt::Debug for Skip<K, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skip")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<K, P> KeyExtractor for Skip<K, P>
where
    K: KeyExtractor,
    P: Fn(RequestHead<'_>) -> bool + Send + Sync + 'static,
{
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        if (self.predicate)(req) {
            return Ok(None);
        }
        self.inner.extract(req)
    }

    fn client_ip(&self, req: RequestHead<'_>) -> Option<std::net::IpAddr> {
        self.inner.client_ip(req)
    }
}

/// A tuple's key under construction: its parts' encodings ([`Key::encode_part`]) one after
/// the other, on the stack. `N` is the tuple's arity times [`PART_MAX`], so the parts always
/// fit: a tuple's key is at most 66 bytes per part, whatever the request.
struct Parts<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Parts<N> {
    #[inline]
    fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, key: &Key) {
        // At least PART_MAX bytes are left: one per part of the tuple.
        self.len += key.encode_part(&mut self.buf[self.len..]);
    }

    #[inline]
    fn key(&self) -> Key {
        Key::tuple(&self.buf[..self.len])
    }
}

/// A tuple of extractors, and the key of a tuple of keys.
macro_rules! tuple {
    ($arity:literal; $($name:ident),+) => {
        /// A tuple of extractors keys a request on all their keys together, such as
        /// `(Route, PeerIp)`: one budget per client per route. If any part leaves the request
        /// unlimited, it is unlimited; if any part fails, the request fails with that error.
        ///
        /// The key is a tuple key ([`Key::is_tuple`]): distinct parts always give distinct
        /// keys, whatever their kinds and lengths (a part longer than [`Key::MAX_LEN`] enters
        /// as its digest, so the key stays small), and a tuple's key never equals a plain
        /// key.
        impl<$($name: KeyExtractor),+> KeyExtractor for ($($name,)+) {
            #[allow(non_snake_case)]
            fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
                let ($($name,)+) = self;
                let mut parts = Parts::<{ $arity * PART_MAX }>::new();
                $(
                    let Some(key) = $name.extract(req)? else { return Ok(None) };
                    parts.push(&key);
                )+
                Ok(Some(parts.key()))
            }
        }

        /// The key a tuple of extractors makes from these parts, in order: what a live
        /// layer's [`Handle`](crate::layer::Handle) takes to peek at, reset or block one
        /// client of a layer keyed on a tuple. Each part must be the key its extractor makes:
        /// [`PeerIp::key_for`](super::PeerIp::key_for) for a client IP (an IPv6 address is
        /// grouped by its prefix), the header's value for a [`Header`](super::Header), the
        /// route (axum's matched route, such as `/users/{id}`) for [`Route`](super::Route).
        ///
        /// ```
        /// use tollgate::key::{PeerIp, Route};
        /// use tollgate::Key;
        ///
        /// let ip = "2001:db8::1".parse().unwrap();
        /// // The key `(Route, PeerIp)` makes for that client's requests to /login.
        /// let key = Key::from(("/login", PeerIp.key_for(ip)));
        /// assert!(key.is_tuple());
        /// assert_ne!(key, Key::from(("/login/", PeerIp.key_for(ip))));
        /// ```
        impl<$($name: Into<Key>),+> From<($($name,)+)> for Key {
            #[allow(non_snake_case)]
            fn from(($($name,)+): ($($name,)+)) -> Self {
                let mut parts = Parts::<{ $arity * PART_MAX }>::new();
                $(parts.push(&$name.into());)+
                parts.key()
            }
        }
    };
}

tuple!(2; A, B);
tuple!(3; A, B, C);
tuple!(4; A, B, C, D);

/// A tuple whose parts are chosen at run time, such as a composite key read from a
/// configuration file: the same key as the tuple of the same parts written in code
/// (`["route", "peer_ip"]` keys as `(Route, PeerIp)` does), made the same way: each part in
/// order, a part that leaves the request unlimited or fails ending the walk, the parts'
/// encodings ([`Key::encode_part`]) one after the other in a [`Parts`] buffer on the stack.
#[cfg_attr(not(feature = "serde"), allow(dead_code))]
pub(crate) struct DynTuple {
    parts: Box<[Box<dyn KeyExtractor>]>,
}

#[cfg_attr(not(feature = "serde"), allow(dead_code))]
impl DynTuple {
    /// The most parts a tuple has, as in code.
    pub(crate) const MAX_PARTS: usize = 4;

    /// The tuple of `parts`; `None` unless there are 2 to [`MAX_PARTS`](Self::MAX_PARTS) of
    /// them, as tuples in code have.
    pub(crate) fn new(parts: Vec<Box<dyn KeyExtractor>>) -> Option<Self> {
        (2..=Self::MAX_PARTS).contains(&parts.len()).then(|| Self {
            parts: parts.into_boxed_slice(),
        })
    }
}

impl KeyExtractor for DynTuple {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        // At most MAX_PARTS parts (checked by `new`): each has PART_MAX bytes.
        let mut parts = Parts::<{ DynTuple::MAX_PARTS * PART_MAX }>::new();
        for part in self.parts.iter() {
            let Some(key) = part.extract(req)? else {
                return Ok(None);
            };
            parts.push(&key);
        }
        Ok(Some(parts.key()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Global, Header, Method, PeerAddr, PeerIp, Route};
    use http::{Request, StatusCode};

    fn req(peer: &str, path: &str) -> Request<()> {
        let mut req = Request::builder().uri(path).body(()).unwrap();
        req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
        req
    }

    #[test]
    fn tuples_separate_every_part() {
        let k = |peer, path| {
            (Route, PeerIp)
                .extract(RequestHead::new(&req(peer, path)))
                .unwrap()
                .unwrap()
        };
        assert_eq!(k("192.0.2.1:1", "/a"), k("192.0.2.1:2", "/a"));
        assert_ne!(k("192.0.2.1:1", "/a"), k("192.0.2.2:1", "/a"));
        assert_ne!(k("192.0.2.1:1", "/a"), k("192.0.2.1:1", "/b"));
        // Length prefixes keep ("ab", "c") apart from ("a", "bc").
        let ab = from_parts("ab", "c");
        let a = from_parts("a", "bc");
        assert_ne!(ab, a);
    }

    fn from_parts(x: &'static str, y: &'static str) -> Key {
        let fx = move |_: RequestHead<'_>| Ok(Some(Key::from(x)));
        let fy = move |_: RequestHead<'_>| Ok(Some(Key::from(y)));
        (fx, fy)
            .extract(RequestHead::new(&Request::new(())))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn tuples_propagate_unlimited_and_errors() {
        let none = |_: RequestHead<'_>| Ok(None);
        assert_eq!(
            (Global, none)
                .extract(RequestHead::new(&Request::new(())))
                .unwrap(),
            None
        );
        let err = (Method, Header::new("x-key"))
            .extract(RequestHead::new(&Request::new(())))
            .unwrap_err();
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn or_falls_back_only_on_errors() {
        let key = Header::new("x-key").or(PeerIp);
        let plain = req("192.0.2.9:1", "/");
        assert_eq!(
            key.extract(RequestHead::new(&plain)).unwrap(),
            Some(Key::from("192.0.2.9".parse::<std::net::IpAddr>().unwrap()))
        );
        let mut keyed = req("192.0.2.9:1", "/");
        keyed.headers_mut().insert("x-key", "k".parse().unwrap());
        assert_eq!(
            key.extract(RequestHead::new(&keyed)).unwrap(),
            Some(Key::from("k"))
        );
    }

    #[test]
    fn skip_leaves_picked_requests_unlimited() {
        let key = Skip::new(PeerIp, |head: RequestHead<'_>| {
            head.uri().path() == "/healthz"
        });
        assert_eq!(
            key.extract(RequestHead::new(&req("192.0.2.1:1", "/healthz")))
                .unwrap(),
            None
        );
        assert!(key
            .extract(RequestHead::new(&req("192.0.2.1:1", "/api")))
            .unwrap()
            .is_some());
    }
}
