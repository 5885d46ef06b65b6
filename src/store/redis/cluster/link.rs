//! How a watched [`Cluster`](super::Cluster) connects again, and the store's map of the
//! masters that follows each slot map.

use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo};

use super::node::Node;
use super::{Link, CONNECT_BOUND};
use crate::store::redis::connection::lock;
use crate::store::redis::health::Master;
use crate::store::redis::healths::NodeMap;
use crate::store::redis::slot_map::Masters;

impl Link {
    pub(super) fn known(&self) -> Option<Masters> {
        lock(&self.known).clone()
    }

    /// The masters connected with are `masters`: the store's map follows them, keeping what
    /// it knows of the masters it still lists (none when the seeds are not plain TCP
    /// addresses).
    pub(super) fn follow(self: &Arc<Self>, masters: Option<Masters>) {
        let seed = self.seeds.first();
        let ranges = masters
            .iter()
            .flatten()
            .filter_map(|(first, last, host, port)| {
                let info = at(seed?, host, *port)?;
                let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
                    return None;
                };
                let node = Node {
                    address: format!("{host}:{port}"),
                    host,
                    port,
                    info,
                    link: Arc::downgrade(self),
                };
                Some((*first, *last, Box::new(node) as Box<dyn Master>))
            });
        let map = NodeMap::new(ranges, &self.nodes.load());
        self.nodes.store(Arc::new(map));
        *lock(&self.known) = masters;
    }

    /// Connects again, to `masters`, and sends every later call through the new connection;
    /// whether it did.
    pub(super) async fn reconnect(self: &Arc<Self>, masters: Masters) -> bool {
        let Some(fresh) = self.to(&masters).await else {
            return false;
        };
        let Some(current) = self.current.upgrade() else {
            return false;
        };
        current.store(Arc::new(fresh));
        self.follow(Some(masters));
        true
    }

    /// The nodes of `masters` with the first seed's settings, each once; `None` when the seed
    /// is not a plain TCP address (TLS, a Unix socket).
    fn at_masters(&self, masters: &Masters) -> Option<Vec<ConnectionInfo>> {
        let seed = self.seeds.first()?;
        let mut nodes: Vec<ConnectionInfo> = Vec::new();
        for (_, _, host, port) in masters {
            let node = at(seed, host, *port)?;
            let address = node.addr().to_string();
            if !nodes.iter().any(|n| n.addr().to_string() == address) {
                nodes.push(node);
            }
        }
        Some(nodes)
    }

    /// A new connection: through the masters just read (a frozen seed costs nothing), else
    /// through the seeds.
    async fn to(&self, masters: &Masters) -> Option<ClusterConnection> {
        let masters_only = self.at_masters(masters).unwrap_or_default();
        for nodes in [masters_only, self.seeds.clone()] {
            if nodes.is_empty() {
                continue;
            }
            let Ok(client) = (self.make)(nodes) else {
                continue;
            };
            if let Ok(Ok(connection)) =
                tokio::time::timeout(CONNECT_BOUND, client.get_async_connection()).await
            {
                return Some(connection);
            }
        }
        None
    }
}

/// `seed`'s settings at `host:port`, when `seed` is a plain TCP address.
fn at(seed: &ConnectionInfo, host: &[u8], port: i64) -> Option<ConnectionInfo> {
    let ConnectionAddr::Tcp(..) = seed.addr() else {
        return None;
    };
    let host = String::from_utf8(host.to_vec()).ok()?;
    let port = u16::try_from(port).ok()?;
    Some(seed.clone().set_addr(ConnectionAddr::Tcp(host, port)))
}
