use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use sluice_contract::tenant_settings::Citations;

use super::*;
use sluice_local::FileSettings;

fn acme() -> Tenant {
    Tenant::new("acme").unwrap()
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn with_k(k: usize) -> TenantSettings {
    TenantSettings {
        k: Some(k),
        ..TenantSettings::default()
    }
}

#[tokio::test]
async fn the_file_keeps_each_tenants_settings_and_counts_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.json");
    let file = FileSettings::new(&path);
    assert_eq!(file.get(&acme()).await.unwrap(), None, "no file yet");
    let first = file.put(&acme(), with_k(3)).await.unwrap();
    assert_eq!(first.version, 1);
    let mut prompt = TenantSettings::default();
    prompt.prompt.citations = Citations::None;
    let second = file.put(&acme(), prompt.clone()).await.unwrap();
    assert_eq!(second.version, 2);
    let globex = Tenant::new("globex").unwrap();
    assert_eq!(file.put(&globex, with_k(7)).await.unwrap().version, 1);
    // Another reader of the same file sees both tenants' latest.
    let again = FileSettings::new(&path);
    assert_eq!(again.get(&acme()).await.unwrap().unwrap().settings, prompt);
    assert_eq!(
        again.get(&globex).await.unwrap().unwrap().settings.k,
        Some(7)
    );
    std::fs::write(&path, "{not json").unwrap();
    assert!(
        again.get(&acme()).await.is_err(),
        "a broken file is an error, not empty"
    );
}

/// A store that counts its reads and can be made to fail.
struct Counted {
    inner: FileSettings,
    reads: AtomicUsize,
    failing: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl SettingsStore for Counted {
    async fn get(&self, tenant: &Tenant) -> Result<Option<StoredSettings>, SettingsError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(SettingsError::Unavailable("injected".into()));
        }
        self.inner.get(tenant).await
    }
    async fn put(&self, t: &Tenant, s: TenantSettings) -> Result<StoredSettings, SettingsError> {
        self.inner.put(t, s).await
    }
}

fn counted(path: &std::path::Path) -> Arc<Counted> {
    Arc::new(Counted {
        inner: FileSettings::new(path),
        reads: AtomicUsize::new(0),
        failing: false.into(),
    })
}

#[tokio::test]
async fn a_kept_copy_answers_without_reading_while_it_is_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.json");
    let store = counted(&path);
    let tenants = Tenants::new(store.clone(), Duration::from_secs(3600));
    assert_eq!(tenants.get(&acme(), soon()).await, None);
    // Another process changes them; this one keeps its copy until it is stale.
    FileSettings::new(&path)
        .put(&acme(), with_k(9))
        .await
        .unwrap();
    for _ in 0..10 {
        assert_eq!(
            tenants.get(&acme(), soon()).await,
            None,
            "still the kept copy"
        );
    }
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        1,
        "read once while fresh"
    );
}

#[tokio::test]
async fn a_change_elsewhere_is_in_force_once_the_kept_copy_is_older_than_its_freshness() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.json");
    let store = counted(&path);
    let fresh = Duration::from_millis(300);
    let tenants = Tenants::new(store.clone(), fresh);
    assert_eq!(tenants.get(&acme(), soon()).await, None);
    FileSettings::new(&path)
        .put(&acme(), with_k(9))
        .await
        .unwrap();
    tokio::time::sleep(fresh + Duration::from_millis(50)).await;
    let now = tenants.get(&acme(), soon()).await.expect("read again");
    assert_eq!(now.settings.k, Some(9));

    // A failing store keeps the last known, and is asked again only after another period.
    store.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(fresh + Duration::from_millis(50)).await;
    let reads = store.reads.load(Ordering::SeqCst);
    for _ in 0..10 {
        let kept = tenants.get(&acme(), soon()).await.expect("last known");
        assert_eq!(kept.settings.k, Some(9));
    }
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        reads + 1,
        "one failed read a period"
    );
}

#[tokio::test]
async fn a_put_is_in_force_at_once_in_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let tenants = Tenants::new(
        Arc::new(FileSettings::new(&dir.path().join("s.json"))),
        Duration::from_secs(3600),
    );
    assert_eq!(tenants.get(&acme(), soon()).await, None);
    let stored = tenants.put(&acme(), with_k(2)).await.unwrap();
    assert_eq!(stored.version, 1);
    let read = tenants.get(&acme(), soon()).await.unwrap();
    assert_eq!((read.version, read.settings.k), (1, Some(2)));
}

#[tokio::test]
async fn what_is_kept_stays_bounded_whatever_tenants_ask() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileSettings::new(&dir.path().join("settings.json")));
    let tenants = Tenants::new(store, Duration::from_secs(60));
    let max = sluice_contract::REMEMBERED_TENANTS;
    for i in 0..max * 2 + 3 {
        tenants.remember(&Tenant::new(&format!("t{i}")).unwrap(), None);
    }
    let known = tenants.known();
    assert!(known.len() <= max, "{}", known.len());
    assert!(
        known.contains_key(format!("t{}", max * 2 + 2).as_str()),
        "the newest is kept"
    );
}
