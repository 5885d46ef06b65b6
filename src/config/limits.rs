//! [`Limits`]: a file of named limits over one store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::store::{ConfiguredStore, StoreConfig};
use super::{ConfigError, LimitConfig};
use crate::{InFlightLayer, RateLimitLayer};

/// Several named limits and the one store they share: a whole configuration file.
///
/// ```toml
/// [store]                  # memory unless url or urls is set; see StoreConfig
/// max_keys = 100000
///
/// [limits.api]
/// quota = "100/min"
/// key = { header = "x-api-key" }
///
/// [limits.login]
/// algorithm = "fixed_window"
/// quota = "5/15min"
/// ```
///
/// Each limit's name in the file is its policy name (in the headers and the store), unless
/// the limit sets `name` itself. A limit does not set its own `store`: every limit uses the
/// file's.
///
/// ```
/// use tollgate::config::Limits;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits: Limits = toml::from_str(r#"
///     [limits.api]
///     quota = "100/min"
///     key = { header = "x-api-key" }
///
///     [limits.login]
///     algorithm = "fixed_window"
///     quota = "5/15min"
/// "#)?;
/// let mut layers = limits.layers().await?; // connects to Redis first when the store is Redis
/// let login = layers.remove("login").ok_or("no login limit")?;
/// assert_eq!(login.policy(), "login");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Limits {
    /// The store every limit uses (memory when unset).
    #[serde(default)]
    pub store: StoreConfig,
    /// The limits, by name.
    #[serde(default)]
    pub limits: BTreeMap<String, LimitConfig>,
}

impl Limits {
    /// Connects the store ([`StoreConfig::connect`]) and builds every rate limit's layer over
    /// it, by name (see [`layers_in`](Self::layers_in) for limits on requests in flight).
    ///
    /// # Errors
    ///
    /// The first field that cannot be used, named by its path in the file
    /// (`limits.login.quota`, `store.url`), or a store that cannot connect.
    pub async fn layers(&self) -> Result<BTreeMap<String, RateLimitLayer>, ConfigError> {
        // Every limit is checked before connecting, so a typo is reported at once.
        self.layers_in(&ConfiguredStore::from(crate::store::MemoryStore::new()))?;
        let store = self.store.connect().await?;
        self.layers_in(&store)
    }

    /// Builds every rate limit's layer over `store`, already connected, by name; the file's
    /// `store` is not read. The limits on requests in flight (`in_flight`) are checked too,
    /// and left to [`in_flight_layers_in`](Self::in_flight_layers_in).
    ///
    /// # Errors
    ///
    /// The first field that cannot be used, named by its path in the file.
    pub fn layers_in(
        &self,
        store: &ConfiguredStore,
    ) -> Result<BTreeMap<String, RateLimitLayer>, ConfigError> {
        Ok(self.built(store)?.0)
    }

    /// Builds every limit on requests in flight (`in_flight`) over `store`, already connected,
    /// by name, as [`layers_in`](Self::layers_in) builds the rate limits.
    ///
    /// # Errors
    ///
    /// The first field that cannot be used, named by its path in the file.
    pub fn in_flight_layers_in(
        &self,
        store: &ConfiguredStore,
    ) -> Result<BTreeMap<String, InFlightLayer>, ConfigError> {
        Ok(self.built(store)?.1)
    }

    /// Every limit's layer over `store`: the rate limits, and the limits on requests in flight.
    fn built(&self, store: &ConfiguredStore) -> Result<Built, ConfigError> {
        let mut layers = Built::default();
        for (name, limit) in &self.limits {
            let prefix = format!("limits.{name}");
            if limit.store.is_some() {
                return Err(ConfigError::missing(
                    format!("{prefix}.store"),
                    "every limit of the file uses the file's [store]; move these settings there",
                ));
            }
            let limit = &LimitConfig {
                name: limit.name.clone().or_else(|| Some(name.clone())),
                ..limit.clone()
            };
            let under = |e: ConfigError| e.under(&prefix);
            if limit.in_flight.is_some() {
                let layer = InFlightLayer::from_config_in(limit, store).map_err(under)?;
                layers.1.insert(name.clone(), layer);
            } else {
                let layer = RateLimitLayer::from_config_in(limit, store).map_err(under)?;
                layers.0.insert(name.clone(), layer);
            }
        }
        Ok(layers)
    }
}

/// A file's rate limits and limits on requests in flight, by name.
type Built = (
    BTreeMap<String, RateLimitLayer>,
    BTreeMap<String, InFlightLayer>,
);
