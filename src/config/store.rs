//! The `store` of configured limits: memory, or Redis (which must connect first).

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::store::MemoryStore;
#[cfg(feature = "redis")]
use crate::store::{OnFailure, RedisStore};

/// Why [`StoreConfig::memory`] refuses a Redis store: it must connect first, or (without the
/// feature `redis`) cannot be made at all.
#[cfg(feature = "redis")]
const NOT_IN_MEMORY: &str = "a Redis store must connect first, which RateLimitLayer::from_config \
     cannot do: `let store = config.store.connect().await?` once, then \
     `RateLimitLayer::from_config_in(&config, &store)` for each layer (or \
     `Limits::layers().await`)";
#[cfg(not(feature = "redis"))]
const NOT_IN_MEMORY: &str = "the Redis store needs tollgate's feature `redis`: enable it in \
     Cargo.toml, or remove url and urls to keep limits in memory";

/// Where configured limits keep their state: in memory (the default), or in Redis when `url`
/// (one server) or `urls` (a Redis Cluster, through any of its nodes) is set.
///
/// | field | store | meaning |
/// | --- | --- | --- |
/// | `max_keys` | memory | the most keys each policy keeps ([`MemoryStore::with_max_keys`]); with Redis, of the local fallback (`on_failure = "local"`) |
/// | `url` | Redis | `redis://host:port/db` (`RedisStore::connect`) |
/// | `urls` | Redis Cluster | the nodes' URLs (`RedisStore::cluster`) |
/// | `prefix` | Redis | the keys' prefix instead of `tollgate`, without `{` or `}` |
/// | `timeout` | Redis | the longest one check waits, such as `"50ms"` (the default) |
/// | `on_failure` | Redis | `"local"` (the default: each server limits on its own), `"open"` (allow) or `"closed"` (answer 503) |
/// | `deny_cache` | Redis | how many denials each policy remembers locally (10 000 by default; 0 turns it off) |
///
/// A Redis store must connect, which takes an async step: [`connect`](Self::connect) it once,
/// then build every layer over the connected store with
/// [`RateLimitLayer::from_config_in`](crate::RateLimitLayer::from_config_in), or let
/// [`Limits::layers`](super::Limits::layers) do both. The Redis store needs tollgate's feature
/// `redis`.
///
/// ```
/// use tollgate::config::{LimitConfig, StoreConfig};
/// use tollgate::RateLimitLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store: StoreConfig = toml::from_str("max_keys = 100000")?;
/// let store = store.connect().await?; // a memory store connects at once
///
/// let api: LimitConfig = toml::from_str(r#"name = "api"
/// quota = "100/min""#)?;
/// let login: LimitConfig = toml::from_str(r#"name = "login"
/// quota = "5/15min""#)?;
/// let api = RateLimitLayer::from_config_in(&api, &store)?;
/// let login = RateLimitLayer::from_config_in(&login, &store)?;
/// assert_eq!((api.policy(), login.policy()), ("api", "login"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreConfig {
    /// The most keys each policy keeps in memory (500 000 by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_keys: Option<usize>,
    /// One Redis server's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The URLs of Redis Cluster nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urls: Option<Vec<String>>,
    /// The Redis keys' prefix (`tollgate` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The longest one Redis check waits, such as `"50ms"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// What a check answers when Redis fails: `"local"`, `"open"` or `"closed"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    /// How many denials each policy remembers locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_cache: Option<usize>,
}

/// A store made from a [`StoreConfig`], shared by every layer built over it
/// ([`RateLimitLayer::from_config_in`](crate::RateLimitLayer::from_config_in)). Clones share
/// the store.
///
/// Also made from a store built in code: `ConfiguredStore::from(MemoryStore::new())`, or from a
/// `RedisStore`.
#[derive(Clone, Debug)]
pub struct ConfiguredStore(pub(crate) Backend);

#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Memory(MemoryStore),
    #[cfg(feature = "redis")]
    Redis(RedisStore),
}

impl From<MemoryStore> for ConfiguredStore {
    fn from(store: MemoryStore) -> Self {
        Self(Backend::Memory(store))
    }
}

#[cfg(feature = "redis")]
impl From<RedisStore> for ConfiguredStore {
    fn from(store: RedisStore) -> Self {
        Self(Backend::Redis(store))
    }
}

impl StoreConfig {
    /// Whether this is a Redis store (`url` or `urls` is set), which must
    /// [`connect`](Self::connect).
    pub fn is_redis(&self) -> bool {
        self.url.is_some() || self.urls.is_some()
    }

    /// Makes the store: a memory store at once, or a Redis store once connected (and its
    /// version checked). Connect once and share the store between layers.
    ///
    /// # Errors
    ///
    /// A field that cannot be used (named, with its value and the fix), a Redis store without
    /// tollgate's feature `redis`, or a Redis that cannot be reached (the error names the URL,
    /// its password hidden, and carries the store's error as its source).
    pub async fn connect(&self) -> Result<ConfiguredStore, ConfigError> {
        #[cfg(feature = "redis")]
        if self.is_redis() {
            return self.redis().await;
        }
        self.memory()
    }

    /// The memory store, or an error for a Redis store (which must connect first).
    pub(crate) fn memory(&self) -> Result<ConfiguredStore, ConfigError> {
        if self.is_redis() {
            #[cfg(feature = "redis")]
            let field = "store";
            #[cfg(not(feature = "redis"))]
            let field = self.url.as_ref().map_or("store.urls", |_| "store.url");
            return Err(ConfigError::missing(field, NOT_IN_MEMORY));
        }
        // The fields only the Redis store reads.
        let redis_only = [
            ("prefix", self.prefix.is_some()),
            ("timeout", self.timeout.is_some()),
            ("on_failure", self.on_failure.is_some()),
            ("deny_cache", self.deny_cache.is_some()),
        ];
        if let Some((field, _)) = redis_only.iter().find(|(_, set)| *set) {
            return Err(ConfigError::missing(
                format!("store.{field}"),
                "applies to the Redis store only; set store.url (or store.urls for a Redis \
                 Cluster), or remove it",
            ));
        }
        Ok(ConfiguredStore(Backend::Memory(self.local()?)))
    }

    /// A memory store with `max_keys`.
    fn local(&self) -> Result<MemoryStore, ConfigError> {
        match self.max_keys {
            Some(0) => Err(ConfigError::bare(
                "store.max_keys",
                0,
                "each policy must keep at least one key; leave it out for the default (500000)",
            )),
            Some(max) => Ok(MemoryStore::new().with_max_keys(max)),
            None => Ok(MemoryStore::new()),
        }
    }

    #[cfg(feature = "redis")]
    async fn redis(&self) -> Result<ConfiguredStore, ConfigError> {
        // Every field is checked before connecting, so a typo is reported at once.
        let on_failure = match self.on_failure.as_deref() {
            None | Some("local") => OnFailure::Local(self.local()?),
            Some("open") => OnFailure::Open,
            Some("closed") => OnFailure::Closed,
            Some(other) => {
                return Err(ConfigError::text(
                    "store.on_failure",
                    other,
                    "expected \"local\" (each server limits on its own while Redis fails), \
                     \"open\" (allow) or \"closed\" (answer 503)",
                ))
            }
        };
        if self.max_keys.is_some() && !matches!(on_failure, OnFailure::Local(_)) {
            return Err(ConfigError::missing(
                "store.max_keys",
                "with Redis, max_keys bounds the local fallback, which only on_failure = \
                 \"local\" uses; remove it",
            ));
        }
        let timeout = match &self.timeout {
            Some(text) => match super::duration::parse("store.timeout", text)? {
                timeout if timeout.is_zero() => {
                    return Err(ConfigError::text(
                        "store.timeout",
                        text,
                        "a zero timeout fails every check; choose one such as \"50ms\"",
                    ))
                }
                timeout => timeout,
            },
            None => RedisStore::DEFAULT_TIMEOUT,
        };
        if let Some(prefix) = &self.prefix {
            let refused = |why| ConfigError::text("store.prefix", prefix, why);
            RedisStore::key_prefix(prefix).map_err(refused)?;
        }
        let mut store = match (&self.url, &self.urls) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::missing(
                    "store",
                    "set either url (one Redis server) or urls (a Redis Cluster's nodes), not \
                     both",
                ))
            }
            (Some(url), None) => RedisStore::connect(url).await.map_err(|e| {
                ConfigError::text("store.url", &redact(url), "cannot connect to Redis").caused_by(e)
            })?,
            (None, Some(urls)) if urls.is_empty() => {
                return Err(ConfigError::missing(
                    "store.urls",
                    "list at least one node of the Redis Cluster, such as \
                     [\"redis://10.0.0.1:6379\"]",
                ))
            }
            (None, Some(urls)) => RedisStore::cluster(urls).await.map_err(|e| {
                let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
                ConfigError::text(
                    "store.urls",
                    &shown.join(", "),
                    "cannot connect to the Redis Cluster",
                )
                .caused_by(e)
            })?,
            (None, None) => return self.memory(),
        };
        if let Some(prefix) = &self.prefix {
            store = store.prefix(prefix);
        }
        let store = store
            .timeout(timeout)
            .on_failure(on_failure)
            .deny_cache(self.deny_cache.unwrap_or(RedisStore::DEFAULT_DENY_CACHE));
        Ok(ConfiguredStore(Backend::Redis(store)))
    }
}

/// `url` with the password of its user info hidden, for errors and logs: everything between
/// the user's `:` and the last `@`, whatever it holds (a password may hold `/` or `@`).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("redis://:secret@10.0.0.1:6379/0"),
            "redis://:***@10.0.0.1:6379/0"
        );
        assert_eq!(
            redact("rediss://app:secret@cache:6380"),
            "rediss://app:***@cache:6380"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn a_password_holding_a_slash_or_an_at_is_hidden_whole() {
        assert_eq!(
            redact("redis://app:pa/ss@cache:6379/0"),
            "redis://app:***@cache:6379/0"
        );
        assert_eq!(
            redact("redis://app:p@ss@cache:6379"),
            "redis://app:***@cache:6379"
        );
    }
}
