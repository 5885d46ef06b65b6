//! How a [`LimitConfig`] reads into its limiter's recipe: the algorithm, the quotas and the
//! algorithm's options, each checked.

use std::str::FromStr;

use super::{one_of, LimitConfig};
use crate::algorithm::FixedWindow;
use crate::config::{duration, ConfigError};
use crate::limiter::{AlgorithmKind, Spec};
use crate::quota::is_policy_name;
use crate::Quota;

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
    /// The recipe of the limiter: algorithm, quotas and options, each checked.
    pub(super) fn recipe(&self) -> Result<Spec, ConfigError> {
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
