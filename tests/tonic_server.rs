//! The middleware in a real tonic server on a local port, called by a real gRPC client. The peer
//! IP comes from tonic's `TcpConnectInfo` (feature `tonic`). Time moves by a `ManualClock`.
#![cfg(feature = "tonic")]

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimitLayer};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[tokio::test]
async fn a_denied_call_is_resource_exhausted_with_a_pushback() {
    let clock = ManualClock::new();
    let (_reporter, health_service) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(RateLimitLayer::gcra(Quota::per_minute(1)).clock(clock.clone()))
        .add_service(health_service)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(async move { server.await.unwrap() });

    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        // Only keeps a broken server from hanging the test run.
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let request = || HealthCheckRequest {
        service: String::new(),
    };

    let response = client.check(request()).await.unwrap();
    assert_eq!(response.get_ref().status(), ServingStatus::Serving);
    let metadata = response.metadata();
    assert_eq!(
        metadata.get("ratelimit-policy").unwrap(),
        r#""1/min";q=1;w=60"#
    );
    assert_eq!(metadata.get("ratelimit").unwrap(), r#""1/min";r=0;t=60"#);

    // 1/min: T = 60 s.
    let status = client.check(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(!status.message().is_empty());
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "60000"
    );
    assert_eq!(
        status.metadata().get("ratelimit").unwrap(),
        r#""1/min";r=0;t=60"#
    );

    clock.advance(Duration::from_millis(59_999));
    let status = client.check(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1"
    );

    clock.advance(Duration::from_millis(1));
    let response = client.check(request()).await.unwrap();
    assert_eq!(response.get_ref().status(), ServingStatus::Serving);
}
