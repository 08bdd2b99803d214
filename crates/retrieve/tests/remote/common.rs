//! What the remote-store tests share: the official API documents (as JSON Schema) and a
//! stand-in HTTP server on 127.0.0.1 — a stand-in for the transport only: it knows nothing
//! of vectors, it records requests, counts TCP connections, and can answer slowly or with
//! 503; each module gives it the canned answers of its API.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use sluice_contract::filter::Filter;
use sluice_contract::stages::{DocumentInfo, Search, Store, StoredChunk};
use sluice_retrieve::StoreConfig;
use sluice_testkit::tenant;

// ---- the stand-in -------------------------------------------------------------------------

/// One request the stand-in received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path with query string.
    pub path: String,
    pub headers: HeaderMap,
    /// The JSON body, or null.
    pub body: Value,
    /// The canned answer given (status, body); `None` when a 503 was injected.
    pub response: Option<(u16, Value)>,
}

/// A canned answer: status and JSON body.
pub type Respond = fn(&Request) -> (StatusCode, Value);

pub struct StandIn {
    pub requests: Mutex<Vec<Request>>,
    pub connections: AtomicUsize,
    /// Answer 503 to this many requests first.
    pub fail_next: AtomicUsize,
    /// Sleep this long before answering (milliseconds).
    pub delay_ms: AtomicUsize,
    respond: Respond,
}

impl StandIn {
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    pub fn sent(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn clear(&self) {
        self.requests.lock().unwrap().clear();
    }
}

async fn handle(
    State(s): State<Arc<StandIn>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let request = Request {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        response: None,
    };
    let fail = s
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let response = (!fail).then(|| (s.respond)(&request));
    s.requests.lock().unwrap().push(Request {
        response: response
            .as_ref()
            .map(|(status, body)| (status.as_u16(), body.clone())),
        ..request
    });
    let delay = s.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay as u64)).await;
    }
    match response {
        Some((status, body)) => (status, axum::Json(body)).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response(),
    }
}

/// Starts a stand-in answering with `respond`; returns its state and its base URL.
pub async fn stand_in(respond: Respond) -> (Arc<StandIn>, String) {
    use axum::serve::ListenerExt;
    let state = Arc::new(StandIn {
        requests: Mutex::default(),
        connections: AtomicUsize::new(0),
        fail_next: AtomicUsize::new(0),
        delay_ms: AtomicUsize::new(0),
        respond,
    });
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
    (state, url)
}

/// Serves `answer` (method, URI, JSON body → status, JSON body; a body that is not JSON is
/// null) on 127.0.0.1; returns the base URL.
pub async fn serve_json<F>(answer: F) -> String
where
    F: Fn(&Method, &Uri, Value) -> (StatusCode, Value) + Clone + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app =
        axum::Router::new().fallback(move |method: Method, uri: Uri, body: Bytes| async move {
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let (status, body) = answer(&method, &uri, body);
            (status, axum::Json(body)).into_response()
        });
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A config from `vars` over the defaults.
pub fn config(vars: &[(&str, &str)]) -> StoreConfig {
    StoreConfig::from_lookup(
        &|k: &str| {
            vars.iter()
                .rev()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        },
        std::path::Path::new("sluice-data"),
    )
    .expect("config")
}

pub fn chunk(index: usize, text: &str) -> StoredChunk {
    StoredChunk {
        place: Default::default(),
        header: String::new(),
        index,
        text: text.into(),
        tokens: 3,
        vector: vec![0.0, 1.0],
    }
}

pub fn doc() -> DocumentInfo {
    DocumentInfo {
        format: None,
        digest: None,
        id: "cards/lost".into(),
        title: "Lost cards".into(),
        source: "samples/lost-card.md".into(),
        metadata: Default::default(),
        origin: None,
    }
}

// ---- the metadata-filter cases ------------------------------------------------------------

/// The filter corpus (`sluice_testkit::filters`) written through `store`, one chunk a
/// document, for each of `tenants`.
pub async fn ingest_filter_corpus(store: &dyn Store, tenants: &[&str]) {
    for (id, metadata) in sluice_testkit::filters::corpus() {
        let info = DocumentInfo {
            id: id.into(),
            metadata,
            ..doc()
        };
        for t in tenants {
            store
                .replace_document(&tenant(t), &info, vec![chunk(0, "policy text")])
                .await
                .unwrap();
        }
    }
}

/// Searches `store` as tenant acme under `filter`, for `k` chunks.
pub async fn search_filtered(store: &dyn Store, filter: &Filter, k: usize) {
    search_under(store, Some(filter), k).await;
}

/// Searches `store` as tenant acme under `filter`, if any, for `k` chunks.
pub async fn search_under(store: &dyn Store, filter: Option<&Filter>, k: usize) {
    store
        .search(
            &tenant("acme"),
            &Search::new("policy text", &[0.0, 1.0], k).filter(filter),
        )
        .await
        .unwrap();
}

// ---- the official documents ---------------------------------------------------------------

/// An official API document as JSON Schema, from the specs folder (`SLUICE_SPECS_DIR`, default
/// `../shared/specs` beside the project). The tests that call it are ignored, and counted as
/// skipped, when the folder is absent (see `build.rs`), except under `CI`, where they run and
/// fail here. The package's folder is the one Cargo names when the test runs (a test compiled
/// in another clone sharing the target directory is not rebuilt, and would name that clone's).
pub fn spec(file: &str) -> Spec {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let dir = std::env::var_os("SLUICE_SPECS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| package.join("../../../shared/specs"));
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} — set SLUICE_SPECS_DIR to the folder holding the official API documents",
            path.display()
        )
    });
    let mut doc: Value = if file.ends_with(".json") {
        serde_json::from_str(&text).expect("JSON document")
    } else {
        serde_saphyr::from_str(&text).expect("YAML document")
    };
    to_json_schema(&mut doc);
    Spec {
        doc,
        name: file.to_string(),
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

pub struct Spec {
    doc: Value,
    name: String,
}

impl Spec {
    /// The operation of `method path` (templated segments match anything; the query string
    /// is ignored).
    pub fn operation(&self, method: &str, path: &str) -> &Value {
        let path = path.split('?').next().unwrap();
        let parts: Vec<&str> = path.split('/').collect();
        let method = method.to_lowercase();
        let (_, ops) = self.doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(template, ops)| {
                let t: Vec<&str> = template.split('/').collect();
                ops.get(&method).is_some()
                    && t.len() == parts.len()
                    && t.iter()
                        .zip(&parts)
                        .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
            })
            .unwrap_or_else(|| panic!("{method} {path} is not an operation of {}", self.name));
        &ops[method]
    }

    /// Errors of `instance` against `schema` (a `{"$ref": …}` or an inline schema whose
    /// references point into the document).
    pub fn errors(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let mut root = self.doc.clone();
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

    /// What is wrong with `request` as a call of this API: a body the operation does not
    /// take or that fails its schema, a query parameter it does not declare, a required
    /// header or query parameter missing — and with the stand-in's canned answer, when it
    /// does not fit the operation's response schema for its status.
    pub fn check(&self, request: &Request) -> Vec<String> {
        let op = self.operation(&request.method, &request.path);
        let mut errors = Vec::new();
        match op["requestBody"]["content"]["application/json"].get("schema") {
            Some(schema) => errors.extend(self.errors(schema, &request.body)),
            None if !request.body.is_null() => {
                errors.push("sends a body the operation does not take".into())
            }
            None => {}
        }
        let query: Vec<&str> = request
            .path
            .split_once('?')
            .map(|(_, q)| q.split('&').filter_map(|kv| kv.split('=').next()).collect())
            .unwrap_or_default();
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        for name in &query {
            let declared = params
                .iter()
                .any(|p| p["in"] == "query" && p["name"].as_str() == Some(name));
            if !declared {
                errors.push(format!("query parameter {name} is not declared"));
            }
        }
        for p in params.iter().filter(|p| p["required"] == true) {
            let name = p["name"].as_str().unwrap_or_default();
            let present = match p["in"].as_str() {
                Some("header") => request.headers.contains_key(name.to_lowercase().as_str()),
                Some("query") => query.contains(&name),
                _ => true,
            };
            if !present {
                errors.push(format!("required {} parameter {name} missing", p["in"]));
            }
        }
        if let Some((status, body)) = &request.response {
            let class = format!("{}XX", status / 100);
            let declared = [status.to_string(), class, "default".into()]
                .into_iter()
                .find_map(|key| op["responses"].get(&key));
            match declared.and_then(|r| r["content"]["application/json"].get("schema")) {
                Some(schema) => errors.extend(
                    self.errors(schema, body)
                        .into_iter()
                        .map(|e| format!("canned {status} response: {e}")),
                ),
                None => errors.push(format!("canned {status} response is not a declared one")),
            }
        }
        errors
    }
}
