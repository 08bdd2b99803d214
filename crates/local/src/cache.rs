//! The in-process cache backend: the local default. Bounded (the oldest entry goes first
//! when full), lost on restart, private to one process.

use sluice_contract::Tenant;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;

use sluice_contract::cache::{BANDS, CacheEntry, CacheStore};
use sluice_contract::error::CacheError;

/// Entries in memory, indexed by exact key and by LSH bucket.
pub struct MemoryCache {
    max_entries: usize,
    inner: Mutex<Inner>,
}

type Id = (Tenant, String);

#[derive(Default)]
struct Inner {
    /// (tenant, key) → (insertion number, entry).
    entries: HashMap<Id, (u64, CacheEntry)>,
    /// (tenant, band, bucket) → keys.
    buckets: HashMap<(Tenant, usize, u32), HashSet<String>>,
    /// Insertion number → (tenant, key): the eviction order.
    order: BTreeMap<u64, Id>,
    next: u64,
}

impl Inner {
    fn remove(&mut self, id: &Id) -> Option<CacheEntry> {
        let (seq, entry) = self.entries.remove(id)?;
        self.order.remove(&seq);
        for (band, bucket) in entry.buckets.iter().enumerate() {
            let slot = (entry.tenant.clone(), band, *bucket);
            if let Some(keys) = self.buckets.get_mut(&slot) {
                keys.remove(&entry.key);
                if keys.is_empty() {
                    self.buckets.remove(&slot);
                }
            }
        }
        Some(entry)
    }
}

impl MemoryCache {
    /// A cache holding at most `max_entries` entries (at least 1).
    pub fn new(max_entries: usize) -> Self {
        Self {
            max_entries: max_entries.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Number of entries held, expired ones included until they are evicted.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.entries.len())
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, CacheError> {
        self.inner
            .lock()
            .map_err(|_| CacheError::Backend("memory cache lock poisoned".into()))
    }
}

impl MemoryCache {
    /// Deletes the tenant's entries that `doomed` picks; how many.
    fn delete_where(
        &self,
        tenant: &Tenant,
        doomed: impl Fn(&CacheEntry) -> bool,
    ) -> Result<usize, CacheError> {
        let mut inner = self.lock()?;
        let ids: Vec<Id> = (inner.entries.iter())
            .filter(|((t, _), (_, e))| t == tenant && doomed(e))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            inner.remove(id);
        }
        Ok(ids.len())
    }
}

#[async_trait]
impl CacheStore for MemoryCache {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn in_process(&self) -> bool {
        true
    }

    async fn get(&self, tenant: &Tenant, key: &str) -> Result<Option<CacheEntry>, CacheError> {
        let inner = self.lock()?;
        let id = (tenant.clone(), key.to_string());
        Ok(inner.entries.get(&id).map(|(_, e)| e.clone()))
    }

    async fn candidates(
        &self,
        tenant: &Tenant,
        buckets: &[u32],
    ) -> Result<Vec<CacheEntry>, CacheError> {
        let inner = self.lock()?;
        let mut keys = HashSet::new();
        for (band, bucket) in buckets.iter().enumerate().take(BANDS) {
            if let Some(found) = inner.buckets.get(&(tenant.clone(), band, *bucket)) {
                keys.extend(found.iter().cloned());
            }
        }
        Ok(keys
            .into_iter()
            .filter_map(|key| inner.entries.get(&(tenant.clone(), key)))
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn put(&self, entry: &CacheEntry) -> Result<(), CacheError> {
        let mut inner = self.lock()?;
        let id = (entry.tenant.clone(), entry.key.clone());
        inner.remove(&id);
        // Make room by evicting the oldest entry. Every entry gets the same TTL, so the oldest
        // is also the first to expire: no scan for expired entries is needed.
        while inner.entries.len() >= self.max_entries {
            let Some(oldest) = inner.order.first_key_value().map(|(_, id)| id.clone()) else {
                break;
            };
            inner.remove(&oldest);
        }
        let seq = inner.next;
        inner.next += 1;
        for (band, bucket) in entry.buckets.iter().enumerate() {
            inner
                .buckets
                .entry((entry.tenant.clone(), band, *bucket))
                .or_default()
                .insert(entry.key.clone());
        }
        inner.order.insert(seq, id.clone());
        inner.entries.insert(id, (seq, entry.clone()));
        Ok(())
    }

    async fn clear(&self, tenant: &Tenant, binding: Option<&str>) -> Result<usize, CacheError> {
        self.delete_where(tenant, |e| {
            binding.is_none_or(|b| e.scope.binding.as_deref() == Some(b))
        })
    }

    async fn forget(&self, tenant: &Tenant, answer: &str) -> Result<usize, CacheError> {
        self.delete_where(tenant, |e| e.answer.digest() == answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_down_voted_answer_is_forgotten_wherever_it_is_held() {
        sluice_testkit::forgets_an_answer_wherever_it_is_held(&MemoryCache::new(10)).await;
    }

    /// Unix time in seconds.
    fn now() -> u64 {
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
            .map_or(0, |d| d.as_secs())
    }
    use sluice_contract::cache::CachedAnswer;

    fn t(name: &str) -> Tenant {
        Tenant::new(name).unwrap()
    }

    fn entry(tenant: &str, key: &str, buckets: Vec<u32>) -> CacheEntry {
        CacheEntry {
            tenant: t(tenant),
            key: key.into(),
            query: key.into(),
            vector: vec![1.0],
            buckets,
            scope: sluice_testkit::scope(0),
            expires_at: now() + 60,
            answer: CachedAnswer {
                tokens: vec![],
                sources: vec![],
                finish_reason: "stop".into(),
                token_count: 0,
                token_count_source: "usage".into(),
                extract: None,
                grounding: None,
                cited: Vec::new(),
            },
        }
    }

    #[tokio::test]
    async fn full_cache_evicts_the_oldest_entry_and_its_buckets() {
        let c = MemoryCache::new(2);
        c.put(&entry("t", "a", vec![1, 2])).await.unwrap();
        c.put(&entry("t", "b", vec![1, 3])).await.unwrap();
        c.put(&entry("t", "a", vec![1, 2])).await.unwrap(); // rewritten: now the newest
        c.put(&entry("t", "c", vec![9, 9])).await.unwrap();
        assert_eq!(c.len(), 2);
        assert!(c.get(&t("t"), "b").await.unwrap().is_none());
        assert!(c.get(&t("t"), "a").await.unwrap().is_some());
        let found = c.candidates(&t("t"), &[1, 3]).await.unwrap();
        assert_eq!(found.len(), 1, "b's buckets left with it");
        assert_eq!(found[0].key, "a");
    }

    #[tokio::test]
    async fn buckets_and_keys_are_per_tenant_and_clear_removes_one_tenant() {
        let c = MemoryCache::new(10);
        c.put(&entry("acme", "k", vec![5])).await.unwrap();
        c.put(&entry("globex", "k", vec![5])).await.unwrap();
        let found = c.candidates(&t("acme"), &[5]).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tenant, "acme");
        let mut bound = entry("acme", "kb", vec![6]);
        bound.scope.binding = Some("team-a".into());
        c.put(&bound).await.unwrap();
        assert_eq!(c.clear(&t("acme"), Some("team-a")).await.unwrap(), 1);
        assert!(c.get(&t("acme"), "kb").await.unwrap().is_none());
        assert!(c.get(&t("acme"), "k").await.unwrap().is_some());
        assert_eq!(c.clear(&t("acme"), None).await.unwrap(), 1);
        assert!(c.get(&t("acme"), "k").await.unwrap().is_none());
        assert!(c.get(&t("globex"), "k").await.unwrap().is_some());
        assert!(c.candidates(&t("acme"), &[5]).await.unwrap().is_empty());
    }
}
