//! The Qdrant REST adapter. No Qdrant server can be installed here, so:
//!
//! - contract: every request body the adapter sends is checked against Qdrant's official
//!   OpenAPI document (`qdrant-1.19.0-openapi.json` in `SLUICE_SPECS_DIR`, default
//!   `../shared/specs` beside the project; the test says so and skips when it is absent), and
//!   responses are parsed from bodies that validate against that document's response schemas;
//! - meaning: the store contract every backend keeps (`sluice_testkit::store_suite`), run
//!   against Qdrant's own engine behind its REST API ([`QdrantServer`]: Qdrant Edge shards
//!   served on 127.0.0.1) — filters, fusion, listings, deletions and counts as the engine
//!   does them;
//! - transport: a stand-in HTTP server on 127.0.0.1 — a stand-in for the transport only, it
//!   knows nothing of vectors — records requests and counts TCP connections, and can answer
//!   slowly or with 503.

use sluice_testkit::tenant;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::{Request, StandIn, chunk, doc, ingest_filter_corpus, search_filtered, spec};
use crate::qdrant_server::QdrantServer;
use axum::http::StatusCode;
use serde_json::{Value, json};
use sluice_contract::error::StoreError;
use sluice_contract::fusion::Fusion;
use sluice_contract::{stages::Search, stages::Store};
use sluice_retrieve::StoreConfig;
use sluice_retrieve::breaker::{Breaker, GuardedStore};
use sluice_retrieve::qdrant::{QdrantStore, parse_query_response};
use sluice_testkit::store_suite::DIM;

const SPEC: &str = "qdrant-1.19.0-openapi.json";

/// A `ScoredPoint` as the document's schema describes it.
fn scored_point(doc: &str, chunk: u64, score: f64) -> Value {
    json!({
        "id": "550e8400-e29b-41d4-a716-446655440000",
        "version": 3,
        "score": score,
        "payload": {"tenant": "acme", "doc_id": doc, "chunk": chunk, "title": "T", "source": "s",
                    "text": "chunk text", "tokens": 2},
        "vector": {"dense": [0.6, 0.8]},
    })
}

/// Qdrant's answers, canned.
fn respond(r: &Request) -> (StatusCode, Value) {
    let path = r.path.split('?').next().unwrap_or_default();
    let ok = |result: Value| {
        (
            StatusCode::OK,
            json!({"result": result, "status": "ok", "time": 0.001}),
        )
    };
    let ack = || ok(json!({"operation_id": 1, "status": "completed"}));
    let not_found = || {
        (
            StatusCode::NOT_FOUND,
            json!({"status": {"error": "Not found: Collection doesn't exist!"}, "time": 0.0}),
        )
    };
    match (r.method.as_str(), path) {
        (_, p) if p.starts_with("/collections/missing") => not_found(),
        ("GET", p) if p.starts_with("/collections/") => not_found(),
        // Equal scores in the engine's own order (`d` before `b`).
        ("POST", p) if p.ends_with("/points/query") => ok(json!({"points": [
            scored_point("a", 0, 0.5),
            scored_point("d", 0, 0.25),
            scored_point("b", 1, 0.25),
        ]})),
        // The two halves of a convex search: dense (cosines), then BM25 (its scores).
        ("POST", p) if p.ends_with("/points/query/batch") => ok(json!([
            {"points": [scored_point("a", 0, 0.9), scored_point("b", 0, 0.5)]},
            {"points": [scored_point("b", 0, 12.0), scored_point("c", 0, 3.0)]},
        ])),
        ("POST", p) if p.ends_with("/points/count") => ok(json!({"count": 2})),
        // A page of first chunks (the listed fields only), and where the next page starts.
        ("POST", p) if p.ends_with("/points/scroll") => ok(json!({
            "points": [
                {"id": "550e8400-e29b-41d4-a716-446655440000",
                 "payload": {"doc_id": "alpha", "title": "A", "source": "s", "chunks": 3,
                             "ingested_at": "2026-12-01T10:00:00Z", "origin": "s3://b/acme/a.md",
                             "meta": {"year": 2025}}},
                {"id": "650e8400-e29b-41d4-a716-446655440000",
                 "payload": {"doc_id": "older", "title": "O", "source": "s"}},
            ],
            "next_page_offset": if r.body.get("offset").is_some() { Value::Null } else {
                json!("750e8400-e29b-41d4-a716-446655440000")
            },
        })),
        ("PUT", p) if p.ends_with("/index") || p.ends_with("/points") => ack(),
        ("PUT", _) => ok(json!(true)),
        ("POST", p) if p.ends_with("/points/delete") => ack(),
        _ => (StatusCode::NOT_IMPLEMENTED, Value::Null),
    }
}

/// Starts the stand-in; returns its state and a config pointing the adapter at it.
async fn stand_in(overrides: &[(&str, &str)]) -> (Arc<StandIn>, StoreConfig) {
    let (state, url) = crate::common::stand_in(respond).await;
    let mut vars = vec![
        ("SLUICE_STORE", "qdrant"),
        ("SLUICE_QDRANT_URL", url.as_str()),
        ("SLUICE_QDRANT_API_KEY", "secret-key"),
    ];
    vars.extend_from_slice(overrides);
    (state, crate::common::config(&vars))
}

/// The adapter on Qdrant's engine behind its REST API, with its collection made.
async fn on_the_engine() -> (Arc<dyn Store>, Arc<QdrantServer>) {
    let (server, url) = QdrantServer::start().await;
    let config = crate::common::config(&[
        ("SLUICE_STORE", "qdrant"),
        ("SLUICE_QDRANT_URL", url.as_str()),
    ]);
    let store = QdrantStore::from_config(&config).unwrap();
    assert!(store.create_collection(DIM).await.unwrap());
    (Arc::new(store), server)
}

sluice_testkit::store_suite!(on_the_engine());

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn every_request_body_validates_against_the_official_document() {
    let spec = spec(SPEC);
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    assert!(store.create_collection(384).await.unwrap());
    store
        .replace_document(
            &tenant("acme"),
            &doc(),
            vec![
                chunk(0, "Freeze the card in the app."),
                chunk(1, "A new card arrives in five days."),
            ],
        )
        .await
        .unwrap();
    store.bump_corpus_version(&tenant("acme")).await.unwrap();
    store
        .search(
            &tenant("acme"),
            &Search::new("replacement card days", &[0.0, 1.0], 5),
        )
        .await
        .unwrap();
    store
        .search(&tenant("acme"), &Search::new("the of and", &[0.0, 1.0], 5))
        .await
        .unwrap();
    // A weighted RRF (k and weights in the query) and a convex one (a batch of two halves).
    for fusion in [
        Fusion::Rrf {
            k: 5,
            dense: 1.0,
            bm25: 0.25,
        },
        Fusion::Convex { dense: 0.7 },
    ] {
        let search = Search::new("replacement card days", &[0.0, 1.0], 5).fusion(fusion);
        store.search(&tenant("acme"), &search).await.unwrap();
    }
    store.count(&tenant("acme")).await.unwrap();

    let requests = stand_in.requests();
    for r in &requests {
        let errors = spec.check(r);
        assert!(
            errors.is_empty(),
            "{} {}: {errors:#?}\n{:#}",
            r.method,
            r.path,
            r.body
        );
    }
    let bodies = requests.iter().filter(|r| !r.body.is_null()).count();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert!(bodies >= 11, "bodies checked: {bodies} of {paths:?}");
    let weighted = requests
        .iter()
        .find(|r| r.body["query"]["rrf"]["weights"].is_array());
    assert_eq!(
        weighted.map(|r| r.body["query"].clone()),
        Some(json!({"rrf": {"k": 5, "weights": [1.0, 0.25]}})),
        "the weighted RRF is asked of Qdrant"
    );
    let plain = requests.iter().find(|r| r.body["query"]["rrf"]["k"] == 60);
    assert_eq!(
        plain.map(|r| r.body["query"].clone()),
        Some(json!({"rrf": {"k": 60}})),
        "plain RRF sends no weights (servers before weights took them)"
    );
    for needed in [
        "/points/query",
        "/points/query/batch",
        "/points?wait=true",
        "/points/delete?wait=true",
        "/index?wait=true",
    ] {
        assert!(
            paths.iter().any(|p| p.ends_with(needed)),
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
    let spec = spec(SPEC);
    let op = spec.operation("POST", "/collections/x/points/query");
    let schema = &op["requestBody"]["content"]["application/json"]["schema"];
    assert!(spec.errors(schema, &json!({"limit": 5})).is_empty());
    assert!(
        !spec.errors(schema, &json!({"limt": 5})).is_empty(),
        "unknown field"
    );
    assert!(
        !spec
            .errors(schema, &json!({"query": {"rrf": {"k": 0}}}))
            .is_empty(),
        "k ≥ 1"
    );
}

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn the_canned_query_response_is_shaped_by_the_document() {
    let spec = spec(SPEC);
    let op = spec.operation("POST", "/collections/x/points/query");
    let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
    let errors = spec.errors(schema, &query_response());
    assert!(
        errors.is_empty(),
        "the stand-in's response is off-schema: {errors:?}"
    );
    // And the batch answer of a convex search.
    let batch = Request {
        method: "POST".into(),
        path: "/collections/x/points/query/batch".into(),
        headers: Default::default(),
        body: Value::Null,
        response: None,
    };
    let (_, body) = respond(&batch);
    let op = spec.operation("POST", &batch.path);
    let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
    let errors = spec.errors(schema, &body);
    assert!(
        errors.is_empty(),
        "the batch response is off-schema: {errors:?}"
    );
    assert_eq!(
        sluice_retrieve::qdrant::parse_batch_response(&body.to_string())
            .unwrap()
            .len(),
        2
    );
}

/// A query response as the document shapes it (checked by the test above).
fn query_response() -> Value {
    let result = json!({"points": [scored_point("a", 0, 0.5), scored_point("b", 1, 0.25)]});
    json!({"result": result, "status": "ok", "time": 0.002})
}

#[tokio::test]
async fn query_responses_parse_into_hits() {
    let hits = parse_query_response(&query_response().to_string()).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].document.id, "a");
    assert_eq!(hits[1].chunk, 1);
    assert_eq!(hits[0].vector, vec![0.6, 0.8]);
    assert!((hits[0].score - 0.5).abs() < 1e-6);
    let no_payload = json!({"result": {"points": [{"id": 1, "version": 0, "score": 1.0}]}});
    assert!(parse_query_response(&no_payload.to_string()).is_err());
}

#[tokio::test]
async fn an_rrf_search_asks_for_more_and_keeps_the_lower_id_of_equal_scores() {
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    let search = Search::new("replacement card", &[0.0, 1.0], 2);
    let hits = store.search(&tenant("acme"), &search).await.unwrap();
    let got: Vec<(&str, usize)> = (hits.iter())
        .map(|h| (h.document.id.as_str(), h.chunk))
        .collect();
    assert_eq!(
        got,
        [("a", 0), ("b", 1)],
        "b and d score the same: b is kept"
    );
    let requests = stand_in.requests();
    assert_eq!(requests[0].body["limit"], 4, "k more than asked for");
}

#[tokio::test]
async fn a_convex_search_fuses_the_batchs_two_halves_by_their_scores() {
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    let filter = sluice_contract::filter::Filter::parse(&json!({"year": 2025})).unwrap();
    let search = Search::new("replacement card", &[0.0, 1.0], 3)
        .filter(Some(&filter))
        .fusion(Fusion::Convex { dense: 0.3 });
    let hits = store.search(&tenant("acme"), &search).await.unwrap();
    // Normalised: dense a 1, b 0; BM25 b 1, c 0. With 0.3 on dense: b 0.7, a 0.3, c 0.
    let got: Vec<(&str, f32)> = hits
        .iter()
        .map(|h| (h.document.id.as_str(), h.score))
        .collect();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ["b", "a", "c"]);
    for ((_, score), want) in got.iter().zip([0.7, 0.3, 0.0]) {
        assert!((score - want).abs() < 1e-6, "{got:?}");
    }
    // One round trip; each half filtered by tenant and by the request's filter, ranking the
    // prefetch's candidates.
    let requests = stand_in.requests();
    assert_eq!(requests.len(), 1);
    let searches = requests[0].body["searches"].as_array().unwrap();
    assert_eq!(searches.len(), 2);
    assert_eq!(searches[0]["using"], "dense");
    assert_eq!(searches[1]["using"], "bm25");
    for half in searches {
        assert_eq!(half["limit"], 20);
        let filter = half["filter"]["must"].as_array().unwrap();
        assert_eq!(
            filter[0],
            json!({"key": "tenant", "match": {"value": "acme"}})
        );
        assert_eq!(filter.len(), 2, "{filter:?}");
    }
}

// ---- transport -----------------------------------------------------------------------------

#[tokio::test]
async fn one_connection_serves_a_hundred_sequential_queries() {
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    for _ in 0..100 {
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await
            .unwrap();
    }
    assert_eq!(stand_in.connections.load(Ordering::SeqCst), 1);
    assert_eq!(stand_in.sent(), 100);
}

#[tokio::test]
async fn reads_are_retried_on_5xx_and_writes_are_not() {
    let (stand_in, config) = stand_in(&[("SLUICE_STORE_READ_RETRIES", "1")]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    stand_in.fail_next.store(1, Ordering::SeqCst);
    assert_eq!(
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(stand_in.sent(), 2, "one retry");

    stand_in.clear();
    stand_in.fail_next.store(2, Ordering::SeqCst);
    let e = store
        .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("503"), "{e}");

    stand_in.clear();
    stand_in.fail_next.store(1, Ordering::SeqCst);
    assert!(
        store
            .replace_document(&tenant("acme"), &doc(), vec![chunk(0, "x")])
            .await
            .is_err()
    );
    assert_eq!(stand_in.sent(), 1, "a write is sent once");
}

#[tokio::test]
async fn a_missing_collection_fails_writes_and_searches_with_what_to_do() {
    let (_stand_in, config) = stand_in(&[("SLUICE_QDRANT_COLLECTION", "missing")]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    let e = store
        .replace_document(&tenant("acme"), &doc(), vec![chunk(0, "x")])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("sluice store create-collection"),
        "{e}"
    );
    let e = store
        .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    // A tenant without a corpus version point reads as version 0.
    assert_eq!(store.corpus_version(&tenant("acme")).await.unwrap(), 0);
}

#[tokio::test]
async fn a_slow_server_hits_the_call_timeout() {
    let (stand_in, config) = stand_in(&[
        ("SLUICE_STORE_TIMEOUT_MS", "100"),
        ("SLUICE_STORE_READ_RETRIES", "0"),
    ])
    .await;
    stand_in.delay_ms.store(2000, Ordering::SeqCst);
    let store = QdrantStore::from_config(&config).unwrap();
    let started = Instant::now();
    let e = store
        .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(e, StoreError::Backend(_)), "{e:?}");
}

#[tokio::test]
async fn the_breaker_opens_skips_at_once_then_probes_and_closes() {
    let (stand_in, config) = stand_in(&[("SLUICE_STORE_READ_RETRIES", "0")]).await;
    let store = GuardedStore::new(
        Arc::new(QdrantStore::from_config(&config).unwrap()),
        Breaker::new(3, Duration::from_millis(300)),
    );
    stand_in.fail_next.store(3, Ordering::SeqCst);
    for _ in 0..3 {
        assert!(matches!(
            store
                .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
                .await,
            Err(StoreError::Backend(_))
        ));
    }
    assert_eq!(store.breaker().state(), "open");
    let sent = stand_in.sent();
    let started = Instant::now();
    assert!(matches!(
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await,
        Err(StoreError::CircuitOpen)
    ));
    assert!(
        started.elapsed() < Duration::from_millis(5),
        "skipped without waiting"
    );
    assert_eq!(stand_in.sent(), sent, "nothing sent while open");

    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(store.breaker().state(), "half_open");
    assert_eq!(
        store
            .search(&tenant("acme"), &Search::new("card", &[0.0, 1.0], 5))
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(store.breaker().state(), "closed");
}

// ---- metadata filters -----------------------------------------------------------------------

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn metadata_writes_indexes_and_filtered_searches_validate_against_the_official_document() {
    let spec = spec(SPEC);
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    ingest_filter_corpus(&store, &["acme", "globex"]).await;
    for (filter, _) in sluice_testkit::filters::expected() {
        search_filtered(&store, &filter, 5).await;
    }
    let requests = stand_in.requests();
    for r in &requests {
        let errors = spec.check(r);
        assert!(
            errors.is_empty(),
            "{} {}: {errors:#?}\n{:#}",
            r.method,
            r.path,
            r.body
        );
    }
    // One index per metadata field, asked for once, typed by the values.
    let mut indexes: Vec<(String, String)> = requests
        .iter()
        .filter(|r| r.path.contains("/index"))
        .map(|r| {
            let field = r.body["field_name"].as_str().unwrap().to_string();
            (field, r.body["field_schema"].as_str().unwrap().to_string())
        })
        .collect();
    indexes.sort();
    assert_eq!(
        indexes,
        [
            ("meta.groups", "keyword"),
            ("meta.public", "bool"),
            ("meta.score", "float"),
            ("meta.team", "keyword"),
            ("meta.year", "float"),
            ("meta_ts.updated_at", "float"),
        ]
        .map(|(f, s)| (f.to_string(), s.to_string()))
    );
}

// ---- documents: list, read, delete ----------------------------------------------------------

#[cfg_attr(
    specs_absent,
    ignore = "the official API documents are not in SLUICE_SPECS_DIR (default ../shared/specs)"
)]
#[tokio::test]
async fn listings_and_deletions_validate_against_the_official_document() {
    use sluice_contract::filter::Filter;
    use sluice_contract::{stages::Page, stages::Selection};
    let spec = spec(SPEC);
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    let acme = tenant("acme");
    let page = store
        .documents(
            &acme,
            &Selection::default(),
            Page {
                limit: 2,
                cursor: None,
            },
        )
        .await
        .unwrap();
    let first = &page.documents[0];
    assert_eq!(first.document.id, "alpha");
    assert_eq!(
        (first.chunks, first.ingested_at.as_deref()),
        (Some(3), Some("2026-12-01T10:00:00Z"))
    );
    assert_eq!(first.document.origin.as_deref(), Some("s3://b/acme/a.md"));
    // A document written before Sluice recorded chunks and times lists without them.
    assert_eq!(
        (
            page.documents[1].chunks,
            page.documents[1].ingested_at.as_ref()
        ),
        (None, None)
    );
    let next = page.next.expect("a next page");
    assert_eq!(next, "750e8400-e29b-41d4-a716-446655440000");
    let filter = Filter::parse(&json!({"year": {"$gte": 2025}})).unwrap();
    let ids = ["alpha".to_string()];
    let selection = Selection {
        ids: Some(&ids),
        origin: Some("s3://b/acme/a.md"),
        filter: Some(&filter),
    };
    let last = store
        .documents(
            &acme,
            &selection,
            Page {
                limit: 2,
                cursor: Some(&next),
            },
        )
        .await
        .unwrap();
    assert_eq!(last.next, None);
    store.delete_documents(&acme, &selection).await.unwrap();
    // A cursor that is not a point id never reaches Qdrant.
    let sent = stand_in.sent();
    let bad = store
        .documents(
            &acme,
            &Selection::default(),
            Page {
                limit: 2,
                cursor: Some("2"),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Invalid(_)), "{bad:?}");
    assert_eq!(stand_in.sent(), sent);

    let requests = stand_in.requests();
    let scrolls: Vec<&Request> = requests
        .iter()
        .filter(|r| r.path.ends_with("/points/scroll"))
        .collect();
    assert_eq!(scrolls.len(), 2);
    // Only first chunks, only the tenant's, never a chunk's text or vector.
    let must = scrolls[0].body["filter"]["must"].as_array().unwrap();
    assert!(
        must.contains(&json!({"key": "tenant", "match": {"value": "acme"}})),
        "{must:?}"
    );
    assert!(
        must.contains(&json!({"key": "chunk", "match": {"value": 0}})),
        "{must:?}"
    );
    assert!(
        !scrolls[0].body["with_payload"]
            .as_array()
            .unwrap()
            .contains(&json!("text"))
    );
    assert_eq!(scrolls[0].body["with_vector"], false);
    assert_eq!(scrolls[1].body["offset"], json!(next));
    let delete = requests
        .iter()
        .find(|r| r.path.contains("/points/delete"))
        .unwrap();
    let must = delete.body["filter"]["must"].as_array().unwrap();
    assert!(
        !must.contains(&json!({"key": "chunk", "match": {"value": 0}})),
        "every chunk goes"
    );
    assert!(
        must.contains(&json!({"key": "doc_id", "match": {"any": ["alpha"]}})),
        "{must:?}"
    );
    for r in &requests {
        let errors = spec.check(r);
        assert!(
            errors.is_empty(),
            "{} {}: {errors:#?}\n{:#}",
            r.method,
            r.path,
            r.body
        );
    }
}

/// A document sent again is replaced new chunks first: the upsert (waited for) goes before
/// the deletion of the chunks past the new end, so a reader never finds the document
/// missing while it is replaced.
#[tokio::test]
async fn a_resent_document_is_written_before_its_stale_chunks_are_deleted() {
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    for texts in [&["one", "two", "three"][..], &["one only"]] {
        stand_in.clear();
        let chunks = (texts.iter().enumerate())
            .map(|(i, t)| chunk(i, t))
            .collect();
        store
            .replace_document(&tenant("acme"), &doc(), chunks)
            .await
            .unwrap();
        let paths: Vec<String> = (stand_in.requests().into_iter())
            .map(|r| r.path)
            .filter(|p| p.contains("/points?wait=true") || p.contains("/points/delete"))
            .collect();
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert!(paths[0].ends_with("/points?wait=true"), "{paths:?}");
        assert!(paths[1].ends_with("/points/delete?wait=true"), "{paths:?}");
    }
}
