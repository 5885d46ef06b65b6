//! [`Error`]: why a limiter could not decide, or could not be built; [`ErrorKind`] tells which.

use std::fmt;

/// What an [`Error`] holds as its cause.
type Source = Box<dyn std::error::Error + Send + Sync>;

/// What kind of failure an [`Error`] is, for code that reacts differently to each (retry a
/// timeout, alert on an unreachable store, fix a misconfiguration).
///
/// ```
/// use tollgate::{Error, ErrorKind};
///
/// let error = Error::timeout("no answer within 50ms");
/// assert_eq!(error.kind(), ErrorKind::Timeout);
/// assert_eq!(error.to_string(), "rate limit store timed out: no answer within 50ms");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The store did not answer within its timeout.
    Timeout,
    /// The store could not be reached: the connection was refused or dropped, or no node can
    /// serve the key.
    Unreachable,
    /// The store answered, but not as the limiter expects: an unexpected reply, a malformed
    /// state under a key, a script error that loading the script again does not cure.
    Protocol,
    /// The limiter or the store is set up in a way that cannot work, whatever the traffic: a
    /// quota the store cannot hold (a figure too large for Redis's exact arithmetic), a server
    /// too old, a URL or credentials the store refuses. The message says how to fix it.
    Misconfigured,
    /// The store is out of memory and refuses to write (Redis answered `OOM`: `maxmemory`
    /// reached under `noeviction`). No decision can be recorded, so none is admitted, whatever
    /// the failure policy says: a layer answers `503 Service Unavailable`.
    Full,
    /// Any other failure of a store ([`Error::store`]).
    Other,
}

impl ErrorKind {
    /// What the `Display` of an [`Error`] of this kind starts with.
    fn prefix(self) -> &'static str {
        match self {
            Self::Timeout => "rate limit store timed out",
            Self::Unreachable => "rate limit store unreachable",
            Self::Protocol => "rate limit store answered unexpectedly",
            Self::Misconfigured => "rate limit misconfigured",
            Self::Full => "rate limit store out of memory",
            Self::Other => "rate limit store failed",
        }
    }
}

/// A limiter could not reach a decision (a store failed), or could not be built (the store
/// cannot hold its quotas). The in-memory store never fails.
///
/// [`kind`](Self::kind) tells the failures apart. Messages never carry a client's key.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Source,
}

impl Error {
    /// An error of `kind`, caused by `source`.
    pub fn new(kind: ErrorKind, source: impl Into<Source>) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// Wraps a store's error, of kind [`ErrorKind::Other`].
    pub fn store(source: impl Into<Source>) -> Self {
        Self::new(ErrorKind::Other, source)
    }

    /// The store did not answer in time ([`ErrorKind::Timeout`]).
    pub fn timeout(source: impl Into<Source>) -> Self {
        Self::new(ErrorKind::Timeout, source)
    }

    /// The store could not be reached ([`ErrorKind::Unreachable`]).
    pub fn unreachable(source: impl Into<Source>) -> Self {
        Self::new(ErrorKind::Unreachable, source)
    }

    /// The store answered in a way the limiter cannot use ([`ErrorKind::Protocol`]).
    pub fn protocol(source: impl Into<Source>) -> Self {
        Self::new(ErrorKind::Protocol, source)
    }

    /// The limiter or store cannot work as configured ([`ErrorKind::Misconfigured`]); the
    /// message should name the bad value and how to fix it.
    pub fn misconfigured(source: impl Into<Source>) -> Self {
        Self::new(ErrorKind::Misconfigured, source)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.prefix(), self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_constructor_gives_its_kind_and_says_it_first() {
        let cases = [
            (
                Error::timeout("t"),
                ErrorKind::Timeout,
                "rate limit store timed out: t",
            ),
            (
                Error::unreachable("u"),
                ErrorKind::Unreachable,
                "rate limit store unreachable: u",
            ),
            (
                Error::protocol("p"),
                ErrorKind::Protocol,
                "rate limit store answered unexpectedly: p",
            ),
            (
                Error::misconfigured("m"),
                ErrorKind::Misconfigured,
                "rate limit misconfigured: m",
            ),
            (
                Error::store("o"),
                ErrorKind::Other,
                "rate limit store failed: o",
            ),
        ];
        for (error, kind, text) in cases {
            assert_eq!(error.kind(), kind);
            assert_eq!(error.to_string(), text);
            assert!(std::error::Error::source(&error).is_some());
        }
    }
}
