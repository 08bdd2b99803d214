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
    /// What [`Records::shared`] says: set, it stands for a table every environment reads
    /// (two servers given the same one are two Lambda environments).
    shared: bool,
}

impl MemoryRecords {
    /// Records every process reads ([`Records::shared`]): what DynamoDB is to Lambda
    /// environments.
    pub fn across_processes() -> Self {
        Self {
            shared: true,
            ..Self::default()
        }
    }

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

    async fn tenants(&self, shelf: Shelf) -> Result<Vec<Tenant>, RecordsError> {
        self.check()?;
        let shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
        let mut tenants: Vec<Tenant> = (shelves.iter())
            .filter(|((_, s), kept)| *s == shelf && !kept.is_empty())
            .map(|((t, _), _)| t.clone())
            .collect();
        tenants.sort();
        Ok(tenants)
    }

    fn shared(&self) -> bool {
        self.shared
    }
}

/// What every records store must do (`sluice_contract::evals::Records`): versions that rise
/// with each write of a name, each tenant's shelves apart from each other and from another
/// tenant's, the body read back as written, listings of a shelf, deletions that say whether
/// there was something to delete. Run on the memory, file and DynamoDB stores.
pub async fn records_keep_each_tenants_shelves_apart(records: &dyn Records) {
    use serde_json::json;
    let (acme, globex) = (crate::tenant("acme"), crate::tenant("globex"));
    let body =
        json!({"questions": [{"question": "How long?", "documents": ["cards/*"]}], "n": 1.5});
    let first = records
        .put(&acme, Shelf::EvalSets, "help", body.clone())
        .await
        .expect("put");
    assert_eq!((first.name.as_str(), first.version), ("help", 1));
    let second = records
        .put(&acme, Shelf::EvalSets, "help", json!({"v": 2}))
        .await
        .expect("put");
    assert_eq!(second.version, 2, "one more at each write");
    records
        .put(&acme, Shelf::EvalSets, "other", body.clone())
        .await
        .expect("put");
    records
        .put(&acme, Shelf::Feedback, "help", body.clone())
        .await
        .expect("put");
    records
        .put(&globex, Shelf::EvalSets, "help", body.clone())
        .await
        .expect("put");
    // The tenants keeping records on a shelf: both on the sets' shelf, one on the ratings'.
    let tenants = |shelf| async move { records.tenants(shelf).await.expect("tenants") };
    assert_eq!(
        tenants(Shelf::EvalSets).await,
        [acme.clone(), globex.clone()]
    );
    assert_eq!(tenants(Shelf::Feedback).await, std::slice::from_ref(&acme));
    assert!(tenants(Shelf::Sources).await.is_empty());

    let read = records
        .get(&acme, Shelf::EvalSets, "help")
        .await
        .expect("get");
    assert_eq!(
        read.map(|r| (r.version, r.body)),
        Some((2, json!({"v": 2})))
    );
    let theirs = records
        .get(&globex, Shelf::EvalSets, "help")
        .await
        .expect("get");
    assert_eq!(
        theirs.map(|r| (r.version, r.body)),
        Some((1, body.clone())),
        "another tenant's own"
    );
    let mut names: Vec<String> = (records.list(&acme, Shelf::EvalSets).await.expect("list"))
        .into_iter()
        .map(|r| r.name)
        .collect();
    names.sort();
    assert_eq!(names, ["help", "other"], "a shelf lists its own");
    assert_eq!(
        records.list(&acme, Shelf::EvalRuns).await.expect("list"),
        vec![]
    );
    assert!(
        records
            .get(&acme, Shelf::Gaps, "help")
            .await
            .expect("get")
            .is_none()
    );

    assert!(
        records
            .delete(&acme, Shelf::EvalSets, "help")
            .await
            .expect("delete")
    );
    assert!(
        !records
            .delete(&acme, Shelf::EvalSets, "help")
            .await
            .expect("delete"),
        "nothing left"
    );
    assert!(
        records
            .get(&acme, Shelf::EvalSets, "help")
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        records
            .get(&acme, Shelf::Feedback, "help")
            .await
            .expect("get")
            .is_some(),
        "other shelf"
    );
    assert!(
        records
            .get(&globex, Shelf::EvalSets, "help")
            .await
            .expect("get")
            .is_some(),
        "other tenant"
    );
    let again = records
        .put(&acme, Shelf::EvalSets, "help", body)
        .await
        .expect("put");
    assert_eq!(again.version, 1, "a name deleted starts again");
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_memory_records_keep_each_tenants_shelves_apart() {
        super::records_keep_each_tenants_shelves_apart(&super::MemoryRecords::default()).await;
    }
}
