//! Layers from configuration files (feature `serde`): a [`LimitConfig`] read from any serde
//! format (TOML, JSON, YAML, ...) makes a [`RateLimitLayer`](crate::RateLimitLayer) (or an
//! [`InFlightLayer`](crate::InFlightLayer)), and [`Limits`] a whole file of named limits.
//!
//! A configured layer is the layer the same settings make in code: the same algorithm,
//! quotas, key, headers and store, so the same decisions and headers for the same requests.
//! A value that cannot be used is an error at build time, never a panic and never a failure
//! per request: it names the field, the value and the fix ([`ConfigError`]).
//!
//! ```
//! use tollgate::config::LimitConfig;
//! use tollgate::key::{PeerIp, Route};
//! use tollgate::{Quota, RateLimitLayer};
//!
//! let config: LimitConfig = toml::from_str(r#"
//!     name = "search"
//!     algorithm = "sliding_log"
//!     quota = "30/min"
//!     key = ["route", "peer_ip"]
//! "#)?;
//! let configured = RateLimitLayer::from_config(&config)?;
//!
//! // The same layer, in code:
//! let coded = RateLimitLayer::sliding_log(Quota::per_minute(30).named("search")).key((Route, PeerIp));
//! assert_eq!(configured.policy(), coded.policy());
//! assert_eq!(configured.quotas(), coded.quotas());
//!
//! let bad: LimitConfig = toml::from_str(r#"
//!     quota = "30/min"
//!     key = { client_ip = { trusted = ["10.0.0.1/8"] } }
//! "#)?;
//! let err = RateLimitLayer::from_config(&bad).unwrap_err();
//! assert_eq!(err.field(), "key.client_ip.trusted[0]");
//! assert!(err.to_string().contains("write 10.0.0.0/8 for the network"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Stores that connect
//!
//! A memory store is made at once; a Redis store (`store.url`, feature `redis`) must connect,
//! which is async. So building is two steps: [`StoreConfig::connect`] (async, once), then
//! [`RateLimitLayer::from_config_in`](crate::RateLimitLayer::from_config_in) (sync) for each
//! layer over the connected store. [`RateLimitLayer::from_config`](crate::RateLimitLayer::from_config)
//! makes its own memory store, and refuses a Redis one with an error that says to connect
//! first; [`Limits::layers`] does both steps for a whole file.

mod duration;
mod error;
mod key;
mod limit;
mod limits;
mod store;

pub use self::error::ConfigError;
pub use self::key::{ClientIpConfig, KeyConfig, KeyPart};
pub use self::limit::LimitConfig;
pub use self::limits::Limits;
pub use self::store::{ConfiguredStore, StoreConfig};
