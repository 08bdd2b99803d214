//! Tenants' settings in one JSON file (`sluice serve`'s, beside its keys): `{"tenants":
//! {"acme": {"settings": …, "version": 3, "updated_at": "…"}}}`, replaced whole on each write
//! (written beside it, then renamed), so a reader never sees half a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_contract::Tenant;
use sluice_contract::tenant_settings::{
    SettingsError, SettingsStore, StoredSettings, TenantSettings,
};

/// The settings file.
pub struct FileSettings {
    path: PathBuf,
    /// One write at a time in this process: a `PUT` reads the file, bumps the tenant's
    /// version and writes it back.
    writing: tokio::sync::Mutex<()>,
}

#[derive(Default, Serialize, Deserialize)]
struct SettingsFile {
    tenants: BTreeMap<String, StoredSettings>,
}

impl FileSettings {
    /// The file at `path` (made at the first write).
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    fn fail(&self, e: impl std::fmt::Display) -> SettingsError {
        SettingsError::Unavailable(format!("{}: {e}", self.path.display()))
    }

    async fn read(&self) -> Result<SettingsFile, SettingsError> {
        match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => serde_json::from_str(&text).map_err(|e| self.fail(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SettingsFile::default()),
            Err(e) => Err(self.fail(e)),
        }
    }
}

#[async_trait]
impl SettingsStore for FileSettings {
    async fn get(&self, tenant: &Tenant) -> Result<Option<StoredSettings>, SettingsError> {
        Ok(self.read().await?.tenants.remove(tenant.as_str()))
    }

    async fn put(
        &self,
        tenant: &Tenant,
        settings: TenantSettings,
    ) -> Result<StoredSettings, SettingsError> {
        let _one_at_a_time = self.writing.lock().await;
        let mut file = self.read().await?;
        let version = file.tenants.get(tenant.as_str()).map_or(0, |s| s.version) + 1;
        let stored = StoredSettings {
            settings,
            version,
            updated_at: sluice_contract::tenant_settings::now(),
        };
        file.tenants.insert(tenant.to_string(), stored.clone());
        let text = serde_json::to_string_pretty(&file).map_err(|e| self.fail(e))?;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || crate::replace_file(&path, &(text + "\n")))
            .await
            .map_err(|e| self.fail(e))?
            .map_err(|e| self.fail(e))?;
        Ok(stored)
    }
}
