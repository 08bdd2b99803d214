//! The Pinecone serverless adapter. No Pinecone service can be reached from here, so:
//!
//! - contract: every request the adapter sends — body, query parameters, required headers —
//!   is checked against Pinecone's official OpenAPI documents for API version 2025-10
//!   (`pinecone-2025-10-db_data.oas.yaml` for the indexes, `pinecone-2025-10-db_control.oas.yaml`
//!   for index creation, in `SLUICE_SPECS_DIR`, default `../shared/specs`; the test says so and
//!   skips when they are absent), and responses are parsed from bodies that validate against
//!   the documents' response schemas;
//! - meaning: the store contract every backend keeps (`sluice_testkit::store_suite`), run
//!   against two index hosts that keep what they are sent ([`PineconeIndex`]: Pinecone's
//!   documented query, fetch, listing, deletion and filter semantics, in memory), under both
//!   readings of what Pinecone leaves undocumented (a negation on a missing key);
//! - transport: stand-in HTTP servers on 127.0.0.1 (one per index host, one for the control
//!   plane) — stand-ins for the transport only, with canned answers; they rank nothing.

use sluice_testkit::tenant;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Request, StandIn, chunk, doc, ingest_filter_corpus, search_filtered, spec};
use crate::pinecone_server::{PineconeIndex, passes};
use axum::http::StatusCode;
use serde_json::{Value, json};
use sluice_contract::error::StoreError;
use sluice_contract::fusion::Fusion;
use sluice_contract::stages::{Search, Store};
use sluice_retrieve::StoreConfig;
use sluice_retrieve::pinecone::{PineconeStore, create_indexes, parse_query_response};

const DATA: &str = "pinecone-2025-10-db_data.oas.yaml";
const CONTROL: &str = "pinecone-2025-10-db_control.oas.yaml";
const KEY: &str = "pc-secret-key";

/// A `ScoredVector` as the document's schema describes it.
fn scored(id: &str, doc: &str, score: f64, values: Option<&[f32]>) -> Value {
    let mut v = json!({
        "id": id,
        "score": score,
        "metadata": {"tenant": "acme", "doc_id": doc, "chunk": 0, "title": "T", "source": "s",
                     "text": format!("text of {doc}"), "tokens": 2},
    });
    if let Some(values) = values {
        v["values"] = json!(values);
    }
    v
}

/// The dense query's matches: a, b. The sparse query's: c, a.
fn query_response(body: &Value) -> Value {
    let matches = if body.get("vector").is_some() {
        vec![
            scored("id-a", "a", 0.9, Some(&[0.6, 0.8])),
            scored("id-b", "b", 0.8, Some(&[0.8, 0.6])),
        ]
    } else {
        vec![
            scored("id-c", "c", 7.5, None),
            scored("id-a", "a", 3.0, None),
        ]
    };
    json!({"matches": matches, "namespace": body["namespace"], "usage": {"readUnits": 5}})
}

/// A `fetch_by_metadata` answer: two first chunks (Pinecone's numbers are doubles), and a
/// next page unless this is the page after the first.
fn fetched_page(body: &Value) -> Value {
    let record = |id: &str, doc: &str, origin: Option<&str>| {
        let mut metadata = json!({"tenant": "acme", "doc_id": doc, "chunk": 0.0, "title": "T",
            "source": "s", "text": "t", "tokens": 2.0, "chunks": 3.0,
            "ingested_at": "2026-12-01T10:00:00Z", "meta.year": 2025.0});
        if let Some(o) = origin {
            metadata["origin"] = json!(o);
        }
        (
            id.to_string(),
            json!({"id": id, "values": [0.6, 0.8], "metadata": metadata}),
        )
    };
    let vectors: serde_json::Map<String, Value> = [
        record("id-z", "zeta", None),
        record("id-a", "alpha", Some("s3://docs/acme/a.jsonl")),
    ]
    .into_iter()
    .collect();
    let mut page =
        json!({"vectors": vectors, "namespace": body["namespace"], "usage": {"readUnits": 1}});
    if body.get("paginationToken").is_none() {
        page["pagination"] = json!({"next": "Tm90aGluZyB0byBzZWUgaGVyZQo="});
    }
    page
}

/// An index host's answers, canned.
fn data_plane(r: &Request) -> (StatusCode, Value) {
    let path = r.path.split('?').next().unwrap_or_default();
    match (r.method.as_str(), path) {
        ("POST", "/query") => (StatusCode::OK, query_response(&r.body)),
        ("POST", "/vectors/upsert") => (
            StatusCode::OK,
            json!({"upsertedCount": r.body["vectors"].as_array().map_or(0, Vec::len)}),
        ),
        ("POST", "/vectors/delete") => (StatusCode::OK, json!({})),
        ("POST", "/vectors/fetch_by_metadata") => (StatusCode::OK, fetched_page(&r.body)),
        ("GET", "/vectors/fetch") => (
            StatusCode::OK,
            json!({"vectors": {}, "namespace": "sluice.versions", "usage": {"readUnits": 1}}),
        ),
        ("POST", "/describe_index_stats") => (
            StatusCode::OK,
            json!({"namespaces": {"acme": {"vectorCount": 7}}, "dimension": 384,
                   "indexFullness": 0.0, "totalVectorCount": 7, "metric": "cosine",
                   "vectorType": "dense"}),
        ),
        _ => (StatusCode::NOT_IMPLEMENTED, Value::Null),
    }
}

/// Indexes the control-plane stand-in has been asked to create, with how often each was
/// described since (the first description says "Initializing").
static CREATED: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn index_model(name: &str, ready: bool) -> Value {
    json!({
        "name": name, "metric": "cosine", "dimension": 384, "vector_type": "dense",
        "host": format!("{name}-abc1234.svc.aped-4627-b74a.pinecone.io"),
        "deletion_protection": "disabled",
        "spec": {"serverless": {"cloud": "aws", "region": "us-east-1",
                                "read_capacity": {"mode": "OnDemand", "status": {"state": "Ready"}}}},
        "status": {"ready": ready, "state": if ready { "Ready" } else { "Initializing" }},
    })
}

/// The control plane's answers, canned: indexes named `existing*` exist and are ready.
fn control_plane(r: &Request) -> (StatusCode, Value) {
    let mut guard = CREATED.lock().unwrap();
    let created = guard.get_or_insert_with(HashMap::new);
    match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/indexes") => {
            let name = r.body["name"].as_str().unwrap_or_default().to_string();
            created.insert(name.clone(), 0);
            (StatusCode::CREATED, index_model(&name, false))
        }
        ("GET", p) if p.starts_with("/indexes/") => {
            let name = &p["/indexes/".len()..];
            if name.starts_with("existing") {
                return (StatusCode::OK, index_model(name, true));
            }
            match created.get_mut(name) {
                Some(seen) => {
                    *seen += 1;
                    (StatusCode::OK, index_model(name, *seen > 1))
                }
                None => (
                    StatusCode::NOT_FOUND,
                    json!({"status": 404, "error": {"code": "NOT_FOUND",
                           "message": format!("Resource {name} not found")}}),
                ),
            }
        }
        _ => (StatusCode::NOT_IMPLEMENTED, Value::Null),
    }
}

struct Setup {
    dense: Arc<StandIn>,
    sparse: Arc<StandIn>,
    control: Arc<StandIn>,
    config: StoreConfig,
}

async fn setup(overrides: &[(&str, &str)]) -> Setup {
    let (dense, dense_url) = crate::common::stand_in(data_plane).await;
    let (sparse, sparse_url) = crate::common::stand_in(data_plane).await;
    let (control, control_url) = crate::common::stand_in(control_plane).await;
    let mut vars = vec![
        ("SLUICE_STORE", "pinecone"),
        ("SLUICE_PINECONE_API_KEY", KEY),
        ("SLUICE_PINECONE_HOST", dense_url.as_str()),
        ("SLUICE_PINECONE_SPARSE_HOST", sparse_url.as_str()),
        ("SLUICE_PINECONE_CONTROL_URL", control_url.as_str()),
    ];
    vars.extend_from_slice(overrides);
    Setup {
        dense,
        sparse,
        control,
        config: crate::common::config(&vars),
    }
}

/// The adapter on two index hosts that keep what they are sent, reading a negation on a
/// missing key as `absent_negations` says.
async fn on_indexes(absent_negations: bool) -> (Arc<dyn Store>, [Arc<PineconeIndex>; 2]) {
    let (dense, dense_url) = PineconeIndex::start(absent_negations).await;
    let (sparse, sparse_url) = PineconeIndex::start(absent_negations).await;
    let config = crate::common::config(&[
        ("SLUICE_STORE", "pinecone"),
        ("SLUICE_PINECONE_API_KEY", KEY),
        ("SLUICE_PINECONE_HOST", dense_url.as_str()),
        ("SLUICE_PINECONE_SPARSE_HOST", sparse_url.as_str()),
        // These hosts' reads see a write at once.
        ("SLUICE_PINECONE_LAG_MS", "0"),
    ]);
    let store = PineconeStore::from_config(&config).unwrap();
    (Arc::new(store), [dense, sparse])
}

/// A negation (`$ne`, `$nin`) lets a record without the key through.
mod negations_pass_a_missing_key {
    use super::*;
    sluice_testkit::store_suite!(on_indexes(true));
}

/// A negation (`$ne`, `$nin`) stops a record without the key: the cases that filter.
mod negations_stop_a_missing_key {
    use super::*;
    sluice_testkit::store_suite!(@cases on_indexes(false);
        every_filter_returns_exactly_the_documents_its_meaning_lets_through,
        an_end_users_access_lets_through_exactly_what_they_may_see,
    );
}

/// Both indexes' answers are fused here, so under RRF too chunks that tie in both (the same
/// words and vector under five ids, written in reverse) are ranked by document id — not by
/// Pinecone's record ids, which are hashes.
#[tokio::test]
async fn chunks_tied_in_both_indexes_are_ranked_by_document_id() {
    use sluice_testkit::store_suite::{chunks, doc, unit};
    let (store, _indexes) = on_indexes(true).await;
    for i in (0..5).rev() {
        let twin = doc(&format!("twin{i}"));
        (store.replace_document(&tenant("t"), &twin, chunks(&["the card policy"], 5)))
            .await
            .unwrap();
    }
    let vector = unit(5);
    let search = Search::new("card policy", &vector, 3);
    let hits = store.search(&tenant("t"), &search).await.unwrap();
    assert_eq!(ids(&hits), ["twin0", "twin1", "twin2"]);
}

fn ids(hits: &[sluice_contract::stages::Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.document.id.as_str()).collect()
}

// ---- contract ------------------------------------------------------------------------------

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn every_request_validates_against_the_official_documents() {
    let (data, control) = (spec(DATA), spec(CONTROL));
    let s = setup(&[("SLUICE_PINECONE_INDEX", "contract")]).await;
    let indexes = create_indexes(&s.config, 384, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(indexes.len(), 2);
    // No metadata schema: Pinecone then indexes every field, as tenants' filters need.
    for r in s.control.requests().iter().filter(|r| r.method == "POST") {
        assert!(
            r.body["spec"]["serverless"].get("schema").is_none(),
            "{}",
            r.body
        );
    }
    let store = PineconeStore::from_config(&s.config).unwrap();
    store
        .replace_document(
            &tenant("acme"),
            &doc(),
            vec![
                chunk(0, "Freeze the card in the app."),
                chunk(1, "The of and."),
            ],
        )
        .await
        .unwrap();
    store.bump_corpus_version(&tenant("acme")).await.unwrap();
    // A second store (no memo) reads the version from the index; the stand-in keeps nothing.
    let other = PineconeStore::from_config(&s.config).unwrap();
    assert_eq!(other.corpus_version(&tenant("acme")).await.unwrap(), 0);
    store
        .search(
            &tenant("acme"),
            &Search::new("replacement card days", &[0.0, 1.0], 5),
        )
        .await
        .unwrap();
    store.count(&tenant("acme")).await.unwrap();

    let mut paths = Vec::new();
    for (standin, spec) in [
        (&s.dense, &data),
        (&s.sparse, &data),
        (&s.control, &control),
    ] {
        for r in standin.requests() {
            let errors = spec.check(&r);
            assert!(
                errors.is_empty(),
                "{} {}: {errors:#?}\n{:#}",
                r.method,
                r.path,
                r.body
            );
            assert_eq!(
                r.headers.get("api-key").and_then(|v| v.to_str().ok()),
                Some(KEY),
                "every call carries the key"
            );
            paths.push(r.path.split('?').next().unwrap().to_string());
        }
    }
    for needed in [
        "/indexes",
        "/indexes/contract",
        "/indexes/contract-bm25",
        "/vectors/upsert",
        "/vectors/delete",
        "/vectors/fetch",
        "/query",
        "/describe_index_stats",
    ] {
        assert!(
            paths.iter().any(|p| p == needed),
            "{needed} never sent: {paths:?}"
        );
    }
}

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn a_misspelt_field_would_fail_the_contract_check() {
    let data = spec(DATA);
    let schema =
        &data.operation("POST", "/query")["requestBody"]["content"]["application/json"]["schema"];
    assert!(
        data.errors(schema, &json!({"topK": 5, "namespace": "a"}))
            .is_empty()
    );
    assert!(
        !data
            .errors(schema, &json!({"top_k": 5, "namespace": "a"}))
            .is_empty(),
        "snake case is not the API's"
    );
    assert!(
        !data.errors(schema, &json!({"namespace": "a"})).is_empty(),
        "topK is required"
    );
}

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn the_canned_query_response_is_shaped_by_the_document() {
    let dense = query_response(&json!({"vector": [0.1], "namespace": "acme"}));
    let data = spec(DATA);
    let op = data.operation("POST", "/query");
    let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
    let errors = data.errors(schema, &dense);
    assert!(
        errors.is_empty(),
        "the canned response is off-schema: {errors:?}"
    );
}

#[tokio::test]
async fn query_responses_parse_into_hits() {
    let dense = query_response(&json!({"vector": [0.1], "namespace": "acme"}));
    let hits = parse_query_response(&dense.to_string()).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].document.id, "a");
    assert_eq!(hits[0].text, "text of a");
    assert_eq!(hits[0].vector, vec![0.6, 0.8]);
    assert!(hits[1].vector.len() == 2);
    let no_metadata = json!({"matches": [{"id": "x", "score": 1.0}]});
    assert!(parse_query_response(&no_metadata.to_string()).is_err());
    assert!(parse_query_response(r#"{"matches": 3}"#).is_err());
}

// ---- behaviour -----------------------------------------------------------------------------

#[tokio::test]
async fn a_search_queries_both_indexes_in_the_tenant_namespace_and_fuses_by_rrf() {
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    let hits = store
        .search(
            &tenant("acme"),
            &Search::new("replacement card", &[0.0, 1.0], 3),
        )
        .await
        .unwrap();
    // dense: a, b; sparse: c, a → a (1/60 + 1/61), c (1/60), b (1/61): Qdrant's formula,
    // 1 / (k + rank − 1), so that k means the same on every store.
    assert_eq!(ids(&hits), ["a", "c", "b"]);
    let expected = [1.0 / 60.0 + 1.0 / 61.0, 1.0 / 60.0, 1.0 / 61.0];
    for (hit, want) in hits.iter().zip(expected) {
        assert!(
            (hit.score - want as f32).abs() < 1e-6,
            "{} {want}",
            hit.score
        );
    }
    assert_eq!(
        hits[0].vector,
        vec![0.6, 0.8],
        "the dense copy, with its vector"
    );
    assert!(hits[1].vector.is_empty(), "sparse-only: no dense vector");

    let dense = s.dense.requests();
    let sparse = s.sparse.requests();
    assert_eq!((dense.len(), sparse.len()), (1, 1));
    assert_eq!(dense[0].body["namespace"], "acme");
    assert_eq!(dense[0].body["vector"], json!([0.0, 1.0]));
    assert_eq!(dense[0].body["includeValues"], true);
    assert_eq!(sparse[0].body["namespace"], "acme");
    assert!(
        sparse[0].body["sparseVector"]["indices"]
            .as_array()
            .unwrap()
            .len()
            == 2
    );
    assert!(sparse[0].body.get("vector").is_none());
    assert_eq!(dense[0].body["topK"], 20, "candidates per list");

    // Stopwords only: no BM25 terms, so the sparse index is not asked.
    s.sparse.clear();
    let hits = store
        .search(&tenant("acme"), &Search::new("the of and", &[0.0, 1.0], 3))
        .await
        .unwrap();
    assert_eq!(ids(&hits), ["a", "b"]);
    assert_eq!(s.sparse.sent(), 0);
}

#[tokio::test]
async fn the_tenants_fusion_rule_fuses_the_two_indexes_answers() {
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    let search = |fusion| Search::new("replacement card", &[0.0, 1.0], 3).fusion(fusion);
    // dense: a 0.9, b 0.8; sparse: c 7.5, a 3.0. Normalised: dense a 1, b 0; sparse c 1, a 0.
    // Convex with 0.2 on dense: c 0.8, a 0.2, b 0.
    let hits = store
        .search(&tenant("acme"), &search(Fusion::Convex { dense: 0.2 }))
        .await
        .unwrap();
    assert_eq!(ids(&hits), ["c", "a", "b"]);
    for (hit, want) in hits.iter().zip([0.8, 0.2, 0.0]) {
        assert!((hit.score - want).abs() < 1e-6, "{} {want}", hit.score);
    }
    // Weighted RRF, BM25 at weight 2 and k = 1: 1 / (rank / w + k − 1), so c 1/0.5 = 2,
    // a 1/1 + 1/1 = 2 (dense 1st, BM25 2nd at weight 2), b 1/2 — and a, seen first, leads.
    let hits = store
        .search(
            &tenant("acme"),
            &search(Fusion::Rrf {
                k: 1,
                dense: 1.0,
                bm25: 2.0,
            }),
        )
        .await
        .unwrap();
    assert_eq!(ids(&hits), ["a", "c", "b"]);
    for (hit, want) in hits.iter().zip([2.0, 2.0, 0.5]) {
        assert!((hit.score - want).abs() < 1e-6, "{} {want}", hit.score);
    }
}

#[tokio::test]
async fn a_document_is_upserted_to_both_indexes_in_batches_then_its_tail_deleted() {
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    let mut chunks: Vec<_> = (0..1500)
        .map(|i| chunk(i, &format!("card number {i}")))
        .collect();
    chunks[7].text = "the and of".into();
    store
        .replace_document(&tenant("acme"), &doc(), chunks)
        .await
        .unwrap();
    for (standin, expected) in [(&s.dense, 1500), (&s.sparse, 1499)] {
        let requests = standin.requests();
        let upserts: Vec<&Request> = requests
            .iter()
            .filter(|r| r.path == "/vectors/upsert")
            .collect();
        let sizes: Vec<usize> = upserts
            .iter()
            .map(|r| r.body["vectors"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes.iter().sum::<usize>(), expected, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n <= 1000), "{sizes:?}");
        assert!(upserts.iter().all(|r| r.body["namespace"] == "acme"));
        let last = requests.last().unwrap();
        assert_eq!(last.path, "/vectors/delete", "delete after upsert");
        assert_eq!(
            last.body["filter"],
            json!({"doc_id": {"$eq": "cards/lost"}, "chunk": {"$gte": 1500}})
        );
        assert_eq!(last.body["namespace"], "acme");
    }
    let dense = s.dense.requests();
    let record = &dense[0].body["vectors"][0];
    assert_eq!(record["values"], json!([0.0, 1.0]));
    assert_eq!(record["metadata"]["doc_id"], "cards/lost");
    assert!(record.get("sparseValues").is_none());
    let sparse = s.sparse.requests();
    assert_eq!(
        sparse[0].body["vectors"][0]["id"], record["id"],
        "one id in both indexes"
    );
    assert!(sparse[0].body["vectors"][0].get("values").is_none());
}

#[tokio::test]
async fn corpus_versions_are_written_then_trusted_for_a_second() {
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    assert_eq!(store.corpus_version(&tenant("acme")).await.unwrap(), 0);
    let v = store.bump_corpus_version(&tenant("acme")).await.unwrap();
    assert!(v > 1_700_000_000_000, "Unix milliseconds: {v}");
    assert_eq!(
        store.corpus_version(&tenant("acme")).await.unwrap(),
        v,
        "memo, no read"
    );
    let upsert = s
        .sparse
        .requests()
        .into_iter()
        .find(|r| r.path == "/vectors/upsert")
        .unwrap();
    assert_eq!(upsert.body["namespace"], "sluice.versions");
    assert_eq!(upsert.body["vectors"][0]["metadata"]["corpus_version"], v);
    assert_eq!(
        s.sparse
            .requests()
            .iter()
            .filter(|r| r.path.starts_with("/vectors/fetch"))
            .count(),
        1
    );
    assert_eq!(store.count(&tenant("acme")).await.unwrap(), 7);
    assert_eq!(store.count(&tenant("nobody")).await.unwrap(), 0);
}

#[tokio::test]
async fn create_indexes_makes_missing_ones_waits_for_ready_and_keeps_existing_ones() {
    let s = setup(&[("SLUICE_PINECONE_INDEX", "fresh")]).await;
    let made = create_indexes(&s.config, 384, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(made.len(), 2);
    assert_eq!(made[0].0, "fresh");
    assert!(made[0].1.starts_with("fresh-abc1234.svc."));
    assert!(made[0].2 && made[1].2, "created");
    let posts: Vec<Value> = s
        .control
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.body)
        .collect();
    assert_eq!(posts[0]["metric"], "cosine");
    assert_eq!(posts[0]["dimension"], 384);
    assert_eq!(posts[1]["name"], "fresh-bm25");
    assert_eq!(posts[1]["vector_type"], "sparse");
    assert_eq!(posts[1]["metric"], "dotproduct");
    assert!(posts[1].get("dimension").is_none());

    let s = setup(&[("SLUICE_PINECONE_INDEX", "existing")]).await;
    let made = create_indexes(&s.config, 384, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!made[0].2 && !made[1].2, "already there");
    assert!(s.control.requests().iter().all(|r| r.method == "GET"));
}

#[tokio::test]
async fn a_store_without_hosts_says_how_to_get_them() {
    let config = crate::common::config(&[
        ("SLUICE_STORE", "pinecone"),
        ("SLUICE_PINECONE_API_KEY", KEY),
    ]);
    let Err(e) = PineconeStore::from_config(&config) else {
        panic!("opened without hosts");
    };
    assert!(matches!(e, StoreError::Open(_)));
    assert!(e.to_string().contains("SLUICE_PINECONE_HOST"), "{e}");
    assert!(
        e.to_string().contains("sluice store create-collection"),
        "{e}"
    );
}

// ---- transport -----------------------------------------------------------------------------

#[tokio::test]
async fn one_connection_per_index_serves_a_hundred_sequential_searches() {
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    for _ in 0..100 {
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await
            .unwrap();
    }
    assert_eq!(s.dense.sent(), 100);
    assert_eq!(s.sparse.sent(), 100);
    assert_eq!(s.dense.connections.load(Ordering::SeqCst), 1);
    assert_eq!(s.sparse.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_failing_index_fails_the_search_after_one_retry_and_writes_are_sent_once() {
    let s = setup(&[("SLUICE_STORE_READ_RETRIES", "1")]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    s.sparse.fail_next.store(1, Ordering::SeqCst);
    assert_eq!(
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(s.sparse.sent(), 2, "one retry");

    s.sparse.fail_next.store(2, Ordering::SeqCst);
    let e = store
        .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("503"), "{e}");

    s.dense.clear();
    s.dense.fail_next.store(1, Ordering::SeqCst);
    assert!(
        store
            .replace_document(&tenant("acme"), &doc(), vec![chunk(0, "card")])
            .await
            .is_err()
    );
    assert_eq!(s.dense.sent(), 1, "a write is sent once");
}

#[tokio::test]
async fn a_slow_index_hits_the_call_timeout() {
    let s = setup(&[
        ("SLUICE_STORE_TIMEOUT_MS", "100"),
        ("SLUICE_STORE_READ_RETRIES", "0"),
    ])
    .await;
    s.sparse.delay_ms.store(2000, Ordering::SeqCst);
    let store = PineconeStore::from_config(&s.config).unwrap();
    let started = std::time::Instant::now();
    assert!(
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await
            .is_err()
    );
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
}

// ---- metadata filters -----------------------------------------------------------------------

#[tokio::test]
async fn metadata_comes_back_as_sent_from_a_query_response() {
    let body = json!({"matches": [{"id": "x", "score": 0.5, "metadata": {
        "tenant": "acme", "doc_id": "d", "chunk": 0, "title": "T", "source": "s", "text": "t",
        "tokens": 1, "meta.year": 2025.0, "meta.rate": 2.5, "meta.groups": ["hr"],
        "meta.updated_at": "2025-03-01", "meta_ts.updated_at": 1_740_787_200.0,
    }}]});
    let hits = parse_query_response(&body.to_string()).unwrap();
    assert_eq!(
        serde_json::to_value(&hits[0].document.metadata).unwrap(),
        // Whole numbers whole (Pinecone keeps doubles), others as they are.
        json!({"year": 2025, "rate": 2.5, "groups": ["hr"], "updated_at": "2025-03-01"})
    );
}

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn filtered_queries_and_metadata_validate_against_the_official_documents() {
    let data = spec(DATA);
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    ingest_filter_corpus(&store, &["acme"]).await;
    for (filter, _) in sluice_testkit::filters::expected() {
        search_filtered(&store, &filter, 5).await;
    }
    for r in s.dense.requests().into_iter().chain(s.sparse.requests()) {
        let errors = data.check(&r);
        assert!(
            errors.is_empty(),
            "{} {}: {errors:#?}\n{:#}",
            r.method,
            r.path,
            r.body
        );
    }
}

// ---- documents: list, read, delete ----------------------------------------------------------

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn listings_and_deletions_validate_against_the_official_documents() {
    use sluice_contract::filter::Filter;
    use sluice_contract::stages::{Page, Selection};
    let data = spec(DATA);
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    let acme = tenant("acme");
    let filter = Filter::parse(&json!({"year": {"$gte": 2025}, "groups": "hr"})).unwrap();
    let ids = ["alpha".to_string(), "zeta".to_string()];
    let first = Page {
        limit: 2,
        cursor: None,
    };
    let page = store
        .documents(&acme, &Selection::default(), first)
        .await
        .unwrap();
    // Parsed from the canned answer: by id within the page, numbers back to whole ones.
    let got: Vec<&str> = page
        .documents
        .iter()
        .map(|d| d.document.id.as_str())
        .collect();
    assert_eq!(got, ["alpha", "zeta"]);
    assert_eq!(page.documents[0].chunks, Some(3));
    assert_eq!(
        page.documents[0].document.origin.as_deref(),
        Some("s3://docs/acme/a.jsonl")
    );
    assert_eq!(
        page.documents[0].ingested_at.as_deref(),
        Some("2026-12-01T10:00:00Z")
    );
    assert_eq!(
        serde_json::to_value(&page.documents[0].document.metadata).unwrap(),
        json!({"year": 2025})
    );
    let next = page.next.expect("a next page");
    let second = Page {
        limit: 2,
        cursor: Some(&next),
    };
    let selection = Selection {
        ids: Some(&ids),
        origin: Some("s3://docs/acme/a.jsonl"),
        filter: Some(&filter),
    };
    assert_eq!(
        store
            .documents(&acme, &selection, second)
            .await
            .unwrap()
            .next,
        None
    );
    store.delete_documents(&acme, &selection).await.unwrap();
    let by_id = Selection {
        ids: Some(&ids),
        ..Selection::default()
    };
    store.delete_documents(&acme, &by_id).await.unwrap();
    // A deletion that would select the whole namespace is never sent.
    let all = store
        .delete_documents(&acme, &Selection::default())
        .await
        .unwrap_err();
    assert!(matches!(all, StoreError::Invalid(_)), "{all:?}");

    let sent = s.dense.requests();
    let listings: Vec<&Request> = sent
        .iter()
        .filter(|r| r.path == "/vectors/fetch_by_metadata")
        .collect();
    assert_eq!(listings.len(), 2);
    assert_eq!(listings[1].body["paginationToken"], json!(next));
    assert_eq!(listings[0].body["namespace"], "acme");
    // Deletions go to both indexes, in the tenant's namespace, by filter (never deleteAll).
    for index in [&s.dense, &s.sparse] {
        let deletes: Vec<Request> = index
            .requests()
            .into_iter()
            .filter(|r| r.path == "/vectors/delete")
            .collect();
        assert_eq!(deletes.len(), 2);
        for d in &deletes {
            assert_eq!(d.body["namespace"], "acme");
            assert!(
                d.body.get("deleteAll").is_none() && d.body["filter"].is_object(),
                "{}",
                d.body
            );
        }
    }
    for r in s.dense.requests().into_iter().chain(s.sparse.requests()) {
        let errors = data.check(&r);
        assert!(
            errors.is_empty(),
            "{} {}: {errors:#?}\n{:#}",
            r.method,
            r.path,
            r.body
        );
    }
}

#[tokio::test]
async fn the_listing_and_deletion_filters_select_what_the_selection_means() {
    use sluice_contract::stages::{DocumentInfo, Page, Selection};
    let s = setup(&[]).await;
    let store = PineconeStore::from_config(&s.config).unwrap();
    ingest_filter_corpus(&store, &["acme"]).await;
    // One more document, of three chunks, from an upload.
    let uploaded = DocumentInfo {
        id: "uploaded".into(),
        origin: Some("s3://b/acme/u.md".into()),
        ..doc()
    };
    store
        .replace_document(
            &tenant("acme"),
            &uploaded,
            vec![chunk(0, "a b"), chunk(1, "c d"), chunk(2, "e f")],
        )
        .await
        .unwrap();
    let records: Vec<Value> = (s.dense.requests().into_iter())
        .filter(|r| r.path == "/vectors/upsert")
        .flat_map(|r| r.body["vectors"].as_array().cloned().unwrap_or_default())
        .collect();
    let every_id: Vec<String> = sluice_testkit::filters::corpus()
        .into_iter()
        .map(|(id, _)| id.to_string())
        .collect();
    let some_ids = [every_id[0].clone(), "uploaded".to_string()];
    for (filter, _) in sluice_testkit::filters::expected() {
        for selection in [
            Selection {
                filter: Some(&filter),
                ..Selection::default()
            },
            Selection {
                filter: Some(&filter),
                ids: Some(&some_ids),
                ..Selection::default()
            },
            Selection {
                origin: Some("s3://b/acme/u.md"),
                ..Selection::default()
            },
        ] {
            s.dense.clear();
            s.sparse.clear();
            let page = Page {
                limit: 100,
                cursor: None,
            };
            store
                .documents(&tenant("acme"), &selection, page)
                .await
                .unwrap();
            store
                .delete_documents(&tenant("acme"), &selection)
                .await
                .unwrap();
            let listing = s.dense.requests()[0].body["filter"].clone();
            let deletion = s.dense.requests()[1].body["filter"].clone();
            assert_eq!(s.sparse.requests()[0].body["filter"], deletion);
            let meaning = |r: &Value| {
                let info = DocumentInfo {
                    id: r["metadata"]["doc_id"].as_str().unwrap().into(),
                    origin: r["metadata"]["origin"].as_str().map(String::from),
                    metadata: if r["metadata"]["doc_id"] == "uploaded" {
                        Default::default()
                    } else {
                        sluice_testkit::filters::corpus()
                            .into_iter()
                            .find(|(id, _)| *id == r["metadata"]["doc_id"])
                            .unwrap()
                            .1
                    },
                    ..doc()
                };
                selection.matches(&info)
            };
            for absent_negations in [false, true] {
                for r in &records {
                    let m = &r["metadata"];
                    let first = m["chunk"] == 0;
                    assert_eq!(
                        passes(&deletion, m, absent_negations),
                        meaning(r),
                        "deletion {deletion} of {m}"
                    );
                    assert_eq!(
                        passes(&listing, m, absent_negations),
                        meaning(r) && first,
                        "listing {listing} of {m}"
                    );
                }
            }
        }
    }
}
