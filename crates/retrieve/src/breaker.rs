//! A circuit breaker in front of a remote vector store.
//!
//! When a backend is down, every request would otherwise spend its whole retrieval deadline
//! waiting for a timeout before answering without context. After
//! `SLUICE_BREAKER_FAILURES` failures in a row the breaker **opens**: reads fail at once with
//! [`StoreError::CircuitOpen`] and the pipeline answers without context
//! (`meta.degraded = ["retrieval_circuit_open"]`). After `SLUICE_BREAKER_COOLDOWN_MS` it is
//! **half-open**: one request goes through as a probe while the others still skip; the
//! probe's success closes the breaker, its failure opens it for another cool-down.
//!
//! A call that is abandoned (the retrieval deadline passed and its future was dropped) counts
//! as a failure: waiting past the deadline is exactly what the breaker is for.

use sluice_contract::Tenant;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use sluice_contract::error::StoreError;
use sluice_contract::{
    stages::DocumentInfo, stages::DocumentPage, stages::Hit, stages::Page, stages::Search,
    stages::Selection, stages::Store, stages::StoredChunk,
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// Failure counting and the open / half-open / closed states.
#[derive(Debug)]
pub struct Breaker {
    failures_to_open: u32,
    cool_down: Duration,
    state: Mutex<State>,
}

impl Breaker {
    /// Opens after `failures_to_open` consecutive failures (at least 1), for `cool_down`.
    pub fn new(failures_to_open: u32, cool_down: Duration) -> Self {
        Self {
            failures_to_open: failures_to_open.max(1),
            cool_down,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    /// `closed`, `open` or `half_open` (for `/readyz` and logs).
    pub fn state(&self) -> &'static str {
        match *self.lock() {
            State::Closed { .. } => "closed",
            State::Open { until } if Instant::now() < until => "open",
            State::Open { .. } | State::HalfOpen { .. } => "half_open",
        }
    }

    /// Whether a call may go ahead now; when it may, its outcome must be reported through the
    /// returned [`Permit`].
    pub fn permit(&self) -> Option<Permit<'_>> {
        let mut state = self.lock();
        match *state {
            State::Closed { .. } => {}
            State::Open { until } if Instant::now() < until => return None,
            State::Open { .. } => *state = State::HalfOpen { probing: true },
            State::HalfOpen { probing: true } => return None,
            State::HalfOpen { probing: false } => *state = State::HalfOpen { probing: true },
        }
        Some(Permit {
            breaker: self,
            reported: false,
        })
    }

    fn report(&self, ok: bool) {
        let mut state = self.lock();
        *state = match (*state, ok) {
            (_, true) => State::Closed { failures: 0 },
            (State::Closed { failures }, false) if failures + 1 < self.failures_to_open => {
                State::Closed {
                    failures: failures + 1,
                }
            }
            (_, false) => {
                tracing::warn!(cool_down = ?self.cool_down, "vector store circuit opened");
                State::Open {
                    until: Instant::now() + self.cool_down,
                }
            }
        };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain data: a panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One allowed call. Report its outcome with [`Permit::done`]; dropping it unreported (the
/// call was abandoned) counts as a failure.
pub struct Permit<'a> {
    breaker: &'a Breaker,
    reported: bool,
}

impl Permit<'_> {
    /// Reports the call's outcome.
    pub fn done(mut self, ok: bool) {
        self.reported = true;
        self.breaker.report(ok);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.reported {
            self.breaker.report(false);
        }
    }
}

/// A store whose reads on the request path (search, corpus version) go through a breaker.
/// Writes (ingest) are not latency-critical and always go to the store.
pub struct GuardedStore {
    inner: Arc<dyn Store>,
    breaker: Breaker,
}

impl GuardedStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, breaker: Breaker) -> Self {
        Self { inner, breaker }
    }

    /// The breaker.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let Some(permit) = self.breaker.permit() else {
            return Err(StoreError::CircuitOpen);
        };
        let result = call.await;
        permit.done(result.is_ok());
        result
    }
}

#[async_trait]
impl Store for GuardedStore {
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError> {
        self.guarded(self.inner.search(tenant, search)).await
    }

    async fn replace_document(
        &self,
        tenant: &Tenant,
        document: &DocumentInfo,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        self.inner.replace_document(tenant, document, chunks).await
    }

    // Listings and deletions are the administrator's, not the answer path's: they neither
    // wait on nor move the breaker.
    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError> {
        self.inner.documents(tenant, selection, page).await
    }

    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError> {
        self.inner.delete_documents(tenant, selection).await
    }

    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        self.inner.bump_corpus_version(tenant).await
    }

    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        self.guarded(self.inner.corpus_version(tenant)).await
    }

    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        self.inner.count(tenant).await
    }

    fn lag(&self) -> std::time::Duration {
        self.inner.lag()
    }

    fn version_memo(&self) -> std::time::Duration {
        self.inner.version_memo()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_then_probes_once_and_closes() {
        let b = Breaker::new(3, Duration::from_millis(50));
        for _ in 0..2 {
            b.permit().unwrap().done(false);
        }
        b.permit().unwrap().done(true);
        assert_eq!(b.state(), "closed", "a success resets the count");
        for _ in 0..3 {
            b.permit().unwrap().done(false);
        }
        assert_eq!(b.state(), "open");
        assert!(b.permit().is_none(), "open: skip at once");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.state(), "half_open");
        let probe = b.permit().expect("one probe");
        assert!(b.permit().is_none(), "only one probe at a time");
        probe.done(true);
        assert_eq!(b.state(), "closed");
        assert!(b.permit().is_some());
    }

    #[test]
    fn a_failed_or_abandoned_probe_opens_again() {
        let b = Breaker::new(1, Duration::from_millis(30));
        b.permit().unwrap().done(false);
        std::thread::sleep(Duration::from_millis(40));
        b.permit().unwrap().done(false);
        assert_eq!(b.state(), "open");
        std::thread::sleep(Duration::from_millis(40));
        drop(b.permit().unwrap()); // the deadline dropped the probe's future
        assert_eq!(b.state(), "open");
    }
}
