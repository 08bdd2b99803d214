//! Tenants' settings in memory, for the contract tests: the same versions as the file's.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use sluice_contract::Tenant;
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
