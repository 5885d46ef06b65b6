//! [`ConfigError`]: a configured value that cannot be used, named by its field.

use std::fmt;

/// A configuration that cannot make a layer or a store: names the field (`limits.api.quota`,
/// `key[1].client_ip.trusted[0]`), the value as it was given, and how to fix it.
///
/// ```
/// use tollgate::config::LimitConfig;
/// use tollgate::RateLimitLayer;
///
/// let config: LimitConfig = serde_json::from_str(r#"{"algorithm": "sliding_lag", "quota": "10/s"}"#)?;
/// let err = RateLimitLayer::from_config(&config).unwrap_err();
/// assert_eq!(err.field(), "algorithm");
/// assert_eq!(err.value(), Some("sliding_lag"));
/// assert!(err.to_string().starts_with("algorithm = \"sliding_lag\": unknown algorithm"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ConfigError {
    field: String,
    /// The rejected value, as given, and whether it is text (shown quoted; numbers and
    /// booleans are shown bare).
    value: Option<(String, bool)>,
    reason: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConfigError {
    /// `field` holds the text `value`, which cannot be used: `reason` says why and how to fix
    /// it.
    pub(crate) fn text(field: impl Into<String>, value: &str, reason: impl Into<String>) -> Self {
        Self::new(field, Some((value.to_owned(), true)), reason)
    }

    /// `field` holds the number (or boolean) `value`, which cannot be used.
    pub(crate) fn bare(
        field: impl Into<String>,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Self::new(field, Some((value.to_string(), false)), reason)
    }

    /// `field` is missing, or set where it does not apply: `reason` says what to write.
    pub(crate) fn missing(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::new(field, None, reason)
    }

    fn new(
        field: impl Into<String>,
        value: Option<(String, bool)>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            value,
            reason: reason.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    pub(crate) fn caused_by(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same error, for a field found under `prefix` (such as `limits.api`).
    pub(crate) fn under(mut self, prefix: &str) -> Self {
        self.field = if self.field.starts_with('[') {
            format!("{prefix}{}", self.field)
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }

    /// The path of the field, such as `quota`, `limits.login.key.client_ip.trusted[0]` or
    /// `store.url`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The rejected value as it was given (a Redis URL with its password hidden); `None` when
    /// the field is missing, or set where it does not apply.
    pub fn value(&self) -> Option<&str> {
        self.value.as_ref().map(|(value, _)| value.as_str())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some((value, true)) => write!(f, "{} = {value:?}: {}", self.field, self.reason)?,
            Some((value, false)) => write!(f, "{} = {value}: {}", self.field, self.reason)?,
            None => write!(f, "{}: {}", self.field, self.reason)?,
        }
        match &self.source {
            Some(source) => write!(f, " ({source})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|source| source as _)
    }
}
