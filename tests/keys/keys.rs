//! Key extractors through the layer: skipping, per-route keys, header keys with a fallback.

use crate::support::request;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::{BearerToken, Header, KeyExtractor, PeerIp, RequestHead, Route};
use tollgate::{Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use request::Req;

fn request(peer: &str, path: &str, headers: &[(&str, &str)]) -> Request<String> {
    Req::new().path(path).headers(headers).from(peer).build()
}

fn counting_handler() -> (
    Arc<AtomicUsize>,
    impl Service<
            Request<String>,
            Response = Response<String>,
            Error = Infallible,
            Future = impl Send,
        > + Clone,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let svc = tower::service_fn(move |_req: Request<String>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    });
    (calls, svc)
}

async fn status<S>(svc: &S, req: Request<String>) -> StatusCode
where
    S: Service<Request<String>> + Clone,
    S::Response: Into<Response<tollgate::layer::ResponseBody<String>>>,
    S::Error: std::fmt::Debug,
{
    let response: Response<_> = svc.clone().oneshot(req).await.unwrap().into();
    response.status()
}

#[tokio::test]
async fn skipped_requests_are_unlimited_and_unannotated() {
    let (calls, handler) = counting_handler();
    let layer = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .skip(|head| head.uri().path() == "/healthz");
    let svc = layer.layer(handler);
    for _ in 0..5 {
        let response = svc
            .clone()
            .oneshot(request("192.0.2.1:1", "/healthz", &[]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("ratelimit").is_none());
    }
    assert_eq!(
        status(&svc, request("192.0.2.1:1", "/api", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("192.0.2.1:1", "/api", &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn route_and_ip_give_each_client_a_budget_per_route() {
    let (_, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key((Route, PeerIp))
        .layer(handler);
    assert_eq!(
        status(&svc, request("192.0.2.1:1", "/a", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("192.0.2.1:1", "/b", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("192.0.2.2:1", "/a", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("192.0.2.1:9", "/a", &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn api_keys_with_an_ip_fallback() {
    let (calls, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(Header::new("x-api-key").or(PeerIp))
        .layer(handler);
    let ip = "192.0.2.1:1";
    // One budget per API key, whatever the address...
    assert_eq!(
        status(&svc, request(ip, "/", &[("x-api-key", "a")])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("192.0.2.7:1", "/", &[("x-api-key", "a")])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&svc, request(ip, "/", &[("x-api-key", "b")])).await,
        StatusCode::OK
    );
    // ...and one per address for requests without a key.
    assert_eq!(status(&svc, request(ip, "/", &[])).await, StatusCode::OK);
    assert_eq!(
        status(&svc, request(ip, "/", &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_missing_bearer_token_is_answered_without_calling_the_handler() {
    let (calls, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(5))
        .key(BearerToken)
        .layer(handler);
    let response = svc
        .clone()
        .oneshot(request("192.0.2.1:1", "/", &[]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let auth = [("authorization", "Bearer t-1")];
    assert_eq!(
        status(&svc, request("192.0.2.1:1", "/", &auth)).await,
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn long_header_values_keep_their_bytes_and_stand_for_a_digest() {
    let long = "k".repeat(64 * 1024);
    let req = request("192.0.2.1:1", "/", &[("x-api-key", &long)]);
    let key = Header::new("x-api-key")
        .extract(RequestHead::new(&req))
        .unwrap()
        .unwrap();
    // Callbacks see the value as sent; stores see its 32-byte digest.
    assert_eq!(key.as_bytes(), Some(long.as_bytes()));
    assert!(key.as_digest().is_some(), "{key:?}");
    assert_eq!(key.kind(), "digest");
    // A tuple with the long value in it stays small: the value enters as its digest.
    let pair = (Header::new("x-api-key"), Route)
        .extract(RequestHead::new(&req))
        .unwrap()
        .unwrap();
    assert!(pair.is_tuple());
    assert!(pair
        .as_bytes()
        .is_some_and(|b| b.len() <= 2 * (2 + tollgate::Key::MAX_LEN)));
}

/// A JWT-sized value: longer than `Key::MAX_LEN`, told apart from another only by its end.
fn jwt(client: char) -> String {
    format!("eyJhbGciOiJIUzI1NiJ9.{}.{client}", "e".repeat(300))
}

#[tokio::test]
async fn tuples_with_long_values_give_each_client_its_own_budget() {
    let (calls, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key((Header::new("x-api-key"), Route))
        .layer(handler);
    let (a, b) = (jwt('a'), jwt('b'));
    let with = |key: &str| request("192.0.2.1:1", "/api", &[("x-api-key", key)]);
    assert_eq!(status(&svc, with(&a)).await, StatusCode::OK);
    assert_eq!(status(&svc, with(&b)).await, StatusCode::OK);
    assert_eq!(status(&svc, with(&a)).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(&svc, with(&b)).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    let (calls, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key((BearerToken, PeerIp))
        .layer(handler);
    let bearer = |token: &str| format!("Bearer {token}");
    let (a, b) = (bearer(&jwt('a')), bearer(&jwt('b')));
    let with = |auth: &str| request("192.0.2.1:1", "/", &[("authorization", auth)]);
    assert_eq!(status(&svc, with(&a)).await, StatusCode::OK);
    assert_eq!(status(&svc, with(&b)).await, StatusCode::OK);
    assert_eq!(status(&svc, with(&b)).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A fallback that is a tuple never shares a budget with the first extractor's keys: a client
/// cannot send another client's user id as its session id.
#[tokio::test]
async fn a_tuple_fallback_keeps_its_keys_apart() {
    use tollgate::key::Global;
    let (_, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(Header::new("x-user").or((Header::new("x-session"), Global)))
        .layer(handler);
    let ip = "192.0.2.1:1";
    assert_eq!(
        status(&svc, request(ip, "/", &[("x-user", "42")])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request(ip, "/", &[("x-session", "42")])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request(ip, "/", &[("x-user", "42")])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

mod per_key_quotas {
    use super::*;
    use tollgate::key::RequestHead;
    use tollgate::store::MemoryStore;
    use tollgate::Key;

    fn plans() -> impl Fn(&Key, RequestHead<'_>) -> Quota + Send + Sync + 'static {
        let free = Quota::per_minute(2).named("free");
        let pro = Quota::per_minute(5).named("pro");
        move |key: &Key, _head: RequestHead<'_>| {
            if key.as_bytes().is_some_and(|k| k.starts_with(b"pro_")) {
                pro.clone()
            } else {
                free.clone()
            }
        }
    }

    async fn header(
        svc: &(impl Service<
            Request<String>,
            Response = Response<tollgate::layer::ResponseBody<String>>,
            Error = Infallible,
        > + Clone),
        api_key: &str,
        name: &str,
    ) -> (StatusCode, String) {
        let response = svc
            .clone()
            .oneshot(request("192.0.2.1:1", "/", &[("x-api-key", api_key)]))
            .await
            .unwrap();
        let value = response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (response.status(), value)
    }

    #[tokio::test]
    async fn each_plan_has_its_own_quota_and_policy_name() {
        let (_, handler) = counting_handler();
        let svc = RateLimitLayer::gcra(Quota::per_minute(2).named("free"))
            .key(Header::new("x-api-key"))
            .quota_for(plans())
            .clock(ManualClock::new())
            .store(MemoryStore::new())
            .layer(handler);
        for remaining in (0..5).rev() {
            let (status, rate) = header(&svc, "pro_1", "ratelimit").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(
                rate,
                format!("\"pro\";r={remaining};t={}", 12 * (5 - remaining))
            );
        }
        assert_eq!(
            header(&svc, "pro_1", "ratelimit-policy").await,
            (StatusCode::TOO_MANY_REQUESTS, "\"pro\";q=5;w=60".to_owned())
        );
        // A free key next to it still has its own budget, under its own policy.
        assert_eq!(
            header(&svc, "free_1", "ratelimit").await,
            (StatusCode::OK, "\"free\";r=1;t=30".to_owned())
        );
        assert_eq!(
            header(&svc, "free_1", "ratelimit").await,
            (StatusCode::OK, "\"free\";r=0;t=60".to_owned())
        );
        assert_eq!(
            header(&svc, "free_1", "ratelimit-policy").await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        // Another pro key is a fresh budget.
        assert_eq!(
            header(&svc, "pro_2", "ratelimit").await,
            (StatusCode::OK, "\"pro\";r=4;t=12".to_owned())
        );
    }

    /// `quota_for` sees the key as sent, whatever its length: an 84-byte pro key is on the
    /// pro plan, not the free one a digest would have given it.
    #[tokio::test]
    async fn long_keys_are_seen_whole_by_quota_for() {
        let (_, handler) = counting_handler();
        let svc = RateLimitLayer::gcra(Quota::per_minute(2).named("free"))
            .key(Header::new("x-api-key"))
            .quota_for(plans())
            .clock(ManualClock::new())
            .layer(handler);
        let pro = format!("pro_{}", "7".repeat(80));
        assert_eq!(pro.len(), 84);
        for remaining in (0..5).rev() {
            let (status, rate) = header(&svc, &pro, "ratelimit").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(
                rate,
                format!("\"pro\";r={remaining};t={}", 12 * (5 - remaining))
            );
        }
        assert_eq!(
            header(&svc, &pro, "ratelimit").await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        // Another long pro key is a fresh budget.
        let other = format!("pro_{}", "8".repeat(80));
        assert_eq!(
            header(&svc, &other, "ratelimit").await,
            (StatusCode::OK, "\"pro\";r=4;t=12".to_owned())
        );
    }

    #[tokio::test]
    async fn made_up_quotas_are_bounded() {
        let (_, handler) = counting_handler();
        // A selector that makes a distinct quota from every key: past the 256 limiters a layer
        // keeps, the least recently used is dropped (its state stays in the store), so every
        // plan is honoured.
        let svc = RateLimitLayer::gcra(Quota::per_minute(1).named("default"))
            .key(Header::new("x-api-key"))
            .quota_for(|key: &Key, _head: RequestHead<'_>| {
                let n: u64 = key
                    .as_bytes()
                    .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
                    .unwrap_or(0);
                Quota::per_minute(100 + n).named(format!("made-up-{n}"))
            })
            .clock(ManualClock::new())
            .layer(handler);
        for n in 1..=256usize {
            let (status, policy) = header(&svc, &n.to_string(), "ratelimit-policy").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(policy, format!("\"made-up-{n}\";q={};w=60", 100 + n));
        }
        let key = 257.to_string();
        assert_eq!(
            header(&svc, &key, "ratelimit-policy").await,
            (StatusCode::OK, "\"made-up-257\";q=357;w=60".to_owned())
        );
        // The first plan, whose limiter was dropped to make room, is honoured again.
        assert_eq!(
            header(&svc, "1", "ratelimit-policy").await,
            (StatusCode::OK, "\"made-up-1\";q=101;w=60".to_owned())
        );
    }
}

/// Per-route limits: two layers on two routes sharing one store never share a budget, whether
/// their quotas are named differently or are equal and unnamed; the same name shares on purpose.
#[tokio::test]
async fn layers_sharing_a_store_share_state_only_by_name() {
    use tollgate::store::MemoryStore;
    let store = MemoryStore::new();
    let clock = ManualClock::new();
    let layer = |quota: Quota| {
        let (_, handler) = counting_handler();
        RateLimitLayer::gcra(quota)
            .clock(clock.clone())
            .store(store.clone())
            .layer(handler)
    };
    let search = layer(Quota::per_minute(1));
    let upload = layer(Quota::per_minute(1));
    assert_eq!(
        status(&search, request("192.0.2.1:1", "/search", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&upload, request("192.0.2.1:1", "/upload", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&search, request("192.0.2.1:1", "/search", &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    let a = layer(Quota::per_minute(1).named("reports"));
    let b = layer(Quota::per_minute(1).named("exports"));
    let a_again = layer(Quota::per_minute(1).named("reports"));
    assert_eq!(
        status(&a, request("192.0.2.1:1", "/", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&b, request("192.0.2.1:1", "/", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&a_again, request("192.0.2.1:1", "/", &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn allow_listed_addresses_are_unlimited() {
    use tollgate::key::{ClientIp, IpList};
    let (calls, handler) = counting_handler();
    let list = IpList::new(["203.0.113.0/24", "2001:db8:beef::/48"]).unwrap();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .allow(list.clone())
        .layer(handler);
    for peer in [
        "203.0.113.9:1",
        "[2001:db8:beef:1::9]:1",
        "[::ffff:203.0.113.10]:1",
    ] {
        for _ in 0..3 {
            let response = svc.clone().oneshot(request(peer, "/", &[])).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{peer}");
            assert!(response.headers().get("ratelimit").is_none(), "{peer}");
        }
    }
    assert_eq!(
        status(&svc, request("203.0.114.1:1", "/", &[])).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("203.0.114.1:1", "/", &[])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(calls.load(Ordering::SeqCst), 10);

    // Behind a trusted proxy the list applies to the client's address, not the proxy's; a
    // client cannot claim a listed address through the header from an untrusted peer.
    let (_, handler) = counting_handler();
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(ClientIp::trusting(["10.0.0.0/8"]).unwrap())
        .allow(list)
        .layer(handler);
    let xff = [("x-forwarded-for", "203.0.113.5")];
    for _ in 0..3 {
        assert_eq!(
            status(&svc, request("10.0.0.1:1", "/", &xff)).await,
            StatusCode::OK
        );
    }
    assert_eq!(
        status(&svc, request("198.51.100.1:1", "/", &xff)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, request("198.51.100.1:1", "/", &xff)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
