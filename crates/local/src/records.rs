//! Tenants' records (evaluation sets and runs) in files, `sluice serve`'s: one JSON file per
//! tenant and shelf, `<dir>/<tenant>/<shelf>.json` (`{"name": {"name", "version",
//! "updated_at", "body"}}`), replaced whole on each write, so a reader never sees half a
//! file. A tenant's name is a safe file name (letters, digits, `-`, `_`).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use sluice_contract::Tenant;
use sluice_contract::evals::{Record, Records, RecordsError, Shelf, Shelved, next_record};

/// The records folder.
pub struct FileRecords {
    dir: PathBuf,
    /// One write at a time in this process: a write reads the shelf's file, changes one
    /// record and writes it back.
    writing: tokio::sync::Mutex<()>,
}

impl FileRecords {
    /// The folder at `dir` (made at the first write).
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    fn path(&self, tenant: &Tenant, shelf: Shelf) -> PathBuf {
        self.dir
            .join(tenant.as_str())
            .join(format!("{}.json", shelf.as_str()))
    }

    fn fail(path: &Path, e: impl std::fmt::Display) -> RecordsError {
        RecordsError::Unavailable(format!("{}: {e}", path.display()))
    }

    async fn read(&self, tenant: &Tenant, shelf: Shelf) -> Result<Shelved, RecordsError> {
        let path = self.path(tenant, shelf);
        match tokio::fs::read_to_string(&path).await {
            Ok(text) => serde_json::from_str(&text).map_err(|e| Self::fail(&path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Shelved::default()),
            Err(e) => Err(Self::fail(&path, e)),
        }
    }

    /// Changes the shelf's file by `change`, one writer at a time.
    async fn change<T>(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        change: impl FnOnce(&mut Shelved) -> T,
    ) -> Result<T, RecordsError> {
        let _one_at_a_time = self.writing.lock().await;
        let mut records = self.read(tenant, shelf).await?;
        let out = change(&mut records);
        let path = self.path(tenant, shelf);
        let text = serde_json::to_string_pretty(&records).map_err(|e| Self::fail(&path, e))?;
        let at = path.clone();
        tokio::task::spawn_blocking(move || crate::replace_file(&at, &(text + "\n")))
            .await
            .map_err(|e| Self::fail(&path, e))?
            .map_err(|e| Self::fail(&path, e))?;
        Ok(out)
    }
}

#[async_trait]
impl Records for FileRecords {
    async fn get(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<Option<Record>, RecordsError> {
        Ok(self.read(tenant, shelf).await?.remove(name))
    }

    async fn list(&self, tenant: &Tenant, shelf: Shelf) -> Result<Vec<Record>, RecordsError> {
        Ok(self.read(tenant, shelf).await?.into_values().collect())
    }

    async fn put(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
        body: serde_json::Value,
    ) -> Result<Record, RecordsError> {
        self.change(tenant, shelf, |s| next_record(s, name, body))
            .await
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<bool, RecordsError> {
        self.change(tenant, shelf, |s| s.remove(name).is_some())
            .await
    }
    async fn tenants(&self, shelf: Shelf) -> Result<Vec<Tenant>, RecordsError> {
        let mut entries = match tokio::fs::read_dir(&self.dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::fail(&self.dir, e)),
        };
        let mut tenants = Vec::new();
        while let Some(entry) =
            (entries.next_entry().await).map_err(|e| Self::fail(&self.dir, e))?
        {
            let name = entry.file_name().to_string_lossy().to_string();
            if let Ok(tenant) = Tenant::new(&name)
                && !self.read(&tenant, shelf).await?.is_empty()
            {
                tenants.push(tenant);
            }
        }
        tenants.sort();
        Ok(tenants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_keep_each_tenants_shelves_apart_and_survive_a_new_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        sluice_testkit::records_keep_each_tenants_shelves_apart(&FileRecords::new(dir.path()))
            .await;
        let reopened = FileRecords::new(dir.path());
        let acme = Tenant::new("acme").unwrap();
        let kept = reopened.get(&acme, Shelf::EvalSets, "other").await.unwrap();
        assert_eq!(
            kept.map(|r| r.version),
            Some(1),
            "read back by another process"
        );
    }
}
