//! The middleware in a real tonic server on a local port, called by a real gRPC client, over
//! plain TCP and over TLS. The peer IP comes from tonic's `TcpConnectInfo`, or
//! `TlsConnectInfo<TcpConnectInfo>` over TLS (feature `tonic`). Time moves by a `ManualClock`.
#![cfg(feature = "tonic")]

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::key::{BearerToken, Header, KeyError, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity, Server, ServerTlsConfig};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Serves the gRPC health service behind `$layer` on a free local port, over TLS when a
/// `ServerTlsConfig` is given; evaluates to the address.
macro_rules! serve {
    ($layer:expr) => {
        serve!($layer, None)
    };
    ($layer:expr, $tls:expr) => {{
        let (_reporter, health_service) = tonic_health::server::health_reporter();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut builder = Server::builder();
        let tls: Option<ServerTlsConfig> = $tls;
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).unwrap();
        }
        let server = builder
            .layer($layer)
            .add_service(health_service)
            .serve_with_incoming(TcpIncoming::from(listener));
        tokio::spawn(async move { server.await.unwrap() });
        // The health service's client keeps the reporter's status; the reporter may go.
        drop(_reporter);
        addr
    }};
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        // Only keeps a broken server from hanging the test run.
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn request() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

/// One call per minute, then RESOURCE_EXHAUSTED with the exact pushback, on the clock.
async fn check_one_per_minute(client: &mut HealthClient<Channel>, clock: &ManualClock) {
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
    assert_eq!(status.message(), "Too many requests: retry in 60 seconds.");
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

#[tokio::test]
async fn a_denied_call_is_resource_exhausted_with_a_pushback() {
    let clock = ManualClock::new();
    let addr = serve!(RateLimitLayer::gcra(Quota::per_minute(1)).clock(clock.clone()));
    check_one_per_minute(&mut client(addr).await, &clock).await;
}

/// TLS terminated by tonic (`tls_config`).
#[tokio::test]
async fn over_tonics_tls_the_peer_is_read() {
    let (cert_pem, _, key_pem, _) = localhost_certificate();
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(&cert_pem, &key_pem));
    let clock = ManualClock::new();
    let addr = serve!(
        RateLimitLayer::gcra(Quota::per_minute(1)).clock(clock.clone()),
        Some(tls)
    );
    check_one_per_minute(&mut tls_client(addr, &cert_pem).await, &clock).await;
}

/// A self-signed certificate for `localhost`: the certificate's PEM and DER, and the key's PEM
/// and DER.
fn localhost_certificate() -> (String, Vec<u8>, String, Vec<u8>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    (
        certified.cert.pem(),
        certified.cert.der().to_vec(),
        certified.signing_key.serialize_pem(),
        certified.signing_key.serialize_der(),
    )
}

/// A channel to `addr` over TLS, trusting `cert_pem` for `localhost`.
async fn tls_client(addr: SocketAddr, cert_pem: &str) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(cert_pem))
                .domain_name("localhost"),
        )
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

/// TLS terminated by the application (rustls), not by tonic's `tls_config`: tonic then records
/// only `TlsConnectInfo<TcpConnectInfo>` for each request.
#[tokio::test]
async fn over_an_applications_own_tls_the_peer_is_read_from_the_tls_connect_info() {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    let (cert_pem, cert_der, _, key_der) = localhost_certificate();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert_der)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_der)),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let stream = acceptor.accept(tcp).await;
            if tx.send(stream).is_err() {
                break;
            }
        }
    });
    let clock = ManualClock::new();
    let (_reporter, health_service) = tonic_health::server::health_reporter();
    let server = Server::builder()
        .layer(RateLimitLayer::gcra(Quota::per_minute(1)).clock(clock.clone()))
        .add_service(health_service)
        .serve_with_incoming(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
    tokio::spawn(async move { server.await.unwrap() });

    check_one_per_minute(&mut tls_client(addr, &cert_pem).await, &clock).await;
}

#[tokio::test]
async fn key_errors_get_the_grpc_code_of_their_http_status_and_an_exact_message() {
    // A client without the header is the client's mistake: INVALID_ARGUMENT, as for 400.
    let addr = serve!(RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(Header::new("x-api-key")));
    let status = client(addr).await.check(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(status.message(), "missing header `x-api-key`");

    // No bearer token: UNAUTHENTICATED, as for 401.
    let addr = serve!(RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(BearerToken));
    let status = client(addr).await.check(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    // The message travels percent-encoded and the client reads it back exactly: '%', non-ASCII
    // and control characters included.
    const MESSAGE: &str = "100% refusé: l'en-tête «x-tenant» manque\t✓";
    let tenant = |_head: RequestHead<'_>| -> Result<Option<Key>, KeyError> {
        Err(KeyError::new(StatusCode::FORBIDDEN, Cow::Borrowed(MESSAGE)))
    };
    let addr = serve!(RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(tenant));
    let status = client(addr).await.check(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(status.message(), MESSAGE);
}

#[tokio::test]
async fn with_grpc_answers_off_a_denied_call_is_a_plain_429() {
    let addr = serve!(RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .grpc(false));
    let mut client = client(addr).await;
    client.check(request()).await.unwrap();
    let status = client.check(request()).await.unwrap_err();
    // The answer is the plain HTTP one: the client sees the 429, its text body and headers.
    assert!(
        status.message().contains("status: 429 Too Many Requests"),
        "{status:?}"
    );
    let metadata = status.metadata();
    assert_eq!(
        metadata.get("content-type").unwrap(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(metadata.get("retry-after").unwrap(), "60");
    assert!(metadata.get("grpc-status").is_none());
}
