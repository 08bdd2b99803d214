//! The Qdrant REST adapter. No Qdrant server can be installed here, so:
//!
//! - contract: every request body the adapter sends is checked against Qdrant's official
//!   OpenAPI document (`qdrant-1.19.0-openapi.json` in `SLUICE_SPECS_DIR`, default
//!   `../shared/specs` beside the project; the test says so and skips when it is absent), and
//!   responses are parsed from bodies that validate against that document's response schemas;
//! - transport: a stand-in HTTP server on 127.0.0.1 — a stand-in for the transport only, it
//!   knows nothing of vectors — records requests and counts TCP connections, and can answer
//!   slowly or with 503.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use sluice_core::Config;
use sluice_core::breaker::{Breaker, GuardedStore};
use sluice_core::error::StoreError;
use sluice_core::stages::{DocumentInfo, Store, StoredChunk};
use sluice_retrieve::qdrant::{QdrantStore, parse_query_response};

const SPEC: &str = "qdrant-1.19.0-openapi.json";

// ---- the stand-in -------------------------------------------------------------------------

#[derive(Default)]
struct StandIn {
    /// (method, path with query, body) of every request.
    requests: Mutex<Vec<(String, String, Value)>>,
    connections: AtomicUsize,
    /// Answer 503 to this many requests first.
    fail_next: AtomicUsize,
    /// Sleep this long before answering (milliseconds).
    delay_ms: AtomicUsize,
}

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

async fn handle(
    State(s): State<Arc<StandIn>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> axum::response::Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path().to_string();
    s.requests.lock().unwrap().push((
        method.to_string(),
        uri.path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        body,
    ));
    let delay = s.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay as u64)).await;
    }
    if s.fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response();
    }
    let ok = |result: Value| axum::Json(json!({"result": result, "status": "ok", "time": 0.001}));
    let ack = || ok(json!({"operation_id": 1, "status": "completed"}));
    match (method.as_str(), path.as_str()) {
        (_, p) if p.starts_with("/collections/missing") => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"status": {"error": "Not found: Collection `missing` doesn't exist!"}, "time": 0.0})),
        )
            .into_response(),
        ("GET", p) if p.starts_with("/collections/") => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"status": {"error": "Not found"}, "time": 0.0})),
        )
            .into_response(),
        ("POST", p) if p.ends_with("/points/query") => ok(json!({"points": [
            scored_point("a", 0, 0.5),
            scored_point("b", 1, 0.25),
        ]}))
        .into_response(),
        ("POST", p) if p.ends_with("/points/count") => ok(json!({"count": 2})).into_response(),
        ("PUT", p) if p.contains("/index") || p.ends_with("/points") => ack().into_response(),
        ("PUT", _) => ok(json!(true)).into_response(),
        ("POST", p) if p.ends_with("/points/delete") => ack().into_response(),
        _ => StatusCode::NOT_IMPLEMENTED.into_response(),
    }
}

/// Starts the stand-in; returns its state and a config pointing the adapter at it.
async fn stand_in(overrides: &[(&str, &str)]) -> (Arc<StandIn>, Config) {
    use axum::serve::ListenerExt;
    let state = Arc::new(StandIn::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let counter = Arc::clone(&state);
    let listener = listener.tap_io(move |_| {
        counter.connections.fetch_add(1, Ordering::SeqCst);
    });
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(Arc::clone(&state));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut vars = vec![
        ("SLUICE_STORE".to_string(), "qdrant".to_string()),
        ("SLUICE_QDRANT_URL".into(), url),
        ("SLUICE_QDRANT_API_KEY".into(), "secret-key".into()),
    ];
    vars.extend(
        overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let config = Config::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        .expect("config");
    (state, config)
}

fn chunk(index: usize, text: &str) -> StoredChunk {
    StoredChunk {
        index,
        text: text.into(),
        tokens: 3,
        vector: vec![0.0, 1.0],
    }
}

fn doc() -> DocumentInfo {
    DocumentInfo {
        id: "cards/lost".into(),
        title: "Lost cards".into(),
        source: "samples/lost-card.md".into(),
    }
}

// ---- the official document ----------------------------------------------------------------

/// The specs folder, or `None` (said plainly) when it is not there.
fn specs_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SLUICE_SPECS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/specs"));
    if dir.join(SPEC).is_file() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: {SPEC} not found in {} — set SLUICE_SPECS_DIR to the folder holding the official API documents",
            dir.display()
        );
        None
    }
}

/// OpenAPI 3.0 schemas as JSON Schema: `nullable` becomes a `null` type, and objects that
/// list their properties refuse others (so a misspelt field fails).
fn to_json_schema(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("nullable") == Some(&Value::Bool(true)) {
                map.remove("nullable");
                match map.get("type").cloned() {
                    Some(Value::String(t)) => {
                        map.insert("type".into(), json!([t, "null"]));
                    }
                    _ if map.is_empty() => {
                        map.insert("type".into(), json!("null"));
                    }
                    _ => {}
                }
            }
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("unevaluatedProperties".into(), json!(false));
            }
            map.values_mut().for_each(to_json_schema);
        }
        Value::Array(items) => items.iter_mut().for_each(to_json_schema),
        _ => {}
    }
}

struct Spec(Value);

impl Spec {
    fn load(dir: &std::path::Path) -> Self {
        let mut doc: Value =
            serde_json::from_slice(&std::fs::read(dir.join(SPEC)).unwrap()).unwrap();
        to_json_schema(&mut doc);
        Spec(doc)
    }

    /// The operation of `method path` (templated segments match anything).
    fn operation(&self, method: &str, path: &str) -> &Value {
        let path = path.split('?').next().unwrap();
        let parts: Vec<&str> = path.split('/').collect();
        let (_, ops) = self.0["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(template, ops)| {
                let t: Vec<&str> = template.split('/').collect();
                ops.get(method.to_lowercase()).is_some()
                    && t.len() == parts.len()
                    && t.iter()
                        .zip(&parts)
                        .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
            })
            .unwrap_or_else(|| panic!("{method} {path} is not an operation of {SPEC}"));
        &ops[method.to_lowercase()]
    }

    /// Errors of `instance` against `schema` (a `{"$ref": …}` or an inline schema whose
    /// references point into the document).
    fn errors(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let mut root = self.0.clone();
        root["allOf"] = json!([schema]);
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&root)
            .expect("schema");
        validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }
}

#[tokio::test]
async fn every_request_body_validates_against_the_official_document() {
    let Some(dir) = specs_dir() else { return };
    let spec = Spec::load(&dir);
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    assert!(store.create_collection(384).await.unwrap());
    store
        .replace_document(
            "acme",
            &doc(),
            vec![
                chunk(0, "Freeze the card in the app."),
                chunk(1, "A new card arrives in five days."),
            ],
        )
        .await
        .unwrap();
    store.bump_corpus_version("acme").await.unwrap();
    store
        .search("acme", "replacement card days", &[0.0, 1.0], 5)
        .await
        .unwrap();
    store
        .search("acme", "the of and", &[0.0, 1.0], 5)
        .await
        .unwrap();
    store.count("acme").await.unwrap();

    let requests = stand_in.requests.lock().unwrap().clone();
    let mut checked = 0;
    for (method, path, body) in &requests {
        let op = spec.operation(method, path);
        let Some(schema) = op["requestBody"]["content"]["application/json"].get("schema") else {
            assert!(
                body.is_null(),
                "{method} {path} sends a body the API does not take"
            );
            continue;
        };
        let errors = spec.errors(schema, body);
        assert!(errors.is_empty(), "{method} {path}: {errors:#?}\n{body:#}");
        checked += 1;
    }
    let paths: Vec<&str> = requests.iter().map(|(_, p, _)| p.as_str()).collect();
    assert!(checked >= 9, "bodies checked: {checked} of {paths:?}");
    for needed in [
        "/points/query",
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

#[tokio::test]
async fn a_misspelt_field_would_fail_the_contract_check() {
    let Some(dir) = specs_dir() else { return };
    let spec = Spec::load(&dir);
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

#[tokio::test]
async fn query_responses_shaped_by_the_document_parse_into_hits() {
    let result = json!({"points": [scored_point("a", 0, 0.5), scored_point("b", 1, 0.25)]});
    if let Some(dir) = specs_dir() {
        let spec = Spec::load(&dir);
        let op = spec.operation("POST", "/collections/x/points/query");
        let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
        let response = json!({"result": result, "status": "ok", "time": 0.002});
        let errors = spec.errors(schema, &response);
        assert!(
            errors.is_empty(),
            "the stand-in's response is off-schema: {errors:?}"
        );
    }
    let response = json!({"result": result, "status": "ok", "time": 0.002}).to_string();
    let hits = parse_query_response(&response).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].document.id, "a");
    assert_eq!(hits[1].chunk, 1);
    assert_eq!(hits[0].vector, vec![0.6, 0.8]);
    assert!((hits[0].score - 0.5).abs() < 1e-6);
    let no_payload = json!({"result": {"points": [{"id": 1, "version": 0, "score": 1.0}]}});
    assert!(parse_query_response(&no_payload.to_string()).is_err());
}

// ---- transport -----------------------------------------------------------------------------

#[tokio::test]
async fn one_connection_serves_a_hundred_sequential_queries() {
    let (stand_in, config) = stand_in(&[]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    for _ in 0..100 {
        store.search("acme", "card", &[0.0, 1.0], 5).await.unwrap();
    }
    assert_eq!(stand_in.connections.load(Ordering::SeqCst), 1);
    let requests = stand_in.requests.lock().unwrap();
    assert_eq!(requests.len(), 100);
}

#[tokio::test]
async fn reads_are_retried_on_5xx_and_writes_are_not() {
    let (stand_in, config) = stand_in(&[("SLUICE_STORE_READ_RETRIES", "1")]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    stand_in.fail_next.store(1, Ordering::SeqCst);
    assert_eq!(
        store
            .search("acme", "card", &[0.0, 1.0], 5)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(stand_in.requests.lock().unwrap().len(), 2, "one retry");

    stand_in.requests.lock().unwrap().clear();
    stand_in.fail_next.store(2, Ordering::SeqCst);
    let e = store
        .search("acme", "card", &[0.0, 1.0], 5)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("503"), "{e}");

    stand_in.requests.lock().unwrap().clear();
    stand_in.fail_next.store(1, Ordering::SeqCst);
    assert!(
        store
            .replace_document("acme", &doc(), vec![chunk(0, "x")])
            .await
            .is_err()
    );
    assert_eq!(
        stand_in.requests.lock().unwrap().len(),
        1,
        "a write is sent once"
    );
}

#[tokio::test]
async fn a_missing_collection_fails_writes_and_searches_with_what_to_do() {
    let (_stand_in, config) = stand_in(&[("SLUICE_QDRANT_COLLECTION", "missing")]).await;
    let store = QdrantStore::from_config(&config).unwrap();
    let e = store
        .replace_document("acme", &doc(), vec![chunk(0, "x")])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("sluice store create-collection"),
        "{e}"
    );
    let e = store
        .search("acme", "card", &[0.0, 1.0], 5)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    // A tenant without a corpus version point reads as version 0.
    assert_eq!(store.corpus_version("acme").await.unwrap(), 0);
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
        .search("acme", "card", &[0.0, 1.0], 5)
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
            store.search("acme", "card", &[0.0, 1.0], 5).await,
            Err(StoreError::Backend(_))
        ));
    }
    assert_eq!(store.breaker().state(), "open");
    let sent = stand_in.requests.lock().unwrap().len();
    let started = Instant::now();
    assert!(matches!(
        store.search("acme", "card", &[0.0, 1.0], 5).await,
        Err(StoreError::CircuitOpen)
    ));
    assert!(
        started.elapsed() < Duration::from_millis(5),
        "skipped without waiting"
    );
    assert_eq!(
        stand_in.requests.lock().unwrap().len(),
        sent,
        "nothing sent while open"
    );

    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(store.breaker().state(), "half_open");
    assert_eq!(
        store
            .search("acme", "card", &[0.0, 1.0], 5)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(store.breaker().state(), "closed");
}
