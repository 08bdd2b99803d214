//! [`Disk`]: components under a folder, for `sluice serve`.

use std::path::{Path, PathBuf};

use serde_json::json;
use sluice_contract::Tenant;
use sluice_contract::stages::{ComponentError, ComponentStorage as Storage};

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

    fn versions(&self, tenant: &Tenant) -> Result<Vec<(String, usize)>, ComponentError> {
        let Some(bytes) = self.get(&format!("{tenant}/versions.json"))? else {
            return Ok(vec![]);
        };
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&bytes).map_err(storage)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some((
                    r["version"].as_str()?.to_string(),
                    r["size"].as_u64()? as usize,
                ))
            })
            .collect())
    }

    fn add_version(
        &self,
        tenant: &Tenant,
        version: &str,
        size: usize,
    ) -> Result<(), ComponentError> {
        let mut versions = self.versions(tenant)?;
        if versions.iter().any(|(v, _)| v == version) {
            return Ok(());
        }
        versions.push((version.to_string(), size));
        let rows: Vec<_> = versions
            .iter()
            .map(|(v, n)| json!({"version": v, "size": n}))
            .collect();
        let bytes = serde_json::to_vec_pretty(&rows).map_err(storage)?;
        self.put(&format!("{tenant}/versions.json"), &bytes)
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
            None => match std::fs::remove_file(self.dir.join(key)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(storage(e)),
            },
        }
    }
}
