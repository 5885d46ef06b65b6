use http::{Extensions, HeaderMap, Method, Request, Uri, Version};

use super::{Key, KeyError, KeyExtractor};

/// A borrowed view of a request without its body: what closures given as a
/// [`KeyExtractor`] (or to `skip`) read.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    method: &'a Method,
    uri: &'a Uri,
    version: Version,
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
}

impl<'a> RequestHead<'a> {
    /// The head of `req`.
    pub fn new<B>(req: &'a Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            version: req.version(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The request method.
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// The request URI.
    pub fn uri(&self) -> &'a Uri {
        self.uri
    }

    /// The HTTP version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The request headers.
    pub fn headers(&self) -> &'a HeaderMap {
        self.headers
    }

    /// The request extensions (peer address, matched route, authenticated user, ...).
    pub fn extensions(&self) -> &'a Extensions {
        self.extensions
    }
}

impl<'a, B> From<&'a Request<B>> for RequestHead<'a> {
    fn from(req: &'a Request<B>) -> Self {
        Self::new(req)
    }
}

impl<'a> From<&'a http::request::Parts> for RequestHead<'a> {
    /// The head of a request taken apart, as an axum middleware or extractor holds it.
    fn from(parts: &'a http::request::Parts) -> Self {
        Self {
            method: &parts.method,
            uri: &parts.uri,
            version: parts.version,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }
}

/// Closures over a [`RequestHead`] are key extractors.
impl<F> KeyExtractor for F
where
    F: Fn(RequestHead<'_>) -> Result<Option<Key>, KeyError> + Send + Sync + 'static,
{
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        self(req)
    }
}

/// A key extractor from a closure, with the closure's argument type inferred. Key on what the
/// server checked, not on what a client may write: here the tenant an authentication layer in
/// front put in the extensions. `Ok(None)` lets a request through unlimited, so a request
/// without one is refused instead (the authentication layer must run first).
///
/// ```
/// use http::StatusCode;
/// use tollgate::key::{from_fn, KeyError, KeyExtractor, RequestHead};
/// use tollgate::Key;
///
/// /// The tenant the authentication layer found for the request.
/// #[derive(Clone)]
/// struct Tenant(String);
///
/// let by_tenant = from_fn(|head| match head.extensions().get::<Tenant>() {
///     Some(tenant) => Ok(Some(Key::from(tenant.0.as_str()))),
///     None => Err(KeyError::new(
///         StatusCode::INTERNAL_SERVER_ERROR,
///         "no Tenant in the request: add the authentication layer before the limit",
///     )),
/// });
/// let mut req = http::Request::builder().header("x-tenant", "forged").body(()).unwrap();
/// assert!(by_tenant.extract(RequestHead::new(&req)).is_err());
/// req.extensions_mut().insert(Tenant("acme".into()));
/// assert_eq!(by_tenant.extract(RequestHead::new(&req)).unwrap(), Some(Key::from("acme")));
/// ```
pub fn from_fn<F>(f: F) -> FromFn<F>
where
    F: Fn(RequestHead<'_>) -> Result<Option<Key>, KeyError> + Send + Sync + 'static,
{
    FromFn(f)
}

/// The extractor made by [`from_fn`].
#[derive(Clone, Copy)]
pub struct FromFn<F>(F);

impl<F> std::fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FromFn")
    }
}

impl<F: KeyExtractor> KeyExtractor for FromFn<F> {
    #[inline]
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        self.0.extract(req)
    }
}
