//! How a [`LimitConfig`] reads into its limiter's recipe: the algorithm, the quotas and the
//! algorithm's options, each checked.

use std::str::FromStr;

use super::{by_name, check_name, LimitConfig};
use crate::config::{duration, ConfigError};
use crate::limiter::{AlgorithmKind, Spec};
use crate::Quota;

const ONE_OR_TIERS: &str =
    "set either quota (one) or quotas (tiers that must all allow a request), not both";
const MISSING: &str =
    "missing: set quota = \"100/min\" (or quotas = [\"10/s\", \"1000/h\"] for tiers)";
const EMPTY: &str = "the list is empty: list at least one quota, such as [\"10/s\", \"1000/h\"]";

impl LimitConfig {
    /// The quotas, named, and whether they are tiers.
    fn quotas(&self) -> Result<(Vec<Quota>, bool), ConfigError> {
        let parse = |(field, text): (String, &String)| {
            Quota::from_str(text).map_err(|e| {
                let reason = "not a quota such as \"100/min\" or \"10/s;burst=20\"";
                ConfigError::text(field, text, reason).caused_by(e)
            })
        };
        let missing = |field, reason| Err(ConfigError::missing(field, reason));
        let (texts, tiered) = match (&self.quota, &self.quotas) {
            (Some(text), None) => (vec![("quota".to_owned(), text)], false),
            (None, Some(texts)) if !texts.is_empty() => {
                let fields = (0..).map(|i| format!("quotas[{i}]"));
                (fields.zip(texts).collect(), true)
            }
            (Some(_), Some(_)) => return missing("quotas", ONE_OR_TIERS),
            (None, None) => return missing("quota", MISSING),
            (None, Some(_)) => return missing("quotas", EMPTY),
        };
        let quotas = texts.into_iter().map(parse);
        let quotas = quotas.collect::<Result<Vec<_>, _>>()?;
        let Some(name) = &self.name else {
            return Ok((quotas, tiered));
        };
        let tier = |n: usize| match tiered {
            true => format!("-{n}"),
            false => String::new(),
        };
        check_name(name, &tier(quotas.len()))?;
        let named = quotas.into_iter().enumerate();
        let named = named.map(|(i, quota)| quota.named(format!("{name}{}", tier(i + 1))));
        Ok((named.collect(), tiered))
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
            Some(name) => by_name("algorithm", name, &AlgorithmKind::ALL, "algorithm")?,
            None => AlgorithmKind::Gcra,
        };
        let (quotas, tiered) = self.quotas()?;
        let mut recipe = Spec::new(kind, quotas, tiered);
        if let Some(text) = &self.max_delay {
            let max_delay = duration::parse("max_delay", text)?;
            let refused = |why| ConfigError::text("max_delay", text, why);
            recipe = recipe.shaping(max_delay).map_err(refused)?;
        }
        if let Some(k) = self.sub_windows {
            let refused = |why| ConfigError::bare("sub_windows", k, why);
            recipe = recipe.with_sub_windows(k).map_err(refused)?;
        }
        if self.aligned == Some(true) {
            let refused = |why| ConfigError::bare("aligned", true, why);
            recipe = recipe.with_aligned().map_err(refused)?;
        }
        Ok(recipe)
    }
}
