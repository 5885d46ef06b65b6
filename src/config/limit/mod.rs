//! [`LimitConfig`]: one limit as plain values, and the layer it makes.

use serde::{Deserialize, Serialize};

use super::store::StoreConfig;
use super::{ConfigError, KeyConfig};
#[cfg(doc)]
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

mod layers;
mod recipe;

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
    let found = names
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, value)| *value);
    found.ok_or_else(|| {
        let reason = format!("unknown {what}; expected {}", one_of(names));
        ConfigError::text(field, name, reason)
    })
}

/// `Ok` when `name`, with `suffix` added (the tiers' `-2`), is a policy name; else an error
/// naming the field `name`.
fn check_name(name: &str, suffix: &str) -> Result<(), ConfigError> {
    let refused = |why| match suffix {
        "" => ConfigError::text("name", name, why),
        _ => ConfigError::text("name", name, format!("{why} (tiers add \"{suffix}\")")),
    };
    crate::quota::policy_name(&format!("{name}{suffix}")).map_err(refused)?;
    Ok(())
}
