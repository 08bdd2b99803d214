//! Work that ends with its request: a [`Cancel`] is shared by a request and the CPU work it
//! started on other threads (a file's conversion, an ingest's embedding, a component's
//! compilation). Rust cannot stop a thread, so that work asks [`Cancel::check`] between
//! steps of bounded cost and stops there; the request cancels it when it gives up (a time
//! limit) or when it is dropped (its client left: axum drops the handler's future), through
//! the [`CancelOnDrop`] it holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Why work stopped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// Its request ended first (the client left, or a time limit stopped it).
    #[error("its request ended before the work did")]
    Cancelled,
    /// It ran past its own time limit.
    #[error("it ran past its time limit")]
    TimedOut,
}

/// A flag that work checks between steps, and an optional deadline. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Option<Instant>,
}

impl Cancel {
    /// A flag nobody has raised, with no deadline.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same flag, with `deadline` as well (the earlier of it and any deadline it had).
    pub fn with_deadline(&self, deadline: Instant) -> Self {
        Self {
            flag: Arc::clone(&self.flag),
            deadline: Some(self.deadline.map_or(deadline, |d| d.min(deadline))),
        }
    }

    /// Raises the flag: every clone's next [`check`](Self::check) fails.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// Whether the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// `Ok` while the work may go on; what stopped it otherwise.
    pub fn check(&self) -> Result<(), Stopped> {
        if self.is_cancelled() {
            return Err(Stopped::Cancelled);
        }
        match self.deadline {
            Some(deadline) if Instant::now() >= deadline => Err(Stopped::TimedOut),
            _ => Ok(()),
        }
    }

    /// A guard that raises the flag when it is dropped: held by the request for as long as
    /// its work runs. Dropped after the work has ended, it changes nothing.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Raises its [`Cancel`] when dropped: held by a request's future, so that the work it
/// started stops when the future is dropped before the work is done.
#[derive(Debug)]
#[must_use = "the guard cancels when it is dropped"]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_dropped_guard_cancels_every_clone() {
        let cancel = Cancel::new();
        let worker = cancel.clone();
        let guard = cancel.on_drop();
        assert_eq!(worker.check(), Ok(()));
        drop(guard);
        assert_eq!(worker.check(), Err(Stopped::Cancelled));
    }

    #[test]
    fn a_deadline_stops_the_work_and_the_earlier_one_wins() {
        let cancel = Cancel::new();
        let past = cancel.with_deadline(Instant::now());
        assert_eq!(past.check(), Err(Stopped::TimedOut));
        let later = past.with_deadline(Instant::now() + Duration::from_secs(3600));
        assert_eq!(later.check(), Err(Stopped::TimedOut));
        let open = cancel.with_deadline(Instant::now() + Duration::from_secs(3600));
        assert_eq!(open.check(), Ok(()));
        // The flag is shared with the deadline's clones.
        cancel.cancel();
        assert_eq!(open.check(), Err(Stopped::Cancelled));
    }
}
