//! What a lookup that found no primary says: why it missed, the error of a store that could
//! not be built, and the text of reasons kept printable and free of credentials.

use std::fmt;
use std::time::Duration;

use redis::{Client, ConnectionInfo, ErrorKind as RedisKind, RedisError};

use super::Shared;
use crate::store::redis::errors;
use crate::Error;

impl Shared {
    /// The error of a store that found no primary when built, saying what was wrong.
    pub(super) async fn explain(&self, missed: Missed) -> Error {
        let (master, at) = (&self.master, &self.sentinels);
        let error = match missed {
            Missed::Primary(error) => {
                let message = format!(
                    "RedisStore::sentinel: the primary that the sentinels at {at} name for \
                     master {master:?}: {error}"
                );
                return Error::new(error.kind(), message);
            }
            Missed::NoMajority(tally) => {
                return Error::unreachable(format!(
                    "RedisStore::sentinel: no majority of the sentinels at {at} names one \
                     primary of master {master:?} ({tally}); a primary is used when more than \
                     half of the sentinels given name it: try again once they agree, and check \
                     that each sentinel listed monitors this master"
                ));
            }
            Missed::Sentinels(error) => error,
        };
        match error.kind() {
            RedisKind::MasterNameNotFoundBySentinel => {
                let monitored = monitored(&self.sentinel_infos).await;
                if monitored.is_empty() || monitored.iter().any(|name| **name == **master) {
                    Error::unreachable(format!(
                        "RedisStore::sentinel: the sentinels at {at} name no primary of master \
                         {master:?} that answers as one (it is down, or a failover is under \
                         way); try again once the sentinels agree on a primary"
                    ))
                } else {
                    Error::misconfigured(format!(
                        "RedisStore::sentinel: no sentinel at {at} monitors a master named \
                         {master:?} (they monitor {monitored:?}); pass the name of a `sentinel \
                         monitor <name> ...` line of their configuration"
                    ))
                }
            }
            RedisKind::InvalidClientConfig => Error::misconfigured(format!(
                "RedisStore::sentinel: a server at {at} is not a Redis Sentinel ({error}); pass \
                 the sentinels' addresses (port 26379 by default), not those of the Redis \
                 servers"
            )),
            _ => {
                let kind = errors::kind(&error);
                Error::new(
                    kind,
                    format!(
                        "RedisStore::sentinel: the sentinels at {at} named no primary of \
                         master {master:?} that could be reached ({error}); check the \
                         addresses, that redis-sentinel runs there, and that the primary it \
                         names is reachable from here"
                    ),
                )
            }
        }
    }
}

/// The longest reason kept for a call's error and the log (what sentinels and servers answer
/// goes into it).
const MAX_REASON: usize = 512;

/// `text` as it goes into a call's error or the log: control characters escaped, at most
/// [`MAX_REASON`] characters (then `...`). Sentinels and servers write part of it.
pub(super) fn printable(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == MAX_REASON {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a lookup found no primary.
pub(super) enum Missed {
    /// The sentinels named none: none answered, or none knows the master, or the one they
    /// name does not answer as a primary (`ROLE`).
    Sentinels(RedisError),
    /// The primary they named could not be used: no connection, or too old a Redis.
    Primary(Error),
    /// No primary is named by more than half of the sentinels: what each named.
    NoMajority(String),
}

impl fmt::Display for Missed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sentinels(error) => write!(f, "the sentinels named no primary: {error}"),
            Self::Primary(error) => write!(f, "{error}"),
            Self::NoMajority(tally) => {
                write!(f, "no majority of the sentinels names one primary: {tally}")
            }
        }
    }
}

/// The names of the masters the sentinels at `sentinels` monitor, from the first that
/// answers `SENTINEL MASTERS`; empty when none does.
async fn monitored(sentinels: &[ConnectionInfo]) -> Vec<String> {
    for info in sentinels {
        let ask = async {
            let client = Client::open(info.clone())?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("MASTERS")
                .query_async::<Vec<std::collections::HashMap<String, String>>>(&mut connection)
                .await
        };
        if let Ok(Ok(masters)) = tokio::time::timeout(Duration::from_secs(2), ask).await {
            let mut names: Vec<String> = masters
                .into_iter()
                .filter_map(|mut m| m.remove("name"))
                .collect();
            names.sort();
            return names;
        }
    }
    Vec::new()
}

/// `url` with everything between `://` and the last `@` replaced by `***`: the user and
/// password, whatever they hold (a password may hold `@` or `/`); more is hidden, never less,
/// when the rest of the URL has an `@`.
pub(super) fn without_credentials(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    match url[start..].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_printable_and_bounded() {
        assert_eq!(printable("a\r\nERR x"), "a\\r\\nERR x");
        let long = "é".repeat(MAX_REASON + 10);
        let kept = printable(&long);
        assert_eq!(kept.chars().count(), MAX_REASON + 3);
        assert!(kept.ends_with("..."));
        assert_eq!(printable("plain"), "plain");
    }

    #[test]
    fn credentials_are_kept_out_of_messages() {
        assert_eq!(
            without_credentials("redis://user:secret@10.0.0.1:26379/"),
            "redis://***@10.0.0.1:26379/"
        );
        assert_eq!(
            without_credentials("redis://:secret@host"),
            "redis://***@host"
        );
        assert_eq!(
            without_credentials("redis://10.0.0.1:26379"),
            "redis://10.0.0.1:26379"
        );
        assert_eq!(without_credentials("nonsense"), "nonsense");
        // A password holding `@` or `/` (a URL that does not parse) stays hidden whole.
        assert_eq!(
            without_credentials("redis://u:p@ss/w@rd@10.0.0.1:notaport/"),
            "redis://***@10.0.0.1:notaport/"
        );
    }
}
