//! A master of a Redis Cluster as its probe asks it: `CLUSTER INFO` through the store's
//! connection or one of its own, and a new connection when the master serves again.

use std::future::Future;
use std::sync::Weak;
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ConnectionInfo, RedisResult, Value};

use super::Link;
use crate::store::redis::health::{answered, Master};
use crate::store::redis::slot_map::{first, slots};

/// A master of the slot map, as its probe asks it.
pub(super) struct Node {
    /// `host:port`.
    pub(super) address: String,
    pub(super) host: String,
    pub(super) port: u16,
    /// The seeds' settings at the master's address.
    pub(super) info: ConnectionInfo,
    pub(super) link: Weak<Link>,
}

impl Master for Node {
    fn address(&self) -> &str {
        &self.address
    }

    /// `CLUSTER INFO` through the store's connection; else over a connection of its own, and
    /// when the master serves its slots there, a new connection for the store. While the
    /// master does not, each probe reads the slot map from the other masters through the
    /// store's connection: a replica promoted in its place is connected to, its slots' keys
    /// decided there, within a probe of the promotion.
    fn probe(
        &self,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let Some(link) = self.link.upgrade() else {
                return false;
            };
            let Some(current) = link.current.upgrade() else {
                return false;
            };
            let mut connection = ClusterConnection::clone(&current.load());
            drop(current);
            let to_node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: self.host.clone(),
                port: self.port,
            });
            let routed = connection.route_command(cluster_info(), to_node);
            if tokio::time::timeout(timeout, routed)
                .await
                .is_ok_and(serving)
            {
                return true;
            }
            let own = async {
                let client = redis::Client::open(self.info.clone())?;
                let mut own = client.get_multiplexed_async_connection().await?;
                cluster_info().query_async(&mut own).await
            };
            if !tokio::time::timeout(timeout, own).await.is_ok_and(serving) {
                // The slot map from the other masters (and a node at random), through the
                // store's connection.
                let known = link.known();
                let others = known.iter().flatten().filter_map(|(_, _, host, port)| {
                    let host = String::from_utf8(host.clone()).ok()?;
                    let port = u16::try_from(*port).ok()?;
                    let other = host != self.host || port != self.port;
                    other.then_some(SingleNodeRoutingInfo::ByAddress { host, port })
                });
                let asks = others.chain([SingleNodeRoutingInfo::Random]).map(|to| {
                    let mut connection = connection.clone();
                    async move {
                        let to = RoutingInfo::SingleNode(to);
                        connection.route_command(slots(), to).await
                    }
                });
                let seen = first(asks, timeout).await;
                if let Some(seen) = seen.filter(|seen| known.as_ref() != Some(seen)) {
                    link.reconnect(seen).await;
                }
                return false;
            }
            match link.known() {
                Some(masters) => link.reconnect(masters).await,
                None => false,
            }
        })
    }
}

fn cluster_info() -> Cmd {
    redis::cmd("CLUSTER").arg("INFO").clone()
}

/// Whether a master's reply to `CLUSTER INFO` says it serves its slots (`cluster_state:ok`: a
/// master refuses every key for 2 s after it restarts, and while it holds the cluster
/// failed); an error it answers (no permission to ask) is an answer, as to `PING`.
fn serving(reply: RedisResult<Value>) -> bool {
    match reply {
        Ok(info) => redis::from_redis_value::<String>(info)
            .is_ok_and(|info| info.contains("cluster_state:ok")),
        Err(error) => answered(Err(error)),
    }
}
