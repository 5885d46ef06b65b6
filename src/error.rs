//! [`Error`]: why a limiter could not decide.

use std::fmt;

/// A limiter could not reach a decision (a store failed). The in-memory store never fails.
#[derive(Debug)]
pub struct Error {
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl Error {
    /// Wraps a store's error.
    pub fn store(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            source: source.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit store failed: {}", self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
