//! Each version's record in a process — its recent calls and costs, its failures, its log —
//! and the failures and the log as the storage keeps them.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_contract::Tenant;
use sluice_contract::components::{
    CallCosts, ComponentCall, ComponentError, ComponentFailure, ComponentStorage as Storage,
    ComponentVersion,
};

use super::lock;

/// The keys of a version's stored records: its last failures (the listing shows them) and its
/// log (its last calls that logged a line or failed, `GET …/{version}/logs`), each newest
/// first, as JSON beside its upload — so the process that lists versions (on Lambda, the
/// registry function) shows what the processes that run them (the answer function) saw.
pub(super) fn failures_key(tenant: &Tenant, version: &str) -> String {
    format!("{tenant}/{version}.failures.json")
}

pub(super) fn calls_key(tenant: &Tenant, version: &str) -> String {
    format!("{tenant}/{version}.calls.json")
}

/// A call to add to a version's stored records.
type Entry = (Tenant, String, ComponentCall);

/// Stores calls off the request path: one thread per registry takes them from a bounded
/// queue, and adds every call queued for a version to its records in one read and one write
/// of each (a storm of calls costs a write per version per round, not per call). A full
/// queue drops the call (the records keep the last few anyway); two processes adding at once
/// may lose one of the two — the records are advice for the tenant, not an audit log.
#[derive(Clone)]
pub(super) struct CallWriter(SyncSender<Entry>);

impl CallWriter {
    const QUEUE: usize = 64;

    pub(super) fn start(storage: Arc<dyn Storage>) -> Self {
        let (send, receive) = std::sync::mpsc::sync_channel::<Entry>(Self::QUEUE);
        let spawned = std::thread::Builder::new()
            .name("component-calls".into())
            .spawn(move || write_calls(storage.as_ref(), &receive));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread to store component calls: they stay in this process");
        }
        Self(send)
    }

    pub(super) fn send(&self, tenant: &Tenant, version: &str, call: ComponentCall) {
        let _ = (self.0).try_send((tenant.clone(), version.to_string(), call));
    }
}

/// The writer thread: ends when the registry (every sender) is gone.
fn write_calls(storage: &dyn Storage, receive: &Receiver<Entry>) {
    while let Ok(first) = receive.recv() {
        let mut round: HashMap<(Tenant, String), Vec<ComponentCall>> = HashMap::new();
        for (tenant, version, call) in std::iter::once(first).chain(receive.try_iter()) {
            round.entry((tenant, version)).or_default().push(call);
        }
        for ((tenant, version), calls) in round {
            if let Err(e) = store_calls(storage, &tenant, &version, calls) {
                tracing::warn!(%tenant, %version, error = %e, "storing a component's calls failed");
            }
        }
    }
}

/// Adds `calls` (oldest first) to the version's stored log, and the failed ones to its
/// stored failures.
pub(super) fn store_calls(
    storage: &dyn Storage,
    tenant: &Tenant,
    version: &str,
    calls: Vec<ComponentCall>,
) -> Result<(), ComponentError> {
    let failures: Vec<ComponentFailure> = calls.iter().filter_map(failure).collect();
    if !failures.is_empty() {
        let key = failures_key(tenant, version);
        prepend(storage, &key, failures, ComponentVersion::MAX_FAILURES)?;
    }
    prepend(
        storage,
        &calls_key(tenant, version),
        calls,
        ComponentCall::MAX_CALLS,
    )
}

/// Puts `new` (oldest first) before the record under `key`, newest first, and keeps `max`.
fn prepend<T: Serialize + DeserializeOwned>(
    storage: &dyn Storage,
    key: &str,
    new: Vec<T>,
    max: usize,
) -> Result<(), ComponentError> {
    let mut record: Vec<T> = stored(storage, key)?;
    record.splice(0..0, new.into_iter().rev());
    record.truncate(max);
    let bytes = serde_json::to_vec(&record).map_err(|e| ComponentError::Storage(e.to_string()))?;
    storage.put(key, &bytes)
}

/// A stored record, newest first (none when there is none; a record that does not parse
/// counts as none, and is replaced by the next write).
pub(super) fn stored<T: DeserializeOwned>(
    storage: &dyn Storage,
    key: &str,
) -> Result<Vec<T>, ComponentError> {
    Ok(storage
        .get(key)?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default())
}

/// A failed call as the listing shows it.
fn failure(call: &ComponentCall) -> Option<ComponentFailure> {
    Some(ComponentFailure {
        at_ms: call.at_ms,
        request_id: call.request_id.clone(),
        failure: call.failure.clone()?,
        restricted: call.restricted,
    })
}

/// What this process saw of a version's calls: kept per tenant and version, not per load, so
/// that a version activated again (a rollback) keeps its record, and a version no longer
/// active still shows what it did.
#[derive(Default)]
pub(super) struct VersionStats {
    /// `(fuel, wall µs)` of its last [`CallCosts::WINDOW`] calls.
    recent: Mutex<VecDeque<(u64, u64)>>,
    /// Its last calls that logged or failed, newest last.
    calls: Mutex<VecDeque<ComponentCall>>,
}

impl VersionStats {
    /// Records a call's cost, and the call itself when it logged a line or failed (returned,
    /// for the stored records as well).
    pub(super) fn record(
        &self,
        fuel: u64,
        wall: Duration,
        call: impl FnOnce(u64) -> Option<ComponentCall>,
    ) -> Option<ComponentCall> {
        let mut recent = lock(&self.recent);
        if recent.len() == CallCosts::WINDOW {
            recent.pop_front();
        }
        recent.push_back((fuel, wall.as_micros() as u64));
        drop(recent);
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let call = call(at_ms)?;
        let mut calls = lock(&self.calls);
        if calls.len() == ComponentCall::MAX_CALLS {
            calls.pop_front();
        }
        calls.push_back(call.clone());
        Some(call)
    }

    pub(super) fn costs(&self) -> Option<CallCosts> {
        CallCosts::of(lock(&self.recent).iter().copied())
    }

    /// Its calls, newest first.
    pub(super) fn calls(&self) -> Vec<ComponentCall> {
        lock(&self.calls).iter().rev().cloned().collect()
    }

    /// Its failures, newest first.
    pub(super) fn failures(&self) -> Vec<ComponentFailure> {
        let calls = lock(&self.calls);
        let failed = calls.iter().rev().filter_map(failure);
        failed.take(ComponentVersion::MAX_FAILURES).collect()
    }
}
