//! The component routes' operations on the registry: upload, activate, list, deactivate,
//! a version's log, and deleting a version.

use sha2::{Digest, Sha256};
use sluice_contract::Tenant;
use sluice_contract::cancel::Cancel;
use sluice_contract::components::{
    ComponentCall, ComponentError, ComponentFailure, ComponentVersion, Components, StoredVersion,
};

use super::record::{calls_key, failures_key, stored};
use super::{Registry, is_version, lock};
use crate::UploadError;

impl Components for Registry {
    fn upload(
        &self,
        tenant: &Tenant,
        bytes: &[u8],
        label: Option<&str>,
        cancel: &Cancel,
    ) -> Result<ComponentVersion, ComponentError> {
        let version = format!("{:x}", Sha256::digest(bytes));
        // The same bytes again: their compile is stored already (a listed version always has
        // its artefact), never made twice.
        if let Some(record) = self.stored(tenant, &version)? {
            let active = self.inner.storage.active(tenant)?.as_deref() == Some(version.as_str());
            return Ok(shown(record, active));
        }
        // A client that left before the compile started — while it waited for a place among
        // the compiles under way — costs nothing.
        let Some(_place) = self.inner.compiles.take(cancel) else {
            return Err(ComponentError::Abandoned);
        };
        let prepared = self.inner.sandbox.compile(bytes).map_err(|e| match e {
            UploadError::TooLarge { .. } => ComponentError::TooLarge(e.to_string()),
            UploadError::TooComplex(_) => ComponentError::TooComplex(e.to_string()),
            other => ComponentError::Invalid(other.to_string()),
        })?;
        // A tenant's rerank components and its prompt components are kept apart (the latter
        // under its `prompt_components` name): each route takes its own world.
        if prepared.is_prompt() != tenant.is_prompt_components() {
            let (is, route) = match prepared.is_prompt() {
                true => ("a prompt-assembly component", "/v1/components/prompt"),
                false => ("a rerank component", "/v1/components/rerank"),
            };
            return Err(ComponentError::Invalid(format!(
                "this is {is} ({}); upload it to {route}",
                prepared.world()
            )));
        }
        // The compile cannot be stopped, but what it made is kept only for a request that is
        // still there.
        if cancel.is_cancelled() {
            return Err(ComponentError::Abandoned);
        }
        self.inner
            .storage
            .put(&format!("{tenant}/{version}.wasm"), bytes)?;
        self.inner.storage.put(
            &self.inner.artefact_key(tenant, &version),
            &prepared.artifact,
        )?;
        // Recorded last: a listed version always has its bytes stored.
        let uploaded_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let record = StoredVersion {
            version,
            size: bytes.len(),
            uploaded_ms,
            label: label.map(str::to_string),
        };
        self.inner.storage.add_version(tenant, &record)?;
        // The same bytes uploaded again keep their first record.
        let record = self.stored(tenant, &record.version)?.unwrap_or(record);
        let active = self.inner.storage.active(tenant)?.as_deref() == Some(record.version.as_str());
        Ok(shown(record, active))
    }

    fn activate(&self, tenant: &Tenant, version: &str) -> Result<ComponentVersion, ComponentError> {
        let record = (self.stored(tenant, version)?).ok_or_else(|| unknown(tenant, version))?;
        let active = self.inner.load(tenant, version)?;
        self.inner.storage.set_active(tenant, Some(version))?;
        self.inner.remember(tenant, Some(active));
        Ok(shown(record, true))
    }

    fn list(&self, tenant: &Tenant) -> Result<Vec<ComponentVersion>, ComponentError> {
        let active = self.inner.storage.active(tenant)?;
        // What this process saw of each version it has run for the tenant.
        let stats = lock(&self.inner.stats);
        Ok(self
            .inner
            .storage
            .versions(tenant)?
            .into_iter()
            .map(|record| {
                let seen = stats.get(&(tenant.clone(), record.version.clone()));
                // What every process stored; this process's own when the record cannot be read.
                let key = failures_key(tenant, &record.version);
                let failures: Vec<ComponentFailure> = stored(self.inner.storage.as_ref(), &key)
                    .unwrap_or_else(|_| seen.map(|s| s.failures()).unwrap_or_default());
                let is_active = active.as_deref() == Some(record.version.as_str());
                ComponentVersion {
                    cost: seen.and_then(|s| s.costs()),
                    failures,
                    ..shown(record, is_active)
                }
            })
            .collect())
    }

    fn deactivate(&self, tenant: &Tenant) -> Result<(), ComponentError> {
        self.inner.storage.set_active(tenant, None)?;
        self.inner.remember(tenant, None);
        Ok(())
    }

    fn logs(&self, tenant: &Tenant, version: &str) -> Result<Vec<ComponentCall>, ComponentError> {
        self.stored(tenant, version)?
            .ok_or_else(|| unknown(tenant, version))?;
        let seen = lock(&self.inner.stats)
            .get(&(tenant.clone(), version.to_string()))
            .map(|s| s.calls());
        // What every process stored; this process's own when the record cannot be read.
        stored(self.inner.storage.as_ref(), &calls_key(tenant, version)).or_else(|e| seen.ok_or(e))
    }

    fn delete(&self, tenant: &Tenant, version: &str) -> Result<(), ComponentError> {
        self.stored(tenant, version)?
            .ok_or_else(|| unknown(tenant, version))?;
        if self.inner.storage.active(tenant)?.as_deref() == Some(version) {
            return Err(ComponentError::Active(format!(
                "version {version} is active: activate another, or deactivate the tenant's component \
                 (`sluice component deactivate`, DELETE /v1/components/{{kind}}), before deleting it"
            )));
        }
        let storage = &self.inner.storage;
        // The record first: from then on the version is neither listed nor activated, and
        // what is left of its files is only unreachable bytes.
        storage.remove_version(tenant, version)?;
        lock(&self.inner.stats).remove(&(tenant.clone(), version.to_string()));
        for key in [
            format!("{tenant}/{version}.wasm"),
            self.inner.artefact_key(tenant, version),
            failures_key(tenant, version),
            calls_key(tenant, version),
        ] {
            storage.remove(&key)?;
        }
        Ok(())
    }
}

impl Registry {
    /// The tenant's record of `version`, `None` when it has none (or `version` is not one).
    fn stored(
        &self,
        tenant: &Tenant,
        version: &str,
    ) -> Result<Option<StoredVersion>, ComponentError> {
        if !is_version(version) {
            return Ok(None);
        }
        let versions = self.inner.storage.versions(tenant)?;
        Ok(versions.into_iter().find(|v| v.version == version))
    }
}

fn unknown(tenant: &Tenant, version: &str) -> ComponentError {
    ComponentError::NotFound(format!(
        "tenant {tenant:?} has no component version {version:?}"
    ))
}

/// A stored version as the routes show it (no costs or failures: the listing adds them).
fn shown(record: StoredVersion, active: bool) -> ComponentVersion {
    ComponentVersion {
        version: record.version,
        size: record.size,
        label: record.label,
        uploaded_ms: (record.uploaded_ms > 0).then_some(record.uploaded_ms),
        active,
        cost: None,
        failures: Vec::new(),
    }
}
