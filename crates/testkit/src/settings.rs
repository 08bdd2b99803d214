//! Tenants' settings and records in memory, for the contract tests: the same versions as the
//! files'.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use sluice_contract::Tenant;
use sluice_contract::evals::{Record, Records, RecordsError, Shelf, Shelved, next_record};
use sluice_contract::tenant_settings::{
    SettingsError, SettingsStore, StoredSettings, TenantSettings,
};

/// A settings store in memory.
#[derive(Default)]
pub struct MemorySettings {
    by_tenant: Mutex<HashMap<Tenant, StoredSettings>>,
    /// Every read and write fails while set.
    pub failing: std::sync::atomic::AtomicBool,
}

impl MemorySettings {
    fn check(&self) -> Result<(), SettingsError> {
        match self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(SettingsError::Unavailable(
                "injected: settings unreachable".into(),
            )),
            false => Ok(()),
        }
    }
}

#[async_trait]
impl SettingsStore for MemorySettings {
    async fn get(&self, tenant: &Tenant) -> Result<Option<StoredSettings>, SettingsError> {
        self.check()?;
        let by_tenant = self.by_tenant.lock().unwrap_or_else(|e| e.into_inner());
        Ok(by_tenant.get(tenant).cloned())
    }

    async fn put(
        &self,
        tenant: &Tenant,
        settings: TenantSettings,
    ) -> Result<StoredSettings, SettingsError> {
        self.check()?;
        let mut by_tenant = self.by_tenant.lock().unwrap_or_else(|e| e.into_inner());
        let version = by_tenant.get(tenant).map_or(0, |s| s.version) + 1;
        let stored = StoredSettings {
            settings,
            version,
            updated_at: format!("test-{version}"),
        };
        by_tenant.insert(tenant.clone(), stored.clone());
        Ok(stored)
    }
}

/// Tenants' records (evaluation sets, runs) in memory: the versions the file keeps.
#[derive(Default)]
pub struct MemoryRecords {
    shelves: Mutex<HashMap<(Tenant, Shelf), Shelved>>,
    /// Every read and write fails while set.
    pub failing: std::sync::atomic::AtomicBool,
}

impl MemoryRecords {
    fn check(&self) -> Result<(), RecordsError> {
        match self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(RecordsError::Unavailable(
                "injected: records unreachable".into(),
            )),
            false => Ok(()),
        }
    }

    fn with<T>(&self, tenant: &Tenant, shelf: Shelf, f: impl FnOnce(&mut Shelved) -> T) -> T {
        let mut shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
        f(shelves.entry((tenant.clone(), shelf)).or_default())
    }
}

#[async_trait]
impl Records for MemoryRecords {
    async fn get(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<Option<Record>, RecordsError> {
        self.check()?;
        Ok(self.with(tenant, shelf, |s| s.get(name).cloned()))
    }

    async fn list(&self, tenant: &Tenant, shelf: Shelf) -> Result<Vec<Record>, RecordsError> {
        self.check()?;
        Ok(self.with(tenant, shelf, |s| s.values().cloned().collect()))
    }

    async fn put(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
        body: serde_json::Value,
    ) -> Result<Record, RecordsError> {
        self.check()?;
        Ok(self.with(tenant, shelf, |s| next_record(s, name, body)))
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<bool, RecordsError> {
        self.check()?;
        Ok(self.with(tenant, shelf, |s| s.remove(name).is_some()))
    }
}
