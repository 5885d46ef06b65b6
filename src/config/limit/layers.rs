//! The layers a [`LimitConfig`] makes: [`RateLimitLayer::from_config`] and
//! [`InFlightLayer::from_config`], with the settings both take from it.

use std::sync::Arc;

use super::{by_name, check_name, LimitConfig};
use crate::config::store::{Backend, ConfiguredStore};
use crate::config::StoreConfig;
use crate::config::{duration, ConfigError};
#[cfg(feature = "redis")]
use crate::limiter::in_flight::MIN_LEASE_TTL;
use crate::limiter::{Bind, Binder, LayerClock, Recipe};
use crate::{HeaderPlacement, HeaderStyle, InFlightLayer, RateLimitLayer};

/// The header styles by their names in configuration.
const STYLES: [(&str, HeaderStyle); 5] = [
    ("ietf", HeaderStyle::Ietf),
    ("draft7", HeaderStyle::Draft7),
    ("draft6", HeaderStyle::Draft6),
    ("github", HeaderStyle::GitHub),
    ("none", HeaderStyle::None),
];

/// The header placements by their names in configuration.
const PLACEMENTS: [(&str, HeaderPlacement); 3] = [
    ("all", HeaderPlacement::All),
    ("allowed", HeaderPlacement::Allowed),
    ("denied", HeaderPlacement::Denied),
];

impl RateLimitLayer {
    /// The layer `config` describes, over a new memory store (see [`LimitConfig`] for the
    /// fields). Its policy name is `config.name`, or the quota's text.
    ///
    /// ```
    /// use tollgate::config::LimitConfig;
    /// use tollgate::RateLimitLayer;
    ///
    /// let config: LimitConfig = serde_json::from_str(r#"{
    ///     "name": "login",
    ///     "algorithm": "fixed_window",
    ///     "quota": "5/15min",
    ///     "key": ["route", "peer_ip"],
    ///     "status": 503
    /// }"#)?;
    /// let layer = RateLimitLayer::from_config(&config)?;
    /// assert_eq!(layer.policy(), "login");
    ///
    /// let bad: LimitConfig = serde_json::from_str(r#"{"quota": "3/fortnight"}"#)?;
    /// let err = RateLimitLayer::from_config(&bad).unwrap_err();
    /// assert!(err.to_string().starts_with("quota = \"3/fortnight\""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A Redis store must connect first, which takes an async step: for a config whose
    /// `store` is Redis, [`connect`](StoreConfig::connect) the store and use
    /// [`from_config_in`](Self::from_config_in).
    ///
    /// # Errors
    ///
    /// When a field cannot be used: the error names the field and its value and says how to
    /// fix it. Every condition under which a builder method would panic is an error here:
    /// this never panics, whatever the configuration.
    pub fn from_config(config: &LimitConfig) -> Result<Self, ConfigError> {
        Self::from_config_in(config, &config.own_store()?)
    }

    /// The layer `config` describes, over `store`: a store shared by many layers (policies
    /// with different names never share state), such as a Redis store connected once with
    /// [`StoreConfig::connect`]. `config.store` is not read.
    ///
    /// ```
    /// use tollgate::config::{ConfiguredStore, LimitConfig};
    /// use tollgate::store::MemoryStore;
    /// use tollgate::RateLimitLayer;
    ///
    /// let store = ConfiguredStore::from(MemoryStore::new());
    /// let config: LimitConfig = toml::from_str(r#"quota = "60/min""#)?;
    /// let layer = RateLimitLayer::from_config_in(&config, &store)?;
    /// assert_eq!(layer.quotas()[0].to_string(), "60/min");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_config`](Self::from_config); also when the store cannot keep the quotas (a
    /// Redis script decides figures up to about 52 days exactly).
    pub fn from_config_in(
        config: &LimitConfig,
        store: &ConfiguredStore,
    ) -> Result<Self, ConfigError> {
        let spec = config.recipe()?;
        let store: Arc<dyn Bind> = match &store.0 {
            Backend::Memory(memory) => Arc::new(Binder(memory.clone())),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => Arc::new(Binder(redis.clone())),
        };
        let texts: Vec<String> = spec.quotas.iter().map(ToString::to_string).collect();
        let field = if spec.tiered { "quotas" } else { "quota" };
        let clock = LayerClock::System;
        let layer = Self::from_recipe(Recipe { spec, store, clock }).map_err(|e| {
            ConfigError::text(field, &texts.join(", "), "the Redis store cannot keep it")
                .caused_by(e)
        })?;
        config.settings(layer)
    }
}

impl InFlightLayer {
    /// The limit on requests in flight `config` describes (`in_flight = <requests per key>`,
    /// see [`LimitConfig`]), over a new memory store, as
    /// [`RateLimitLayer::from_config`] makes a rate limit.
    ///
    /// # Errors
    ///
    /// When a field cannot be used, or `config` is a rate limit (no `in_flight`): the error
    /// names the field and says how to fix it. This never panics.
    pub fn from_config(config: &LimitConfig) -> Result<Self, ConfigError> {
        Self::from_config_in(config, &config.own_store()?)
    }

    /// The same over `store`, already connected ([`RateLimitLayer::from_config_in`]).
    ///
    /// # Errors
    ///
    /// As [`from_config`](Self::from_config).
    pub fn from_config_in(
        config: &LimitConfig,
        store: &ConfiguredStore,
    ) -> Result<Self, ConfigError> {
        let layer = config.in_flight_layer()?;
        let layer = match &store.0 {
            Backend::Memory(memory) => layer.store(memory.clone()),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => {
                use crate::store::in_flight::sealed::KeepsSlots;
                let slots = config.in_flight.unwrap_or(1);
                let clock = std::sync::Arc::new(crate::clock::SystemClock);
                if let Err(e) = redis.slots(layer.policy(), slots, MIN_LEASE_TTL, clock) {
                    let refused = "the Redis store cannot keep it";
                    return Err(ConfigError::bare("in_flight", slots, refused).caused_by(e));
                }
                layer.store(redis.clone())
            }
        };
        layer.try_with(|layer| config.settings(layer))
    }
}

impl LimitConfig {
    /// The limit's own store: its `store`, or a new memory store.
    fn own_store(&self) -> Result<ConfiguredStore, ConfigError> {
        let memory = || Ok(crate::store::MemoryStore::new().into());
        self.store.as_ref().map_or_else(memory, StoreConfig::memory)
    }

    /// The in-flight layer of `slots` requests per key, each field checked.
    fn in_flight_layer(&self) -> Result<InFlightLayer, ConfigError> {
        let Some(slots) = self.in_flight else {
            return Err(ConfigError::missing(
                "in_flight",
                "missing: a limit on requests in flight sets in_flight = <requests per key>; \
                 build a rate limit with RateLimitLayer::from_config",
            ));
        };
        let rate_fields = [
            ("quota", self.quota.is_some()),
            ("quotas", self.quotas.is_some()),
            ("algorithm", self.algorithm.is_some()),
            ("max_delay", self.max_delay.is_some()),
            ("sub_windows", self.sub_windows.is_some()),
            ("aligned", self.aligned == Some(true)),
        ];
        if let Some((field, _)) = rate_fields.iter().find(|(_, set)| *set) {
            return Err(ConfigError::missing(
                *field,
                format!(
                    "set on a limit of requests in flight (in_flight = {slots}), which counts \
                     requests in progress, not a rate; leave {field} unset, or configure the \
                     rate as a layer of its own"
                ),
            ));
        }
        let refused = |why| ConfigError::bare("in_flight", slots, why);
        let mut layer = InFlightLayer::new(InFlightLayer::limit(slots).map_err(refused)?);
        if let Some(name) = &self.name {
            check_name(name, "")?;
            layer = layer.policy_name(name);
        }
        if let Some(text) = &self.lease_ttl {
            let ttl = InFlightLayer::lease(duration::parse("lease_ttl", text)?);
            let refused = |why| ConfigError::text("lease_ttl", text, why);
            layer = layer.lease_ttl(ttl.map_err(refused)?);
        }
        Ok(layer)
    }

    /// `layer` with this limit's key, headers, status and dry run, each checked.
    fn settings(&self, mut layer: RateLimitLayer) -> Result<RateLimitLayer, ConfigError> {
        if let Some(name) = &self.headers {
            layer = layer.headers(by_name("headers", name, &STYLES, "header style")?);
        }
        if let Some(name) = &self.headers_on {
            let placement = by_name("headers_on", name, &PLACEMENTS, "header placement")?;
            layer = layer.headers_on(placement);
        }
        if let Some(code) = self.status {
            let status = RateLimitLayer::denial_status(code);
            layer = layer.status(status.map_err(|why| ConfigError::bare("status", code, why))?);
        }
        if let Some(key) = &self.key {
            layer = key.apply(layer, "key")?;
        }
        if let Some(dry_run) = self.dry_run {
            layer = layer.dry_run(dry_run);
        }
        Ok(layer)
    }
}
