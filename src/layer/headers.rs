//! The rate limit headers: which fields ([`HeaderStyle`]), on which responses
//! ([`HeaderPlacement`]), and the writer that fills them in from a [`Decision`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::Entry;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::text::{int_value, Text};
use crate::decision::ceil_secs;
use crate::{Decision, Quota};

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// The limit, remaining and reset fields of draft 6 and of GitHub.
static DRAFT6: [HeaderName; 3] = [
    HeaderName::from_static("ratelimit-limit"),
    HeaderName::from_static("ratelimit-remaining"),
    HeaderName::from_static("ratelimit-reset"),
];
static GITHUB: [HeaderName; 3] = [
    HeaderName::from_static("x-ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-reset"),
];
static X_USED: HeaderName = HeaderName::from_static("x-ratelimit-used");

/// The largest Structured Field Integer (RFC 9651 §3.3.1): larger figures are sent as this.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Which rate limit header fields the layer writes, chosen with
/// [`RateLimitLayer::headers`](super::RateLimitLayer::headers).
///
/// Every style reports the same figures:
///
/// | figure | meaning |
/// | --- | --- |
/// | limit (`q`) | the quota's [`limit`](Quota::limit) per window |
/// | window (`w`) | the quota's [`period`](Quota::period) in whole seconds, rounded up |
/// | remaining (`r`) | [`Decision::remaining`] |
/// | reset (`t`) | [`Decision::reset_after`] in whole seconds, rounded up |
///
/// A quota whose burst is above its limit may report more remaining than its limit: a fresh
/// client may send the whole burst at once. (GitHub's style reports the capacity instead: see
/// [`HeaderStyle::GitHub`].)
///
/// Reset times are what is left when the response leaves: a request held back by shaping, or
/// answered slowly, reports its wait less the time that has passed since it was decided.
///
/// A limit on requests in flight ([`InFlightLayer`](super::InFlightLayer))
/// has no window and no reset time: its policy names the quota unit instead of a window
/// (`"in-flight";q=8;qu="concurrent-requests"`), `r` is the slots free, and no style sends a
/// reset (`t`, `reset`, `RateLimit-Reset`, `X-RateLimit-Reset`).
///
/// Layers stack: a global limit around a per-route one around a per-plan one each describe
/// their own quotas. The IETF fields and `RateLimit-Policy` are lists, to which each layer adds
/// its items; the single-value styles (drafts 6 and 7, GitHub) report the most restrictive of
/// the layers (the fewest remaining, then the latest reset; an in-flight limit's counts as 0),
/// whatever their order and kinds: limit, remaining and reset all come from that one layer.
///
/// `Retry-After` on a denied request is not a rate limit header: every style, even
/// [`HeaderStyle::None`], sends it.
///
/// ```
/// use std::net::SocketAddr;
/// use http::{Request, Response};
/// use tollgate::clock::ManualClock;
/// use tollgate::key::PeerAddr;
/// use tollgate::{HeaderStyle, Quota, RateLimitLayer};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let svc = RateLimitLayer::gcra(Quota::per_minute(100))
///     .clock(ManualClock::new())
///     .headers(HeaderStyle::Draft7)
///     .layer(tower::service_fn(|_req: Request<String>| async {
///         Ok::<_, std::convert::Infallible>(Response::new(String::new()))
///     }));
///
/// let mut req = Request::new(String::new());
/// req.extensions_mut().insert(PeerAddr("192.0.2.1:4000".parse::<SocketAddr>().unwrap()));
/// let resp = svc.oneshot(req).await.unwrap();
/// assert_eq!(resp.headers()["ratelimit"], "limit=100, remaining=99, reset=1");
/// assert_eq!(resp.headers()["ratelimit-policy"], "100;w=60");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// The default: IETF
    /// [draft-ietf-httpapi-ratelimit-headers-11](https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/),
    /// two Structured Field lists (RFC 9651) with one item per quota, named by the policy name
    /// ([`Quota::named`]):
    ///
    /// ```text
    /// RateLimit-Policy: "per-minute";q=100;w=60
    /// RateLimit: "per-minute";r=42;t=17
    /// ```
    ///
    /// The optional `pk` (partition key) parameter is not sent: it would echo the client's key.
    #[default]
    Ietf,
    /// The combined field of draft 7, a Structured Field Dictionary, and the policy as a List:
    ///
    /// ```text
    /// RateLimit: limit=100, remaining=42, reset=17
    /// RateLimit-Policy: 100;w=60
    /// ```
    Draft7,
    /// The separate fields of draft 6 (each a Structured Field Integer), and the policy as a List:
    ///
    /// ```text
    /// RateLimit-Limit: 100
    /// RateLimit-Remaining: 42
    /// RateLimit-Reset: 17
    /// RateLimit-Policy: 100;w=60
    /// ```
    Draft6,
    /// GitHub's `X-RateLimit-*` fields, which many client libraries read:
    ///
    /// ```text
    /// X-RateLimit-Limit: 100
    /// X-RateLimit-Remaining: 42
    /// X-RateLimit-Used: 58
    /// X-RateLimit-Reset: 1767225617
    /// ```
    ///
    /// `Limit` is the capacity `Remaining` counts against ([`Decision::limit`]: the burst for
    /// GCRA and the buckets, the limit per window for window algorithms), and `Used` is that
    /// capacity minus the remaining, so that the three always add up. `Reset` is the UNIX time, in whole seconds rounded up, when the quota is back to full:
    /// the wall clock ([`SystemTime`]) when the response is written plus the reset time. It is
    /// the only place the crate reads the wall clock; limits themselves never depend on it.
    GitHub,
    /// No rate limit headers at all.
    None,
}

/// Which responses get the rate limit headers, chosen with
/// [`RateLimitLayer::headers_on`](super::RateLimitLayer::headers_on).
///
/// ```
/// use tollgate::{HeaderPlacement, HeaderStyle, Quota, RateLimitLayer};
///
/// // Tell clients where they stand only once they are refused.
/// let layer = RateLimitLayer::gcra(Quota::per_minute(60))
///     .headers(HeaderStyle::Draft6)
///     .headers_on(HeaderPlacement::Denied);
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderPlacement {
    /// The default: every response to a limited request, allowed or denied. (Requests the layer
    /// does not limit, such as skipped or allow-listed ones, never get them.)
    #[default]
    All,
    /// Only responses from the inner service to allowed requests.
    Allowed,
    /// Only the layer's own answers to denied requests.
    Denied,
}

impl HeaderPlacement {
    fn covers(self, decision: &Decision) -> bool {
        self == Self::All || (self == Self::Allowed) == decision.allowed
    }
}

/// A layer's header settings: the style and the placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Headers {
    pub(crate) style: HeaderStyle,
    pub(crate) placement: HeaderPlacement,
}

/// One quota as the headers describe it.
#[derive(Debug)]
struct Policy {
    /// The policy name as a Structured Field String, quotes included.
    name: Box<str>,
    /// The quota's limit per window, or the slots of an in-flight limit.
    limit: u64,
    /// The window in whole seconds, at least 1; `None` for an in-flight limit, which has no
    /// window and no reset time.
    window: Option<u64>,
}

/// Writes one style's fields for a fixed list of quotas. The fields that describe only the
/// quotas are built once; the ones that describe a decision are formatted per response, each
/// on the stack and then copied into its header value (one allocation per field).
#[derive(Debug)]
pub(crate) struct HeaderWriter {
    headers: Headers,
    policies: Box<[Policy]>,
    /// `RateLimit-Policy`, the same for every response (IETF and drafts 6 and 7).
    policy_value: Option<HeaderValue>,
}

impl HeaderWriter {
    /// A writer for `quotas`, each with its policy name, in the order decisions will come.
    pub(crate) fn new<'a, N: AsRef<str>>(
        quotas: impl IntoIterator<Item = (&'a Quota, N)>,
        headers: Headers,
    ) -> Self {
        let policies: Box<[Policy]> = quotas
            .into_iter()
            .map(|(quota, name)| Policy {
                name: sf_string(name.as_ref()).into(),
                limit: quota.limit(),
                window: Some(ceil_secs(quota.period()).max(1)),
            })
            .collect();
        Self::of(policies, headers)
    }

    /// A writer for a limit of `limit` requests in flight named `name`: its policy item has
    /// the quota unit `qu="concurrent-requests"` and no window, and no field reports a reset
    /// time (none is known: a slot comes back when a response ends).
    pub(crate) fn in_flight(name: &str, limit: u64, headers: Headers) -> Self {
        let policy = Policy {
            name: sf_string(name).into(),
            limit,
            window: None,
        };
        Self::of(Box::new([policy]), headers)
    }

    fn of(policies: Box<[Policy]>, headers: Headers) -> Self {
        let item = |p: &Policy| {
            let limit = sf_int(p.limit);
            let quota = match headers.style {
                HeaderStyle::Ietf => format!("{};q={limit}", p.name),
                _ => limit.to_string(),
            };
            match p.window {
                Some(window) => format!("{quota};w={}", sf_int(window)),
                None => format!("{quota};qu=\"concurrent-requests\""),
            }
        };
        let items: Vec<String> = policies.iter().map(item).collect();
        // Names are printable ASCII (checked by `Quota::named` or made by `Display`), so the
        // value is always valid.
        let lists = !matches!(headers.style, HeaderStyle::GitHub | HeaderStyle::None);
        let value = || HeaderValue::try_from(items.join(", ")).ok();
        let policy_value = lists.then(value).flatten();
        Self {
            headers,
            policies,
            policy_value,
        }
    }

    /// Whether a response to a request with this (overall) decision gets the fields.
    pub(crate) fn covers(&self, decision: &Decision) -> bool {
        self.headers.style != HeaderStyle::None && self.headers.placement.covers(decision)
    }

    /// Adds the fields describing `decisions`, one for each quota in order, `elapsed` after
    /// they were made (a shaping delay, a slow handler): the waits they report are what is left
    /// of them when the response leaves.
    ///
    /// Fields that another layer (one inside this one) already wrote are kept: the IETF fields
    /// and `RateLimit-Policy` are lists, so this layer adds its items to them; single-value
    /// styles (drafts 6 and 7, GitHub) keep whichever layer's figures are the more restrictive.
    /// Within one layer they report the tier that the decision reports (the one that makes the
    /// client wait longest when denied, else the one with the fewest remaining).
    pub(crate) fn write(&self, decisions: &[Decision], elapsed: Duration, out: &mut HeaderMap) {
        let reported = Decision::most_restrictive(decisions);
        let (Some(policy), Some(decision)) = (self.policies.get(reported), decisions.get(reported))
        else {
            return;
        };
        // What is left of a decision's reset time, when its limit has one (an in-flight limit
        // has none), and that in whole seconds.
        let left =
            |p: &Policy, d: &Decision| p.window.map(|_| d.reset_after.saturating_sub(elapsed));
        let reset = |p, d| left(p, d).map(|left| sf_int(ceil_secs(left)));
        match self.headers.style {
            HeaderStyle::Ietf => {
                let mut rate = Text::new();
                for (i, (p, d)) in self.policies.iter().zip(decisions).enumerate() {
                    if i > 0 {
                        rate.push(", ");
                    }
                    rate.push(&p.name);
                    rate.push(";r=");
                    rate.push_int(sf_int(d.remaining));
                    if let Some(t) = reset(p, d) {
                        rate.push(";t=");
                        rate.push_int(t);
                    }
                }
                append(out, &RATELIMIT, rate.as_bytes(), || rate.to_header_value());
            }
            HeaderStyle::None => {}
            style => {
                let github = style == HeaderStyle::GitHub;
                let (limit, remaining, reset) = if github {
                    // The only wall clock read in the crate: GitHub clients want an epoch time.
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    let reset_at =
                        left(policy, decision).map(|left| ceil_secs(now.saturating_add(left)));
                    (decision.limit, decision.remaining, reset_at)
                } else {
                    let reset = reset(policy, decision);
                    (sf_int(policy.limit), sf_int(decision.remaining), reset)
                };
                let [limit_field, remaining_field, reset_field] =
                    if github { &GITHUB } else { &DRAFT6 };
                let theirs = match style {
                    HeaderStyle::Draft7 => out
                        .get(&RATELIMIT)
                        .and_then(|v| v.to_str().ok())
                        .and_then(draft7_figures),
                    _ => int_field(out, remaining_field).map(|r| (r, int_field(out, reset_field))),
                };
                if stricter(theirs, (remaining, reset)) {
                    // Another layer's figures stand, as a set.
                } else if style == HeaderStyle::Draft7 {
                    let mut rate = Text::new();
                    rate.push("limit=");
                    rate.push_int(limit);
                    rate.push(", remaining=");
                    rate.push_int(remaining);
                    if let Some(reset) = reset {
                        rate.push(", reset=");
                        rate.push_int(reset);
                    }
                    if let Some(value) = rate.to_header_value() {
                        out.insert(RATELIMIT.clone(), value);
                    }
                } else {
                    out.insert(limit_field.clone(), int_value(limit));
                    out.insert(remaining_field.clone(), int_value(remaining));
                    if github {
                        // `Limit` is the capacity `Remaining` counts against (the burst, for the
                        // buckets), so that `Used` is what of it is taken and the three add up.
                        let used = limit.saturating_sub(remaining);
                        out.insert(X_USED.clone(), int_value(used));
                    }
                    // Another layer's reset goes when this one has none.
                    match reset {
                        Some(reset) => out.insert(reset_field.clone(), int_value(reset)),
                        None => out.remove(reset_field),
                    };
                }
            }
        }
        if let Some(policy) = &self.policy_value {
            // The value is shared when no other layer wrote the field first.
            append(out, &RATELIMIT_POLICY, policy.as_bytes(), || {
                Some(policy.clone())
            });
        }
    }
}

/// Whether figures another layer wrote, `(remaining, reset)`, are more restrictive than
/// `ours`: fewer remaining, or as few and a later reset (a limit without a reset time, on
/// requests in flight, gets a slot back at any moment: its reset counts as 0).
///
/// The single-value fields are replaced as a set: a client reads one layer's limit, remaining
/// and reset, never one layer's figures beside another's.
fn stricter(theirs: Option<(u64, Option<u64>)>, ours: (u64, Option<u64>)) -> bool {
    theirs.is_some_and(|(r, t)| r < ours.0 || (r == ours.0 && t.unwrap_or(0) > ours.1.unwrap_or(0)))
}

/// An integer field another layer wrote.
fn int_field(out: &HeaderMap, name: &HeaderName) -> Option<u64> {
    out.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// `remaining` and `reset` (absent for a limit on requests in flight) of a draft-7
/// `RateLimit` field.
fn draft7_figures(value: &str) -> Option<(u64, Option<u64>)> {
    let figure = |name: &str| {
        value.split(',').find_map(|part| {
            let (key, n) = part.trim().split_once('=')?;
            (key == name).then(|| n.trim().parse::<u64>().ok())?
        })
    };
    Some((figure("remaining")?, figure("reset")))
}

/// Adds the items `ours` to the list field `name`, after those already there, or sets it to
/// `value()` when there are none (one lookup).
fn append(
    out: &mut HeaderMap,
    name: &HeaderName,
    ours: &[u8],
    value: impl FnOnce() -> Option<HeaderValue>,
) {
    match out.entry(name) {
        Entry::Occupied(mut theirs) => {
            let both = [theirs.get().as_bytes(), b", ", ours].concat();
            if let Ok(both) = HeaderValue::from_bytes(&both) {
                theirs.insert(both);
            }
        }
        Entry::Vacant(room) => {
            if let Some(value) = value() {
                room.insert(value);
            }
        }
    }
}

/// `n` as a Structured Field Integer, which has at most 15 digits.
fn sf_int(n: u64) -> u64 {
    n.min(SF_INTEGER_MAX)
}

/// `name` as a Structured Field String: quoted, with `"` and `\` escaped. Names are printable
/// ASCII (checked by `Quota::named` and `InFlightLayer::policy_name`, or made by `Display`),
/// which `Debug` escapes just so.
fn sf_string(name: &str) -> String {
    format!("{name:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(style: HeaderStyle, quotas: &[Quota], decisions: &[Decision]) -> Vec<String> {
        let names: Vec<String> = quotas.iter().map(Quota::name).collect();
        let headers = Headers {
            style,
            placement: HeaderPlacement::All,
        };
        let writer = HeaderWriter::new(quotas.iter().zip(names.iter().map(|n| &**n)), headers);
        let mut out = HeaderMap::new();
        writer.write(decisions, Duration::ZERO, &mut out);
        let mut fields: Vec<String> = out
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
            .collect();
        fields.sort();
        fields
    }

    #[test]
    fn names_are_escaped_as_structured_field_strings() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
    }

    #[test]
    fn tiered_quotas_are_one_list_item_each() {
        let quotas = [
            Quota::per_second(5).named("burst"),
            Quota::per_hour(100).named("hourly"),
        ];
        let decisions = [
            Decision::allow(5, 4, Duration::from_millis(200)),
            Decision::allow(100, 2, Duration::from_secs(3500)),
        ];
        assert_eq!(
            written(HeaderStyle::Ietf, &quotas, &decisions),
            [
                r#"ratelimit-policy: "burst";q=5;w=1, "hourly";q=100;w=3600"#,
                r#"ratelimit: "burst";r=4;t=1, "hourly";r=2;t=3500"#,
            ]
        );
        // The single-value styles report the quota with the fewest remaining.
        assert_eq!(
            written(HeaderStyle::Draft7, &quotas, &decisions),
            [
                "ratelimit-policy: 5;w=1, 100;w=3600",
                "ratelimit: limit=100, remaining=2, reset=3500",
            ]
        );
    }

    #[test]
    fn an_in_flight_limit_names_its_unit_and_reports_no_window_or_reset() {
        let write = |style| {
            let headers = Headers {
                style,
                placement: HeaderPlacement::All,
            };
            let writer = HeaderWriter::in_flight("uploads", 8, headers);
            let mut out = HeaderMap::new();
            let decision = Decision::allow(8, 5, Duration::ZERO);
            writer.write(std::slice::from_ref(&decision), Duration::ZERO, &mut out);
            let mut fields: Vec<String> = out
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
                .collect();
            fields.sort();
            fields
        };
        assert_eq!(
            write(HeaderStyle::Ietf),
            [
                r#"ratelimit-policy: "uploads";q=8;qu="concurrent-requests""#,
                r#"ratelimit: "uploads";r=5"#,
            ]
        );
        assert_eq!(
            write(HeaderStyle::Draft7),
            [
                r#"ratelimit-policy: 8;qu="concurrent-requests""#,
                "ratelimit: limit=8, remaining=5",
            ]
        );
        assert_eq!(
            write(HeaderStyle::Draft6),
            [
                "ratelimit-limit: 8",
                r#"ratelimit-policy: 8;qu="concurrent-requests""#,
                "ratelimit-remaining: 5",
            ]
        );
        assert_eq!(
            write(HeaderStyle::GitHub),
            [
                "x-ratelimit-limit: 8",
                "x-ratelimit-remaining: 5",
                "x-ratelimit-used: 3",
            ]
        );
    }

    #[test]
    fn figures_beyond_a_structured_integer_are_clamped() {
        let quotas = [Quota::per_second(u64::MAX)];
        let decisions = [Decision::allow(u64::MAX, u64::MAX - 1, Duration::ZERO)];
        assert_eq!(
            written(HeaderStyle::Draft6, &quotas, &decisions),
            [
                "ratelimit-limit: 999999999999999",
                "ratelimit-policy: 999999999999999;w=1",
                "ratelimit-remaining: 999999999999999",
                "ratelimit-reset: 0",
            ]
        );
    }
}
