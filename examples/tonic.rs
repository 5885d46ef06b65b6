//! A gRPC service limited per client IP: tonic's standard health service behind
//! `RateLimitLayer`, in memory.
//!
//! Run it with `cargo run --example tonic --features tonic` (set `PORT` to use another port
//! than 50051). The feature lets the layer read the peer address from tonic's
//! `TcpConnectInfo`.
//!
//! Once the server is up, the example itself calls it 7 times with a real gRPC client and
//! prints each outcome: the first 5 calls pass, the next are refused with
//! `RESOURCE_EXHAUSTED` and a `grpc-retry-pushback-ms` telling the client when to retry. gRPC
//! clients read a bare HTTP 429 as `UNAVAILABLE`, so the layer answers gRPC requests the gRPC
//! way. Then it keeps serving, for you to call it with
//! [grpcurl](https://github.com/fullstorydev/grpcurl):
//!
//! ```text
//! grpcurl -plaintext -protoset /tmp/tollgate-health.protoset 127.0.0.1:50051 grpc.health.v1.Health/Check
//! ```
//!
//! The server has no reflection service, so grpcurl needs the service's description: the
//! example writes it to `tollgate-health.protoset` in the temporary directory and prints the
//! exact command.
//!
//! Each client IP may make 5 calls at once, then one every 12 seconds (5 per minute).

use std::net::SocketAddr;

use tollgate::{Quota, RateLimitLayer};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::var("PORT") {
        Ok(port) => port
            .parse::<u16>()
            .map_err(|e| format!("PORT={port:?} is not a port number: {e}"))?,
        Err(_) => 50051,
    };
    let quota = Quota::per_minute(5);

    // The standard gRPC health service (grpc.health.v1.Health); it reports SERVING.
    let (_reporter, health_service) = tonic_health::server::health_reporter();

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e} (set PORT to use another port)"))?;
    let server = Server::builder()
        // Per client IP, in memory: the one line this example is about.
        .layer(RateLimitLayer::gcra(quota.clone()))
        .add_service(health_service)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
            let _ = tokio::signal::ctrl_c().await;
        });
    let server = tokio::spawn(server);
    println!("tollgate gRPC health service on {addr}");
    println!(
        "Each client IP may make {} calls at once, then one every {:?} ({quota}).\n",
        quota.burst(),
        quota.emission_interval()
    );

    // A real gRPC client in this process, to show the limit without any tool.
    println!("7 calls to grpc.health.v1.Health/Check from this process:");
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    for call in 1..=7 {
        let request = HealthCheckRequest {
            service: String::new(),
        };
        match client.check(request).await {
            Ok(response) => println!(
                "  call {call}: OK {:?}  ratelimit: {}",
                response.get_ref().status(),
                metadata(response.metadata(), "ratelimit")
            ),
            Err(status) => println!(
                "  call {call}: {:?} {:?}  grpc-retry-pushback-ms: {}  ratelimit: {}",
                status.code(),
                status.message(),
                metadata(status.metadata(), "grpc-retry-pushback-ms"),
                metadata(status.metadata(), "ratelimit")
            ),
        }
    }

    // grpcurl needs the service's description, since this server offers no reflection.
    let protoset = std::env::temp_dir().join("tollgate-health.protoset");
    std::fs::write(&protoset, tonic_health::pb::FILE_DESCRIPTOR_SET)
        .map_err(|e| format!("cannot write {}: {e}", protoset.display()))?;
    println!("\nStill serving. Try it from another terminal with grpcurl:");
    println!(
        "  grpcurl -plaintext -protoset {} {addr} grpc.health.v1.Health/Check",
        protoset.display()
    );
    println!(
        "Your calls come from 127.0.0.1 too, so they share the budget the calls above used: \
         one passes every {:?}.",
        quota.emission_interval()
    );
    println!("Press Ctrl-C to stop.");

    server.await??;
    Ok(())
}

/// A metadata value as text, or `-` when absent.
fn metadata<'a>(map: &'a MetadataMap, key: &str) -> &'a str {
    map.get(key).and_then(|v| v.to_str().ok()).unwrap_or("-")
}
