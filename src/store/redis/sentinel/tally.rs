//! What the sentinels answer when asked which primary they name, and what the store makes of
//! it: a primary is used only when more than half of the sentinels given name it.

use std::fmt;

/// The sentinels' answers: which primary each names, one vote per sentinel.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// How many sentinels the store was given: a majority is more than half of them.
    asked: usize,
    /// Each primary named, and the ids of the sentinels that name it.
    named: Vec<((String, u16), Vec<String>)>,
    /// The ids of the sentinels that answered they name none (the master is unknown to them).
    unnamed: Vec<String>,
    /// How many answers came from a sentinel already heard (under another URL).
    repeated: usize,
}

impl Tally {
    /// A tally of `asked` sentinels, none heard yet.
    pub(super) fn of(asked: usize) -> Self {
        Self {
            asked,
            ..Self::default()
        }
    }

    /// Notes that the sentinel `id` names `named` (`None`: no primary). A sentinel heard twice
    /// (two URLs that reach the same process) counts once: its first answer.
    pub(super) fn add(&mut self, id: String, named: Option<(String, u16)>) {
        let heard =
            self.unnamed.contains(&id) || self.named.iter().any(|(_, ids)| ids.contains(&id));
        if heard {
            self.repeated += 1;
            return;
        }
        let Some(named) = named else {
            self.unnamed.push(id);
            return;
        };
        match self.named.iter_mut().find(|(address, _)| *address == named) {
            Some((_, ids)) => ids.push(id),
            None => self.named.push((named, vec![id])),
        }
    }

    /// How many sentinels name `address`.
    pub(super) fn votes(&self, address: &(String, u16)) -> usize {
        self.named
            .iter()
            .find(|(named, _)| named == address)
            .map_or(0, |(_, ids)| ids.len())
    }

    /// The primary more than half of the sentinels given name, if any.
    pub(super) fn majority(&self) -> Option<&(String, u16)> {
        self.named
            .iter()
            .find(|(_, ids)| 2 * ids.len() > self.asked)
            .map(|(address, _)| address)
    }

    /// Whether a primary still in use at `current` (its host and port; `None` for a socket)
    /// may stay: it does while more than half of the sentinels name it, or while no sentinel
    /// that answered names another (all silent: nothing says it changed). It goes when another
    /// has a majority, or when some sentinel names another and it has no majority: what made
    /// it the primary no longer holds, and decisions on a primary the fleet left would count
    /// apart from the fleet's.
    pub(super) fn keeps(&self, current: Option<&(String, u16)>) -> bool {
        let mine = current.map_or(0, |current| self.votes(current));
        if 2 * mine > self.asked {
            return true;
        }
        !self
            .named
            .iter()
            .any(|(address, _)| Some(address) != current)
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut answered = self.unnamed.len() + self.repeated;
        for ((host, port), ids) in &self.named {
            // The host as a sentinel sent it, with anything unprintable escaped.
            let host = host.escape_debug();
            write!(f, "{} of {} name {host}:{port}; ", ids.len(), self.asked)?;
            answered += ids.len();
        }
        if !self.unnamed.is_empty() {
            write!(f, "{} name none; ", self.unnamed.len())?;
        }
        if self.repeated > 0 {
            write!(f, "{} answered again under another URL; ", self.repeated)?;
        }
        write!(f, "{} did not answer", self.asked.saturating_sub(answered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> (String, u16) {
        ("127.0.0.1".to_owned(), port)
    }

    fn tally(asked: usize, votes: &[(&str, Option<u16>)]) -> Tally {
        let mut tally = Tally::of(asked);
        for (id, port) in votes {
            tally.add((*id).to_owned(), port.map(at));
        }
        tally
    }

    #[test]
    fn a_majority_is_more_than_half_of_the_sentinels_given() {
        // Three of four: a majority; two of four: none, whoever else answers.
        let t = tally(
            4,
            &[
                ("a", Some(1)),
                ("b", Some(1)),
                ("c", Some(1)),
                ("d", Some(2)),
            ],
        );
        assert_eq!(t.majority(), Some(&at(1)));
        let t = tally(4, &[("a", Some(1)), ("b", Some(1)), ("c", Some(2))]);
        assert_eq!(t.majority(), None);
        // Silent sentinels count against: one answer of three is no majority.
        assert_eq!(tally(3, &[("a", Some(1))]).majority(), None);
        // One sentinel given decides alone.
        assert_eq!(tally(1, &[("a", Some(1))]).majority(), Some(&at(1)));
        // Two given: both must agree.
        assert_eq!(tally(2, &[("a", Some(1))]).majority(), None);
        assert_eq!(
            tally(2, &[("a", Some(1)), ("b", Some(1))]).majority(),
            Some(&at(1))
        );
    }

    #[test]
    fn a_sentinel_reached_twice_votes_once() {
        // The stale sentinel `s` under three URLs, and two that agree: no majority of five.
        let t = tally(
            5,
            &[
                ("s", Some(9)),
                ("s", Some(9)),
                ("s", Some(9)),
                ("a", Some(1)),
                ("b", Some(1)),
            ],
        );
        assert_eq!(t.votes(&at(9)), 1);
        assert_eq!(t.majority(), None);
        // Its second answer, whatever it says, is not counted either.
        let t = tally(4, &[("s", None), ("s", Some(9)), ("a", Some(9))]);
        assert_eq!(t.votes(&at(9)), 1);
        assert_eq!(
            t.to_string(),
            "1 of 4 name 127.0.0.1:9; 1 name none; 1 answered again under another URL; 1 did \
             not answer"
        );
    }

    #[test]
    fn a_primary_stays_while_nothing_says_it_changed() {
        let current = at(1);
        // A majority names it: it stays, whatever a stale sentinel says.
        let t = tally(
            4,
            &[
                ("s", Some(9)),
                ("a", Some(1)),
                ("b", Some(1)),
                ("c", Some(1)),
            ],
        );
        assert!(t.keeps(Some(&current)));
        // All silent, or only some naming it, none another: it stays.
        assert!(tally(3, &[]).keeps(Some(&current)));
        assert!(tally(3, &[("a", Some(1))]).keeps(Some(&current)));
        assert!(tally(3, &[("a", None)]).keeps(Some(&current)));
        // Another has a majority: it goes.
        assert!(!tally(3, &[("a", Some(2)), ("b", Some(2))]).keeps(Some(&current)));
        // One names another and it has no majority (the others silent): it goes.
        assert!(!tally(3, &[("a", Some(2))]).keeps(Some(&current)));
        assert!(!tally(3, &[("a", Some(2)), ("b", Some(1))]).keeps(Some(&current)));
        // A primary reached by a socket is named by none: any other named sends it away.
        assert!(!tally(1, &[("a", Some(2))]).keeps(None));
    }

    #[test]
    fn hosts_are_printed_with_control_characters_escaped() {
        let mut t = Tally::of(1);
        t.add("a".to_owned(), Some(("evil\nhost".to_owned(), 1)));
        assert_eq!(t.to_string(), "1 of 1 name evil\\nhost:1; 0 did not answer");
    }
}
