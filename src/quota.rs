//! [`Quota`]: how many requests a key may make, over what period, and how many at once.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// How many requests a key may make per period, and how many may pass at once.
///
/// A quota is `limit` requests per `period`, with a `burst` (by default equal to `limit`):
/// the number of requests a fresh key may make at once. Requests then become available again
/// at a steady rate, one every `period / limit` (the *emission interval*).
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// let q = Quota::per_minute(60).with_burst(10).named("api");
/// assert_eq!(q.limit(), 60);
/// assert_eq!(q.burst(), 10);
/// assert_eq!(q.emission_interval(), Duration::from_secs(1));
/// assert_eq!(q.name(), "api");
///
/// let parsed: Quota = "10/s;burst=20".parse().unwrap();
/// assert_eq!(parsed, Quota::per_second(10).with_burst(20));
/// assert_eq!(parsed.to_string(), "10/s;burst=20");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period_ns: u64,
    burst: u64,
    name: Option<Arc<str>>,
}

/// `name`, when it can name a policy: 1 to 64 printable ASCII characters, to fit in a header
/// value as a structured-field string; else why not.
pub(crate) fn policy_name(name: &str) -> Result<&str, String> {
    let why = "a policy name is 1 to 64 printable ASCII characters, as it is sent in headers";
    let fits = (1..=64).contains(&name.len()) && name.bytes().all(|b| (0x20..0x7f).contains(&b));
    fits.then_some(name).ok_or_else(|| why.into())
}

impl Quota {
    /// `limit` requests per `period`, with a burst of `limit`.
    ///
    /// # Panics
    ///
    /// When `limit` is zero, `period` is zero or longer than `u64::MAX` nanoseconds (about 584
    /// years), or the burst window `period / limit * burst` does not fit in that range.
    /// [`str::parse`] reports the same conditions as a [`ParseQuotaError`] instead.
    #[track_caller]
    pub fn new(limit: u64, period: Duration) -> Self {
        let period_ns = crate::clock::saturating_nanos(period);
        match Self::build(limit, period_ns, limit) {
            Ok(q) if period.as_nanos() <= u128::from(u64::MAX) => q,
            Ok(_) => {
                panic!("tollgate::Quota: period {period:?} is longer than u64::MAX nanoseconds")
            }
            Err(e) => panic!("tollgate::Quota: {e}"),
        }
    }

    /// `limit` requests per second.
    ///
    /// # Panics
    ///
    /// When `limit` is zero.
    #[track_caller]
    pub fn per_second(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` requests per minute.
    ///
    /// # Panics
    ///
    /// When `limit` is zero.
    #[track_caller]
    pub fn per_minute(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` requests per hour.
    ///
    /// # Panics
    ///
    /// When `limit` is zero.
    #[track_caller]
    pub fn per_hour(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(3600))
    }

    /// `limit` requests per day.
    ///
    /// # Panics
    ///
    /// When `limit` is zero.
    #[track_caller]
    pub fn per_day(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(86_400))
    }

    /// Sets how many requests a fresh key may make at once (default: `limit`).
    ///
    /// A burst below the limit smooths traffic (a client must spread its requests out); a burst
    /// above it lets a client save up.
    ///
    /// # Panics
    ///
    /// When `burst` is zero, or `period / limit * burst` is longer than `u64::MAX` nanoseconds.
    #[must_use]
    #[track_caller]
    pub fn with_burst(self, burst: u64) -> Self {
        match Self::build(self.limit, self.period_ns, burst) {
            Ok(q) => Self {
                name: self.name,
                ..q
            },
            Err(e) => panic!("tollgate::Quota: {e}"),
        }
    }

    /// Names the policy. The name is shown to clients in the `RateLimit-Policy` and `RateLimit`
    /// headers and separates this quota's state from other quotas' in a shared store.
    ///
    /// Without a name, the quota's own text form (such as `60/min`) is used.
    ///
    /// # Panics
    ///
    /// When `name` is empty, longer than 64 bytes, or has characters other than printable ASCII
    /// (it must fit in a header value as a structured-field string).
    #[must_use]
    #[track_caller]
    pub fn named(mut self, name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        match policy_name(name) {
            Ok(name) => self.name = Some(name.into()),
            Err(why) => panic!("tollgate::Quota::named({name:?}): {why}"),
        }
        self
    }

    fn build(limit: u64, period_ns: u64, burst: u64) -> Result<Self, ParseQuotaError> {
        let zero = [
            (limit, "the limit must be at least 1"),
            (period_ns, "the period must be longer than zero"),
            (burst, "the burst must be at least 1"),
        ];
        if let Some((_, why)) = zero.into_iter().find(|(n, _)| *n == 0) {
            return Err(ParseQuotaError::new(why));
        }
        // The emission interval times the burst.
        if period_ns.div_ceil(limit).checked_mul(burst).is_none() {
            return Err(ParseQuotaError::new(
                "period / limit * burst must be at most u64::MAX nanoseconds (about 584 years)",
            ));
        }
        Ok(Self {
            limit,
            period_ns,
            burst,
            name: None,
        })
    }

    /// Requests allowed per period.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The period over which `limit` requests are allowed.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// How many requests a fresh key may make at once.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The policy name: the one given to [`named`](Self::named), or else the quota's text form.
    pub fn name(&self) -> String {
        self.name
            .as_ref()
            .map_or_else(|| self.to_string(), |n| n.to_string())
    }

    /// The time one request's worth of capacity takes to come back: `period / limit`, rounded up
    /// to a whole nanosecond so that rounding can never admit more than the quota.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.emission_interval_ns())
    }

    pub(crate) fn emission_interval_ns(&self) -> u64 {
        self.period_ns.div_ceil(self.limit)
    }

    /// The period in nanoseconds: at least 1, and it fits in a `u64`.
    pub(crate) fn period_ns(&self) -> u64 {
        self.period_ns
    }

    pub(crate) fn explicit_name(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("limit", &self.limit)
            .field("period", &self.period())
            .field("burst", &self.burst)
            .field("name", &self.name)
            .finish()
    }
}

/// `100/min`, `10/s;burst=20`, `5000/h`, `1/d`, `3/15min`, `7/1500ms`: the shortest form that
/// [`FromStr`] reads back to the same limit, period and burst. The name is not part of it.
impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.limit)?;
        // The largest unit that divides the period (every unit written here is one).
        let unit = ["d", "h", "min", "s", "ms"].map(|unit| (unit, unit_nanos(unit).unwrap_or(1)));
        match unit.iter().find(|(_, ns)| self.period_ns % ns == 0) {
            Some((unit, ns)) if self.period_ns == *ns => f.write_str(unit)?,
            Some((unit, ns)) => write!(f, "{}{unit}", self.period_ns / ns)?,
            None => write!(f, "{}ns", self.period_ns)?,
        }
        if self.burst != self.limit {
            write!(f, ";burst={}", self.burst)?;
        }
        Ok(())
    }
}

/// Reads `<limit>/<period>[;burst=<n>]`.
///
/// The period is an optional whole number followed by a unit: `ns`, `us`, `ms`, `s` (`sec`,
/// `second`, `seconds`), `m` (`min`, `minute`, `minutes`), `h` (`hr`, `hour`, `hours`), or `d`
/// (`day`, `days`). Spaces around the parts are ignored. Examples: `100/min`, `10/s;burst=20`,
/// `5000/h`, `3/15min`.
impl FromStr for Quota {
    type Err = ParseQuotaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |message| {
            Err(ParseQuotaError {
                message,
                input: Some(s.into()),
            })
        };
        let mut parts = s.split(';');
        let rate = parts.next().unwrap_or_default();
        let Some((limit, period)) = rate.split_once('/') else {
            return fail("expected `<limit>/<period>`, such as `100/min` or `10/s;burst=20`");
        };
        let Ok(limit) = limit.trim().parse::<u64>() else {
            return fail("the limit must be a whole number, such as the 100 in `100/min`");
        };
        let Some(period_ns) = parse_period(period.trim()) else {
            return fail("the period must be a unit (ns, us, ms, s, min, h, d) with an optional whole count, such as `min` or `15min`");
        };
        let mut burst = limit;
        for option in parts {
            match option.split_once('=') {
                Some((k, v)) if k.trim() == "burst" => match v.trim().parse::<u64>() {
                    Ok(b) => burst = b,
                    Err(_) => {
                        return fail("the burst must be a whole number, as in `10/s;burst=20`")
                    }
                },
                _ => return fail("the only option after `;` is `burst=<n>`"),
            }
        }
        Self::build(limit, period_ns, burst).or_else(|e| fail(e.message))
    }
}

fn parse_period(s: &str) -> Option<u64> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (count, unit) = s.split_at(split);
    let count = if count.is_empty() {
        1
    } else {
        count.parse::<u64>().ok()?
    };
    count.checked_mul(unit_nanos(unit.trim())?)
}

/// The nanoseconds in one `unit` of time (`ns`, `us`, `ms`, `s`, `min`, `h`, `d` and their
/// spellings), as quotas and durations in configuration are written.
pub(crate) fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hr" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        _ => return None,
    })
}

/// Why a quota could not be read or built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseQuotaError {
    message: &'static str,
    input: Option<Box<str>>,
}

impl ParseQuotaError {
    fn new(message: &'static str) -> Self {
        Self {
            message,
            input: None,
        }
    }
}

impl fmt::Display for ParseQuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = self.message;
        match &self.input {
            Some(input) => write!(f, "invalid quota {input:?}: {msg}"),
            None => f.write_str(msg),
        }
    }
}

impl std::error::Error for ParseQuotaError {}

#[cfg(feature = "serde")]
impl serde::Serialize for Quota {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Quota {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!("100/min".parse::<Quota>().unwrap(), Quota::per_minute(100));
        assert_eq!("5000/h".parse::<Quota>().unwrap(), Quota::per_hour(5000));
        assert_eq!(
            " 10 / s ; burst = 20 ".parse::<Quota>().unwrap(),
            Quota::per_second(10).with_burst(20)
        );
        assert_eq!("1/day".parse::<Quota>().unwrap(), Quota::per_day(1));
        assert_eq!(
            "3/15min".parse::<Quota>().unwrap(),
            Quota::new(3, Duration::from_secs(900))
        );
        assert_eq!(
            "7/1500ms".parse::<Quota>().unwrap(),
            Quota::new(7, Duration::from_millis(1500))
        );
    }

    #[test]
    fn display_round_trips() {
        for q in [
            Quota::per_minute(100),
            Quota::per_second(10).with_burst(20),
            Quota::new(3, Duration::from_secs(900)),
            Quota::new(7, Duration::from_millis(1500)),
            Quota::new(1, Duration::from_nanos(1_234_567)),
            Quota::per_day(2),
        ] {
            let text = q.to_string();
            assert_eq!(text.parse::<Quota>().unwrap(), q, "{text}");
        }
        assert_eq!(Quota::per_hour(5000).to_string(), "5000/h");
        assert_eq!(
            Quota::new(3, Duration::from_secs(900)).to_string(),
            "3/15min"
        );
    }

    #[test]
    fn parse_errors_name_the_input_and_the_problem() {
        for (input, needle) in [
            ("100", "expected `<limit>/<period>`"),
            ("x/min", "limit must be a whole number"),
            ("-1/min", "limit must be a whole number"),
            ("10/fortnight", "the period must be a unit"),
            ("10/s;burst=", "burst must be a whole number"),
            ("10/s;bust=3", "only option"),
            ("0/min", "at least 1"),
            ("10/0s", "longer than zero"),
            ("10/s;burst=0", "burst must be at least 1"),
            ("1/99999999999d", "the period must be a unit"),
            ("1/100000d;burst=18446744073709551615", "584 years"),
        ] {
            let err = input.parse::<Quota>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
            assert!(err.contains(&format!("{input:?}")), "{input}: {err}");
        }
    }

    #[test]
    fn emission_interval_rounds_up() {
        assert_eq!(
            Quota::per_second(3).emission_interval(),
            Duration::from_nanos(333_333_334)
        );
        assert_eq!(
            Quota::per_minute(60).emission_interval(),
            Duration::from_secs(1)
        );
    }

    #[test]
    #[should_panic(expected = "limit must be at least 1")]
    fn zero_limit_panics() {
        let _ = Quota::per_second(0);
    }

    #[test]
    #[should_panic(expected = "printable ASCII")]
    fn bad_name_panics() {
        let _ = Quota::per_second(1).named("tab\there");
    }

    #[test]
    fn name_defaults_to_text_form() {
        assert_eq!(Quota::per_minute(60).name(), "60/min");
        assert_eq!(Quota::per_minute(60).named("free").name(), "free");
    }
}
