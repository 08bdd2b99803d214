//! [`Disk`]: components under a folder, for `sluice serve`.

use std::path::{Path, PathBuf};

use sluice_contract::Tenant;
use sluice_contract::components::{ComponentError, ComponentStorage as Storage, StoredVersion};

pub(super) fn storage(e: impl std::fmt::Display) -> ComponentError {
    ComponentError::Storage(e.to_string())
}

/// Components in a folder: `<tenant>/<file>` as files, plus `<tenant>/versions.json` (upload
/// order and sizes) and `<tenant>/active`.
pub struct Disk {
    dir: PathBuf,
}

impl Disk {
    /// Storage in `dir` (created when missing).
    pub fn open(dir: &Path) -> Result<Self, ComponentError> {
        std::fs::create_dir_all(dir).map_err(storage)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }
}

impl Storage for Disk {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ComponentError> {
        match std::fs::read(self.dir.join(key)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(storage(e)),
        }
    }

    /// Writes by rename, so a crash never leaves half a file.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), ComponentError> {
        let path = self.dir.join(key);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(storage)?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(storage)
    }

    fn remove(&self, key: &str) -> Result<(), ComponentError> {
        match std::fs::remove_file(self.dir.join(key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(storage(e)),
        }
    }

    fn versions(&self, tenant: &Tenant) -> Result<Vec<StoredVersion>, ComponentError> {
        let Some(bytes) = self.get(&versions_key(tenant))? else {
            return Ok(vec![]);
        };
        serde_json::from_slice(&bytes).map_err(storage)
    }

    fn add_version(&self, tenant: &Tenant, version: &StoredVersion) -> Result<(), ComponentError> {
        let mut versions = self.versions(tenant)?;
        if versions.iter().any(|v| v.version == version.version) {
            return Ok(());
        }
        versions.push(version.clone());
        self.put_versions(tenant, &versions)
    }

    fn remove_version(&self, tenant: &Tenant, version: &str) -> Result<(), ComponentError> {
        let mut versions = self.versions(tenant)?;
        versions.retain(|v| v.version != version);
        self.put_versions(tenant, &versions)
    }

    fn active(&self, tenant: &Tenant) -> Result<Option<String>, ComponentError> {
        Ok(self
            .get(&format!("{tenant}/active"))?
            .map(|v| String::from_utf8_lossy(&v).trim().to_string()))
    }

    fn set_active(&self, tenant: &Tenant, version: Option<&str>) -> Result<(), ComponentError> {
        let key = format!("{tenant}/active");
        match version {
            Some(v) => self.put(&key, v.as_bytes()),
            None => self.remove(&key),
        }
    }
}

/// Where a tenant's versions are listed: `[{"version", "size", "uploaded_ms", "label"?}]`,
/// upload order.
fn versions_key(tenant: &Tenant) -> String {
    format!("{tenant}/versions.json")
}

impl Disk {
    fn put_versions(
        &self,
        tenant: &Tenant,
        versions: &[StoredVersion],
    ) -> Result<(), ComponentError> {
        let bytes = serde_json::to_vec_pretty(versions).map_err(storage)?;
        self.put(&versions_key(tenant), &bytes)
    }
}
