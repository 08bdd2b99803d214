//! Hybrid retrieval on Qdrant Edge, the Qdrant engine in-process, in a data directory.
//!
//! Each chunk is one point with a dense 384-d cosine vector (`dense`) and a BM25 sparse
//! vector (`bm25`, Qdrant's own `EdgeBm25` encoder, IDF applied by the engine). A search is
//! one query with two prefetches — dense nearest neighbours and BM25 — fused by weighted
//! reciprocal rank fusion in the engine, or two queries fused here by a convex combination
//! of their scores (the tenant's rule, [`sluice_contract::fusion`]). Every point carries its
//! tenant and every read filters on it.
#![warn(missing_docs)]

pub mod breaker;
pub mod config;
pub mod pinecone;
pub mod qdrant;
mod rest;

pub use config::{PineconeConfig, QdrantConfig, StoreBackend, StoreConfig};

/// The store `SLUICE_STORE` names, for `dim`-d vectors: Qdrant Edge in `SLUICE_DATA_DIR`, or
/// a remote store behind its circuit breaker ([`breaker`]), so that one that is down costs
/// requests nothing once it has failed a few times in a row.
pub fn open(config: &StoreConfig, dim: usize) -> Result<Arc<dyn Store>, StoreError> {
    let guarded = |store: Arc<dyn Store>| -> Arc<dyn Store> {
        let breaker = Breaker::new(config.breaker_failures, config.breaker_cool_down);
        Arc::new(GuardedStore::new(store, breaker))
    };
    Ok(match &config.backend {
        StoreBackend::Edge { dir } => Arc::new(EdgeStore::open(dir, dim)?),
        StoreBackend::Qdrant(qdrant) => {
            guarded(Arc::new(qdrant::QdrantStore::new(config, qdrant)?))
        }
        StoreBackend::Pinecone(pinecone) => {
            guarded(Arc::new(pinecone::PineconeStore::new(config, pinecone)?))
        }
    })
}

/// Whether the configured store is reached over the network (and so may fail or be slow).
pub fn is_remote(config: &StoreConfig) -> bool {
    !matches!(config.backend, StoreBackend::Edge { .. })
}

/// Creates what the remote store `SLUICE_STORE` names needs (`sluice store
/// create-collection`), for `dim`-d vectors; returns what was done, a line per thing, for
/// the operator. Edge needs nothing: it creates its shard on first use.
pub async fn create(config: &StoreConfig, dim: usize) -> Result<Vec<String>, StoreError> {
    let said = |created: bool| if created { "created" } else { "already exists" };
    Ok(match &config.backend {
        StoreBackend::Edge { dir } => vec![format!(
            "nothing to create: Qdrant Edge makes its shard in {} on first use",
            dir.display()
        )],
        StoreBackend::Qdrant(qdrant) => {
            let created = qdrant::QdrantStore::new(config, qdrant)?
                .create_collection(dim)
                .await?;
            vec![format!(
                "collection {} {} at {}",
                qdrant.collection,
                said(created),
                qdrant.url
            )]
        }
        StoreBackend::Pinecone(_) => {
            let wait = std::time::Duration::from_secs(300);
            let indexes = pinecone::create_indexes(config, dim, wait).await?;
            let mut lines: Vec<String> = indexes
                .iter()
                .map(|(name, host, created)| format!("index {name} {}: {host}", said(*created)))
                .collect();
            if let [(_, dense, _), (_, sparse, _)] = indexes.as_slice() {
                lines.push(format!(
                    "set SLUICE_PINECONE_HOST={dense} SLUICE_PINECONE_SPARSE_HOST={sparse}"
                ));
            }
            lines
        }
    })
}

use breaker::{Breaker, GuardedStore};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use qdrant_edge::{
    CountRequest, CreateIndex, Distance, EdgeConfigBuilder, EdgeShard,
    EdgeSparseVectorParamsBuilder, EdgeVectorParamsBuilder, FieldIndexOperations,
    Fusion as EdgeFusion, Modifier, NamedQuery, PointId, PointInsertOperations, PointOperations,
    PointStruct, Prefetch, QueryEnum, QueryRequest, ScoredPoint, ScoringQuery, UpdateOperation,
    Vector, VectorInternal, VectorStructInternal, Vectors, WithPayloadInterface, WithVector,
};
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::error::StoreError;
use sluice_contract::filter::{Bound, Filter, Op, Scalar};
use sluice_contract::metadata::{MetaValue, Metadata};
use sluice_contract::stages::{
    DocumentInfo, DocumentPage, Hit, Page, Place, Search, Selection, Store, StoredChunk,
    StoredDocument,
};

const DENSE: &str = "dense";
const SPARSE: &str = "bm25";
/// Each half of a hybrid search returns this many candidates per requested result (at least
/// `MIN_PREFETCH`), so that fusion has overlap to work with.
const PREFETCH_FACTOR: usize = 4;
const MIN_PREFETCH: usize = 20;

/// How many candidates each half of a hybrid search for `k` chunks ranks, on every store.
pub fn prefetch_limit(k: usize) -> usize {
    (k * PREFETCH_FACTOR).max(MIN_PREFETCH)
}
/// How many fused results to ask an engine that fuses (Qdrant's RRF) for, to keep the best
/// `k` of them here ([`best_of_fused`]): the engine orders equal fused scores its own way,
/// differently from one call to the next, so its own cut at `k` would pick among them at
/// random — the same question could get other sources on an unchanged corpus. Under RRF
/// equal scores come in small groups (one chunk ranked r by one retriever alone, another
/// ranked r by the other), so `k` more settle the cut.
pub fn fused_limit(k: usize) -> usize {
    2 * k
}

/// The best `k` of an engine's fused results (asked for [`fused_limit`]), in [`Hit::rank_order`]:
/// which of equal scores the cut keeps is settled by document id and chunk.
pub fn best_of_fused(mut hits: Vec<Hit>, k: usize) -> Vec<Hit> {
    hits.sort_by(Hit::rank_order);
    hits.truncate(k);
    hits
}

/// Fixed namespace for point ids: uuid-v5(tenant, document id, chunk index).
const POINT_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x5b1c_e0a4_6e0f_4d7b_9c1e_2f3a_4b5c_6d7e);

/// The Qdrant Edge store. Cheap to clone.
#[derive(Clone)]
pub struct EdgeStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Held for the store's lifetime: one process per data directory.
    _lock: std::fs::File,
    shard: EdgeShard,
    bm25: EdgeBm25,
    versions_path: PathBuf,
    /// Corpus version per tenant, persisted to `tenants.json` on every bump. Held for
    /// microseconds and never across an await, so a std mutex is enough.
    versions: Mutex<BTreeMap<String, u64>>,
    /// The payload fields with an index (read from the shard at open).
    indexed: IndexedFields,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl EdgeStore {
    /// Opens the store in `dir`, creating it (and its payload indexes) on first use.
    pub fn open(dir: &Path, dim: usize) -> Result<Self, StoreError> {
        let open_err =
            |e: &dyn std::fmt::Display| StoreError::Open(format!("{}: {e}", dir.display()));
        let shard_dir = dir.join("shard");
        std::fs::create_dir_all(&shard_dir).map_err(|e| open_err(&e))?;
        // The engine does not guard its files against a second process; this lock does.
        let lock = std::fs::File::create(dir.join("lock")).map_err(|e| open_err(&e))?;
        lock.try_lock().map_err(|_| {
            open_err(&"in use by another process (one Sluice server per data directory)")
        })?;
        let shard = if shard_dir.join("edge_config.json").is_file() {
            EdgeShard::load(&shard_dir, None).map_err(|e| open_err(&e))?
        } else {
            let config = EdgeConfigBuilder::new()
                .vector(
                    DENSE,
                    EdgeVectorParamsBuilder::new(dim, Distance::Cosine).build(),
                )
                .sparse_vector(
                    SPARSE,
                    EdgeSparseVectorParamsBuilder::new()
                        .modifier(Modifier::Idf)
                        .build(),
                )
                .build();
            let shard = EdgeShard::new(&shard_dir, config).map_err(|e| open_err(&e))?;
            // Keyword indexes: tenant (marked as the tenant key, so the engine co-locates a
            // tenant's points) and document id (for replacement).
            for (field, schema) in [
                ("tenant", json!({"type": "keyword", "is_tenant": true})),
                ("doc_id", json!({"type": "keyword"})),
            ] {
                create_index(&shard, field, schema).map_err(|e| open_err(&e))?;
            }
            shard
        };
        let config_dim = shard.config().vectors.get(DENSE).map(|v| v.size);
        if config_dim != Some(dim) {
            return Err(StoreError::Open(format!(
                "{} holds {config_dim:?}-d vectors but the embedding model makes {dim}-d ones",
                dir.display()
            )));
        }
        let bm25 = EdgeBm25::new(EdgeBm25Config::default()).map_err(|e| open_err(&e))?;
        let versions_path = dir.join("tenants.json");
        let versions = match std::fs::read(&versions_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| open_err(&format!("tenants.json: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(open_err(&e)),
        };
        let indexed = IndexedFields::default();
        if let Ok(mut known) = indexed.0.lock() {
            known.extend(shard.info().payload_schema.keys().map(|k| k.to_string()));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                _lock: lock,
                shard,
                bm25,
                versions_path,
                versions: Mutex::new(versions),
                indexed,
            }),
        })
    }

    /// The payload fields the shard has an index on, sorted.
    pub fn indexed_fields(&self) -> Vec<String> {
        let mut fields: Vec<String> = (self.inner.shard.info().payload_schema.keys())
            .map(|k| k.to_string())
            .collect();
        fields.sort();
        fields
    }

    /// Runs blocking engine work on the blocking pool, off the async reactor.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }
}

/// Creates a payload index on `field` (`schema`: Qdrant's JSON form of the index params).
fn create_index(shard: &EdgeShard, field: &str, schema: Value) -> Result<(), StoreError> {
    let index = CreateIndex {
        field_name: serde_json::from_value(json!(field)).map_err(backend)?,
        field_schema: Some(serde_json::from_value(schema).map_err(backend)?),
    };
    let op = UpdateOperation::FieldIndexOperation(FieldIndexOperations::CreateIndex(index));
    shard.update(op).map_err(backend)
}

/// The filter of a tenant's points, optionally of one document from chunk `min_chunk` on, in
/// Qdrant's JSON form (the REST API takes it as is; Edge parses it).
fn filter_json(tenant: &str, doc_id: Option<&str>, min_chunk: Option<usize>) -> Value {
    let mut must = vec![json!({"key": "tenant", "match": {"value": tenant}})];
    if let Some(doc) = doc_id {
        must.push(json!({"key": "doc_id", "match": {"value": doc}}));
    }
    if let Some(n) = min_chunk {
        must.push(json!({"key": "chunk", "range": {"gte": n}}));
    }
    json!({ "must": must })
}

fn tenant_filter(
    tenant: &str,
    doc_id: Option<&str>,
    min_chunk: Option<usize>,
) -> Result<qdrant_edge::Filter, StoreError> {
    serde_json::from_value(filter_json(tenant, doc_id, min_chunk)).map_err(backend)
}

/// The filter of a search: the tenant's points whose document passes `filter`, in Qdrant's
/// JSON form.
pub(crate) fn search_filter_json(tenant: &str, filter: Option<&Filter>) -> Value {
    let selection = Selection {
        filter,
        ..Selection::default()
    };
    selection_filter_json(tenant, &selection, false)
}

/// The filter of the points of the tenant's documents that `selection` picks, in Qdrant's
/// JSON form: all their chunks, or with `first_chunks` only each document's first (one point
/// per document: what a listing reads).
pub(crate) fn selection_filter_json(
    tenant: &str,
    selection: &Selection<'_>,
    first_chunks: bool,
) -> Value {
    let mut must = vec![json!({"key": "tenant", "match": {"value": tenant}})];
    if first_chunks {
        must.push(json!({"key": "chunk", "match": {"value": 0}}));
    }
    if let Some(ids) = selection.ids {
        must.push(json!({"key": "doc_id", "match": {"any": ids}}));
    }
    if let Some(origin) = selection.origin {
        must.push(json!({"key": "origin", "match": {"value": origin}}));
    }
    if let Some(f) = selection.filter {
        must.push(qdrant_filter(f));
    }
    json!({ "must": must })
}

/// The payload fields a listing reads (never a chunk's text).
const LISTED_FIELDS: [&str; 9] = [
    "doc_id",
    "title",
    "source",
    "origin",
    "format",
    "digest",
    "chunks",
    "ingested_at",
    META,
];

/// The scroll request of a listing page on the Qdrant stores (Edge parses the REST body):
/// each selected document's first chunk, its listed fields only, from the page's cursor —
/// the point id the next page starts at, as Qdrant hands it out (Sluice's point ids are
/// UUIDs; anything else is refused before a request is made).
pub(crate) fn scroll_body(
    tenant: &str,
    selection: &Selection<'_>,
    page: Page<'_>,
) -> Result<Value, StoreError> {
    let mut body = json!({
        "limit": page.limit,
        "filter": selection_filter_json(tenant, selection, true),
        "with_payload": LISTED_FIELDS,
        "with_vector": false,
    });
    if let Some(cursor) = page.cursor {
        let offset = uuid::Uuid::parse_str(cursor).map_err(|_| {
            StoreError::Invalid(format!(
                "cursor {cursor:?} is not one a listing of this store returned"
            ))
        })?;
        body["offset"] = json!(offset.to_string());
    }
    Ok(body)
}

/// The time a write records with its document: now, RFC 3339 in UTC, to the second.
pub(crate) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Where a metadata key's value is in a point's payload, and where a date's instant is.
pub(crate) fn meta_path(key: &str) -> String {
    format!("{META}.{key}")
}

pub(crate) fn instant_path(key: &str) -> String {
    format!("{META_INSTANTS}.{key}")
}

/// A metadata filter in Qdrant's filter language, with the meaning of [`Filter::matches`]:
/// `must`/`should`/`must_not` for `$and`/`$or`/negations, `match` for strings and booleans
/// (a list payload matches when it holds the value), `range` for numbers (equality too, so
/// that 2025 and 2025.0 are equal) and for dates, on their instants.
pub fn qdrant_filter(filter: &Filter) -> Value {
    let all = |fs: &[Filter]| fs.iter().map(qdrant_filter).collect::<Vec<_>>();
    match filter {
        Filter::And(fs) => json!({"must": all(fs)}),
        Filter::Or(fs) => json!({"should": all(fs)}),
        Filter::Field { key, op } => {
            let path = meta_path(key);
            let eq = |x: &Scalar| match x {
                Scalar::Text(s) => json!({"key": path, "match": {"value": s}}),
                Scalar::Bool(b) => json!({"key": path, "match": {"value": b}}),
                Scalar::Number(n) => json!({"key": path, "range": {"gte": n, "lte": n}}),
                Scalar::Date { seconds, .. } => {
                    json!({"key": instant_path(key), "range": {"gte": seconds, "lte": seconds}})
                }
            };
            let any = |xs: &[Scalar]| {
                let texts: Vec<&str> = xs
                    .iter()
                    .filter_map(|x| match x {
                        Scalar::Text(s) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect();
                let mut should: Vec<Value> = xs
                    .iter()
                    .filter(|x| !matches!(x, Scalar::Text(_)))
                    .map(eq)
                    .collect();
                if !texts.is_empty() {
                    should.push(json!({"key": path, "match": {"any": texts}}));
                }
                json!({ "should": should })
            };
            match op {
                Op::Eq(x) => eq(x),
                Op::Ne(x) => json!({"must_not": [eq(x)]}),
                Op::In(xs) => any(xs),
                Op::Nin(xs) => json!({"must_not": [any(xs)]}),
                Op::Range(cmp, Bound::Number(n)) => json!({"key": path, "range": {cmp.name(): n}}),
                Op::Range(cmp, Bound::Date { seconds, .. }) => {
                    json!({"key": instant_path(key), "range": {cmp.name(): seconds}})
                }
                Op::Exists(true) => json!({"must_not": [{"is_empty": {"key": path}}]}),
                Op::Exists(false) => json!({"is_empty": {"key": path}}),
            }
        }
    }
}

/// The payload indexes a document's metadata wants (field path, Qdrant index schema): a
/// keyword index for strings and lists, a float index for numbers and for dates' instants, a
/// bool index for booleans. Filters work without them (Qdrant then reads payloads); with
/// them a selective filter does not scan.
fn metadata_indexes(metadata: &Metadata) -> Vec<(String, &'static str)> {
    metadata
        .iter()
        .map(|(key, value)| match value {
            MetaValue::Text(_) | MetaValue::List(_) => (meta_path(key), "keyword"),
            MetaValue::Number(_) => (meta_path(key), "float"),
            MetaValue::Bool(_) => (meta_path(key), "bool"),
            MetaValue::Date { .. } => (instant_path(key), "float"),
        })
        .collect()
}

/// Most metadata payload indexes a store creates: keys come from tenants, and each index
/// costs memory and write time. Past it, filters on new keys still work, unindexed.
const MAX_METADATA_INDEXES: usize = 256;

/// The metadata fields a store has indexed (or asked for): each is created once.
#[derive(Default)]
pub(crate) struct IndexedFields(Mutex<HashSet<String>>);

impl IndexedFields {
    /// The fields of `metadata` not indexed yet, marked as indexed; none once the cap is
    /// reached.
    pub(crate) fn claim(&self, metadata: &Metadata) -> Vec<(String, &'static str)> {
        let Ok(mut known) = self.0.lock() else {
            return Vec::new();
        };
        let mut new = Vec::new();
        for (field, schema) in metadata_indexes(metadata) {
            if known.len() >= MAX_METADATA_INDEXES {
                tracing::warn!(
                    field,
                    "metadata index cap reached; this field is filtered unindexed"
                );
                break;
            }
            if known.insert(field.clone()) {
                new.push((field, schema));
            }
        }
        new
    }

    /// Forgets `field` (its index could not be created: try again next time).
    pub(crate) fn forget(&self, field: &str) {
        if let Ok(mut known) = self.0.lock() {
            known.remove(field);
        }
    }
}

/// A chunk's point id: uuid-v5 of (tenant, document id, chunk index), the same in every store.
fn point_uuid(tenant: &str, doc_id: &str, chunk: usize) -> uuid::Uuid {
    let name = format!("{}\u{1f}{}\u{1f}{chunk}", tenant, doc_id);
    uuid::Uuid::new_v5(&POINT_NAMESPACE, name.as_bytes())
}

fn point_id(tenant: &str, doc_id: &str, chunk: usize) -> PointId {
    PointId::Uuid(qdrant_edge::external::uuid::Uuid::from_bytes(
        point_uuid(tenant, doc_id, chunk).into_bytes(),
    ))
}

/// The payload key of a document's metadata (values as sent), and of its dates' instants
/// (seconds since the epoch: what date filters compare).
pub(crate) const META: &str = "meta";
pub(crate) const META_INSTANTS: &str = "meta_ts";

/// What every chunk of one write records about its document besides [`DocumentInfo`]: how
/// many chunks it has and when it was written.
#[derive(Clone)]
pub(crate) struct Written {
    pub(crate) chunks: usize,
    pub(crate) at: String,
}

impl Written {
    /// A write of `chunks` chunks, now.
    pub(crate) fn now(chunks: usize) -> Self {
        Self {
            chunks,
            at: now_rfc3339(),
        }
    }
}

/// The payload of a chunk's point.
fn chunk_payload(
    tenant: &str,
    document: &DocumentInfo,
    written: &Written,
    chunk: &StoredChunk,
) -> Value {
    let mut payload = json!({
        "tenant": tenant, "doc_id": document.id, "chunk": chunk.index,
        "title": document.title, "source": document.source, "text": chunk.text,
        "tokens": chunk.tokens, "chunks": written.chunks, "ingested_at": written.at,
    });
    if let Some(origin) = &document.origin {
        payload["origin"] = json!(origin);
    }
    if let Some(format) = &document.format {
        payload["format"] = json!(format);
    }
    if let Some(digest) = &document.digest {
        payload["digest"] = json!(digest);
    }
    if !chunk.place.section.is_empty() {
        payload["section"] = json!(chunk.place.section);
    }
    if let Some([from, to]) = chunk.place.pages {
        payload["page_from"] = json!(from);
        payload["page_to"] = json!(to);
    }
    if !document.metadata.is_empty() {
        payload[META] = Value::Object(document.metadata.to_json());
        let instants = document.metadata.instants();
        if !instants.is_empty() {
            payload[META_INSTANTS] = Value::Object(instants);
        }
    }
    payload
}

/// A whole number of a payload, also when it comes back as a double (Pinecone keeps every
/// metadata number as one).
fn whole(value: &Value) -> Option<usize> {
    (value.as_u64())
        .or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        })
        .map(|n| n as usize)
}

fn text_field(payload: &serde_json::Map<String, Value>, key: &str) -> String {
    (payload.get(key).and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

/// The document a point's payload belongs to (without its origin and digest, which hits leave
/// out).
fn document_from(payload: &serde_json::Map<String, Value>) -> DocumentInfo {
    DocumentInfo {
        id: text_field(payload, "doc_id"),
        title: text_field(payload, "title"),
        source: text_field(payload, "source"),
        // Validated at ingest; a payload written otherwise loses its metadata, not the hit.
        metadata: (payload.get(META).and_then(Value::as_object))
            .and_then(|m| Metadata::from_json(m).ok())
            .unwrap_or_default(),
        origin: None,
        format: (payload.get("format").and_then(Value::as_str)).map(str::to_string),
        digest: None,
    }
}

/// A listed document from its first chunk's payload.
fn stored_document(payload: &serde_json::Map<String, Value>) -> StoredDocument {
    let field = |key| (payload.get(key).and_then(Value::as_str)).map(str::to_string);
    StoredDocument {
        document: DocumentInfo {
            origin: field("origin"),
            digest: field("digest"),
            ..document_from(payload)
        },
        chunks: payload.get("chunks").and_then(whole),
        ingested_at: (payload.get("ingested_at").and_then(Value::as_str)).map(str::to_string),
    }
}

/// A hit from a point's payload, score and dense vector.
fn hit_from(payload: &serde_json::Map<String, Value>, score: f32, vector: Vec<f32>) -> Hit {
    Hit {
        document: document_from(payload),
        chunk: payload.get("chunk").and_then(whole).unwrap_or(0),
        text: text_field(payload, "text"),
        tokens: payload.get("tokens").and_then(whole).unwrap_or(0),
        vector,
        score,
        place: Place {
            section: text_field(payload, "section"),
            pages: match (payload.get("page_from"), payload.get("page_to")) {
                (Some(from), Some(to)) => whole(from)
                    .zip(whole(to))
                    .map(|(from, to)| [from as u32, to as u32]),
                _ => None,
            },
        },
    }
}

fn hit(point: ScoredPoint) -> Option<Hit> {
    let payload = point.payload?.0;
    let vector = match point.vector {
        Some(VectorStructInternal::Named(mut named)) => match named.remove(DENSE) {
            Some(VectorInternal::Dense(v)) => v,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    Some(hit_from(&payload, point.score, vector))
}

/// Which ranking a search returns: the pipeline always uses [`Retrieval::Hybrid`]; the other
/// two are its halves, for `sluice eval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retrieval {
    /// Dense nearest neighbours alone.
    Dense,
    /// BM25 alone (nothing for a query of stopwords only).
    Bm25,
    /// Both, fused by the search's rule.
    Hybrid,
}

impl EdgeStore {
    /// The `search.k` best chunks of `tenant` by `retrieval`, of the documents that pass the
    /// search's filter (in each query the engine runs: it filters while it searches). A
    /// hybrid search by weighted RRF is one engine query with two prefetches, fused by the
    /// engine; by a convex combination, the two queries, fused here
    /// ([`Hit::fuse`]).
    /// Dense and BM25 alone score hits by cosine and by BM25.
    pub async fn search_by(
        &self,
        tenant: &Tenant,
        search: &Search<'_>,
        retrieval: Retrieval,
    ) -> Result<Vec<Hit>, StoreError> {
        let filter: qdrant_edge::Filter =
            serde_json::from_value(search_filter_json(tenant, search.filter)).map_err(backend)?;
        let sparse = self.inner.bm25.embed_query(search.query);
        let dense = search.vector.to_vec();
        let (k, fusion) = (search.k, search.fusion);
        self.blocking(move |inner| {
            let candidates = prefetch_limit(k);
            let nearest = |query: VectorInternal, using: &str| {
                ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery::new(query, using)))
            };
            let run = |prefetches: Vec<Prefetch>, query: ScoringQuery, limit: usize| {
                let request = QueryRequest {
                    prefetches,
                    query: Some(query),
                    filter: Some(filter.clone()),
                    score_threshold: None,
                    limit,
                    offset: 0,
                    params: None,
                    with_vector: WithVector::Selector(vec![DENSE.into()]),
                    with_payload: WithPayloadInterface::Bool(true),
                };
                let points = inner.shard.query(request).map_err(backend)?;
                Ok::<_, StoreError>(points.into_iter().filter_map(hit).collect::<Vec<_>>())
            };
            let dense_query = nearest(VectorInternal::Dense(dense), DENSE);
            // A query of stopwords only has no BM25 terms: BM25 finds nothing, hybrid is dense.
            let sparse_query = (!sparse.indices.is_empty())
                .then(|| nearest(VectorInternal::Sparse(sparse), SPARSE));
            match (
                retrieval,
                fusion.rrf_weights(1 + sparse_query.is_some() as usize),
            ) {
                (Retrieval::Dense, _) => run(vec![], dense_query, k),
                (Retrieval::Bm25, _) => match sparse_query {
                    Some(q) => run(vec![], q, k),
                    None => Ok(Vec::new()),
                },
                (Retrieval::Hybrid, Some((rrf_k, weights))) => {
                    let prefetch = |query: ScoringQuery| Prefetch {
                        prefetches: vec![],
                        query: Some(query),
                        limit: candidates,
                        params: None,
                        filter: Some(filter.clone()),
                        score_threshold: None,
                    };
                    let prefetches = [Some(dense_query), sparse_query]
                        .into_iter()
                        .flatten()
                        .map(prefetch)
                        .collect();
                    let weights = (weights.iter().any(|w| *w != 1.0)).then(|| {
                        use qdrant_edge::external::ordered_float::OrderedFloat;
                        weights.into_iter().map(OrderedFloat).collect()
                    });
                    let fusion = ScoringQuery::Fusion(EdgeFusion::Rrf { k: rrf_k, weights });
                    Ok(best_of_fused(run(prefetches, fusion, fused_limit(k))?, k))
                }
                (Retrieval::Hybrid, None) => {
                    let dense = run(vec![], dense_query, candidates)?;
                    let bm25 = match sparse_query {
                        Some(q) => run(vec![], q, candidates)?,
                        None => Vec::new(),
                    };
                    Ok(Hit::fuse(&fusion, dense, bm25, k))
                }
            }
        })
        .await
    }
}

#[async_trait]
impl Store for EdgeStore {
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError> {
        self.search_by(tenant, search, Retrieval::Hybrid).await
    }

    async fn replace_document(
        &self,
        tenant: &Tenant,
        document: &DocumentInfo,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        let tenant = tenant.to_string();
        let document = document.clone();
        self.blocking(move |inner| {
            for (field, schema) in inner.indexed.claim(&document.metadata) {
                if let Err(e) = create_index(&inner.shard, &field, json!(schema)) {
                    inner.indexed.forget(&field);
                    return Err(e);
                }
            }
            let n = chunks.len();
            let written = Written::now(n);
            let mut points = Vec::with_capacity(n);
            for c in chunks {
                let payload = chunk_payload(&tenant, &document, &written, &c);
                let sparse = inner.bm25.embed_document(&c.indexed_text());
                let vectors = Vectors::new_named([
                    (DENSE, Vector::new_dense(c.vector)),
                    (SPARSE, Vector(VectorInternal::Sparse(sparse))),
                ]);
                points.push(
                    PointStruct::new(point_id(&tenant, &document.id, c.index), vectors, payload).0,
                );
            }
            // Upsert first (ids are stable per chunk position), then delete the chunks past the
            // new end: readers never see the document missing while it is replaced.
            if !points.is_empty() {
                let upsert =
                    PointOperations::UpsertPoints(PointInsertOperations::PointsList(points));
                inner
                    .shard
                    .update(UpdateOperation::PointOperation(upsert))
                    .map_err(backend)?;
            }
            let stale = tenant_filter(&tenant, Some(&document.id), Some(n))?;
            inner
                .shard
                .update(UpdateOperation::PointOperation(
                    PointOperations::DeletePointsByFilter(stale),
                ))
                .map_err(backend)
        })
        .await
    }

    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError> {
        let request: qdrant_edge::ScrollRequest =
            serde_json::from_value(scroll_body(tenant, selection, page)?).map_err(backend)?;
        self.blocking(move |inner| {
            let (records, next) = inner.shard.scroll(request).map_err(backend)?;
            Ok(DocumentPage {
                documents: (records.into_iter())
                    .filter_map(|r| r.payload.map(|p| stored_document(&p.0)))
                    .collect(),
                next: next.map(|id| id.to_string()),
            })
        })
        .await
    }

    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError> {
        let filter: qdrant_edge::Filter =
            serde_json::from_value(selection_filter_json(tenant, selection, false))
                .map_err(backend)?;
        self.blocking(move |inner| {
            let delete = PointOperations::DeletePointsByFilter(filter);
            inner
                .shard
                .update(UpdateOperation::PointOperation(delete))
                .map_err(backend)
        })
        .await
    }

    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        let tenant = tenant.to_string();
        self.blocking(move |inner| {
            inner.shard.flush();
            let mut versions = inner.versions.lock().map_err(backend)?;
            let v = versions.entry(tenant).or_insert(0);
            *v += 1;
            let version = *v;
            // Write-then-rename: a crash leaves the old file or the new one, never half of one.
            let tmp = inner.versions_path.with_extension("json.tmp");
            let bytes = serde_json::to_vec_pretty(&*versions).map_err(backend)?;
            std::fs::write(&tmp, bytes)
                .and_then(|_| std::fs::rename(&tmp, &inner.versions_path))
                .map_err(backend)?;
            Ok(version)
        })
        .await
    }

    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        let versions = self.inner.versions.lock().map_err(backend)?;
        Ok(versions.get(tenant.as_str()).copied().unwrap_or(0))
    }

    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        let filter = tenant_filter(tenant, None, None)?;
        self.blocking(move |inner| {
            inner
                .shard
                .count(CountRequest {
                    filter: Some(filter),
                    exact: true,
                })
                .map_err(backend)
        })
        .await
    }
}
