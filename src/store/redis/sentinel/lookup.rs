//! How a [`SentinelConnection`](super::SentinelConnection) finds its primary again: one
//! lookup at a time, on a task of its own, retried with a growing wait while it finds none.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::sentinel::Sentinel;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ErrorKind as RedisKind, RedisError};

use super::explain::{printable, Missed};
use super::tally::Address;
use super::{Primary, Shared, LOOKUP_BOUND, RECHECK, RECHECK_BOUND, RETRY_MAX, RETRY_MIN};
use crate::store::redis::connection::{lock, spawn};
use crate::store::redis::{errors, version};

impl Shared {
    /// Drops the primary of `generation` (if it is still the one calls go to) and starts a
    /// lookup.
    pub(super) fn drop_primary(this: &Arc<Self>, generation: u64, why: String) {
        let why = printable(&why);
        {
            let mut lookups = lock(&this.lookups);
            let current = this.primary.load();
            if current.as_ref().map(|p| p.generation) != Some(generation) {
                return;
            }
            this.primary.store(None);
            #[cfg(feature = "tracing")]
            tracing::warn!(
                master = &*this.master,
                "Redis Sentinel: the primary of {:?} failed ({why}); asking the sentinels at {} \
                 for the primary",
                this.master,
                this.sentinels
            );
            lookups.last_error = why;
            // The first lookup after a failure starts at once.
            lookups.not_before = Instant::now();
            lookups.retry = RETRY_MIN;
        }
        Self::look_up(this);
    }

    /// Starts a lookup on the runtime, unless one runs or the last failed too recently.
    pub(super) fn look_up(this: &Arc<Self>) {
        // Held by the lookup's task, however it ends (its runtime may shut down, or none runs).
        let Ok(running) = Arc::clone(&this.running).try_lock_owned() else {
            return;
        };
        if Instant::now() < lock(&this.lookups).not_before {
            return;
        }
        let shared = Arc::clone(this);
        spawn(async move {
            let _running = running;
            let found = match tokio::time::timeout(LOOKUP_BOUND, shared.find()).await {
                Ok(found) => found.map_err(|missed| missed.to_string()),
                Err(_) => Err(format!("the lookup took longer than {LOOKUP_BOUND:?}")),
            };
            match found {
                Ok(found) => shared.install(found),
                Err(error) => {
                    let mut lookups = lock(&shared.lookups);
                    lookups.not_before = Instant::now() + lookups.retry;
                    lookups.retry = (lookups.retry * 2).min(RETRY_MAX);
                    lookups.last_error = printable(&error);
                }
            }
        });
    }

    /// Makes the connection found the primary calls go to.
    pub(super) fn install(&self, (connection, address): (MultiplexedConnection, Option<Address>)) {
        let mut lookups = lock(&self.lookups);
        lookups.generation += 1;
        lookups.retry = RETRY_MIN;
        lookups.last_error.clear();
        self.primary.store(Some(Arc::new(Primary {
            generation: lookups.generation,
            connection,
            address,
            // The sentinels were just asked.
            next_check: Mutex::new(Instant::now() + RECHECK),
        })));
        #[cfg(feature = "tracing")]
        tracing::info!(
            master = &*self.master,
            generation = lookups.generation,
            "Redis Sentinel: deciding on the primary of {:?}",
            self.master
        );
    }

    /// Asks the sentinels for the primary, connects to it and checks its version; the
    /// connection and the primary's host and port.
    pub(super) async fn find(&self) -> Result<(MultiplexedConnection, Option<Address>), Missed> {
        let tally = self.tally().await;
        let Some((named, voters)) = tally.majority() else {
            // Why none: the first sentinel (in the order given) whose primary answers as one
            // says best what is wrong (not a sentinel, an unknown master, none reachable).
            let mut sentinel =
                Sentinel::build(self.sentinel_infos.clone()).map_err(Missed::Sentinels)?;
            sentinel
                .async_master_for(&self.master, Some(&self.node))
                .await
                .map_err(Missed::Sentinels)?;
            return Err(Missed::NoMajority(tally.to_string()));
        };
        let client = self.primary_named_by(&voters, named).await?;
        // The store bounds each call with its own timeout, so the connection sets none.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Missed::Primary(errors::connecting(e)))?;
        let server = format!("the primary of Redis Sentinel master {:?}: ", self.master);
        let checked = version::check(&mut connection, &server).await;
        checked.map_err(Missed::Primary)?;
        Ok((connection, address(&client)))
    }

    /// A client of `named`, the primary a majority of the sentinels name, from the first of
    /// those (`voters`: places in the list given) whose primary is still `named` and answers
    /// as one: made as the sentinel client makes it (credentials, TLS, database from the
    /// store's settings).
    async fn primary_named_by(&self, voters: &[usize], named: &Address) -> Result<Client, Missed> {
        let mut last = None;
        for info in voters
            .iter()
            .filter_map(|&place| self.sentinel_infos.get(place))
        {
            let mut sentinel = Sentinel::build(vec![info.clone()]).map_err(Missed::Sentinels)?;
            let asked = sentinel.async_master_for(&self.master, Some(&self.node));
            match tokio::time::timeout(RECHECK_BOUND, asked).await {
                Ok(Ok(client)) if address(&client).as_ref() == Some(named) => return Ok(client),
                Ok(Ok(_)) => {}
                Ok(Err(error)) => last = Some(error),
                Err(_) => {
                    last = Some(RedisError::from((
                        RedisKind::Io,
                        "a sentinel took too long to give the primary",
                        format!("more than {RECHECK_BOUND:?}"),
                    )));
                }
            }
        }
        Err(Missed::Sentinels(last.unwrap_or_else(|| {
            RedisError::from((
                RedisKind::MasterNameNotFoundBySentinel,
                "the primary a majority of the sentinels named changed while it was looked up",
                format!("{}:{}", named.0, named.1),
            ))
        })))
    }
}

/// The host and port `client` connects to, as the sentinels name it; `None` for a socket.
fn address(client: &Client) -> Option<Address> {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}
