//! Tenant isolation in the real stages, with auth on (`SLUICE_API_KEYS_FILE`): a key never
//! reaches another tenant's documents in the Qdrant Edge store, its ingests, or its components
//! in the sandbox. (Keys, permissions, rates and open streams are contract tests:
//! `crates/http/tests/contract/access.rs`.)

use sluice_testkit::tenant;

use reqwest::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_tests::{Answer, TestServer, answer_with_headers, error_code as code, key_file, start};

use sluice_tests::REVERSE;
const QUESTION: &str = "How long does a refund take?";

/// A key file with keys for two tenants.
struct Keys {
    _dir: tempfile::TempDir,
    path: String,
    acme: String,
    globex: String,
}

fn keys() -> Keys {
    let (dir, path, keys) = key_file(&[
        ("acme", &Permission::DEFAULT),
        ("globex", &Permission::DEFAULT),
    ]);
    let [acme, globex] = <[String; 2]>::try_from(keys).unwrap();
    Keys {
        _dir: dir,
        path,
        acme,
        globex,
    }
}

async fn server_with(keys: &Keys, extra: &[(&str, &str)]) -> TestServer {
    let mut vars = vec![("SLUICE_API_KEYS_FILE", keys.path.as_str())];
    vars.extend_from_slice(extra);
    start(&vars).await
}

/// `method path` with `authorization` (a whole header value) and an optional tenant header;
/// status, headers and the JSON body (Null when not JSON).
async fn call(
    server: &TestServer,
    authorization: Option<&str>,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut headers = Vec::new();
    if let Some(a) = authorization {
        headers.push(("authorization", a));
    }
    if let Some(t) = tenant {
        headers.push(("x-sluice-tenant", t));
    }
    call_with(server, &headers, method, path, body).await
}

/// `method path` with `headers` and `body`.
async fn call_with(
    server: &TestServer,
    headers: &[(&str, &str)],
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    sluice_tests::request(&server.url, headers, method, path, body).await
}

async fn as_key(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let (status, _, body) = call(server, Some(&bearer(key)), None, method, path, bytes).await;
    (status, body)
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

async fn ask(server: &TestServer, key: &str, body: &Value) -> Answer {
    let auth = bearer(key);
    let answer = answer_with_headers(&server.url, &[("authorization", &auth)], body).await;
    answer.assert_well_formed();
    answer
}

async fn ingest(server: &TestServer, key: &str, id: &str, text: &str) -> Value {
    let (status, body) = as_key(
        server,
        key,
        Method::POST,
        "/v1/documents",
        json!({"documents": [{"id": id, "text": text}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn one_tenants_documents_are_never_retrieved_for_another() {
    sluice_testkit::needs!(Llm, Model);
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    ingest(
        &server,
        &keys.acme,
        "refunds",
        "Acme refunds take five business days.",
    )
    .await;
    let acme = ask(&server, &keys.acme, &json!({"query": QUESTION})).await;
    let sources = acme.first("meta").data["documents"].clone();
    assert_eq!(sources[0]["id"], "refunds", "{sources}");
    let globex = ask(&server, &keys.globex, &json!({"query": QUESTION})).await;
    let meta = &globex.first("meta").data;
    assert_eq!(meta["tenant"], "globex");
    assert_eq!(meta["documents"], json!([]), "{meta}");
}

#[tokio::test]
async fn one_tenants_ingest_never_replaces_or_versions_anothers_documents() {
    sluice_testkit::needs!(Llm, Model);
    let keys = keys();
    let server = server_with(&keys, &[("SLUICE_CACHE", "off")]).await;
    let first = ingest(
        &server,
        &keys.acme,
        "policy",
        "Acme refunds take five business days.",
    )
    .await;
    assert_eq!(first["corpus_version"], 1);
    // The same document id from another tenant is another document.
    let other = ingest(
        &server,
        &keys.globex,
        "policy",
        "Globex refunds take ninety days.",
    )
    .await;
    assert_eq!(
        other["corpus_version"], 1,
        "globex has its own corpus version"
    );
    let acme = ask(&server, &keys.acme, &json!({"query": QUESTION})).await;
    let snippet = acme.first("meta").data["documents"][0]["snippet"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(snippet.contains("five business days"), "{snippet}");
    assert_eq!(
        server.pipeline.store.count(&tenant("acme")).await.unwrap(),
        1
    );
    assert_eq!(
        server
            .pipeline
            .store
            .count(&tenant("globex"))
            .await
            .unwrap(),
        1
    );
    let again = ingest(
        &server,
        &keys.acme,
        "policy",
        "Acme refunds take six business days.",
    )
    .await;
    assert_eq!(again["corpus_version"], 2, "only acme's own ingests count");
}

#[tokio::test]
async fn one_tenants_components_are_invisible_to_another() {
    sluice_testkit::needs!(Llm, Model);
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    let route = "/v1/components/rerank";
    let (status, _, uploaded) = call(
        &server,
        Some(&bearer(&keys.acme)),
        None,
        Method::PUT,
        route,
        REVERSE.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{uploaded}");
    let version = uploaded["version"].as_str().unwrap().to_string();
    let activate = json!({"version": version});
    let (status, _) = as_key(
        &server,
        &keys.acme,
        Method::POST,
        &format!("{route}/activate"),
        activate.clone(),
    )
    .await;
    assert_eq!(status, 200);
    // globex sees none of it and cannot activate it by its version.
    let (status, listed) = as_key(&server, &keys.globex, Method::GET, route, Value::Null).await;
    assert_eq!(
        (status, &listed["versions"], &listed["active"]),
        (200, &json!([]), &Value::Null)
    );
    let (status, error) = as_key(
        &server,
        &keys.globex,
        Method::POST,
        &format!("{route}/activate"),
        activate,
    )
    .await;
    assert_eq!((status, code(&error)), (404, "unknown_version"));
    // globex deactivating its own (none) leaves acme's active.
    let (status, _) = as_key(&server, &keys.globex, Method::DELETE, route, Value::Null).await;
    assert_eq!(status, 200);
    let (_, listed) = as_key(&server, &keys.acme, Method::GET, route, Value::Null).await;
    assert_eq!(listed["active"], version.as_str());
}
