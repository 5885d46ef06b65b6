//! What kind of failure a Redis error is ([`ErrorKind`]), with the client's key taken out; and
//! a call bounded by the timeout, what it found told to the store's health.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

use super::health::Health;
use super::keys::redact;
use super::RedisStore;
use crate::{Error, ErrorKind, Key};

/// The kind of a redis-rs error: a timeout, a server out of memory (`OOM`), a server that
/// cannot be reached (refused, dropped, loading, no node for the slot), a configuration the server refuses (credentials,
/// a URL or client setting), or else an answer the store cannot use (a script error, a reply
/// of the wrong type, a `NOSCRIPT` that loading the script again did not cure).
pub(crate) fn kind(error: &RedisError) -> ErrorKind {
    if error.is_timeout() {
        return ErrorKind::Timeout;
    }
    // `maxmemory` reached under `noeviction`: the script's first write was refused.
    if error.code() == Some("OOM") {
        return ErrorKind::Full;
    }
    if error.is_connection_refusal() || error.is_connection_dropped() || error.is_io_error() {
        return ErrorKind::Unreachable;
    }
    match error.kind() {
        RedisKind::ClusterConnectionNotFound
        | RedisKind::MasterNameNotFoundBySentinel
        | RedisKind::NoValidReplicasFoundBySentinel
        | RedisKind::EmptySentinelList
        | RedisKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown,
        ) => ErrorKind::Unreachable,
        RedisKind::InvalidClientConfig
        | RedisKind::AuthenticationFailed
        | RedisKind::Server(ServerErrorKind::NoPerm) => ErrorKind::Misconfigured,
        _ => ErrorKind::Protocol,
    }
}

/// A redis-rs error met while connecting: its kind, and its text (no key is involved yet).
pub(crate) fn connecting(error: RedisError) -> Error {
    Error::new(kind(&error), error)
}

/// A redis-rs error met while deciding for `key`: its kind, and its text without the key.
pub(crate) fn deciding(error: &RedisError, key: &Key) -> Error {
    Error::new(kind(error), redact(&error.to_string(), key))
}

/// `call`, bounded by `timeout`: its error made into the store's by `error`, or a timeout's
/// when Redis did not answer in time.
pub(crate) async fn bounded<T, E>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, E>>,
    error: impl FnOnce(E) -> Error,
) -> Result<T, Error> {
    match tokio::time::timeout(timeout, call).await {
        Ok(reply) => reply.map_err(error),
        Err(_) => Err(Error::timeout(format!(
            "Redis did not answer within {timeout:?}"
        ))),
    }
}

impl RedisStore {
    /// `call`, and what it found (an answer, a timeout, Redis unreachable) told to `health`,
    /// the health of the Redis it asks, when the store knows it.
    pub(crate) async fn observed<T>(
        &self,
        health: Option<Cow<'_, Arc<Health>>>,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let sent = health.as_ref().map_or(0, |health| health.now());
        let result = call.await;
        if let Some(health) = health {
            health.observe(&result, sent, &self.connection, self.timeout);
        }
        result
    }
}
