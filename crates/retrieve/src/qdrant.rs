//! Hybrid retrieval on a Qdrant server or Qdrant Cloud, over its REST API.
//!
//! The collection has the Edge store's layout — a `dense` cosine vector, a `bm25` sparse
//! vector with the IDF modifier, the same payload and point ids — and a search is the same
//! query: a dense prefetch and a BM25 prefetch, filtered by tenant, fused by the tenant's
//! weighted RRF in Qdrant (`{"rrf": {"k", "weights"}}`) — or, for a convex combination, which
//! Qdrant cannot compute, both halves in one batch call fused here.
//! Sparse vectors are computed here with Qdrant's own BM25 encoder, the one the Edge store
//! uses, so the two rank alike. Corpus versions live in a second collection,
//! `<collection>_versions`, one point per tenant.
//!
//! Calls go through the shared [`crate::rest`] client (keep-alive, timeouts, read retries).

use crate::config::{QdrantConfig, StoreBackend, StoreConfig};
use async_trait::async_trait;
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::error::StoreError;
use sluice_contract::stages::{
    DocumentInfo, DocumentPage, Hit, Page, Search, Selection, Store, StoredChunk,
};

use crate::rest::{Rest, VersionMemo, backend, next_version, qdrant_result};
use crate::{
    DENSE, IndexedFields, SPARSE, Written, best_of_fused, chunk_payload, filter_json, fused_limit,
    hit_from, point_uuid, prefetch_limit, scroll_body, search_filter_json, selection_filter_json,
    stored_document,
};

/// The Qdrant REST store.
pub struct QdrantStore {
    rest: Rest,
    collection: String,
    bm25: EdgeBm25,
    versions: VersionMemo,
    /// Metadata fields this process has asked an index for.
    indexed: IndexedFields,
}

impl QdrantStore {
    /// The store `SLUICE_QDRANT_*` and `SLUICE_STORE_*` describe; no request is made.
    pub fn from_config(store: &StoreConfig) -> Result<Self, StoreError> {
        match &store.backend {
            StoreBackend::Qdrant(qdrant) => Self::new(store, qdrant),
            other => Err(StoreError::Open(format!(
                "SLUICE_STORE is not qdrant ({other:?})"
            ))),
        }
    }

    /// The store over `config`, its calls bounded as `store` says; no request is made.
    pub fn new(store: &StoreConfig, config: &QdrantConfig) -> Result<Self, StoreError> {
        let headers: Vec<(&'static str, &str)> = config
            .api_key
            .as_ref()
            .map(|key| ("api-key", key.expose()))
            .into_iter()
            .collect();
        let rest = Rest::new(
            store,
            &config.url,
            &headers,
            "collection missing (run `sluice store create-collection`)",
        )?;
        let bm25 = EdgeBm25::new(EdgeBm25Config::default())
            .map_err(|e| StoreError::Open(format!("BM25 encoder: {e}")))?;
        Ok(Self {
            rest,
            collection: config.collection.clone(),
            bm25,
            versions: VersionMemo::default(),
            indexed: IndexedFields::default(),
        })
    }

    fn versions_collection(&self) -> String {
        format!("{}_versions", self.collection)
    }

    /// One call with a JSON body; returns the response's `result`, or `None` for 404.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        read: bool,
    ) -> Result<Option<Value>, StoreError> {
        let body = body.map(|b| b.to_string().into_bytes());
        match self.rest.send(method.clone(), path, body, read).await? {
            None => Ok(None),
            Some(text) => qdrant_result(&text)
                .map(Some)
                .map_err(|e| backend(format!("{method} {path}: {e}"))),
        }
    }

    /// Creates the collection (dense cosine `dim`-d + sparse BM25 with IDF, keyword indexes
    /// on `tenant` — marked as the tenant key — and `doc_id`, an integer index on `chunk`) and
    /// the corpus-version collection. Returns `false` when the collection already existed.
    pub async fn create_collection(&self, dim: usize) -> Result<bool, StoreError> {
        let path = format!("/collections/{}", self.collection);
        if self.call(Method::GET, &path, None, true).await?.is_some() {
            return Ok(false);
        }
        let body = json!({
            "vectors": {DENSE: {"size": dim, "distance": "Cosine"}},
            "sparse_vectors": {SPARSE: {"modifier": "idf"}},
        });
        self.call(Method::PUT, &path, Some(&body), false).await?;
        for (field, schema) in [
            ("tenant", json!({"type": "keyword", "is_tenant": true})),
            ("doc_id", json!({"type": "keyword"})),
            ("chunk", json!({"type": "integer"})),
        ] {
            self.create_index(field, schema).await?;
        }
        let versions = format!("/collections/{}", self.versions_collection());
        let body = json!({"vectors": {"size": 1, "distance": "Dot"}});
        self.call(Method::PUT, &versions, Some(&body), false)
            .await?;
        Ok(true)
    }

    /// Creates (or, when it exists with this schema, keeps) a payload index on `field`.
    async fn create_index(&self, field: &str, schema: Value) -> Result<(), StoreError> {
        let body = json!({"field_name": field, "field_schema": schema});
        let path = format!("/collections/{}/index?wait=true", self.collection);
        self.call(Method::PUT, &path, Some(&body), false).await?;
        Ok(())
    }

    /// Sends a read to the Query API; a 404 means the collection is missing.
    async fn query(&self, path: &str, body: Vec<u8>) -> Result<String, StoreError> {
        self.rest
            .send(Method::POST, path, Some(body), true)
            .await?
            .ok_or_else(|| backend(format!("collection {} does not exist", self.collection)))
    }

    /// The two halves of a hybrid search as one batch call (`/points/query/batch`), each
    /// ranked by its own scores, fused here by `search.fusion`.
    async fn search_halves(
        &self,
        halves: Vec<Prefetch<'_>>,
        search: &Search<'_>,
    ) -> Result<Vec<Hit>, StoreError> {
        let searches: Vec<HalfBody> = (halves.into_iter())
            .map(|half| HalfBody {
                half,
                with_payload: true,
                with_vector: [DENSE],
            })
            .collect();
        let body = serde_json::to_vec(&json!({ "searches": searches })).map_err(backend)?;
        let path = format!("/collections/{}/points/query/batch", self.collection);
        let text = self.query(&path, body).await?;
        let mut halves = parse_batch_response(&text)?.into_iter();
        let dense = halves.next().unwrap_or_default();
        let bm25 = halves.next().unwrap_or_default();
        Ok(Hit::fuse(&search.fusion, dense, bm25, search.k))
    }

    fn version_id(tenant: &str) -> String {
        point_uuid(tenant, "", 0).to_string()
    }
}

/// A sparse vector in the REST form.
fn sparse_json(indices: &[u32], values: &[f32]) -> Value {
    json!({"indices": indices, "values": values})
}

#[async_trait]
impl Store for QdrantStore {
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError> {
        let filter = search_filter_json(tenant, search.filter);
        let limit = prefetch_limit(search.k);
        let sparse = self.bm25.embed_query(search.query);
        let dense_query = QueryVector::Dense(search.vector);
        // A query of stopwords only has no BM25 terms: dense alone then.
        let sparse_query = (!sparse.indices.is_empty()).then_some(QueryVector::Sparse {
            indices: &sparse.indices,
            values: &sparse.values,
        });
        let half = |query, using| Prefetch {
            query,
            using,
            limit,
            filter: &filter,
        };
        let mut prefetch = vec![half(dense_query, DENSE)];
        prefetch.extend(sparse_query.map(|q| half(q, SPARSE)));
        let Some((k, weights)) = search.fusion.rrf_weights(prefetch.len()) else {
            // A convex combination: both halves in one batch call, fused here.
            return self.search_halves(prefetch, search).await;
        };
        let mut rrf = json!({"k": k});
        if weights.iter().any(|w| *w != 1.0) {
            rrf["weights"] = json!(weights);
        }
        let body = QueryBody {
            prefetch,
            query: json!({ "rrf": rrf }),
            filter: &filter,
            limit: fused_limit(search.k),
            with_payload: true,
            with_vector: [DENSE],
        };
        let body = serde_json::to_vec(&body).map_err(backend)?;
        let path = format!("/collections/{}/points/query", self.collection);
        let text = self.query(&path, body).await?;
        Ok(best_of_fused(parse_query_response(&text)?, search.k))
    }

    async fn replace_document(
        &self,
        tenant: &Tenant,
        document: &DocumentInfo,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        // The indexes the document's metadata wants, once per field and process.
        for (field, schema) in self.indexed.claim(&document.metadata) {
            if let Err(e) = self.create_index(&field, json!(schema)).await {
                self.indexed.forget(&field);
                return Err(e);
            }
        }
        let n = chunks.len();
        let written = Written::now(n);
        let points: Vec<Value> = chunks
            .iter()
            .map(|c| {
                let sparse = self.bm25.embed_document(&c.indexed_text());
                json!({
                    "id": point_uuid(tenant, &document.id, c.index).to_string(),
                    "vector": {DENSE: c.vector, SPARSE: sparse_json(&sparse.indices, &sparse.values)},
                    "payload": chunk_payload(tenant, document, &written, c),
                })
            })
            .collect();
        let base = format!("/collections/{}/points", self.collection);
        // Upsert first (ids are stable per chunk position), then delete the chunks past the
        // new end: readers never see the document missing while it is replaced.
        if !points.is_empty() {
            let body = json!({ "points": points });
            self.call(
                Method::PUT,
                &format!("{base}?wait=true"),
                Some(&body),
                false,
            )
            .await?;
        }
        let body = json!({ "filter": filter_json(tenant, Some(&document.id), Some(n)) });
        self.call(
            Method::POST,
            &format!("{base}/delete?wait=true"),
            Some(&body),
            false,
        )
        .await?;
        Ok(())
    }

    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError> {
        let body = scroll_body(tenant, selection, page)?;
        let path = format!("/collections/{}/points/scroll", self.collection);
        let text = self.query(&path, body.to_string().into_bytes()).await?;
        parse_scroll_response(&text)
    }

    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError> {
        let body = json!({ "filter": selection_filter_json(tenant, selection, false) });
        let path = format!("/collections/{}/points/delete?wait=true", self.collection);
        self.call(Method::POST, &path, Some(&body), false).await?;
        Ok(())
    }

    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        let version = next_version(self.corpus_version(tenant).await?);
        let body = json!({"points": [{
            "id": Self::version_id(tenant),
            "vector": [1.0],
            "payload": {"tenant": tenant, "corpus_version": version},
        }]});
        let path = format!(
            "/collections/{}/points?wait=true",
            self.versions_collection()
        );
        self.call(Method::PUT, &path, Some(&body), false).await?;
        self.versions.put(tenant, version);
        Ok(version)
    }

    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        if let Some(v) = self.versions.get(tenant) {
            return Ok(v);
        }
        let path = format!(
            "/collections/{}/points/{}",
            self.versions_collection(),
            Self::version_id(tenant)
        );
        let version = match self.call(Method::GET, &path, None, true).await? {
            None => 0,
            Some(point) => point["payload"]["corpus_version"].as_u64().ok_or_else(|| {
                backend(format!(
                    "corpus version point of {tenant} has no corpus_version"
                ))
            })?,
        };
        self.versions.put(tenant, version);
        Ok(version)
    }

    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        let body = json!({"filter": filter_json(tenant, None, None), "exact": true});
        let path = format!("/collections/{}/points/count", self.collection);
        let result = self
            .call(Method::POST, &path, Some(&body), true)
            .await?
            .ok_or_else(|| backend(format!("collection {} does not exist", self.collection)))?;
        result["count"]
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| backend("count response without a count"))
    }

    fn version_memo(&self) -> std::time::Duration {
        crate::rest::VERSION_FRESH
    }
}

/// The body of a Query API call, serialised without building a JSON tree of the vector.
#[derive(Serialize)]
struct QueryBody<'a> {
    prefetch: Vec<Prefetch<'a>>,
    query: Value,
    filter: &'a Value,
    limit: usize,
    with_payload: bool,
    with_vector: [&'static str; 1],
}

/// One search of a batch call: a half of the hybrid search, with what a hit needs.
#[derive(Serialize)]
struct HalfBody<'a> {
    #[serde(flatten)]
    half: Prefetch<'a>,
    with_payload: bool,
    with_vector: [&'static str; 1],
}

#[derive(Serialize)]
struct Prefetch<'a> {
    query: QueryVector<'a>,
    using: &'static str,
    limit: usize,
    filter: &'a Value,
}

#[derive(Serialize)]
#[serde(untagged)]
enum QueryVector<'a> {
    Dense(&'a [f32]),
    Sparse {
        indices: &'a [u32],
        values: &'a [f32],
    },
}

/// A query response's `result`: `{"points": [ScoredPoint…]}`, read straight into the fields
/// a hit needs.
#[derive(Deserialize)]
struct QueryResult {
    points: Vec<ScoredPoint>,
}

#[derive(Deserialize)]
struct ScoredPoint {
    score: f32,
    payload: serde_json::Map<String, Value>,
    #[serde(default)]
    vector: Option<NamedVectors>,
}

#[derive(Deserialize)]
struct NamedVectors {
    #[serde(default)]
    dense: Vec<f32>,
}

/// A scroll response's `result`: the points (their listed payload fields) and where the next
/// page starts.
#[derive(Deserialize)]
struct ScrollResult {
    points: Vec<Record>,
    #[serde(default)]
    next_page_offset: Option<Value>,
}

#[derive(Deserialize)]
struct Record {
    #[serde(default)]
    payload: Option<serde_json::Map<String, Value>>,
}

/// The documents of a whole scroll response body (`{"result": {"points": […],
/// "next_page_offset": …}, …}`), each from its first chunk's payload.
pub fn parse_scroll_response(text: &str) -> Result<DocumentPage, StoreError> {
    let result: ScrollResult = qdrant_result(text).map_err(backend)?;
    Ok(DocumentPage {
        documents: (result.points.into_iter())
            .filter_map(|p| p.payload.as_ref().map(stored_document))
            .collect(),
        next: match result.next_page_offset {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(other) => Some(other.to_string()),
        },
    })
}

/// The hits of a whole query response body (`{"result": {"points": […]}, …}`).
pub fn parse_query_response(text: &str) -> Result<Vec<Hit>, StoreError> {
    let result: QueryResult = qdrant_result(text).map_err(backend)?;
    Ok(result.hits())
}

/// The hits of each search of a batch response body (`{"result": [{"points": […]}, …]}`).
pub fn parse_batch_response(text: &str) -> Result<Vec<Vec<Hit>>, StoreError> {
    let results: Vec<QueryResult> = qdrant_result(text).map_err(backend)?;
    Ok(results.into_iter().map(QueryResult::hits).collect())
}

impl QueryResult {
    fn hits(self) -> Vec<Hit> {
        (self.points.into_iter())
            .map(|p| {
                let vector = p.vector.map(|v| v.dense).unwrap_or_default();
                hit_from(&p.payload, p.score, vector)
            })
            .collect()
    }
}
