//! Decoding a script's reply into a [`Decision`]: six figures per tier.

use std::time::Duration;

use crate::{Decision, Error};

/// One figure of a script's reply: an integer, or an integer as text (past what Lua replies
/// as an integer exactly).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figure(pub(crate) i128);

impl redis::FromRedisValue for Figure {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let figure = match &v {
            redis::Value::Int(n) => Some(i128::from(*n)),
            redis::Value::BulkString(text) => {
                std::str::from_utf8(text).ok().and_then(|t| t.parse().ok())
            }
            _ => None,
        };
        figure
            .map(Figure)
            .ok_or_else(|| format!("not a figure: {v:?}").into())
    }
}

/// The decision from the script's reply, for tiers reporting `limits`: six integers per tier
/// (allowed, or 2 for a blocked key, remaining, reset_after, retry_after or -1, delay, and the admission's receipt,
/// which may pass `i64::MAX` and comes as text). With `tiered`, the tiers' decisions are
/// combined ([`Decision::from_tiers`]). A reply of any other shape is a protocol error.
pub(crate) fn decision(reply: &[Figure], limits: &[u64], tiered: bool) -> Result<Decision, Error> {
    let bad = || Error::protocol(format!("unexpected reply from the Redis script: {reply:?}"));
    if reply.len() != 6 * limits.len() {
        return Err(bad());
    }
    let whole = |f: Figure| u64::try_from(f.0).map_err(|_| bad());
    let nanos = |f: Figure| whole(f).map(Duration::from_nanos);
    let decisions = reply
        .chunks_exact(6)
        .zip(limits)
        .map(|(d, &limit)| {
            let (remaining, reset_after, receipt) = (whole(d[1])?, nanos(d[2])?, whole(d[5])?);
            match d[0].0 {
                1 => Ok(Decision::allow(limit, remaining, reset_after)
                    .delayed(nanos(d[4])?)
                    .with_receipt(receipt)),
                0 => {
                    let retry_after = if d[3].0 == -1 {
                        None
                    } else {
                        Some(nanos(d[3])?)
                    };
                    Ok(Decision::deny(limit, remaining, reset_after, retry_after))
                }
                // Denied by a block, for what is left of it.
                2 => Ok(Decision::deny(limit, 0, reset_after, None).blocked_for(nanos(d[3])?)),
                _ => Err(bad()),
            }
        })
        .collect::<Result<Vec<Decision>, Error>>()?;
    if tiered {
        Ok(Decision::from_tiers(decisions.into()))
    } else {
        decisions.into_iter().next().ok_or_else(bad)
    }
}

/// Every text or integer in `value`, as text, in order: one reply, or one per node for a
/// cluster (a map of node to reply: the node's address, then its reply's texts).
pub(crate) fn collect_texts(value: &redis::Value, out: &mut Vec<String>) {
    use redis::Value;
    match value {
        Value::Array(values) | Value::Set(values) => {
            values.iter().for_each(|v| collect_texts(v, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            collect_texts(k, out);
            collect_texts(v, out);
        }),
        value => out.extend(text(value)),
    }
}

/// A reply that is one text or integer, as text.
pub(crate) fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(text) | redis::Value::VerbatimString { text, .. } => {
            Some(text.clone())
        }
        redis::Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_reply_of_the_wrong_shape_is_a_protocol_error() {
        let figures = |v: &[i128]| v.iter().copied().map(Figure).collect::<Vec<_>>();
        let short = decision(&figures(&[1, 2, 3]), &[5], false).unwrap_err();
        assert_eq!(short.kind(), ErrorKind::Protocol);
        let verdict = decision(&figures(&[7, 2, 3, -1, 0, 0]), &[5], false).unwrap_err();
        assert_eq!(verdict.kind(), ErrorKind::Protocol);
        let negative = decision(&figures(&[1, -2, 3, -1, 0, 0]), &[5], false).unwrap_err();
        assert_eq!(negative.kind(), ErrorKind::Protocol);
        let allowed = decision(&figures(&[1, 4, 3, -1, 0, 9]), &[5], false).unwrap();
        assert!(allowed.allowed);
        assert_eq!(
            (allowed.limit, allowed.remaining, allowed.receipt()),
            (5, 4, 9)
        );
    }
}
