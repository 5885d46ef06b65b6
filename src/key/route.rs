use super::{Key, KeyError, KeyExtractor, RequestHead};

/// The key is the route: with axum, the matched route pattern (`/users/{id}`, so every user
/// page shares one key); elsewhere, the request path.
///
/// Alone it limits each route for all clients together; in a tuple with a client key,
/// `(Route, PeerIp)`, it gives each client a separate budget per route.
///
/// Without axum's matched path the key is the path itself, which clients choose: then bound
/// the number of keys in the store, or prefer separate layers per route.
#[derive(Debug, Clone, Copy, Default)]
pub struct Route;

impl KeyExtractor for Route {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        #[cfg(feature = "axum")]
        if let Some(path) = req.extensions().get::<axum::extract::MatchedPath>() {
            return Ok(Some(Key::from(path.as_str())));
        }
        Ok(Some(Key::from(req.uri().path())))
    }
}

/// The key is the request method; in a tuple, `(Method, PeerIp)`, a separate budget per method.
#[derive(Debug, Clone, Copy, Default)]
pub struct Method;

impl KeyExtractor for Method {
    fn extract(&self, req: RequestHead<'_>) -> Result<Option<Key>, KeyError> {
        Ok(Some(Key::from(req.method().as_str())))
    }
}
