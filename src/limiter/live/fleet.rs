//! The servers of a layer sharing one Redis ([`Fleet`]): a change of quotas made through any
//! server's handle is written to the layer's record in Redis
//! ([`LiveRecord`]), and each server reads the record on a
//! schedule and applies what changed through the same carry-over as
//! [`Handle::set_quotas`](crate::layer::Handle::set_quotas).
//!
//! One task per layer and server, started on first use inside a tokio runtime: it writes the
//! changes made here (again, until Redis takes them), reads the record's version every
//! [`POLL_EVERY`], and the whole record when the version moved. It holds the layer weakly and
//! ends once the layer, its handles and its services are gone. Until its first read (or the
//! first failure to read), each request of the layer waits for it (`gate`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::Notify;

use super::Live;
use crate::limiter::bind::Recipe;
use crate::limiter::object::Limiter;
use crate::store::{LiveRecord, POLL_EVERY};
use crate::{Error, Quota};

/// Puts in force, one after the other, the quotas of `history` (the latest last) that came
/// after `now` (all of them when `now` is not among them), so that each key is charged what
/// it used under every quotas the fleet went through; when one is refused, the latest alone.
fn steps(
    history: &[Vec<Quota>],
    now: &[Quota],
    set: impl Fn(&[Quota]) -> Result<(), Error>,
) -> Result<(), Error> {
    let from = history
        .iter()
        .rposition(|q| q == now)
        .map_or(0, |at| at + 1);
    for quotas in &history[from..] {
        if let Err(error) = set(quotas) {
            return match history.last() {
                Some(latest) => set(latest).and(Err(error)),
                None => Err(error),
            };
        }
    }
    Ok(())
}

/// A field of the record and its value: what to write.
type Field = (Vec<u8>, Vec<u8>);

/// A layer's part in its fleet, on this server.
pub(crate) struct Fleet {
    record: LiveRecord,
    live: Weak<Live>,
    /// The field of the layer's own quotas: `own` and the quotas it was built with, so that
    /// servers built with other quotas (another release) keep theirs.
    own: Vec<u8>,
    /// Whether the record was read once, or found unreadable: requests no longer wait.
    ready: AtomicBool,
    started: AtomicBool,
    read_once: Notify,
    /// Wakes the task for a change made here.
    wake: Arc<Notify>,
    /// The changes made here that Redis has not taken yet, the latest of each field.
    pending: Mutex<Vec<Field>>,
    /// Held while quotas change here, by a handle or from the record: one at a time.
    changes: Mutex<()>,
}

impl Fleet {
    /// The fleet of the layer `live` that `recipe` builds: `None` but for a layer with a
    /// recipe over a `RedisStore`.
    pub(crate) fn of(live: Weak<Live>, recipe: Option<&Recipe>) -> Option<Arc<Self>> {
        let spec = &recipe?.spec;
        let record = recipe?.store.record(&spec.tie.layer)?;
        Some(Arc::new(Self {
            record,
            live,
            own: field("own", &spec.quotas),
            ready: AtomicBool::new(false),
            started: AtomicBool::new(false),
            read_once: Notify::new(),
            wake: Arc::new(Notify::new()),
            pending: Mutex::new(Vec::new()),
            changes: Mutex::new(()),
        }))
    }

    /// Whether the record was read (or found unreadable) once.
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Starts the task if it has not started, in the runtime of the caller; whether it runs.
    pub(crate) fn start(self: &Arc<Self>) -> bool {
        if self.started.load(Ordering::Relaxed) {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if !self.started.swap(true, Ordering::AcqRel) {
            runtime.spawn(run(Arc::downgrade(self), self.wake.clone()));
        }
        true
    }

    /// Waits until the record was read once.
    pub(crate) async fn first_read(&self) {
        let mut notified = std::pin::pin!(self.read_once.notified());
        notified.as_mut().enable();
        if !self.ready() {
            notified.await;
        }
    }

    fn mark_ready(&self) {
        if !self.ready.swap(true, Ordering::AcqRel) {
            self.read_once.notify_waiters();
        }
    }

    /// The layer's own limiter in force, while the layer lives.
    pub(crate) fn own(&self) -> Option<Arc<dyn Limiter>> {
        Some(self.live.upgrade()?.lock().limiter.clone())
    }

    /// Held while quotas change through a handle, so that the record is not applied
    /// meanwhile.
    pub(crate) fn changing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.changes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The changes made here that Redis has not taken yet.
    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Field>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The quotas of `plan` (the layer's own when `None`) changed here, for the other servers.
    pub(crate) fn publish(self: &Arc<Self>, plan: Option<&[Quota]>, quotas: &[Quota]) {
        let field = plan.map_or_else(|| self.own.clone(), |plan| field("plan", plan));
        {
            let mut pending = self.pending();
            pending.retain(|(f, _)| *f != field);
            pending.push((field, encode(quotas)));
        }
        self.start();
        self.wake.notify_one();
    }

    /// Writes the changes made here, then reads the record if its version moved from
    /// `known`, and applies what differs.
    async fn tick(&self, known: &mut Option<u64>) -> Result<(), Error> {
        loop {
            let Some(next) = self.pending().first().cloned() else {
                break;
            };
            self.record.write(&next.0, &next.1).await?;
            self.pending().retain(|pending| *pending != next);
        }
        if known.is_some() && Some(self.record.version().await?) == *known {
            return Ok(());
        }
        let (version, fields) = self.record.read().await?;
        if self.apply(&fields) {
            *known = Some(version);
        }
        Ok(())
    }

    /// Puts the record's `fields` in force here; `false` when a change made here meanwhile
    /// is still to be written (the record is read again after it).
    fn apply(&self, fields: &[Field]) -> bool {
        let Some(live) = self.live.upgrade() else {
            return true;
        };
        let _changing = self.changing();
        if !self.pending().is_empty() {
            return false;
        }
        for (field, value) in fields {
            let Some(history) = history(value) else {
                continue;
            };
            let applied = if *field == self.own {
                let now = live.lock().limiter.quotas().to_vec();
                steps(&history, &now, |quotas| live.set_own(quotas))
            } else if let Some(plan) = field.strip_prefix(b"plan\t".as_slice()).and_then(decode) {
                if history.iter().any(|q| live.check_plan(&plan, q).is_err()) {
                    continue;
                }
                let now = live.plan_quotas(&plan).to_vec();
                steps(&history, &now, |quotas| live.set_plan(&plan, quotas))
            } else {
                continue;
            };
            if let Err(_error) = applied {
                #[cfg(feature = "tracing")]
                tracing::warn!(
                    "tollgate: quotas changed through another server not applied here: {_error}"
                );
            }
        }
        true
    }
}

/// Reads the record on a schedule until the fleet is gone.
async fn run(fleet: Weak<Fleet>, wake: Arc<Notify>) {
    let mut known = None;
    loop {
        let Some(now) = fleet.upgrade() else { return };
        if let Err(_error) = now.tick(&mut known).await {
            #[cfg(feature = "tracing")]
            tracing::debug!(
                "tollgate: the live quotas' record could not be read or written: {_error}"
            );
        }
        now.mark_ready();
        drop(now);
        // A change made here wakes the task at once.
        let _ = tokio::time::timeout(POLL_EVERY, wake.notified()).await;
    }
}

/// `<kind>\t<quotas>`: the field of a plan or of the layer's own quotas, as built.
fn field(kind: &str, quotas: &[Quota]) -> Vec<u8> {
    [kind.as_bytes(), b"\t", &encode(quotas)].concat()
}

/// Each quota on a line: its figures (`10/min;burst=20`), then a space and its name if named.
fn encode(quotas: &[Quota]) -> Vec<u8> {
    let line = |q: &Quota| {
        q.explicit_name()
            .map_or(q.to_string(), |name| format!("{q} {name}"))
    };
    let lines: Vec<String> = quotas.iter().map(line).collect();
    lines.join("\n").into_bytes()
}

/// The quotas a field held, the latest last (the record keeps the latest few, each as
/// [`encode`] wrote it, separated by an empty line); `None` for anything else.
fn history(bytes: &[u8]) -> Option<Vec<Vec<Quota>>> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split("\n\n")
        .map(|entry| decode(entry.as_bytes()))
        .collect::<Option<Vec<_>>>()
        .filter(|history| !history.is_empty())
}

/// The quotas [`encode`] wrote; `None` for anything else.
fn decode(bytes: &[u8]) -> Option<Vec<Quota>> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split('\n')
        .map(|line| match line.split_once(' ') {
            None => line.parse().ok(),
            Some((figures, name)) => {
                let name = crate::quota::policy_name(name).ok()?;
                Some(figures.parse::<Quota>().ok()?.named(name))
            }
        })
        .collect::<Option<Vec<Quota>>>()
        .filter(|quotas| !quotas.is_empty())
}
