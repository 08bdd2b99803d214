//! Hybrid retrieval on Pinecone serverless, data-plane API version 2025-10.
//!
//! Pinecone keeps dense and sparse vectors in separate indexes (a serverless index is either
//! dense or sparse; its single-index "hybrid" mode needs the dot-product metric and sums the
//! two scores, weighted, which is not what the other stores do). So Sluice uses two indexes:
//!
//! - `<SLUICE_PINECONE_INDEX>`: dense, cosine, the embedding of each chunk;
//! - `<SLUICE_PINECONE_INDEX>-bm25`: sparse, dot product, the chunk's BM25 document vector
//!   from the encoder the Qdrant stores use.
//!
//! A search queries both at once (two requests in parallel, each on its index's keep-alive
//! connection) and fuses the two ranked lists here by the tenant's rule ([`Fusion`]: weighted
//! RRF by the formula the Qdrant stores' engine uses, or a convex combination of scores). Pinecone does not apply IDF to sparse
//! vectors, so the BM25 side ranks by saturated term frequency with document-length
//! normalisation but without IDF (stopwords are dropped by the encoder); the README says so.
//!
//! Each tenant is a namespace in both indexes: a query never sees another tenant's records,
//! with no filter to forget. Corpus versions are records of the sparse index in the namespace
//! `sluice.versions` (a name no tenant can take: tenants have no '.').

use std::time::{Duration, Instant};

use crate::config::{PineconeConfig, StoreBackend, StoreConfig};
use async_trait::async_trait;
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::error::StoreError;
use sluice_contract::stages::{
    DocumentInfo, DocumentPage, Hit, Page, Search, Selection, Store, StoredChunk,
};

use crate::rest::{Rest, VersionMemo, backend, next_version};
use crate::{
    META, META_INSTANTS, Written, chunk_payload, hit_from, instant_path, meta_path, point_uuid,
    prefetch_limit, stored_document,
};
use sluice_contract::filter::{Bound, Filter, Op, Scalar};
use sluice_contract::fusion::Ranking;

/// The API version both planes are called with.
pub const API_VERSION: &str = "2025-10";
/// The namespace of the corpus-version records.
const VERSIONS_NAMESPACE: &str = "sluice.versions";
/// An upsert request carries at most this many records and about this many bytes (Pinecone's
/// limits are 1,000 records and 2 MB per request).
const UPSERT_RECORDS: usize = 1000;
const UPSERT_BYTES: usize = 1_800_000;
/// The timeout of one control-plane call (index creation and description).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// What a write that finds no index says.
const MISSING: &str = "index missing (run `sluice store create-collection`)";

/// The Pinecone store: a dense index and a sparse index.
pub struct PineconeStore {
    dense: Rest,
    sparse: Rest,
    bm25: EdgeBm25,
    versions: VersionMemo,
    /// `SLUICE_PINECONE_LAG_MS`.
    lag: std::time::Duration,
}

/// The Pinecone settings of a `SLUICE_STORE=pinecone` configuration.
fn section(store: &StoreConfig) -> Result<&PineconeConfig, StoreError> {
    match &store.backend {
        StoreBackend::Pinecone(pinecone) => Ok(pinecone),
        other => Err(StoreError::Open(format!(
            "SLUICE_STORE is not pinecone ({other:?})"
        ))),
    }
}

fn headers(config: &PineconeConfig) -> [(&'static str, &str); 2] {
    [
        ("api-key", config.api_key.expose()),
        ("x-pinecone-api-version", API_VERSION),
    ]
}

impl PineconeStore {
    /// The store `SLUICE_PINECONE_*` and `SLUICE_STORE_*` describe; no request is made.
    pub fn from_config(store: &StoreConfig) -> Result<Self, StoreError> {
        Self::new(store, section(store)?)
    }

    /// The store over `config`, its remote calls bounded as `store` says.
    pub fn new(store: &StoreConfig, config: &PineconeConfig) -> Result<Self, StoreError> {
        let headers = headers(config);
        let host = |value: &Option<String>, name: &str| {
            value.clone().ok_or_else(|| {
                StoreError::Open(format!(
                    "{name} is not set: `sluice store create-collection` creates the Pinecone indexes and prints their hosts"
                ))
            })
        };
        let dense = host(&config.host, "SLUICE_PINECONE_HOST")?;
        let sparse = host(&config.sparse_host, "SLUICE_PINECONE_SPARSE_HOST")?;
        let bm25 = EdgeBm25::new(EdgeBm25Config::default())
            .map_err(|e| StoreError::Open(format!("BM25 encoder: {e}")))?;
        Ok(Self {
            dense: Rest::new(store, &dense, &headers, MISSING)?,
            sparse: Rest::new(store, &sparse, &headers, MISSING)?,
            bm25,
            versions: VersionMemo::default(),
            lag: config.lag,
        })
    }

    async fn upsert(
        &self,
        rest: &Rest,
        namespace: &str,
        records: &[Record<'_>],
    ) -> Result<(), StoreError> {
        // Each record is serialised once: its size decides the batch, and the batch body is
        // assembled from those bytes.
        let mut batch: Vec<Box<RawValue>> = Vec::new();
        let mut bytes = 0;
        for record in records {
            let json = serde_json::value::to_raw_value(record).map_err(backend)?;
            let size = json.get().len();
            if !batch.is_empty() && (batch.len() == UPSERT_RECORDS || bytes + size > UPSERT_BYTES) {
                send_upsert(rest, namespace, &batch).await?;
                batch.clear();
                bytes = 0;
            }
            batch.push(json);
            bytes += size;
        }
        if !batch.is_empty() {
            send_upsert(rest, namespace, &batch).await?;
        }
        Ok(())
    }
}

async fn send_upsert(
    rest: &Rest,
    namespace: &str,
    vectors: &[Box<RawValue>],
) -> Result<(), StoreError> {
    let body = serde_json::to_vec(&UpsertBody { vectors, namespace }).map_err(backend)?;
    rest.send(Method::POST, "/vectors/upsert", Some(body), false)
        .await
        .map(drop)
}

/// The two indexes' names for `SLUICE_PINECONE_INDEX`.
pub fn index_names(config: &PineconeConfig) -> [String; 2] {
    [config.index.clone(), format!("{}-bm25", config.index)]
}

/// Creates the two serverless indexes (`SLUICE_PINECONE_CLOUD`/`_REGION`) through the
/// control plane when they do not exist, waits until both are ready (at most `wait`), and
/// returns each one's (name, host, created).
pub async fn create_indexes(
    store: &StoreConfig,
    dim: usize,
    wait: Duration,
) -> Result<Vec<(String, String, bool)>, StoreError> {
    let config = section(store)?;
    let headers = headers(config);
    // An operator's command, not the request path: the control plane gets 30 s per call (the
    // store timeout is sized for queries).
    let slow = StoreConfig {
        timeout: store.timeout.max(CONTROL_TIMEOUT),
        ..store.clone()
    };
    let control = Rest::new(
        &slow,
        &config.control_url,
        &headers,
        "not found on the control plane",
    )?;
    let [dense, sparse] = index_names(config);
    // No metadata schema: Pinecone then indexes every metadata field, which filters need
    // (their keys are the tenants' own). The chunk text is indexed too, for nothing; a schema
    // cannot name fields not known yet.
    let spec = json!({"serverless": {"cloud": config.cloud, "region": config.region}});
    let requests = [
        json!({"name": dense, "dimension": dim, "metric": "cosine", "vector_type": "dense",
               "spec": spec, "tags": {"app": "sluice"}}),
        json!({"name": sparse, "metric": "dotproduct", "vector_type": "sparse",
               "spec": spec, "tags": {"app": "sluice"}}),
    ];
    let mut out = Vec::new();
    for request in requests {
        let name = request["name"].as_str().unwrap_or_default().to_string();
        let path = format!("/indexes/{name}");
        let created = match control.send(Method::GET, &path, None, true).await? {
            Some(_) => false,
            None => {
                let body = serde_json::to_vec(&request).map_err(backend)?;
                control
                    .send(Method::POST, "/indexes", Some(body), false)
                    .await?;
                true
            }
        };
        let started = Instant::now();
        let host = loop {
            let model: IndexModel = match control.send(Method::GET, &path, None, true).await? {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| backend(format!("GET {path}: unexpected response: {e}")))?,
                None => return Err(backend(format!("index {name} vanished after creation"))),
            };
            if model.status.ready {
                break model.host;
            }
            if started.elapsed() > wait {
                return Err(backend(format!(
                    "index {name} not ready after {} s (state {})",
                    wait.as_secs(),
                    model.status.state
                )));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        out.push((name, host, created));
    }
    Ok(out)
}

#[derive(Deserialize)]
struct IndexModel {
    host: String,
    status: IndexStatus,
}

#[derive(Deserialize)]
struct IndexStatus {
    ready: bool,
    state: String,
}

/// One record of an upsert.
#[derive(Serialize)]
struct Record<'a> {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<&'a [f32]>,
    #[serde(rename = "sparseValues", skip_serializing_if = "Option::is_none")]
    sparse_values: Option<Sparse<'a>>,
    metadata: Value,
}

#[derive(Serialize)]
struct Sparse<'a> {
    indices: &'a [u32],
    values: &'a [f32],
}

#[derive(Serialize)]
struct UpsertBody<'a> {
    /// Serialised [`Record`]s.
    vectors: &'a [Box<RawValue>],
    namespace: &'a str,
}

/// A `QueryRequest` with the fields Sluice sends.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueryBody<'a> {
    namespace: &'a str,
    top_k: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    vector: Option<&'a [f32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sparse_vector: Option<Sparse<'a>>,
    include_values: bool,
    include_metadata: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<&'a Value>,
}

/// A `QueryResponse`. Only the ids are read at once: fusion needs nothing else, and the
/// metadata and values of the candidates fusion drops are never parsed (with 2 × 20 matches
/// that was most of the client's time).
#[derive(Deserialize)]
struct QueryResponse<'a> {
    #[serde(default, borrow)]
    matches: Vec<Match<'a>>,
}

/// One match of a query response, its metadata and values left as JSON text.
#[derive(Deserialize)]
struct Match<'a> {
    id: String,
    /// The index's score (cosine, or the sparse dot product): what a convex fusion reads.
    #[serde(default)]
    score: f32,
    #[serde(default, borrow)]
    values: Option<&'a RawValue>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
}

impl Match<'_> {
    /// The hit this match describes, scored `score`; a match without metadata is an error
    /// (Sluice always asks for it).
    fn hit(&self, score: f32) -> Result<Hit, StoreError> {
        let unexpected = |e: serde_json::Error| backend(format!("match {}: {e}", self.id));
        let metadata: serde_json::Map<String, Value> = match self.metadata {
            Some(raw) => nest(serde_json::from_str(raw.get()).map_err(unexpected)?),
            None => return Err(backend(format!("match {} has no metadata", self.id))),
        };
        let vector = match self.values {
            Some(raw) => serde_json::from_str(raw.get()).map_err(unexpected)?,
            None => Vec::new(),
        };
        Ok(hit_from(&metadata, score, vector))
    }
}

/// The matches of a query response body, best first, each known by its chunk
/// ([`Hit::fusion_key`]: the document id and position from its metadata, not the record id,
/// so that fusion ranks equal scores by document id as every store does).
fn parse_matches(text: &str) -> Result<Ranking<Match<'_>>, StoreError> {
    /// The two fields of a match's metadata that name its chunk (the rest is skipped).
    #[derive(Deserialize)]
    struct Chunk<'a> {
        #[serde(borrow)]
        doc_id: std::borrow::Cow<'a, str>,
        #[serde(default)]
        chunk: f64,
    }
    let response: QueryResponse = serde_json::from_str(text)
        .map_err(|e| backend(format!("unexpected query response: {e}")))?;
    (response.matches.into_iter())
        .map(|m| {
            let raw = m.metadata.map_or("null", RawValue::get);
            let at: Chunk =
                serde_json::from_str(raw).map_err(|e| backend(format!("match {}: {e}", m.id)))?;
            Ok((Hit::fusion_key(&at.doc_id, at.chunk as usize), m.score, m))
        })
        .collect()
}

/// The hits of a whole query response body, best first (score left at 0: fusion sets it).
pub fn parse_query_response(text: &str) -> Result<Vec<Hit>, StoreError> {
    parse_matches(text)?
        .iter()
        .map(|(_, _, m)| m.hit(0.0))
        .collect()
}

/// The corpus version in a fetch response body (0 when the record is absent).
fn parse_version(text: &str, id: &str) -> Result<u64, StoreError> {
    let body: Value = serde_json::from_str(text)
        .map_err(|e| backend(format!("unexpected fetch response: {e}")))?;
    let Some(record) = body["vectors"].get(id) else {
        return Ok(0);
    };
    // Pinecone stores metadata numbers as doubles; Unix milliseconds fit exactly.
    record["metadata"]["corpus_version"]
        .as_f64()
        .map(|v| v as u64)
        .ok_or_else(|| backend(format!("corpus version record {id} has no corpus_version")))
}

/// A chunk's payload as Pinecone metadata, which is flat: the document's metadata and its
/// dates' instants under `meta.KEY` and `meta_ts.KEY` (the paths the Qdrant stores use, as
/// key names), beside Sluice's own fields.
fn flatten(mut payload: Value) -> Value {
    if let Some(object) = payload.as_object_mut() {
        for group in [META, META_INSTANTS] {
            if let Some(Value::Object(fields)) = object.remove(group) {
                for (key, value) in fields {
                    object.insert(format!("{group}.{key}"), value);
                }
            }
        }
    }
    payload
}

/// Pinecone metadata back in the payload form [`hit_from`] reads (the inverse of
/// [`flatten`] for the document's metadata, whose whole numbers come back whole: Pinecone
/// keeps every number as a double, and a document sent with `{"year": 2025}` is listed and
/// cited with 2025, not 2025.0, as on the other stores).
fn nest(mut metadata: serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    let prefix = format!("{META}.");
    let keys: Vec<String> = metadata
        .keys()
        .filter(|k| k.starts_with(&prefix))
        .cloned()
        .collect();
    let mut nested = serde_json::Map::new();
    for key in keys {
        if let Some(value) = metadata.remove(&key) {
            nested.insert(key[prefix.len()..].to_string(), whole_number(value));
        }
    }
    if !nested.is_empty() {
        metadata.insert(META.to_string(), Value::Object(nested));
    }
    metadata
}

/// A double that holds a whole number exactly (within ±2^53) as that integer; any other
/// value as it is.
fn whole_number(value: Value) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value.as_f64() {
        Some(x) if value.is_f64() && x.fract() == 0.0 && x.abs() <= EXACT => json!(x as i64),
        _ => value,
    }
}

/// The records of the documents `selection` picks, in Pinecone's filter language (the
/// tenant is the namespace): all their chunks, or with `first_chunks` each one's first.
/// `None` when the selection has no part at all (every record of the namespace).
pub fn selection_filter(selection: &Selection<'_>, first_chunks: bool) -> Option<Value> {
    let mut parts = Vec::new();
    if first_chunks {
        parts.push(json!({"chunk": {"$eq": 0}}));
    }
    if let Some(ids) = selection.ids {
        parts.push(json!({"doc_id": {"$in": ids}}));
    }
    if let Some(origin) = selection.origin {
        parts.push(json!({"origin": {"$eq": origin}}));
    }
    if let Some(f) = selection.filter {
        parts.push(pinecone_filter(f));
    }
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(json!({ "$and": parts })),
    }
}

/// The documents of a `fetch_by_metadata` response body, each from its first chunk's
/// metadata, by id within the page.
pub fn parse_fetch_by_metadata_response(text: &str) -> Result<DocumentPage, StoreError> {
    #[derive(Deserialize)]
    struct Fetched {
        #[serde(default)]
        vectors: serde_json::Map<String, Value>,
        #[serde(default)]
        pagination: Option<Pagination>,
    }
    #[derive(Deserialize)]
    struct Pagination {
        next: Option<String>,
    }
    let fetched: Fetched = serde_json::from_str(text)
        .map_err(|e| backend(format!("unexpected fetch_by_metadata response: {e}")))?;
    let mut documents: Vec<_> = (fetched.vectors.into_iter())
        .filter_map(|(_, mut record)| match record["metadata"].take() {
            Value::Object(m) => Some(stored_document(&nest(m))),
            _ => None,
        })
        .collect();
    documents.sort_by(|a, b| a.document.id.cmp(&b.document.id));
    Ok(DocumentPage {
        documents,
        next: fetched.pagination.and_then(|p| p.next),
    })
}

/// A metadata filter in Pinecone's filter language, with the meaning of [`Filter::matches`]:
/// the same operators on the flattened keys, dates on their instants, string equality as
/// `$in` (which also matches a list holding the string), and the negations made to match a
/// record without the key, as MongoDB's do (`{"$or": [{k: {"$exists": false}}, …]}`).
pub fn pinecone_filter(filter: &Filter) -> Value {
    let all = |fs: &[Filter]| fs.iter().map(pinecone_filter).collect::<Vec<_>>();
    let on = |key: String, op: &str, arg: Value| json!({ key: { op: arg } });
    let or_absent = |key: String, test: Value| json!({"$or": [{ key: {"$exists": false} }, test]});
    let values = |xs: &[Scalar]| xs.iter().map(Scalar::to_json).collect::<Vec<_>>();
    match filter {
        Filter::And(fs) => json!({"$and": all(fs)}),
        Filter::Or(fs) => json!({"$or": all(fs)}),
        Filter::Field { key, op } => {
            let path = meta_path(key);
            match op {
                Op::Eq(Scalar::Text(s)) => on(path, "$in", json!([s])),
                Op::Eq(Scalar::Date { seconds, .. }) => {
                    on(instant_path(key), "$eq", json!(seconds))
                }
                Op::Eq(x) => on(path, "$eq", x.to_json()),
                Op::Ne(Scalar::Text(s)) => or_absent(path.clone(), on(path, "$nin", json!([s]))),
                Op::Ne(Scalar::Date { seconds, .. }) => {
                    let at = instant_path(key);
                    or_absent(at.clone(), on(at, "$ne", json!(seconds)))
                }
                Op::Ne(x) => or_absent(path.clone(), on(path, "$ne", x.to_json())),
                Op::In(xs) => on(path, "$in", json!(values(xs))),
                Op::Nin(xs) => or_absent(path.clone(), on(path, "$nin", json!(values(xs)))),
                Op::Range(cmp, Bound::Number(n)) => on(path, cmp.operator(), json!(n)),
                Op::Range(cmp, Bound::Date { seconds, .. }) => {
                    on(instant_path(key), cmp.operator(), json!(seconds))
                }
                Op::Exists(b) => on(path, "$exists", json!(b)),
            }
        }
    }
}

#[async_trait]
impl Store for PineconeStore {
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError> {
        let limit = prefetch_limit(search.k);
        let filter = search.filter.map(pinecone_filter);
        let body = |vector, sparse_vector, include_values| {
            serde_json::to_vec(&QueryBody {
                namespace: tenant,
                top_k: limit,
                vector,
                sparse_vector,
                include_values,
                include_metadata: true,
                filter: filter.as_ref(),
            })
            .map_err(backend)
        };
        let query_dense = async {
            let body = body(Some(search.vector), None, true)?;
            self.dense
                .send(Method::POST, "/query", Some(body), true)
                .await?
                .ok_or_else(|| backend("the dense index does not exist"))
        };
        let sparse = self.bm25.embed_query(search.query);
        let query_sparse = async {
            // A query of stopwords only has no BM25 terms: dense alone then.
            if sparse.indices.is_empty() {
                return Ok(None);
            }
            let sparse_vector = Sparse {
                indices: &sparse.indices,
                values: &sparse.values,
            };
            let body = body(None, Some(sparse_vector), false)?;
            self.sparse
                .send(Method::POST, "/query", Some(body), true)
                .await?
                .map(Some)
                .ok_or_else(|| backend("the sparse index does not exist"))
        };
        let (dense, sparse) = tokio::try_join!(query_dense, query_sparse)?;
        let sparse = match &sparse {
            Some(sparse) => parse_matches(sparse)?,
            None => Vec::new(),
        };
        (search
            .fusion
            .fuse(parse_matches(&dense)?, sparse, search.k)
            .into_iter())
        .map(|(score, m)| m.hit(score))
        .collect()
    }

    async fn replace_document(
        &self,
        tenant: &Tenant,
        document: &DocumentInfo,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        let n = chunks.len();
        let written = Written::now(n);
        let sparse: Vec<_> = chunks
            .iter()
            .map(|c| self.bm25.embed_document(&c.indexed_text()))
            .collect();
        let mut dense_records = Vec::with_capacity(n);
        let mut sparse_records = Vec::with_capacity(n);
        for (c, s) in chunks.iter().zip(&sparse) {
            let id = point_uuid(tenant, &document.id, c.index).to_string();
            let metadata = flatten(chunk_payload(tenant, document, &written, c));
            // A chunk of stopwords only has no BM25 terms; Pinecone refuses an empty sparse
            // vector, and no BM25 query could find it anyway.
            if !s.indices.is_empty() {
                sparse_records.push(Record {
                    id: id.clone(),
                    values: None,
                    sparse_values: Some(Sparse {
                        indices: &s.indices,
                        values: &s.values,
                    }),
                    metadata: metadata.clone(),
                });
            }
            dense_records.push(Record {
                id,
                values: Some(&c.vector),
                sparse_values: None,
                metadata,
            });
        }
        // Upsert first (ids are stable per chunk position), then delete the chunks past the
        // new end: readers never see the document missing while it is replaced.
        self.upsert(&self.dense, tenant, &dense_records).await?;
        self.upsert(&self.sparse, tenant, &sparse_records).await?;
        let stale = serde_json::to_vec(&json!({
            "namespace": tenant,
            "filter": {"doc_id": {"$eq": document.id}, "chunk": {"$gte": n}},
        }))
        .map_err(backend)?;
        for rest in [&self.dense, &self.sparse] {
            rest.send(Method::POST, "/vectors/delete", Some(stale.clone()), false)
                .await?;
        }
        Ok(())
    }

    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError> {
        let mut body = json!({"namespace": tenant, "limit": page.limit});
        if let Some(filter) = selection_filter(selection, true) {
            body["filter"] = filter;
        }
        if let Some(cursor) = page.cursor {
            body["paginationToken"] = json!(cursor);
        }
        let body = serde_json::to_vec(&body).map_err(backend)?;
        // The dense index holds every chunk (the sparse one lacks chunks of stopwords only).
        match (self.dense)
            .send(Method::POST, "/vectors/fetch_by_metadata", Some(body), true)
            .await
        {
            Ok(Some(text)) => parse_fetch_by_metadata_response(&text),
            Ok(None) => Err(backend("the dense index does not exist")),
            // Pinecone answers a token it cannot read with 400.
            Err(StoreError::Backend(e)) if page.cursor.is_some() && e.contains(": 400 ") => {
                Err(StoreError::Invalid(format!(
                    "cursor is not one a listing of this store returned ({e})"
                )))
            }
            Err(e) => Err(e),
        }
    }

    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError> {
        let Some(filter) = selection_filter(selection, false) else {
            return Err(StoreError::Invalid(
                "a deletion must select documents".into(),
            ));
        };
        let body =
            serde_json::to_vec(&json!({"namespace": tenant, "filter": filter})).map_err(backend)?;
        for rest in [&self.dense, &self.sparse] {
            rest.send(Method::POST, "/vectors/delete", Some(body.clone()), false)
                .await?;
        }
        Ok(())
    }

    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        let version = next_version(self.corpus_version(tenant).await?);
        let record = Record {
            id: point_uuid(tenant, "", 0).to_string(),
            values: None,
            sparse_values: Some(Sparse {
                indices: &[0],
                values: &[1.0],
            }),
            metadata: json!({"tenant": tenant, "corpus_version": version}),
        };
        let record = serde_json::value::to_raw_value(&record).map_err(backend)?;
        send_upsert(&self.sparse, VERSIONS_NAMESPACE, &[record]).await?;
        self.versions.put(tenant, version);
        Ok(version)
    }

    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        if let Some(v) = self.versions.get(tenant) {
            return Ok(v);
        }
        let id = point_uuid(tenant, "", 0).to_string();
        let path = format!("/vectors/fetch?ids={id}&namespace={VERSIONS_NAMESPACE}");
        let version = match self.sparse.send(Method::GET, &path, None, true).await? {
            None => 0,
            Some(text) => parse_version(&text, &id)?,
        };
        self.versions.put(tenant, version);
        Ok(version)
    }

    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        let text = self
            .dense
            .send(
                Method::POST,
                "/describe_index_stats",
                Some(b"{}".to_vec()),
                true,
            )
            .await?
            .ok_or_else(|| backend("the dense index does not exist"))?;
        let stats: Value = serde_json::from_str(&text)
            .map_err(|e| backend(format!("unexpected stats response: {e}")))?;
        // Serverless stats are eventually consistent: a count right after an ingest may lag.
        Ok(stats["namespaces"][tenant.as_str()]["vectorCount"]
            .as_u64()
            .unwrap_or(0) as usize)
    }

    fn version_memo(&self) -> std::time::Duration {
        crate::rest::VERSION_FRESH
    }

    fn lag(&self) -> std::time::Duration {
        self.lag
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::fusion::Fusion;

    #[test]
    fn only_the_winners_metadata_and_values_are_read() {
        // The second match's values are not numbers; fusion reads no more of a match than the
        // document and position its metadata names.
        let body = r#"{"matches": [
            {"id": "a", "score": 0.9, "values": [0.6, 0.8], "metadata": {"doc_id": "a", "text": "x"}},
            {"id": "b", "score": 0.1, "values": [1.0, "x"], "metadata": {"doc_id": "b", "chunk": 0}}
        ]}"#;
        let matches = parse_matches(body).unwrap();
        let fused = Fusion::default().fuse(matches, vec![], 1);
        let hit = fused[0].1.hit(fused[0].0).unwrap();
        assert_eq!(hit.document.id, "a");
        assert_eq!(hit.vector, vec![0.6, 0.8]);
        assert!(
            parse_query_response(body).is_err(),
            "read whole, b is refused"
        );
    }

    #[test]
    fn a_version_read_back_as_a_double_is_exact() {
        let id = "x";
        let body =
            json!({"vectors": {"x": {"id": "x", "metadata": {"corpus_version": 1764470000123.0}}}});
        assert_eq!(parse_version(&body.to_string(), id).unwrap(), 1764470000123);
        assert_eq!(parse_version(r#"{"vectors": {}}"#, id).unwrap(), 0);
        assert!(parse_version(r#"{"vectors": {"x": {"id": "x"}}}"#, id).is_err());
    }
}
