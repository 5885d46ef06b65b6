//! Asking the sentinels which primary they name: each by its id, all at once, until a
//! majority names one; and dropping the primary in use when they no longer name it.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionInfo, ErrorKind as RedisKind, RedisError, RedisResult};

use super::tally::{Address, Tally, MAX_ID};
use super::{Primary, Shared, RECHECK_BOUND};
use crate::store::redis::connection::spawn;

impl Shared {
    /// Asks the sentinels, on the runtime, whether they still name `primary`; drops it unless
    /// it may stay ([`Tally::keeps`]: a majority names it, or no other is named by more).
    pub(super) fn recheck(this: &Arc<Self>, primary: &Arc<Primary>) {
        let (shared, primary) = (Arc::clone(this), Arc::clone(primary));
        spawn(async move {
            let tally = shared.tally().await;
            if !tally.keeps(primary.address.as_ref()) {
                let why = format!("the sentinels no longer name it ({tally})");
                Shared::drop_primary(&shared, primary.generation, why);
            }
        });
    }

    /// Which primary each sentinel names (`SENTINEL GET-MASTER-ADDR-BY-NAME`), all asked at
    /// once, each for at most [`RECHECK_BOUND`], until one primary has a majority or every
    /// sentinel has answered or timed out. A sentinel is known by its id (`SENTINEL MYID`,
    /// asked once per connection; its address where it has none), so the same answer from one
    /// reached by two URLs counts once. Connections are kept for the next time unless they
    /// failed.
    pub(super) async fn tally(&self) -> Tally {
        let mut kept = self.checkers.lock().await.clone();
        let mut asks = tokio::task::JoinSet::new();
        for (index, (info, cached)) in self.sentinel_infos.iter().zip(kept.clone()).enumerate() {
            let (info, master) = (info.clone(), self.master.clone());
            asks.spawn(async move {
                let ask = async {
                    let (mut connection, id) = match cached {
                        Some(cached) => cached,
                        None => sentinel_with_id(info).await?,
                    };
                    let named: RedisResult<Option<Address>> = redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(&*master)
                        .query_async(&mut connection)
                        .await;
                    match named {
                        Ok(named) => Ok((connection, id, Some(named))),
                        // An error reply: the sentinel answered, but gives no vote.
                        Err(e) if is_reply(&e) => Ok((connection, id, None)),
                        Err(e) => Err(e),
                    }
                };
                (index, tokio::time::timeout(RECHECK_BOUND, ask).await)
            });
        }
        let mut tally = Tally::of(self.sentinel_infos.len());
        while let Some(answer) = asks.join_next().await {
            let Ok((index, answer)) = answer else {
                continue;
            };
            let Some(slot) = kept.get_mut(index) else {
                continue;
            };
            match answer {
                Ok(Ok((connection, id, named))) => {
                    if let Some(named) = named {
                        tally.add(id.clone(), index, named);
                    }
                    *slot = Some((connection, id));
                }
                // Failed, or no answer in time: counts as not answering, and is reached anew.
                Ok(Err(_)) | Err(_) => *slot = None,
            }
            if tally.majority().is_some() {
                // The others cannot change the outcome; they keep their connections.
                break;
            }
        }
        *self.checkers.lock().await = kept;
        tally
    }
}

/// Connects to the sentinel at `info` and asks its id (`SENTINEL MYID`; its address when it
/// does not know the command, before Redis 6.2, or answers more than [`MAX_ID`] bytes).
async fn sentinel_with_id(info: ConnectionInfo) -> RedisResult<(MultiplexedConnection, String)> {
    let address = info.addr().to_string();
    let mut connection = Client::open(info)?
        .get_multiplexed_async_connection()
        .await?;
    let id: RedisResult<String> = redis::cmd("SENTINEL")
        .arg("MYID")
        .query_async(&mut connection)
        .await;
    match id {
        Ok(id) if id.len() <= MAX_ID => Ok((connection, id)),
        Ok(_) => Ok((connection, address)),
        Err(e) if is_reply(&e) => Ok((connection, address)),
        Err(e) => Err(e),
    }
}

/// Whether `error` is a server's error reply: the connection still works.
fn is_reply(error: &RedisError) -> bool {
    matches!(error.kind(), RedisKind::Server(_) | RedisKind::Extension)
}
