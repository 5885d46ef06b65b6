//! The oldest Redis the scripts run on, and the check made once per connection.
//!
//! Every script reads `TIME` and then writes. Redis before 5.0 replicates a script by sending
//! the script itself to replicas, so it refuses writes after a command whose answer differs
//! between servers (`TIME`); from 5.0 it replicates the script's effects and allows them.

use std::fmt;

use redis::Value;

use super::reply::collect_texts;
use crate::Error;
use redis::aio::ConnectionLike;

/// The oldest Redis server the store works with.
pub(crate) const MIN_VERSION: Version = Version(5, 0, 0);

/// A Redis server version, as `INFO server` reports it in `redis_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(pub(crate) u32, pub(crate) u32, pub(crate) u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The `redis_version` of an `INFO server` reply; `None` when it has none.
pub(crate) fn parse(info: &str) -> Option<Version> {
    let text = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("redis_version:"))?;
    let mut parts = text.trim().splitn(3, '.').map(|digits| {
        // "7.2.4-rc1" and the like: the leading digits.
        let end = digits.find(|c: char| !c.is_ascii_digit());
        digits[..end.unwrap_or(digits.len())].parse::<u32>().ok()
    });
    let major = parts.next()??;
    let mut part = || parts.next().flatten().unwrap_or(0);
    Some(Version(major, part(), part()))
}

/// Refuses a server older than [`MIN_VERSION`], with a message that says what to do.
pub(crate) fn require(found: Version) -> Result<(), String> {
    if found >= MIN_VERSION {
        return Ok(());
    }
    Err(format!(
        "tollgate's RedisStore needs Redis {MIN_VERSION} or newer, but the server runs Redis \
         {found}: its scripts read TIME before they write, which Redis replicates only from 5.0 \
         on (effects replication); upgrade the Redis server"
    ))
}

/// Reads `INFO server` from every node the connection reaches (every master of a cluster) and
/// refuses the oldest when it is too old, the message naming `server` first. A server that
/// does not answer `INFO`, or answers without a version (a proxy, say), is taken as it is:
/// the scripts will tell.
pub(crate) async fn check(connection: &mut impl ConnectionLike, server: &str) -> Result<(), Error> {
    let reply: Value = match redis::cmd("INFO")
        .arg("server")
        .query_async(connection)
        .await
    {
        Ok(reply) => reply,
        // Refused by the server (INFO renamed away, a proxy): nothing to tell from.
        Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => return Ok(()),
        Err(e) => return Err(super::errors::connecting(e)),
    };
    let mut texts = Vec::new();
    collect_texts(&reply, &mut texts);
    match texts.iter().filter_map(|t| parse(t)).min() {
        Some(oldest) => require(oldest).map_err(|m| Error::misconfigured(format!("{server}{m}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(parse(info), Some(Version(7, 0, 15)));
        assert_eq!(parse("redis_version:4.0.14\n"), Some(Version(4, 0, 14)));
        assert_eq!(parse("redis_version:5.0\r\n"), Some(Version(5, 0, 0)));
        assert_eq!(parse("redis_version:7.2.4-rc1\r\n"), Some(Version(7, 2, 4)));
        assert_eq!(
            parse("redis_version:255.255.255\r\n"),
            Some(Version(255, 255, 255))
        );
        assert_eq!(parse("# Server\r\nredis_mode:standalone\r\n"), None);
        assert_eq!(parse("redis_version:x.y\r\n"), None);
        assert_eq!(parse(""), None);
        // Another field that ends in the same name is not the version.
        assert_eq!(parse("valkey_redis_version:3.0.0\r\n"), None);
    }

    #[test]
    fn versions_order_by_number_not_text() {
        assert!(Version(10, 0, 0) > Version(9, 9, 9));
        assert!(Version(5, 0, 0) > Version(4, 0, 14));
        assert!(Version(5, 0, 10) > Version(5, 0, 9));
    }

    #[test]
    fn an_old_server_is_refused_with_both_versions_and_the_fix() {
        for old in [Version(4, 0, 14), Version(3, 2, 12), Version(2, 8, 0)] {
            let message = require(old).unwrap_err();
            assert!(message.contains(&format!("runs Redis {old}")), "{message}");
            assert!(message.contains("needs Redis 5.0.0 or newer"), "{message}");
            assert!(message.contains("upgrade the Redis server"), "{message}");
        }
        for new in [
            MIN_VERSION,
            Version(5, 0, 1),
            Version(6, 2, 0),
            Version(7, 0, 15),
        ] {
            assert_eq!(require(new), Ok(()));
        }
    }

    #[test]
    fn a_cluster_is_judged_by_its_oldest_node() {
        let node = |v: &str| {
            (
                Value::BulkString(b"127.0.0.1:7000".to_vec()),
                Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: format!("# Server\r\nredis_version:{v}\r\n"),
                },
            )
        };
        let reply = Value::Map(vec![node("7.0.15"), node("4.0.9"), node("6.2.1")]);
        let mut texts = Vec::new();
        collect_texts(&reply, &mut texts);
        let oldest = texts.iter().filter_map(|t| parse(t)).min();
        assert_eq!(oldest, Some(Version(4, 0, 9)));
    }
}
