//! `examples/production.rs`, served as it is on a local port and driven by a real HTTP client:
//! the global limit behind a trusted proxy, the login limits keyed on the account in the JSON
//! body (and attacks on that body), the per-plan API limit, the JSON answers, compression, and
//! Redis when there is a `redis-server`.

mod support;

use support::http as web;

#[path = "../examples/production.rs"]
#[allow(dead_code)]
mod production;

use support::redis as server;

use production::{account_name, app, Backend, Limits, MAX_LOGIN_BODY};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tollgate::key::ClientIp;
use tollgate::store::MemoryStore;

use web::{client, header, serve};

/// The app over a fresh memory store, trusting the loopback (the test client) as its proxy.
async fn start() -> String {
    serve(app(limits(&Backend::Memory(MemoryStore::new())))).await
}

fn limits(backend: &Backend) -> Limits {
    Limits::new(backend, ClientIp::trusting(["127.0.0.1"]).unwrap())
}

/// A login through the proxy for `client_ip`, with `body` as it is.
async fn login_raw(base: &str, client_ip: &str, body: String) -> reqwest::Response {
    client()
        .post(format!("{base}/login"))
        .header("content-type", "application/json")
        .header("x-forwarded-for", client_ip)
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn login(base: &str, client_ip: &str, name: &str, password: &str) -> StatusCode {
    let body = json!({ "username": name, "password": password }).to_string();
    login_raw(base, client_ip, body).await.status()
}

async fn api(base: &str, key: Option<&str>, client_ip: &str) -> reqwest::Response {
    let mut req = client()
        .get(format!("{base}/api/v1/me"))
        .header("x-forwarded-for", client_ip);
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    req.send().await.unwrap()
}

async fn json_of(response: reqwest::Response) -> Value {
    assert_eq!(header(&response, "content-type"), "application/json");
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

async fn every_spelling_of_an_account_spends_one_budget_of_failed_logins() {
    let base = start().await;
    let spellings = ["alice", " Alice ", "ALICE", "alice\t", "\naLiCe"];
    for name in spellings {
        let status = login(&base, "198.51.100.1", name, "guess").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name:?}");
    }
    // Five failures for alice, however spelled: refused before the password is checked, the
    // right one included, in any spelling.
    for name in ["alice", "ALICE ", "aliCE"] {
        let response = login_raw(
            &base,
            "198.51.100.1",
            json!({ "username": name, "password": "hunter2" }).to_string(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{name:?}");
        assert_eq!(header(&response, "retry-after"), "180");
        let body = json_of(response).await;
        assert_eq!(body["error"], "rate_limited");
        assert_eq!(body["policy"], "login");
        assert_eq!(body["retry_after_seconds"], 180);
    }
    // Bob, and alice from another address, are unaffected.
    assert_eq!(
        login(&base, "198.51.100.1", "bob", "hunter2").await,
        StatusCode::OK
    );
    assert_eq!(
        login(&base, "198.51.100.2", "alice", "hunter2").await,
        StatusCode::OK
    );
}

async fn names_no_account_can_have_are_refused_before_the_handler_and_spend_nothing() {
    let base = start().await;
    // Unicode look-alikes, inner spaces, empty and overlong names, and names that are not
    // strings: 400, never a guess at a password and never a key of their own.
    let long = "a".repeat(65);
    let bad = [
        json!({ "username": "ａｌｉｃｅ", "password": "hunter2" }),
        json!({ "username": "alicé", "password": "hunter2" }),
        json!({ "username": "al ice", "password": "hunter2" }),
        json!({ "username": "ALİCE", "password": "hunter2" }),
        json!({ "username": "", "password": "hunter2" }),
        json!({ "username": "   ", "password": "hunter2" }),
        json!({ "username": long, "password": "hunter2" }),
        json!({ "username": 42, "password": "hunter2" }),
        json!({ "username": ["alice"], "password": "hunter2" }),
        json!({ "password": "hunter2" }),
        json!("alice"),
    ];
    // Each from its own address, so that the global limit (60 a minute) stays out of the way.
    for (n, body) in bad.iter().enumerate() {
        for _ in 0..6 {
            let response = login_raw(&base, &format!("192.0.2.{n}"), body.to_string()).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(json_of(response).await["error"], "bad_login", "{body}");
        }
    }
    let not_json = login_raw(&base, "198.51.100.1", "username=alice&password=x".into()).await;
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    // None of them spent alice's budget: five failures are still allowed, then the sixth is
    // refused.
    for _ in 0..5 {
        assert_eq!(
            login(&base, "198.51.100.1", "alice", "guess").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        login(&base, "198.51.100.1", "alice", "guess").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

async fn a_body_over_the_bound_is_refused_and_one_at_the_bound_goes_on_intact() {
    let base = start().await;
    let padded = |len: usize| {
        let head = r#"{"username":"bob","password":"hunter2","pad":""#;
        let tail = r#""}"#;
        let body = format!("{head}{}{tail}", " ".repeat(len - head.len() - tail.len()));
        assert_eq!(body.len(), len);
        body
    };
    let over = login_raw(&base, "198.51.100.1", padded(MAX_LOGIN_BODY + 1)).await;
    assert_eq!(over.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(json_of(over).await["error"], "too_large");
    let huge = login_raw(&base, "198.51.100.1", padded(1 << 20)).await;
    assert_eq!(huge.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // At the bound, the handler gets the whole body: it reads the password from it.
    let at = login_raw(&base, "198.51.100.1", padded(MAX_LOGIN_BODY)).await;
    assert_eq!(at.status(), StatusCode::OK);
    assert_eq!(json_of(at).await["welcome"], "bob");
}

async fn a_body_naming_two_accounts_is_counted_against_the_one_the_handler_logs_into() {
    let base = start().await;
    let twice = |password: &str| {
        format!(r#"{{"username":"alice","username":"bob","password":"{password}"}}"#)
    };
    let welcome = login_raw(&base, "198.51.100.1", twice("hunter2")).await;
    assert_eq!(welcome.status(), StatusCode::OK);
    let account = json_of(welcome).await["welcome"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..5 {
        let failed = login_raw(&base, "198.51.100.1", twice("guess")).await;
        assert_eq!(failed.status(), StatusCode::UNAUTHORIZED);
    }
    // The failures were the account the handler checked: that one is refused now.
    assert_eq!(
        login(&base, "198.51.100.1", &account, "hunter2").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

async fn successful_logins_cost_nothing() {
    let base = start().await;
    for _ in 0..20 {
        assert_eq!(
            login(&base, "198.51.100.1", "bob", "hunter2").await,
            StatusCode::OK
        );
    }
    for _ in 0..5 {
        assert_eq!(
            login(&base, "198.51.100.1", "bob", "guess").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        login(&base, "198.51.100.1", "bob", "guess").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

async fn guesses_at_one_account_from_many_addresses_are_limited_per_account() {
    let base = start().await;
    // 20 failures an hour per account from anywhere: 4 from each of 5 addresses (each under
    // its own limit of 5), then a sixth address is refused at once.
    for n in 1..=5 {
        for _ in 0..4 {
            let status = login(&base, &format!("203.0.113.{n}"), "alice", "guess").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
        }
    }
    let response = login_raw(
        &base,
        "203.0.113.6",
        json!({ "username": "alice", "password": "hunter2" }).to_string(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json_of(response).await["policy"], "login-account");
    assert_eq!(
        login(&base, "203.0.113.6", "bob", "hunter2").await,
        StatusCode::OK
    );
}

async fn api_keys_get_their_plans_quota_and_both_limits_headers() {
    let base = start().await;
    for remaining in (0..5).rev() {
        let response = api(&base, Some("free_9Lk4"), "198.51.100.1").await;
        assert_eq!(response.status(), StatusCode::OK);
        let items = header(&response, "ratelimit");
        assert!(
            items.starts_with(&format!("\"free\";r={remaining};")),
            "{items}"
        );
        assert!(items.contains("\"global\";r="), "{items}");
        assert_eq!(
            header(&response, "ratelimit-policy"),
            "\"free\";q=5;w=60, \"global\";q=60;w=60"
        );
    }
    let denied = api(&base, Some("free_9Lk4"), "198.51.100.1").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "12");
    let body = json_of(denied).await;
    assert_eq!(body["policy"], "free");
    assert_eq!(body["retry_after_seconds"], 12);
    // The free customer from another address is the same customer: still refused.
    let elsewhere = api(&base, Some("free_9Lk4"), "198.51.100.2").await;
    assert_eq!(elsewhere.status(), StatusCode::TOO_MANY_REQUESTS);
    // The pro plan has 50 a minute.
    for _ in 0..50 {
        let response = api(&base, Some("pro_7Qx2"), "198.51.100.3").await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(
        api(&base, Some("pro_7Qx2"), "198.51.100.4").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

async fn unknown_and_doubled_api_keys_are_refused_and_no_plan_is_free_to_pick() {
    let base = start().await;
    for key in [None, Some("pro_mine"), Some("PRO_7QX2"), Some("pro_7Qx2.")] {
        let response = api(&base, key, "198.51.100.1").await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{key:?}");
        assert_eq!(json_of(response).await["error"], "unauthenticated");
    }
    let doubled = client()
        .get(format!("{base}/api/v1/me"))
        .header("x-api-key", "free_9Lk4")
        .header("x-api-key", "pro_7Qx2")
        .send()
        .await
        .unwrap();
    assert_eq!(doubled.status(), StatusCode::UNAUTHORIZED);
}

async fn the_global_limit_counts_every_request_per_forwarded_client_but_not_health_checks() {
    let base = start().await;
    for _ in 0..60 {
        let response = api(&base, None, "192.0.2.50").await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    let denied = api(&base, Some("pro_7Qx2"), "192.0.2.50").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(json_of(denied).await["policy"], "global");
    // Another client behind the proxy has its own budget.
    assert_eq!(
        api(&base, Some("pro_7Qx2"), "192.0.2.51").await.status(),
        StatusCode::OK
    );
    // Health checks are outside every limit.
    for _ in 0..100 {
        let health = client()
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), StatusCode::OK);
        assert!(health.headers().get("ratelimit").is_none());
    }
}

async fn a_forwarded_header_from_an_untrusted_peer_is_ignored() {
    // Trusting no proxy: the key is the peer (the loopback), whatever the header says.
    let limits = Limits::new(
        &Backend::Memory(MemoryStore::new()),
        ClientIp::trusting(["10.0.0.0/8"]).unwrap(),
    );
    let base = serve(app(limits)).await;
    for n in 0..60 {
        let response = api(&base, None, &format!("192.0.2.{n}")).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    let denied = api(&base, None, "192.0.2.200").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
}

async fn large_responses_are_compressed_and_keep_their_headers() {
    let base = start().await;
    let response = client()
        .get(format!("{base}/api/v1/items"))
        .header("x-api-key", "pro_7Qx2")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "content-encoding"), "gzip");
    assert!(header(&response, "ratelimit").starts_with("\"pro\";r=49;"));
}

fn account_names_are_trimmed_ascii_and_caseless() {
    assert_eq!(account_name(" Alice\t").as_deref(), Some("alice"));
    assert_eq!(account_name("B.o_b-1").as_deref(), Some("b.o_b-1"));
    for bad in [
        "",
        " ",
        "al ice",
        "ａｌｉｃｅ",
        "alicé",
        "ALİCE",
        "a\u{200b}lice",
        "a\0",
    ] {
        assert_eq!(account_name(bad), None, "{bad:?}");
    }
    assert!(account_name(&"a".repeat(64)).is_some());
    assert!(account_name(&"a".repeat(65)).is_none());
}

/// Two servers over one Redis share every limit: a customer's free plan is 5 calls a minute
/// across both.
#[cfg(feature = "redis")]
async fn two_servers_over_redis_share_the_plan_limit() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    // Two servers, each with its own connection to the same Redis.
    let mut servers = Vec::new();
    for _ in 0..2 {
        let backend = Backend::new(Some(redis.url())).await.unwrap();
        assert!(matches!(backend, Backend::Redis(_)));
        servers.push(serve(app(limits(&backend))).await);
    }
    let [first, second] = [&servers[0], &servers[1]];
    for n in 0..5 {
        let base = if n % 2 == 0 { first } else { second };
        assert_eq!(
            api(base, Some("free_9Lk4"), "198.51.100.1").await.status(),
            StatusCode::OK
        );
    }
    for base in [first, second] {
        let denied = api(base, Some("free_9Lk4"), "198.51.100.1").await;
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    }
}

fn main() -> std::process::ExitCode {
    server::harness(vec![
        server::plain_async(
            "every_spelling_of_an_account_spends_one_budget_of_failed_logins",
            every_spelling_of_an_account_spends_one_budget_of_failed_logins,
        ),
        server::plain_async(
            "names_no_account_can_have_are_refused_before_the_handler_and_spend_nothing",
            names_no_account_can_have_are_refused_before_the_handler_and_spend_nothing,
        ),
        server::plain_async(
            "a_body_over_the_bound_is_refused_and_one_at_the_bound_goes_on_intact",
            a_body_over_the_bound_is_refused_and_one_at_the_bound_goes_on_intact,
        ),
        server::plain_async(
            "a_body_naming_two_accounts_is_counted_against_the_one_the_handler_logs_into",
            a_body_naming_two_accounts_is_counted_against_the_one_the_handler_logs_into,
        ),
        server::plain_async(
            "successful_logins_cost_nothing",
            successful_logins_cost_nothing,
        ),
        server::plain_async(
            "guesses_at_one_account_from_many_addresses_are_limited_per_account",
            guesses_at_one_account_from_many_addresses_are_limited_per_account,
        ),
        server::plain_async(
            "api_keys_get_their_plans_quota_and_both_limits_headers",
            api_keys_get_their_plans_quota_and_both_limits_headers,
        ),
        server::plain_async(
            "unknown_and_doubled_api_keys_are_refused_and_no_plan_is_free_to_pick",
            unknown_and_doubled_api_keys_are_refused_and_no_plan_is_free_to_pick,
        ),
        server::plain_async(
            "the_global_limit_counts_every_request_per_forwarded_client_but_not_health_checks",
            the_global_limit_counts_every_request_per_forwarded_client_but_not_health_checks,
        ),
        server::plain_async(
            "a_forwarded_header_from_an_untrusted_peer_is_ignored",
            a_forwarded_header_from_an_untrusted_peer_is_ignored,
        ),
        server::plain_async(
            "large_responses_are_compressed_and_keep_their_headers",
            large_responses_are_compressed_and_keep_their_headers,
        ),
        server::plain(
            "account_names_are_trimmed_ascii_and_caseless",
            account_names_are_trimmed_ascii_and_caseless,
        ),
        #[cfg(feature = "redis")]
        server::needs_redis("two_servers_over_redis_share_the_plan_limit", || {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(two_servers_over_redis_share_the_plan_limit())
        }),
    ])
}
