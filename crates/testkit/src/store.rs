//! Stores: one in memory, and a wrapper that makes any store slow or failing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sluice_contract::Tenant;
use sluice_contract::error::StoreError;
use sluice_contract::stages::{
    DocumentInfo, DocumentPage, Hit, Page, Search, Selection, Store, StoredChunk, StoredDocument,
};

use crate::HashEmbedder;

#[derive(Default)]
struct Corpus {
    version: u64,
    documents: BTreeMap<String, (DocumentInfo, Vec<StoredChunk>)>,
    /// When each document was last written (RFC 3339, UTC).
    written: HashMap<String, String>,
}

/// Where a page of a listing starts: the id of its first document, marked as this store's.
const CURSOR: &str = "memory:";

/// Now, as RFC 3339 in UTC to the second (the civil date from the days since the epoch).
fn now_rfc3339() -> String {
    let secs = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rest / 3600, rest / 60 % 60, rest % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

/// A hybrid store in memory: a search ranks the tenant's chunks by cosine to the query vector
/// and by how many of the query's words they contain, and fuses the two rankings by the
/// search's rule, as the real stores do. Tenants never see each other's chunks.
#[derive(Default)]
pub struct MemoryStore {
    tenants: Mutex<HashMap<Tenant, Corpus>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Tenant, Corpus>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError> {
        let tenants = self.lock();
        let Some(corpus) = tenants.get(tenant) else {
            return Ok(Vec::new());
        };
        let filter = search.filter;
        let hits: Vec<(Hit, String)> = corpus
            .documents
            .values()
            // The filter's reference meaning, before ranking: as the real stores apply it.
            .filter(|(info, _)| filter.is_none_or(|f| f.matches(&info.metadata)))
            .flat_map(|(info, chunks)| {
                chunks.iter().map(move |c| {
                    let hit = Hit {
                        place: c.place.clone(),
                        document: info.clone(),
                        chunk: c.index,
                        text: c.text.clone(),
                        tokens: c.tokens,
                        vector: c.vector.clone(),
                        score: 0.0,
                    };
                    // What BM25 indexes, as the real stores do: the header and the text.
                    (hit, c.indexed_text().into_owned())
                })
            })
            .collect();
        let cosine = |v: &[f32]| -> f32 { v.iter().zip(search.vector).map(|(a, b)| a * b).sum() };
        let mut dense: Vec<Hit> = (hits.iter().map(|(h, _)| h.clone()))
            .map(|h| Hit {
                score: cosine(&h.vector),
                ..h
            })
            .collect();
        dense.sort_by(|a, b| b.score.total_cmp(&a.score));
        let terms: HashSet<String> = HashEmbedder::words(search.query).collect();
        let overlap = |text: &str| {
            HashEmbedder::words(text)
                .filter(|w| terms.contains(w))
                .count()
        };
        let mut sparse: Vec<Hit> = (hits.into_iter())
            .map(|(h, indexed)| Hit {
                score: overlap(&indexed) as f32,
                ..h
            })
            .filter(|h| h.score > 0.0)
            .collect();
        sparse.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(Hit::fuse(&search.fusion, dense, sparse, search.k))
    }

    async fn replace_document(
        &self,
        tenant: &Tenant,
        document: &DocumentInfo,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        let mut tenants = self.lock();
        let corpus = tenants.entry(tenant.clone()).or_default();
        corpus.written.insert(document.id.clone(), now_rfc3339());
        (corpus.documents).insert(document.id.clone(), (document.clone(), chunks));
        Ok(())
    }

    /// By id; the cursor is the id the next page starts at, marked as this store's.
    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError> {
        let tenants = self.lock();
        let Some(corpus) = tenants.get(tenant) else {
            return Ok(DocumentPage::default());
        };
        let from = match page.cursor {
            None => "",
            Some(cursor) => cursor.strip_prefix(CURSOR).ok_or_else(|| {
                StoreError::Invalid(format!("{cursor:?} is not a cursor this store handed out"))
            })?,
        };
        let mut picked = (corpus.documents.range(from.to_string()..))
            .filter(|(_, (info, _))| selection.matches(info))
            .map(|(id, (info, chunks))| StoredDocument {
                document: info.clone(),
                chunks: Some(chunks.len()),
                ingested_at: corpus.written.get(id).cloned(),
            });
        let documents: Vec<StoredDocument> = picked.by_ref().take(page.limit).collect();
        let next = picked.next().map(|d| format!("{CURSOR}{}", d.document.id));
        Ok(DocumentPage { documents, next })
    }

    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError> {
        if let Some(corpus) = self.lock().get_mut(tenant) {
            corpus
                .documents
                .retain(|_, (info, _)| !selection.matches(info));
        }
        Ok(())
    }

    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        let mut tenants = self.lock();
        let corpus = tenants.entry(tenant.clone()).or_default();
        corpus.version += 1;
        Ok(corpus.version)
    }

    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        Ok(self.lock().get(tenant).map_or(0, |c| c.version))
    }

    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        Ok(self.lock().get(tenant).map_or(0, |c| {
            c.documents.values().map(|(_, chunks)| chunks.len()).sum()
        }))
    }
}

/// A store that is slow or broken as set: searches and listings take `delay` (then fail with
/// `fail`),
/// corpus-version reads take `version_delay` (then fail with `fail_versions`), writes fail
/// with `fail_writes`, and with `scramble` searches return ties in a new order each time.
/// What is not troubled goes to `inner` untouched.
pub struct Troubled {
    /// The store underneath.
    pub inner: Arc<dyn Store>,
    /// Added before every search and listing.
    pub delay: Duration,
    /// Every search and listing fails (after the delay).
    pub fail: bool,
    /// Every search and corpus-version read fails at once, as the answer path's reads of a
    /// remote store behind an open circuit breaker do.
    pub open_circuit: bool,
    /// Added before every corpus-version read.
    pub version_delay: Duration,
    /// Every corpus-version read fails (after its delay).
    pub fail_versions: bool,
    /// Every write (document replacement) fails.
    pub fail_writes: bool,
    /// How long its writes take to show in reads, as it tells the pipeline ([`Store::lag`];
    /// the store underneath still reads its own writes at once).
    pub lag: Duration,
    /// How long other processes may read a version after it changed ([`Store::version_memo`]).
    pub memo: Duration,
    /// Every search's hits come back with one score, in an order turned on every call: a
    /// store's arbitrary order among equal scores (identical vectors).
    pub scramble: bool,
    /// (query, document): searches for that query text leave that document out — a change
    /// that moved one question's sources and no other's.
    pub hidden: std::sync::Mutex<Option<(String, String)>>,
    searches: std::sync::atomic::AtomicUsize,
}

impl Troubled {
    /// `inner`, untroubled until fields are set.
    pub fn around(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            delay: Duration::ZERO,
            fail: false,
            open_circuit: false,
            version_delay: Duration::ZERO,
            fail_versions: false,
            fail_writes: false,
            lag: Duration::ZERO,
            memo: Duration::ZERO,
            scramble: false,
            hidden: Default::default(),
            searches: Default::default(),
        }
    }
}

#[async_trait]
impl Store for Troubled {
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError> {
        if self.open_circuit {
            return Err(StoreError::CircuitOpen);
        }
        tokio::time::sleep(self.delay).await;
        if self.fail {
            return Err(StoreError::Backend("injected failure".into()));
        }
        let mut hits = self.inner.search(tenant, search).await?;
        let hidden = self
            .hidden
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((query, document)) = hidden
            && search.query == query
        {
            hits.retain(|h| h.document.id != document);
        }
        if self.scramble && !hits.is_empty() {
            let call = (self.searches).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for hit in &mut hits {
                hit.score = 0.5;
            }
            let n = hits.len();
            hits.rotate_left(call % n);
            if call % 2 == 1 {
                hits.reverse();
            }
        }
        Ok(hits)
    }
    async fn replace_document(
        &self,
        tenant: &Tenant,
        d: &DocumentInfo,
        c: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        if self.fail_writes {
            return Err(StoreError::Backend("injected write failure".into()));
        }
        self.inner.replace_document(tenant, d, c).await
    }
    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError> {
        tokio::time::sleep(self.delay).await;
        if self.fail {
            return Err(StoreError::Backend("injected failure".into()));
        }
        self.inner.documents(tenant, selection, page).await
    }
    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError> {
        if self.fail_writes {
            return Err(StoreError::Backend("injected write failure".into()));
        }
        self.inner.delete_documents(tenant, selection).await
    }
    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        self.inner.bump_corpus_version(tenant).await
    }
    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        if self.open_circuit {
            return Err(StoreError::CircuitOpen);
        }
        tokio::time::sleep(self.version_delay).await;
        if self.fail_versions {
            return Err(StoreError::Backend("injected version failure".into()));
        }
        self.inner.corpus_version(tenant).await
    }
    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        self.inner.count(tenant).await
    }

    fn lag(&self) -> Duration {
        self.lag.max(self.inner.lag())
    }

    fn version_memo(&self) -> Duration {
        self.memo.max(self.inner.version_memo())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant;
    use sluice_contract::stages::Embedder;

    fn chunk(e: &HashEmbedder, index: usize, text: &str) -> StoredChunk {
        StoredChunk {
            place: Default::default(),
            header: String::new(),
            index,
            text: text.into(),
            tokens: e.count_tokens(text),
            vector: e.embed(&[text]).unwrap().remove(0),
        }
    }

    #[tokio::test]
    async fn the_matching_chunk_comes_first_and_tenants_are_apart() {
        let e = HashEmbedder::new();
        let store = MemoryStore::new();
        let (acme, globex) = (tenant("acme"), tenant("globex"));
        let cards = vec![chunk(&e, 0, "a lost card is replaced in five days")];
        let fees = vec![chunk(&e, 0, "the monthly fee is two dollars")];
        store
            .replace_document(&acme, &crate::document("cards"), cards)
            .await
            .unwrap();
        store
            .replace_document(&acme, &crate::document("fees"), fees)
            .await
            .unwrap();
        let q = "how long until a lost card is replaced";
        let v = e.embed(&[q]).unwrap().remove(0);
        let hits = store.search(&acme, &Search::new(q, &v, 5)).await.unwrap();
        assert_eq!(hits[0].document.id, "cards");
        assert!(hits[0].score > hits[1].score);
        assert!(
            store
                .search(&globex, &Search::new(q, &v, 5))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.count(&acme).await.unwrap(), 2);
        assert_eq!(store.bump_corpus_version(&acme).await.unwrap(), 1);
        assert_eq!(store.corpus_version(&globex).await.unwrap(), 0);
    }
}
