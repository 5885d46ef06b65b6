//! [`LimitConfig`]: one limit as plain values, and the layer it makes.

use std::str::FromStr;

use http::StatusCode;
use serde::{Deserialize, Serialize};

use super::store::{Backend, ConfiguredStore, StoreConfig};
use super::{duration, ConfigError, KeyConfig};
use crate::algorithm::FixedWindow;
use crate::limiter::in_flight::{MAX_LEASE_TTL, MIN_LEASE_TTL};
use crate::limiter::{AlgorithmKind, Spec};
use crate::quota::is_policy_name;
use crate::{HeaderPlacement, HeaderStyle, InFlightLayer, Quota, RateLimitLayer};

/// One limit, as read from a configuration file in any serde format (TOML, JSON, YAML, ...):
/// what [`RateLimitLayer::from_config`] builds a layer from, or [`InFlightLayer::from_config`]
/// for a limit on requests in flight (`in_flight`). Every field is optional but the quota
/// (`quota` or `quotas`, or `in_flight`); unknown fields are refused, and so are fields that do
/// not apply to the limit.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `algorithm` | `"gcra"` | `"gcra"`, `"token_bucket"`, `"leaky_bucket"`, `"fixed_window"`, `"sliding_window"`, `"sliding_log"` or `"hybrid"` |
/// | `quota` | | one quota's text, such as `"100/min"` or `"10/s;burst=20"` ([`Quota`]'s `FromStr`) |
/// | `quotas` | | several quotas that must all allow a request (tiers), such as `["10/s", "1000/h"]` |
/// | `name` | the quota's text | the policy name in the headers and the store ([`Quota::named`]); tiers are named `<name>-1`, `<name>-2`, ... in order |
/// | `key` | `"peer_ip"` | what requests are counted against: see [`KeyConfig`] |
/// | `headers` | `"ietf"` | the rate limit headers: `"ietf"` (draft 11), `"draft7"`, `"draft6"`, `"github"` or `"none"` ([`HeaderStyle`]) |
/// | `headers_on` | `"all"` | which responses get them: `"all"`, `"allowed"` or `"denied"` ([`HeaderPlacement`]) |
/// | `status` | `429` | the status of denials, a 4xx or 5xx ([`RateLimitLayer::status`]) |
/// | `max_delay` | | shape instead of refusing, up to this wait, such as `"250ms"` (gcra and token_bucket; [`RateLimitLayer::max_delay`]) |
/// | `sub_windows` | `1` | counters per period, 1 to 64 (sliding_window; [`RateLimitLayer::sub_windows`]) |
/// | `aligned` | `false` | calendar windows, starting at multiples of the period since the UNIX epoch in UTC (fixed_window; [`RateLimitLayer::aligned`]) |
/// | `in_flight` | | instead of a quota, at most this many requests of a key in progress at once ([`InFlightLayer`]); `name` is then its policy name |
/// | `lease_ttl` | `"30s"` | how long an in-flight slot lasts in Redis unless renewed, from `"1s"` to `"24h"` ([`InFlightLayer::lease_ttl`]) |
/// | `dry_run` | `false` | never deny; log and report would-be denials ([`RateLimitLayer::dry_run`]) |
/// | `store` | memory | where state lives: see [`StoreConfig`] |
///
/// ```
/// use tollgate::config::LimitConfig;
/// use tollgate::RateLimitLayer;
///
/// let config: LimitConfig = toml::from_str(r#"
///     name = "api"
///     algorithm = "sliding_window"
///     quota = "100/min"
///     key = { header = "x-api-key" }
///     headers = "draft7"
///     sub_windows = 4
/// "#)?;
/// let layer = RateLimitLayer::from_config(&config)?;
/// assert_eq!(layer.policy(), "api");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LimitConfig {
    /// The policy name (1 to 64 printable ASCII characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The algorithm's name (`"gcra"` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// One quota's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// Tiers: several quotas' texts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Vec<String>>,
    /// What requests are counted against (the peer IP when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyConfig>,
    /// The header style's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<String>,
    /// Which responses get the headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_on: Option<String>,
    /// The status of denials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The longest wait shaping may impose, as a duration's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<String>,
    /// The sliding window's counters per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_windows: Option<usize>,
    /// Calendar windows (the fixed window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aligned: Option<bool>,
    /// Requests of a key in progress at once, for a limit on requests in flight (instead of
    /// a quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    /// How long an in-flight slot lasts in Redis unless renewed, as a duration's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl: Option<String>,
    /// Report would-be denials without denying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Where state lives (memory when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreConfig>,
}

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

/// `"a", "b" or "c"`: the accepted names, for error messages.
fn one_of<T>(names: &[(&str, T)]) -> String {
    let quoted: Vec<String> = names.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The value named `name` in `names`, or an error naming `field` and the accepted names.
fn by_name<T: Copy>(
    field: &str,
    name: &str,
    names: &[(&str, T)],
    what: &str,
) -> Result<T, ConfigError> {
    match names.iter().find(|(n, _)| *n == name) {
        Some((_, value)) => Ok(*value),
        None => Err(ConfigError::text(
            field,
            name,
            format!("unknown {what}; expected {}", one_of(names)),
        )),
    }
}

impl LimitConfig {
    /// The quotas, named, and whether they are tiers.
    fn quotas(&self) -> Result<(Vec<Quota>, bool), ConfigError> {
        let parse = |field: String, text: &str| {
            Quota::from_str(text).map_err(|e| {
                ConfigError::text(
                    field,
                    text,
                    "not a quota such as \"100/min\" or \"10/s;burst=20\"",
                )
                .caused_by(e)
            })
        };
        let (mut quotas, tiered) =
            match (&self.quota, &self.quotas) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::missing(
                        "quotas",
                        "set either quota (one) or quotas (tiers that must all allow a request), \
                     not both",
                    ))
                }
                (None, None) => {
                    return Err(ConfigError::missing(
                        "quota",
                        "missing: set quota = \"100/min\" (or quotas = [\"10/s\", \"1000/h\"] for \
                     tiers)",
                    ))
                }
                (Some(text), None) => (vec![parse("quota".into(), text)?], false),
                (None, Some(texts)) if texts.is_empty() => return Err(ConfigError::missing(
                    "quotas",
                    "the list is empty: list at least one quota, such as [\"10/s\", \"1000/h\"]",
                )),
                (None, Some(texts)) => {
                    let mut quotas = Vec::with_capacity(texts.len());
                    for (i, text) in texts.iter().enumerate() {
                        quotas.push(parse(format!("quotas[{i}]"), text)?);
                    }
                    (quotas, true)
                }
            };
        if let Some(name) = &self.name {
            let tier_name = |n: usize| {
                if tiered {
                    format!("{name}-{n}")
                } else {
                    name.clone()
                }
            };
            let longest = tier_name(quotas.len());
            if !is_policy_name(&longest) {
                let tiers = if tiered {
                    format!(" (tiers add \"-{}\")", quotas.len())
                } else {
                    String::new()
                };
                return Err(ConfigError::text(
                    "name",
                    name,
                    format!(
                        "a policy name is 1 to 64 printable ASCII characters{tiers}, as it is \
                         sent in headers"
                    ),
                ));
            }
            quotas = quotas
                .into_iter()
                .enumerate()
                .map(|(i, quota)| quota.named(tier_name(i + 1)))
                .collect();
        }
        Ok((quotas, tiered))
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
        if slots == 0 {
            return Err(ConfigError::bare(
                "in_flight",
                slots,
                "no request could ever pass; allow at least 1 request in flight per key",
            ));
        }
        let mut layer = InFlightLayer::new(slots);
        if let Some(name) = &self.name {
            if !is_policy_name(name) {
                return Err(ConfigError::text(
                    "name",
                    name,
                    "a policy name is 1 to 64 printable ASCII characters, as it is sent in \
                     headers",
                ));
            }
            layer = layer.policy_name(name);
        }
        if let Some(text) = &self.lease_ttl {
            let ttl = duration::parse("lease_ttl", text)?;
            if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
                return Err(ConfigError::text(
                    "lease_ttl",
                    text,
                    "a lease lasts from 1s to 24h: long enough to be renewed (every third of \
                     it) while a request runs, short enough that a server that dies gives its \
                     slots back soon",
                ));
            }
            layer = layer.lease_ttl(ttl);
        }
        Ok(layer)
    }

    /// The recipe of the limiter: algorithm, quotas and options, each checked.
    fn recipe(&self) -> Result<Spec, ConfigError> {
        if let Some(slots) = self.in_flight {
            return Err(ConfigError::bare(
                "in_flight",
                slots,
                "a limit on requests in flight is an InFlightLayer: build it with \
                 InFlightLayer::from_config (Limits::in_flight_layers_in for a file)",
            ));
        }
        if let Some(text) = &self.lease_ttl {
            return Err(ConfigError::text(
                "lease_ttl",
                text,
                "a lease is a slot of a limit of requests in flight; set in_flight = <requests \
                 per key> too, or leave lease_ttl unset",
            ));
        }
        let kind = match &self.algorithm {
            Some(name) => AlgorithmKind::from_name(name).ok_or_else(|| {
                ConfigError::text(
                    "algorithm",
                    name,
                    format!(
                        "unknown algorithm; expected {}",
                        one_of(&AlgorithmKind::ALL)
                    ),
                )
            })?,
            None => AlgorithmKind::Gcra,
        };
        let (quotas, tiered) = self.quotas()?;
        let mut recipe = Spec::new(kind, quotas, tiered).own();
        if let Some(text) = &self.max_delay {
            if !kind.shapes() {
                return Err(ConfigError::text(
                    "max_delay",
                    text,
                    format!(
                        "only gcra and token_bucket shape; this limit's algorithm is \"{}\" \
                         (the leaky bucket always queues: its burst is the queue)",
                        kind.name()
                    ),
                ));
            }
            recipe.max_delay = Some(duration::parse("max_delay", text)?);
        }
        if let Some(k) = self.sub_windows {
            if kind != AlgorithmKind::SlidingWindow {
                return Err(ConfigError::bare(
                    "sub_windows",
                    k,
                    format!(
                        "sub-windows are the sliding window's; this limit's algorithm is \"{}\"",
                        kind.name()
                    ),
                ));
            }
            if !(1..=64).contains(&k) {
                return Err(ConfigError::bare(
                    "sub_windows",
                    k,
                    "the sliding window keeps 1 to 64 counters per period",
                ));
            }
            recipe.sub_windows = Some(k);
        }
        if self.aligned == Some(true) {
            if kind != AlgorithmKind::FixedWindow {
                return Err(ConfigError::bare(
                    "aligned",
                    true,
                    format!(
                        "calendar windows are the fixed window's; this limit's algorithm is \"{}\"",
                        kind.name()
                    ),
                ));
            }
            if let Some(short) = recipe
                .quotas
                .iter()
                .find(|q| q.period() < FixedWindow::MIN_ALIGNED_PERIOD)
            {
                return Err(ConfigError::bare(
                    "aligned",
                    true,
                    format!(
                        "the quota \"{short}\" has a period shorter than 1 ms, too short for \
                         calendar windows; use a longer period or leave aligned unset"
                    ),
                ));
            }
            recipe.aligned = true;
        }
        Ok(recipe)
    }
}

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
        match &config.store {
            None => Self::configured(config, None),
            Some(store) => Self::configured(config, Some(&store.memory()?)),
        }
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
        Self::configured(config, Some(store))
    }

    fn configured(
        config: &LimitConfig,
        store: Option<&ConfiguredStore>,
    ) -> Result<Self, ConfigError> {
        let recipe = config.recipe()?;
        #[cfg(feature = "redis")]
        if let Some(ConfiguredStore(Backend::Redis(redis))) = store {
            refused_by(redis, &recipe)?;
        }
        let mut layer = Self::from_recipe(recipe);
        if let Some(store) = store {
            layer = match &store.0 {
                Backend::Memory(memory) => layer.store(memory.clone()),
                // Checked by `refused_by`: the store keeps these quotas, so `store` does not
                // panic.
                #[cfg(feature = "redis")]
                Backend::Redis(redis) => layer.store(redis.clone()),
            };
        }
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
        match &config.store {
            None => Self::from_config_in(config, &crate::store::MemoryStore::new().into()),
            Some(store) => Self::from_config_in(config, &store.memory()?),
        }
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
    /// `layer` with this limit's key, headers, status and dry run, each checked.
    fn settings(&self, mut layer: RateLimitLayer) -> Result<RateLimitLayer, ConfigError> {
        let style = match &self.headers {
            Some(name) => Some(by_name("headers", name, &STYLES, "header style")?),
            None => None,
        };
        let placement = match &self.headers_on {
            Some(name) => Some(by_name(
                "headers_on",
                name,
                &PLACEMENTS,
                "header placement",
            )?),
            None => None,
        };
        let status = match self.status {
            Some(code) => match StatusCode::from_u16(code) {
                Ok(status) if status.is_client_error() || status.is_server_error() => Some(status),
                _ => {
                    return Err(ConfigError::bare(
                        "status",
                        code,
                        "denials are answered with a 4xx or 5xx status, such as 429 or 503",
                    ))
                }
            },
            None => None,
        };
        if let Some(key) = &self.key {
            layer = key.apply(layer, "key")?;
        }
        if let Some(style) = style {
            layer = layer.headers(style);
        }
        if let Some(placement) = placement {
            layer = layer.headers_on(placement);
        }
        if let Some(status) = status {
            layer = layer.status(status);
        }
        if let Some(dry_run) = self.dry_run {
            layer = layer.dry_run(dry_run);
        }
        Ok(layer)
    }
}

/// Why the Redis store `redis` cannot keep `recipe`'s quotas, as an error naming them.
#[cfg(feature = "redis")]
fn refused_by(redis: &crate::store::RedisStore, recipe: &Spec) -> Result<(), ConfigError> {
    use crate::limiter::{Bind, Binder, LayerClock};

    match Binder(redis.clone()).bind(recipe, &LayerClock::System, recipe.named()) {
        Ok(_) => Ok(()),
        Err(e) => {
            let texts: Vec<String> = recipe.quotas.iter().map(Quota::to_string).collect();
            let field = if recipe.tiered { "quotas" } else { "quota" };
            Err(
                ConfigError::text(field, &texts.join(", "), "the Redis store cannot keep it")
                    .caused_by(e),
            )
        }
    }
}
