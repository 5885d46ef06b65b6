//! Asking the sentinels which primary they name (each by its id, all at once, until a
//! majority names one), and what the store makes of their answers: a primary is used only when
//! more than half of the sentinels given name it, and the primary in use is dropped when they
//! no longer name it.

use std::fmt;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionInfo, ErrorKind as RedisKind, RedisError, RedisResult};

use super::{Primary, Shared, RECHECK_BOUND};
use crate::store::redis::connection::spawn;

/// The longest sentinel id kept (`SENTINEL MYID` is 40 hex digits); a longer one is not used.
const MAX_ID: usize = 64;

/// The longest host name a vote may carry (a DNS name's limit); a longer one is no vote.
const MAX_HOST: usize = 255;

/// A primary's host and port, as the sentinels name it.
pub(super) type Address = (String, u16);

/// The sentinels' answers: which primary each names, one vote per sentinel.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// How many sentinels the store was given: a majority is more than half of them.
    asked: usize,
    /// Each primary named, and the votes for it: each voter's id and its place in the list
    /// of sentinels given.
    named: Vec<(Address, Vec<(String, usize)>)>,
    /// The ids of the sentinels that answered they name none (the master is unknown to them).
    unnamed: Vec<String>,
    /// How many answers repeated one already counted: the same sentinel, under another URL.
    repeated: usize,
    /// How many answers were no vote: a host name longer than any DNS name.
    malformed: usize,
}

impl Tally {
    /// A tally of `asked` sentinels, none heard yet.
    pub(super) fn of(asked: usize) -> Self {
        Self {
            asked,
            ..Self::default()
        }
    }

    /// Notes that the sentinel `id`, the `place`-th given, names `named` (`None`: no primary).
    ///
    /// The same answer from the same id counts once: one sentinel reached by two URLs (an
    /// address and a host name) votes once. Two different answers under one id both count,
    /// as two sentinels' would: a sentinel that claims another's id cannot cancel its vote.
    pub(super) fn add(&mut self, id: String, place: usize, named: Option<Address>) {
        let Some(named) = named else {
            if self.unnamed.contains(&id) {
                self.repeated += 1;
            } else {
                self.unnamed.push(id);
            }
            return;
        };
        if named.0.len() > MAX_HOST {
            self.malformed += 1;
            return;
        }
        match self.named.iter_mut().find(|(address, _)| *address == named) {
            Some((_, votes)) => match votes.iter_mut().find(|(voter, _)| *voter == id) {
                Some((_, first)) => {
                    self.repeated += 1;
                    // The vote stands for the one listed first.
                    *first = (*first).min(place);
                }
                None => votes.push((id, place)),
            },
            None => self.named.push((named, vec![(id, place)])),
        }
    }

    /// How many sentinels name `address`.
    pub(super) fn votes(&self, address: &Address) -> usize {
        self.named
            .iter()
            .find(|(named, _)| named == address)
            .map_or(0, |(_, votes)| votes.len())
    }

    /// The primary more than half of the sentinels given name, if any, and the places (in
    /// the list given) of those that name it, in the order given (not the order they
    /// answered in, which a sentinel could race for).
    pub(super) fn majority(&self) -> Option<(&Address, Vec<usize>)> {
        let (address, votes) = self
            .named
            .iter()
            .find(|(_, votes)| 2 * votes.len() > self.asked)?;
        let mut places: Vec<usize> = votes.iter().map(|(_, place)| *place).collect();
        places.sort_unstable();
        Some((address, places))
    }

    /// Whether a primary in use at `current` (its host and port; `None` for a socket) may
    /// stay: while more than half of the sentinels name it, or while no other primary is named
    /// by more sentinels than it (a sentinel that names another is outvoted or tied, or all
    /// are silent: nothing says it changed). It goes when another is named by more: a
    /// failover the sentinels that answered have seen, where decisions on the old primary
    /// would count apart from the fleet's.
    pub(super) fn keeps(&self, current: Option<&Address>) -> bool {
        let mine = current.map_or(0, |current| self.votes(current));
        if 2 * mine > self.asked {
            return true;
        }
        self.named
            .iter()
            .all(|(address, votes)| Some(address) == current || votes.len() <= mine)
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut heard = self.unnamed.len() + self.repeated + self.malformed;
        for ((host, port), votes) in &self.named {
            // The host as a sentinel sent it, as every reason from outside is printed.
            let host = super::printable(host);
            write!(f, "{} of {} name {host}:{port}; ", votes.len(), self.asked)?;
            heard += votes.len();
        }
        if !self.unnamed.is_empty() {
            write!(f, "{} name none; ", self.unnamed.len())?;
        }
        if self.repeated > 0 {
            write!(f, "{} answered again under another URL; ", self.repeated)?;
        }
        if self.malformed > 0 {
            write!(
                f,
                "{} named a host longer than {MAX_HOST} bytes; ",
                self.malformed
            )?;
        }
        write!(f, "{} not heard", self.asked.saturating_sub(heard))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> Address {
        ("127.0.0.1".to_owned(), port)
    }

    fn tally(asked: usize, votes: &[(&str, Option<u16>)]) -> Tally {
        let mut tally = Tally::of(asked);
        for (place, (id, port)) in votes.iter().enumerate() {
            tally.add((*id).to_owned(), place, port.map(at));
        }
        tally
    }

    #[test]
    fn a_majority_is_more_than_half_of_the_sentinels_given() {
        // Three of four: a majority, with the places of those that name it, in list order
        // whatever the order they answered in.
        let mut t = Tally::of(4);
        for (id, place, port) in [("d", 3, 1), ("b", 1, 2), ("a", 0, 1), ("c", 2, 1)] {
            t.add(id.to_owned(), place, Some(at(port)));
        }
        assert_eq!(t.majority(), Some((&at(1), vec![0, 2, 3])));
        // One sentinel under two URLs: its vote stands for the one listed first.
        let mut t = Tally::of(3);
        for (id, place) in [("a", 2), ("b", 1), ("a", 0)] {
            t.add(id.to_owned(), place, Some(at(1)));
        }
        assert_eq!(t.majority(), Some((&at(1), vec![0, 1])));
        // Two of four: none, whoever else answers.
        let t = tally(4, &[("a", Some(1)), ("b", Some(1)), ("c", Some(2))]);
        assert_eq!(t.majority(), None);
        // Silent sentinels count against: one answer of three is no majority.
        assert_eq!(tally(3, &[("a", Some(1))]).majority(), None);
        // One sentinel given decides alone; two given must both name it.
        assert!(tally(1, &[("a", Some(1))]).majority().is_some());
        assert_eq!(tally(2, &[("a", Some(1))]).majority(), None);
        assert!(tally(2, &[("a", Some(1)), ("b", Some(1))])
            .majority()
            .is_some());
    }

    #[test]
    fn a_sentinel_reached_twice_votes_once() {
        // The stale sentinel `s` under three URLs, and two that agree: no majority of five.
        let votes = [
            ("s", Some(9)),
            ("s", Some(9)),
            ("s", Some(9)),
            ("a", Some(1)),
            ("b", Some(1)),
        ];
        let t = tally(5, &votes);
        assert_eq!(t.votes(&at(9)), 1);
        assert_eq!(t.majority(), None);
        let t = tally(4, &[("s", None), ("s", None), ("a", Some(9))]);
        assert_eq!(
            t.to_string(),
            "1 of 4 name 127.0.0.1:9; 1 name none; 1 answered again under another URL; 1 not \
             heard"
        );
    }

    #[test]
    fn a_sentinel_claiming_anothers_id_cannot_cancel_its_vote() {
        // `m` answers first under `a`'s id, naming another primary: both votes count, and the
        // primary `a` and `b` name keeps its majority of three.
        let t = tally(3, &[("a", Some(9)), ("a", Some(1)), ("b", Some(1))]);
        assert_eq!(t.majority().map(|(address, _)| address), Some(&at(1)));
        // Under `a`'s id with `a`'s answer, it merges with `a`: still two of three.
        for votes in [
            [("a", Some(1)), ("a", Some(1)), ("b", Some(1))],
            [("a", Some(1)), ("b", Some(1)), ("a", Some(1))],
        ] {
            let t = tally(3, &votes);
            assert_eq!(t.votes(&at(1)), 2);
            assert_eq!(t.majority().map(|(address, _)| address), Some(&at(1)));
        }
    }

    #[test]
    fn a_primary_stays_unless_another_is_named_by_more() {
        let current = at(1);
        let keeps =
            |asked, votes: &[(&str, Option<u16>)]| tally(asked, votes).keeps(Some(&current));
        // A majority names it: it stays, whatever a stale sentinel says.
        assert!(keeps(
            4,
            &[
                ("s", Some(9)),
                ("a", Some(1)),
                ("b", Some(1)),
                ("c", Some(1))
            ]
        ));
        // All silent, some naming it and none another, or a stale one tied with it: it stays.
        assert!(keeps(3, &[]));
        assert!(keeps(3, &[("a", Some(1))]));
        assert!(keeps(3, &[("a", None)]));
        assert!(keeps(3, &[("s", Some(9)), ("a", Some(1))]));
        // Another has a majority, or more votes than it: it goes.
        assert!(!keeps(3, &[("a", Some(2)), ("b", Some(2))]));
        assert!(!keeps(3, &[("a", Some(2))]));
        assert!(!keeps(5, &[("a", Some(2)), ("b", Some(2)), ("c", Some(1))]));
        // A primary reached by a socket is named by none: any other named sends it away.
        assert!(!tally(1, &[("a", Some(2))]).keeps(None));
    }

    #[test]
    fn answers_are_bounded_and_printed_with_control_characters_escaped() {
        let mut t = Tally::of(2);
        t.add("a".to_owned(), 0, Some(("evil\nhost".to_owned(), 1)));
        t.add("b".to_owned(), 1, Some(("h".repeat(MAX_HOST + 1), 1)));
        assert_eq!(
            t.to_string(),
            "1 of 2 name evil\\nhost:1; 1 named a host longer than 255 bytes; 0 not heard"
        );
    }
}
