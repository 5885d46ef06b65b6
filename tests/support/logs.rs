//! A `tracing` subscriber whose lines the test reads back (feature `tracing`).
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::Level;

/// A log sink shared with the test: every line the subscriber of [`Captured::subscriber`]
/// writes, without colour codes.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// A subscriber that writes every event up to `level` here.
    pub fn subscriber(&self, level: Level) -> impl tracing::Subscriber + Send + Sync + 'static {
        let sink = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish()
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// The lines logged so far, and forgets them.
    pub fn take(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}
