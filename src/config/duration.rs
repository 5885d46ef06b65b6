//! Durations in configuration: a whole number and a unit, such as `250ms` or `2s`.

use std::time::Duration;

use super::ConfigError;

/// What a duration looks like, for error messages.
const EXPECTED: &str = "expected a whole number and a unit (ns, us, ms, s, min, h, d), \
                        such as \"250ms\" or \"2s\"";

/// Reads `text` (`250ms`, `2s`, `1min`, `1h`; spaces around the number and unit are allowed)
/// as the duration of `field`.
pub(crate) fn parse(field: &str, text: &str) -> Result<Duration, ConfigError> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (count, unit) = trimmed.split_at(split);
    let (Some(nanos_per), Ok(count)) =
        (crate::quota::unit_nanos(unit.trim()), count.parse::<u64>())
    else {
        return Err(ConfigError::text(field, text, EXPECTED));
    };
    match count.checked_mul(nanos_per) {
        Some(nanos) => Ok(Duration::from_nanos(nanos)),
        None => Err(ConfigError::text(
            field,
            text,
            "longer than u64::MAX nanoseconds (about 584 years); choose a shorter duration",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_units() {
        let ok = |text| parse("max_delay", text).unwrap();
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok(" 2 s "), Duration::from_secs(2));
        assert_eq!(ok("1min"), Duration::from_secs(60));
        assert_eq!(ok("3h"), Duration::from_secs(3 * 3600));
        assert_eq!(ok("1d"), Duration::from_secs(86_400));
        assert_eq!(ok("7us"), Duration::from_micros(7));
        assert_eq!(ok("0s"), Duration::ZERO);
    }

    #[test]
    fn names_the_field_and_value() {
        for bad in [
            "",
            "ms",
            "2",
            "2 fortnights",
            "-1s",
            "1.5s",
            "99999999999999999999d",
        ] {
            let err = parse("store.timeout", bad).unwrap_err();
            assert_eq!(err.field(), "store.timeout");
            assert_eq!(err.value(), Some(bad));
            assert!(
                err.to_string()
                    .starts_with(&format!("store.timeout = {bad:?}: ")),
                "{err}"
            );
        }
    }
}
