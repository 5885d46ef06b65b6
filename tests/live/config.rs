//! Layers from configuration (`tollgate::config`): a configured layer answers exactly as the
//! same layer written in code, for every algorithm; every bad value is an error that names its
//! field and value; no configuration makes `from_config` panic; and `examples/limits.toml`
//! builds and limits over real TCP. Time moves by a `ManualClock`, never by sleeping.
#![cfg(all(feature = "serde", feature = "axum"))]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::config::{ClientIpConfig, KeyConfig, KeyPart, LimitConfig, Limits};
use tollgate::key::{Global, Header, Method, PeerAddr, PeerIp, Route};
use tollgate::{HeaderPlacement, HeaderStyle, InFlightLayer, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};
use web::{client, serve};

use crate::support::http as web;

fn config(text: &str) -> LimitConfig {
    match toml::from_str(text) {
        Ok(config) => config,
        Err(e) => panic!("{e}\n{text}"),
    }
}

fn quota(text: &str) -> Quota {
    text.parse().unwrap()
}

fn ok() -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    })
}

/// Request `i` of a test run: from one of three peers, to one of two routes, with one of two
/// methods and API keys.
fn request(i: usize) -> Request<String> {
    let peers = ["192.0.2.1:1000", "192.0.2.2:2000", "[2001:db8::1]:3000"];
    let mut req = Request::builder()
        .method(if i % 5 == 0 { "POST" } else { "GET" })
        .uri(if i % 3 == 0 { "/b" } else { "/a" })
        .header("x-api-key", if i % 4 == 0 { "k2" } else { "k1" })
        .body(String::new())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr(peers[i % 7 % 3].parse::<SocketAddr>().unwrap()));
    req
}

/// The next output of `fut` if it is ready at this poll.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match Pin::new(&mut *fut).poll(cx) {
        Poll::Ready(out) => Poll::Ready(Some(out)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// What a response shows a client: its status and every header.
type Answer = (StatusCode, http::HeaderMap);

/// Runs `configured` and `coded` (both on `clock`) over the same 60 requests at the same times,
/// and returns each one's answers, and how many 5 ms steps requests held back by shaping waited
/// (the clock moves on in such steps for both layers at once while either waits).
async fn run_both(
    configured: RateLimitLayer,
    coded: RateLimitLayer,
    clock: &ManualClock,
) -> (Vec<Answer>, Vec<Answer>, usize) {
    let mut waited = 0;
    let (mut a, mut b) = (configured.layer(ok()), coded.layer(ok()));
    let (mut answers_a, mut answers_b) = (Vec::new(), Vec::new());
    // Gaps between requests (ms): bursts, and pauses long enough for windows to turn.
    let gaps = [
        0, 0, 10, 0, 120, 0, 0, 400, 30, 0, 1100, 0, 5, 2500, 0, 0, 60,
    ];
    for i in 0..60 {
        clock.advance(Duration::from_millis(gaps[i % gaps.len()]));
        let mut fa = Box::pin(a.ready().await.unwrap().call(request(i)));
        let mut fb = Box::pin(b.ready().await.unwrap().call(request(i)));
        let (mut ra, mut rb) = (None, None);
        for _ in 0..100_000 {
            if ra.is_none() {
                ra = poll_once(&mut fa).await;
            }
            if rb.is_none() {
                rb = poll_once(&mut fb).await;
            }
            if ra.is_some() && rb.is_some() {
                break;
            }
            clock.advance(Duration::from_millis(5));
            waited += 1;
        }
        let (Some(Ok(ra)), Some(Ok(rb))) = (ra, rb) else {
            panic!("request {i} was never answered");
        };
        answers_a.push((ra.status(), ra.headers().clone()));
        answers_b.push((rb.status(), rb.headers().clone()));
    }
    (answers_a, answers_b, waited)
}

/// For every algorithm, a layer from configuration and the same layer in code, on one clock,
/// give the same statuses and headers to the same requests at the same times. Between them
/// the cases cover tiers, names, every key kind (composite keys included), header styles and
/// placements, status, shaping, sub-windows and dry runs.
#[tokio::test]
async fn configured_and_coded_layers_answer_alike() {
    let cases: Vec<(&str, &str, RateLimitLayer)> = vec![
        (
            "gcra",
            r#"quota = "3/s;burst=2"
               max_delay = "300ms""#,
            RateLimitLayer::gcra(quota("3/s;burst=2")).max_delay(Duration::from_millis(300)),
        ),
        (
            "token_bucket",
            r#"algorithm = "token_bucket"
               name = "tb"
               quotas = ["2/s", "5/min"]
               headers = "draft7"
               max_delay = "200ms""#,
            RateLimitLayer::token_bucket(vec![
                quota("2/s").named("tb-1"),
                quota("5/min").named("tb-2"),
            ])
            .headers(HeaderStyle::Draft7)
            .max_delay(Duration::from_millis(200)),
        ),
        (
            "leaky_bucket",
            r#"algorithm = "leaky_bucket"
               quota = "4/s;burst=3"
               key = ["route", "peer_ip"]"#,
            RateLimitLayer::leaky_bucket(quota("4/s;burst=3")).key((Route, PeerIp)),
        ),
        (
            "fixed_window",
            r#"algorithm = "fixed_window"
               quota = "3/10s"
               key = { header = "x-api-key" }
               headers = "draft6"
               headers_on = "denied"
               status = 503"#,
            RateLimitLayer::fixed_window(quota("3/10s"))
                .key(Header::new("x-api-key"))
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .headers(HeaderStyle::Draft6)
                .headers_on(HeaderPlacement::Denied),
        ),
        (
            "sliding_window",
            r#"algorithm = "sliding_window"
               name = "sw"
               quota = "4/10s"
               sub_windows = 4
               key = { client_ip = { trusted = ["10.0.0.0/8"], ipv6_prefix = 48 } }"#,
            RateLimitLayer::sliding_window(quota("4/10s").named("sw"))
                .sub_windows(4)
                .key(
                    tollgate::key::ClientIp::trusting(["10.0.0.0/8"])
                        .unwrap()
                        .ipv6_prefix(48),
                ),
        ),
        (
            "sliding_log",
            r#"algorithm = "sliding_log"
               quotas = ["2/s", "4/10s"]
               key = ["method", "peer_ip", "route", "global"]
               headers_on = "allowed""#,
            RateLimitLayer::sliding_log(vec![quota("2/s"), quota("4/10s")])
                .key((Method, PeerIp, Route, Global))
                .headers_on(HeaderPlacement::Allowed),
        ),
        (
            "hybrid",
            r#"algorithm = "hybrid"
               quota = "3/s"
               key = "global"
               dry_run = true"#,
            RateLimitLayer::hybrid(quota("3/s"))
                .key(Global)
                .dry_run(true),
        ),
    ];
    let mut covered = Vec::new();
    for (algorithm, text, coded) in cases {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(1_000));
        let configured = RateLimitLayer::from_config(&config(text)).unwrap();
        assert_eq!(configured.policy(), coded.policy(), "{algorithm}");
        assert_eq!(configured.quotas(), coded.quotas(), "{algorithm}");
        let (a, b, waited) = run_both(
            configured.clock(clock.clone()),
            coded.clock(clock.clone()),
            &clock,
        )
        .await;
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(a, b, "{algorithm}: request {i}");
        }
        // The runs are not trivially equal: some requests pass and some are refused (the leaky
        // bucket holds them back instead, and the dry run reports 0 remaining).
        let statuses: std::collections::BTreeSet<u16> = a.iter().map(|(s, _)| s.as_u16()).collect();
        if algorithm == "leaky_bucket" {
            assert_eq!(statuses, [200].into(), "{algorithm}");
            assert!(waited > 0, "{algorithm}: no request was held back");
        } else if algorithm == "hybrid" {
            assert_eq!(statuses, [200].into(), "{algorithm}");
            assert!(a
                .iter()
                .any(|(_, h)| h["ratelimit"].to_str().unwrap().contains("r=0")));
        } else {
            assert!(statuses.len() >= 2, "{algorithm}: {statuses:?}");
        }
        covered.push(algorithm);
    }
    assert_eq!(
        covered,
        [
            "gcra",
            "token_bucket",
            "leaky_bucket",
            "fixed_window",
            "sliding_window",
            "sliding_log",
            "hybrid"
        ]
    );
}

/// Each bad value: the configuration, the field its error names, and the value it names
/// (`None` for a missing or misplaced field).
const BAD: &[(&str, &str, Option<&str>)] = &[
    (
        r#"algorithm = "sliding_lag"
        quota = "1/s""#,
        "algorithm",
        Some("sliding_lag"),
    ),
    (r#"quota = "3/fortnight""#, "quota", Some("3/fortnight")),
    (r#"in_flight = 0"#, "in_flight", Some("0")),
    (
        r#"in_flight = 2
        quota = "1/s""#,
        "quota",
        None,
    ),
    (
        r#"in_flight = 2
        algorithm = "gcra""#,
        "algorithm",
        None,
    ),
    (
        r#"in_flight = 2
        max_delay = "1s""#,
        "max_delay",
        None,
    ),
    (
        r#"in_flight = 2
        aligned = true"#,
        "aligned",
        None,
    ),
    (
        r#"in_flight = 2
        lease_ttl = "500ms""#,
        "lease_ttl",
        Some("500ms"),
    ),
    (
        r#"in_flight = 2
        lease_ttl = "25h""#,
        "lease_ttl",
        Some("25h"),
    ),
    (
        r#"quota = "1/s"
        lease_ttl = "5s""#,
        "lease_ttl",
        Some("5s"),
    ),
    (
        r#"in_flight = 2
        name = "caf\u00e9""#,
        "name",
        Some("caf\u{e9}"),
    ),
    (r#"quotas = ["1/s", "0/min"]"#, "quotas[1]", Some("0/min")),
    (r#"quotas = []"#, "quotas", None),
    (r#"name = "x""#, "quota", None),
    (
        r#"quota = "1/s"
        quotas = ["1/s"]"#,
        "quotas",
        None,
    ),
    (
        r#"quota = "1/s"
        name = "caf\u00e9""#,
        "name",
        Some("caf\u{e9}"),
    ),
    (
        r#"quota = "1/s"
        key = { client_ip = { trusted = ["10.0.0.0/8", "10.0.0.1/8"] } }"#,
        "key.client_ip.trusted[1]",
        Some("10.0.0.1/8"),
    ),
    (
        r#"quota = "1/s"
        key = { client_ip = { trusted = ["10.0.0.0/8"], trusted_hops = 1 } }"#,
        "key.client_ip",
        None,
    ),
    (
        r#"quota = "1/s"
        key = { client_ip = {} }"#,
        "key.client_ip",
        None,
    ),
    (
        r#"quota = "1/s"
        key = { client_ip = { trusted_hops = 0 } }"#,
        "key.client_ip.trusted_hops",
        Some("0"),
    ),
    (
        r#"quota = "1/s"
        key = { client_ip = { trusted_hops = 2, ipv6_prefix = 129 } }"#,
        "key.client_ip.ipv6_prefix",
        Some("129"),
    ),
    (
        r#"quota = "1/s"
        key = { client_ip = { trusted_hops = 1, header = "x forwarded" } }"#,
        "key.client_ip.header",
        Some("x forwarded"),
    ),
    (
        r#"quota = "1/s"
        key = { header = "x-api key" }"#,
        "key.header",
        Some("x-api key"),
    ),
    (
        r#"quota = "1/s"
        key = ["route", { header = "" }]"#,
        "key[1].header",
        Some(""),
    ),
    (
        r#"quota = "1/s"
        key = ["route"]"#,
        "key",
        None,
    ),
    (
        r#"quota = "1/s"
        key = ["route", "peer_ip", "method", "global", "bearer_token"]"#,
        "key",
        None,
    ),
    (
        r#"quota = "1/s"
        headers = "draft-99""#,
        "headers",
        Some("draft-99"),
    ),
    (
        r#"quota = "1/s"
        headers_on = "sometimes""#,
        "headers_on",
        Some("sometimes"),
    ),
    (
        r#"quota = "1/s"
        status = 200"#,
        "status",
        Some("200"),
    ),
    (
        r#"quota = "1/s"
        status = 1000"#,
        "status",
        Some("1000"),
    ),
    (
        r#"quota = "1/s"
        algorithm = "fixed_window"
        max_delay = "1s""#,
        "max_delay",
        Some("1s"),
    ),
    (
        r#"quota = "1/s"
        max_delay = "soon""#,
        "max_delay",
        Some("soon"),
    ),
    (
        r#"quota = "1/s"
        algorithm = "sliding_window"
        sub_windows = 65"#,
        "sub_windows",
        Some("65"),
    ),
    (
        r#"quota = "1/s"
        algorithm = "sliding_window"
        sub_windows = 0"#,
        "sub_windows",
        Some("0"),
    ),
    (
        r#"quota = "1/s"
        sub_windows = 2"#,
        "sub_windows",
        Some("2"),
    ),
    (
        r#"quota = "1/s"
        algorithm = "sliding_window"
        aligned = true"#,
        "aligned",
        Some("true"),
    ),
    (
        r#"quota = "1/s"
        store = { max_keys = 0 }"#,
        "store.max_keys",
        Some("0"),
    ),
    (
        r#"quota = "1/s"
        store = { prefix = "app" }"#,
        "store.prefix",
        None,
    ),
];

#[test]
fn bad_values_are_named_in_errors() {
    for (text, field, value) in BAD {
        let config = config(text);
        let built = match config.in_flight {
            Some(_) => InFlightLayer::from_config(&config).map(|l| format!("{l:?}")),
            None => RateLimitLayer::from_config(&config).map(|l| format!("{l:?}")),
        };
        let err = match built {
            Ok(layer) => panic!("accepted {text}: {layer}"),
            Err(err) => err,
        };
        let shown = err.to_string();
        assert_eq!(err.field(), *field, "{shown}");
        assert_eq!(err.value(), *value, "{shown}");
        let bare = value.and_then(|v| v.parse::<u64>().ok().map(|n| n.to_string()));
        let bare = bare.or_else(|| {
            value
                .filter(|v| v.parse::<bool>().is_ok())
                .map(str::to_owned)
        });
        let start = match (value, bare) {
            (Some(_), Some(n)) => format!("{field} = {n}: "),
            (Some(v), None) => format!("{field} = {v:?}: "),
            (None, _) => format!("{field}: "),
        };
        assert!(
            shown.starts_with(&start),
            "{shown:?} should start with {start:?}"
        );
    }
}

#[test]
fn errors_say_how_to_fix() {
    let err = |text| {
        RateLimitLayer::from_config(&config(text))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(r#"algorithm = "sliding_lag"
               quota = "1/s""#),
        "algorithm = \"sliding_lag\": unknown algorithm; expected \"gcra\", \"token_bucket\", \
         \"leaky_bucket\", \"fixed_window\", \"sliding_window\", \"sliding_log\" or \"hybrid\""
    );
    assert!(err(r#"quota = "3/fortnight""#).contains("the period must be a unit"));
    assert!(err(r#"quota = "1/s"
                   key = { client_ip = { trusted = ["10.0.0.1/8"] } }"#)
    .contains("write 10.0.0.0/8 for the network or 10.0.0.1/32 for the one address"));
    assert!(err(r#"quota = "1/s"
                   headers = "draft-99""#)
    .ends_with("expected \"ietf\", \"draft7\", \"draft6\", \"github\" or \"none\""));
}

#[test]
fn unknown_fields_and_key_kinds_are_refused_when_read() {
    let err = toml::from_str::<LimitConfig>("quota = \"1/s\"\nburst = 3").unwrap_err();
    assert!(err.to_string().contains("unknown field `burst`"), "{err}");
    let err = toml::from_str::<LimitConfig>("quota = \"1/s\"\nkey = \"ip\"").unwrap_err();
    assert!(err.to_string().contains("unknown variant `ip`"), "{err}");
    assert!(err.to_string().contains("`peer_ip`"), "{err}");
    let err = toml::from_str::<LimitConfig>(
        "quota = \"1/s\"\nkey = { client_ip = { trusted = [], hops = 1 } }",
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown field `hops`"), "{err}");
}

#[test]
fn tiers_are_named_after_the_limit() {
    let layer = RateLimitLayer::from_config(&config(
        r#"name = "api"
           quotas = ["10/s", "1000/h"]"#,
    ))
    .unwrap();
    let names: Vec<String> = layer.quotas().iter().map(Quota::name).collect();
    assert_eq!(names, ["api-1", "api-2"]);
    assert_eq!(layer.policy(), "api-1+api-2");
}

#[test]
fn configs_read_back_as_written() {
    let text = r#"name = "api"
algorithm = "sliding_window"
quotas = ["2/s", "1000/h"]
key = ["route", { header = "x-api-key" }, { client_ip = { trusted_hops = 1, header = "forwarded" } }]
headers = "draft7"
sub_windows = 4
"#;
    let parsed = config(text);
    assert_eq!(
        parsed.key,
        Some(KeyConfig::Tuple(vec![
            KeyPart::Route,
            KeyPart::Header("x-api-key".into()),
            KeyPart::ClientIp({
                let mut c = ClientIpConfig::default();
                c.trusted_hops = Some(1);
                c.header = Some("forwarded".into());
                c
            }),
        ]))
    );
    let json = serde_json::to_string(&parsed).unwrap();
    assert_eq!(serde_json::from_str::<LimitConfig>(&json).unwrap(), parsed);
    assert_eq!(
        toml::from_str::<LimitConfig>(&toml::to_string(&parsed).unwrap()).unwrap(),
        parsed
    );
}

#[test]
fn a_redis_store_must_connect_first() {
    let err = RateLimitLayer::from_config(&config(
        r#"quota = "1/s"
           store = { url = "redis://:secret@127.0.0.1:1" }"#,
    ))
    .unwrap_err();
    #[cfg(feature = "redis")]
    {
        assert_eq!(err.field(), "store");
        assert!(err.to_string().contains("connect().await"), "{err}");
    }
    #[cfg(not(feature = "redis"))]
    assert!(err.to_string().contains("feature `redis`"), "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[tokio::test]
async fn limits_name_the_limit_in_errors_and_policies() {
    let limits: Limits = toml::from_str(
        r#"[limits.api]
           quota = "100/min"
           [limits.login]
           quota = "5/fortnight""#,
    )
    .unwrap();
    let err = limits.layers().await.unwrap_err();
    assert_eq!(err.field(), "limits.login.quota");
    assert_eq!(err.value(), Some("5/fortnight"));

    let limits: Limits = toml::from_str(
        r#"[limits.api]
           quota = "100/min"
           [limits.search]
           name = "find"
           quota = "5/min""#,
    )
    .unwrap();
    let layers = limits.layers().await.unwrap();
    let policies: Vec<(&str, &str)> = layers
        .iter()
        .map(|(n, l)| (n.as_str(), l.policy()))
        .collect();
    assert_eq!(policies, [("api", "api"), ("search", "find")]);

    let limits: Limits = toml::from_str(
        r#"[limits.api]
           quota = "100/min"
           store = { max_keys = 10 }"#,
    )
    .unwrap();
    assert_eq!(
        limits.layers().await.unwrap_err().field(),
        "limits.api.store"
    );
}

fn example_limits() -> Limits {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits.toml");
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `examples/limits.toml`, read as the example reads it, builds every limit, and its login
/// limit answers the sixth attempt with 503 over real TCP.
#[tokio::test]
async fn the_example_file_builds_and_limits() {
    let mut layers = example_limits().layers().await.unwrap();
    let names: Vec<&String> = layers.keys().collect();
    assert_eq!(names, ["api", "global", "login"]);
    assert_eq!(layers["api"].policy(), "api-1+api-2");
    let (Some(login), Some(api)) = (layers.remove("login"), layers.remove("api")) else {
        panic!("login and api limits");
    };
    let app = Router::new()
        .route("/login", post(|| async { "welcome" }).route_layer(login))
        .route("/api/items", get(|| async { "[]" }).route_layer(api));
    let base = serve(app).await;
    let client = client();
    for attempt in 1..=6 {
        let resp = client.post(format!("{base}/login")).send().await.unwrap();
        let expected = if attempt <= 5 { 200 } else { 503 };
        assert_eq!(resp.status().as_u16(), expected, "attempt {attempt}");
    }
    let resp = client
        .get(format!("{base}/api/items"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
    let resp = client
        .get(format!("{base}/api/items"))
        .header("x-api-key", "k1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    let standing = web::header(&resp, "ratelimit");
    assert!(standing.starts_with("\"api-1\";r=1;t="), "{standing}");
    assert!(standing.contains(", \"api-2\";r=999;t="), "{standing}");
}

/// Texts that are quotas, nearly quotas, or extreme ones.
fn quota_text() -> impl Strategy<Value = String> {
    let limits = prop::sample::select(vec![0u64, 1, 2, 7, 1000, 1 << 53, u64::MAX]);
    let counts = prop::sample::select(vec!["", "0", "1", "15", "18446744073709551615"]);
    let units = prop::sample::select(vec!["ns", "ms", "s", "min", "h", "d", "fortnight", ""]);
    let bursts = prop::option::of(prop::sample::select(vec![0u64, 1, 3, 1 << 40, u64::MAX]));
    prop_oneof![
        (limits, counts, units, bursts).prop_map(|(l, c, u, b)| match b {
            Some(b) => format!("{l}/{c}{u};burst={b}"),
            None => format!("{l}/{c}{u}"),
        }),
        ".{0,12}",
    ]
}

fn key_part() -> impl Strategy<Value = KeyPart> {
    let nets = prop::sample::select(vec![
        "10.0.0.0/8",
        "10.0.0.1/8",
        "::/0",
        "2001:db8::/129",
        "garbage",
        "192.0.2.7",
    ]);
    prop_oneof![
        Just(KeyPart::PeerIp),
        Just(KeyPart::BearerToken),
        Just(KeyPart::Route),
        Just(KeyPart::Method),
        Just(KeyPart::Global),
        "[a-z -]{0,6}".prop_map(KeyPart::Header),
        (
            prop::option::of(prop::collection::vec(nets, 0..3)),
            prop::option::of(0usize..4),
            prop::option::of(prop::sample::select(vec![
                "x-forwarded-for",
                "Forwarded",
                "x-real-ip",
                "cf-connecting-ip",
                "bad header",
                "",
            ])),
            prop::option::of(any::<u8>()),
        )
            .prop_map(|(trusted, hops, header, prefix)| {
                let mut c = ClientIpConfig::default();
                c.trusted = trusted.map(|t| t.into_iter().map(String::from).collect());
                c.trusted_hops = hops;
                c.header = header.map(String::from);
                c.ipv6_prefix = prefix;
                KeyPart::ClientIp(c)
            }),
    ]
}

fn limit_config() -> impl Strategy<Value = LimitConfig> {
    let algorithms = prop::sample::select(vec![
        "gcra",
        "token_bucket",
        "leaky_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "hybrid",
        "sliding_lag",
        "",
    ]);
    let keys = prop_oneof![
        key_part().prop_map(KeyConfig::One),
        prop::collection::vec(key_part(), 0..6).prop_map(KeyConfig::Tuple),
    ];
    let words = |names: Vec<&'static str>| {
        prop_oneof![prop::sample::select(names).prop_map(String::from), ".{0,8}"]
    };
    (
        (
            prop::option::of(algorithms.prop_map(String::from)),
            prop::option::of(quota_text()),
            prop::option::of(prop::collection::vec(quota_text(), 0..4)),
            prop::option::of(prop_oneof!["[a-z]{1,8}", ".{0,70}"]),
            prop::option::of(keys),
        ),
        (
            prop::option::of(words(vec!["ietf", "draft7", "draft6", "github", "none"])),
            prop::option::of(words(vec!["all", "allowed", "denied"])),
            prop::option::of(any::<u16>()),
            prop::option::of(prop_oneof![
                Just("250ms".to_string()),
                Just("18446744073709551615d".to_string()),
                Just("584y".to_string()),
                "[0-9]{1,20}(ns|ms|s|min|h|d)",
            ]),
            prop::option::of(prop_oneof![0usize..70, Just(usize::MAX)]),
            prop::option::of(any::<bool>()),
        ),
        (
            prop::option::of(prop_oneof![0u64..4, Just(1 << 53), Just(u64::MAX)]),
            prop::option::of(prop_oneof![
                Just("30s".to_string()),
                "[0-9]{1,20}(ns|ms|s|min|h|d)",
            ]),
            prop::option::of(any::<bool>()),
        ),
    )
        .prop_map(
            |(
                (algorithm, q, qs, name, key),
                (headers, on, status, delay, sub, dry),
                (in_flight, lease_ttl, aligned),
            )| {
                let mut c = LimitConfig::default();
                c.algorithm = algorithm;
                c.quota = q;
                c.quotas = qs;
                c.name = name;
                c.key = key;
                c.headers = headers;
                c.headers_on = on;
                c.status = status;
                c.max_delay = delay;
                c.sub_windows = sub;
                c.dry_run = dry;
                c.in_flight = in_flight;
                c.lease_ttl = lease_ttl;
                c.aligned = aligned;
                c
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Whatever the configuration, `from_config` answers with a layer or an error naming a
    /// field; it never panics. A layer it makes limits a request without panicking either.
    #[test]
    fn from_config_never_panics(config in limit_config()) {
        // Each kind of layer, the one that does not fit the configuration included.
        for in_flight in [false, true] {
            let built = catch_unwind(AssertUnwindSafe(|| match in_flight {
                true => InFlightLayer::from_config(&config).map(|l| l.layer(ok())),
                false => RateLimitLayer::from_config(&config).map(|l| l.layer(ok())),
            }));
            prop_assert!(built.is_ok(), "from_config panicked on {:?}", config);
            match built.unwrap_or_else(|_| unreachable!()) {
                Ok(svc) => {
                    let answered = catch_unwind(AssertUnwindSafe(|| {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_time()
                            .build()
                            .unwrap()
                            .block_on(svc.oneshot(request(1)))
                    }));
                    prop_assert!(answered.is_ok(), "the layer of {:?} panicked on a request", config);
                }
                Err(err) => prop_assert!(!err.field().is_empty() && !err.to_string().is_empty()),
            }
        }
    }
}

/// A configuration of the other kind of limit is refused by the layer it does not fit, with
/// an error naming the constructor that fits it; a file of both kinds gives each its layers.
#[tokio::test]
async fn each_kind_of_limit_is_built_by_its_own_layer() {
    let err = RateLimitLayer::from_config(&config("in_flight = 2")).unwrap_err();
    assert_eq!(
        (err.field(), err.value()),
        ("in_flight", Some("2")),
        "{err}"
    );
    assert!(
        err.to_string().contains("InFlightLayer::from_config"),
        "{err}"
    );
    let err = InFlightLayer::from_config(&config(r#"quota = "1/s""#)).unwrap_err();
    assert_eq!(err.field(), "in_flight", "{err}");
    assert!(
        err.to_string().contains("RateLimitLayer::from_config"),
        "{err}"
    );

    let limits: Limits = toml::from_str(
        r#"
        [limits.api]
        quota = "10/min"
        [limits.uploads]
        in_flight = 2
        "#,
    )
    .unwrap();
    let store = limits.store.connect().await.unwrap();
    let rates = limits.layers_in(&store).unwrap();
    let in_flight = limits.in_flight_layers_in(&store).unwrap();
    assert_eq!(rates.keys().collect::<Vec<_>>(), ["api"]);
    assert_eq!(in_flight.keys().collect::<Vec<_>>(), ["uploads"]);
    assert_eq!(in_flight["uploads"].policy(), "uploads");
    // A mistake in either kind is reported whichever kind is asked for.
    let mut bad = limits.clone();
    bad.limits.get_mut("uploads").unwrap().in_flight = Some(0);
    assert_eq!(
        bad.layers_in(&store).unwrap_err().field(),
        "limits.uploads.in_flight"
    );
    assert_eq!(
        bad.in_flight_layers_in(&store).unwrap_err().field(),
        "limits.uploads.in_flight"
    );
}

/// `in_flight` makes a limit on requests in flight: the configured layer answers as the one
/// built in code, holding a slot until the response is dropped, and its denial has no
/// `Retry-After`.
#[test]
fn in_flight_limits_requests_in_progress() {
    let layer = InFlightLayer::from_config(&config(
        r#"in_flight = 1
           name = "uploads"
           lease_ttl = "10s"
           key = "global""#,
    ))
    .unwrap();
    assert_eq!(layer.policy(), "uploads");
    let svc = layer.layer(ok());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let first = rt.block_on(svc.clone().oneshot(request(0))).unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = rt.block_on(svc.clone().oneshot(request(1))).unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        second.headers()["ratelimit-policy"],
        r#""uploads";q=1;qu="concurrent-requests""#
    );
    assert!(second.headers().get("retry-after").is_none());
    drop(first);
    let third = rt.block_on(svc.oneshot(request(2))).unwrap();
    assert_eq!(third.status(), StatusCode::OK);
}

#[test]
fn aligned_gives_calendar_windows() {
    use std::time::{Duration, UNIX_EPOCH};
    use tollgate::clock::ManualClock;
    let layer = RateLimitLayer::from_config(&config(
        r#"algorithm = "fixed_window"
           quota = "2/min"
           key = "global"
           aligned = true"#,
    ))
    .unwrap();
    let clock = ManualClock::new();
    clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_795_543_200 + 45));
    let layer = layer.clock(clock);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let response = rt.block_on(layer.layer(ok()).oneshot(request(0))).unwrap();
    // The minute's window ends 15 s later, on the minute.
    assert_eq!(response.headers()["ratelimit"], "\"2/min\";r=1;t=15");
}
