//! Each version's record in a process — its recent calls and costs, its failures — and the
//! failures as the storage keeps them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_contract::Tenant;
use sluice_contract::stages::{
    CallCosts, ComponentError, ComponentFailure, ComponentStorage as Storage, ComponentVersion,
};

use super::lock;

pub(super) fn failures_key(tenant: &Tenant, version: &str) -> String {
    format!("{tenant}/{version}.failures.json")
}

/// Stores failures off the request path: one thread per registry takes them from a bounded
/// queue and adds each to its version's record (read, prepend, cut, write). A full queue
/// drops the failure (a storm of them needs no more than the last ten); two processes adding
/// at once may lose one of the two — the record is advice for the tenant, not an audit log.
#[derive(Clone)]
pub(super) struct FailureWriter(std::sync::mpsc::SyncSender<(Tenant, String, ComponentFailure)>);

impl FailureWriter {
    const QUEUE: usize = 64;

    pub(super) fn start(storage: Arc<dyn Storage>) -> Self {
        let (send, receive) =
            std::sync::mpsc::sync_channel::<(Tenant, String, ComponentFailure)>(Self::QUEUE);
        let spawned = std::thread::Builder::new()
            .name("component-failures".into())
            .spawn(move || {
                // Ends when the registry (every sender) is gone.
                while let Ok((tenant, version, failure)) = receive.recv() {
                    if let Err(e) = store_failure(storage.as_ref(), &tenant, &version, failure) {
                        tracing::warn!(%tenant, %version, error = %e, "storing a component failure failed");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread to store component failures: they stay in this process");
        }
        Self(send)
    }

    pub(super) fn send(&self, tenant: &Tenant, version: &str, failure: ComponentFailure) {
        let _ = (self.0).try_send((tenant.clone(), version.to_string(), failure));
    }
}

/// Adds `failure` to the version's stored record.
pub(super) fn store_failure(
    storage: &dyn Storage,
    tenant: &Tenant,
    version: &str,
    failure: ComponentFailure,
) -> Result<(), ComponentError> {
    let key = failures_key(tenant, version);
    let mut record = stored_failures(storage, tenant, version)?;
    record.insert(0, failure);
    record.truncate(ComponentVersion::MAX_FAILURES);
    let bytes = serde_json::to_vec(&record).map_err(|e| ComponentError::Storage(e.to_string()))?;
    storage.put(&key, &bytes)
}

/// A version's stored failures, newest first (none when there is no record; a record that
/// does not parse counts as none, and is replaced by the next failure).
pub(super) fn stored_failures(
    storage: &dyn Storage,
    tenant: &Tenant,
    version: &str,
) -> Result<Vec<ComponentFailure>, ComponentError> {
    Ok(storage
        .get(&failures_key(tenant, version))?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default())
}

/// What this process saw of a version's calls: kept per tenant and version, not per load, so
/// that a version activated again (a rollback) keeps its record, and a version no longer
/// active still shows what it did.
#[derive(Default)]
pub(super) struct VersionStats {
    /// `(fuel, wall µs)` of its last [`CallCosts::WINDOW`] calls.
    recent: Mutex<VecDeque<(u64, u64)>>,
    /// Its last failed calls, newest last.
    failures: Mutex<VecDeque<ComponentFailure>>,
}

impl VersionStats {
    /// Records a call; a failure is returned stamped, for the stored record as well.
    pub(super) fn record(
        &self,
        fuel: u64,
        wall: Duration,
        failed: Option<&sluice_contract::stages::RerankFailure>,
    ) -> Option<ComponentFailure> {
        let mut recent = lock(&self.recent);
        if recent.len() == CallCosts::WINDOW {
            recent.pop_front();
        }
        recent.push_back((fuel, wall.as_micros() as u64));
        drop(recent);
        if let Some(failure) = failed {
            let at_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let stamped = ComponentFailure {
                at_ms,
                failure: failure.clone(),
            };
            let mut failures = lock(&self.failures);
            if failures.len() == ComponentVersion::MAX_FAILURES {
                failures.pop_front();
            }
            failures.push_back(stamped.clone());
            return Some(stamped);
        }
        None
    }

    pub(super) fn costs(&self) -> Option<CallCosts> {
        CallCosts::of(lock(&self.recent).iter().copied())
    }

    /// Newest first.
    pub(super) fn failures(&self) -> Vec<ComponentFailure> {
        lock(&self.failures).iter().rev().cloned().collect()
    }
}
