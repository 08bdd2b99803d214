//! Bad input gets a clear JSON error with the exact status and code, and nothing hangs.

use serde_json::json;
use sluice_tests::{error_code as code, start, start_without_llm};

#[tokio::test]
async fn answer_requests_are_validated() {
    let server = start(&[]).await;
    let long = "x".repeat(4097);
    let cases: Vec<(String, u16, &str)> = vec![
        ("{not json".into(), 400, "invalid_json"),
        ("[1,2]".into(), 400, "invalid_json"),
        (json!({"query": 5}).to_string(), 400, "invalid_json"),
        (
            json!({"query": "hi", "colour": "red"}).to_string(),
            400,
            "invalid_json",
        ),
        ("{}".into(), 400, "missing_query"),
        (json!({"query": "   "}).to_string(), 400, "empty_query"),
        (json!({"query": long}).to_string(), 400, "query_too_long"),
        (json!({"query": "hi", "k": 0}).to_string(), 400, "invalid_k"),
        (
            json!({"query": "hi", "k": 51}).to_string(),
            400,
            "invalid_k",
        ),
        (
            json!({"query": "hi", "k": -3}).to_string(),
            400,
            "invalid_k",
        ),
        (
            json!({"query": "hi", "k": 2.5}).to_string(),
            400,
            "invalid_k",
        ),
        (
            json!({"query": "hi", "k": "5"}).to_string(),
            400,
            "invalid_k",
        ),
        (
            json!({"query": "hi", "retrieval_deadline_ms": 600000}).to_string(),
            400,
            "invalid_deadline",
        ),
        (
            json!({"query": "hi", "session_id": ""}).to_string(),
            400,
            "invalid_session_id",
        ),
    ];
    for (body, status, expected) in cases {
        let (got, reply) = server.post_raw("/v1/answer", body.clone()).await;
        assert_eq!(
            (got, code(&reply)),
            (status, expected),
            "for body {body:.80}"
        );
        assert!(!reply["error"]["message"].as_str().unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_4096_character_query_is_accepted() {
    // An unreachable LLM keeps this fast: acceptance is what is checked (200, meta, error).
    let server = start_without_llm().await;
    let query = "é".repeat(4096); // characters, not bytes: 8,192 bytes
    let answer = server.answer(&json!({"query": query})).await;
    answer.assert_well_formed();
    assert_eq!(answer.names(), ["meta", "error"]);
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let server = start(&[]).await;
    let big = json!({"query": "x".repeat(1 << 20)}).to_string();
    let (status, body) = server.post_raw("/v1/answer", big).await;
    assert_eq!((status, code(&body)), (413, "body_too_large"));

    let small = start(&[("SLUICE_MAX_INGEST_BYTES", "2048")]).await;
    let doc = json!({"documents": [{"id": "a", "text": "y".repeat(4096)}]});
    let (status, body) = small.post("/v1/documents", &doc).await;
    assert_eq!((status, code(&body)), (413, "body_too_large"));
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let server = start(&[]).await;
    let (status, body) = server.get("/v1/nothing").await;
    assert_eq!((status, code(&body)), (404, "not_found"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/nothing")
    );
    let (status, body) = server.get("/v1/answer").await;
    assert_eq!((status, code(&body)), (405, "method_not_allowed"));
}

#[tokio::test]
async fn bad_documents_are_refused_and_nothing_is_written() {
    let server = start(&[]).await;
    let cases = vec![
        (json!({"documents": []}), "invalid_document"),
        (
            json!({"documents": [{"id": "a", "text": ""}]}),
            "invalid_document",
        ),
        (
            json!({"documents": [{"id": "", "text": "x"}]}),
            "invalid_document",
        ),
        (
            json!({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}),
            "invalid_document",
        ),
        (json!({"documents": [{"id": "a"}]}), "invalid_json"),
        (json!({"docs": []}), "invalid_json"),
    ];
    for (body, expected) in cases {
        let (status, reply) = server.post("/v1/documents", &body).await;
        assert_eq!((status, code(&reply)), (400, expected), "for {body}");
    }
    server.assert_nothing_written("default").await;
}

/// Sends `head` (request line and headers), a body shorter than its `content-length` says,
/// then ends the request side: what a client that breaks off mid-body leaves. The response.
async fn broken_off(url: &str, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(br#"{"query": "#).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut response = String::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_string(&mut response),
    )
    .await;
    response
}

#[tokio::test]
async fn a_body_broken_off_is_unreadable() {
    let server = start(&[]).await;
    let head = "POST /v1/answer HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    let response = broken_off(&server.url, head).await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert!(response.contains("\"unreadable_body\""), "{response}");
}

#[tokio::test]
async fn broken_dependencies_get_their_own_codes() {
    use sluice_core::stages::{ComponentError, ComponentStorage, ComponentVersion, Components};
    use std::sync::Arc;

    /// Component storage that fails every read.
    struct Unreachable;
    impl ComponentStorage for Unreachable {
        fn get(&self, _: &str) -> Result<Option<Vec<u8>>, ComponentError> {
            Err(ComponentError::Storage("injected: unreachable".into()))
        }
        fn put(&self, _: &str, _: &[u8]) -> Result<(), ComponentError> {
            Err(ComponentError::Storage("injected: unreachable".into()))
        }
        fn versions(&self, _: &str) -> Result<Vec<(String, usize)>, ComponentError> {
            Err(ComponentError::Storage("injected: unreachable".into()))
        }
        fn add_version(&self, _: &str, _: &str, _: usize) -> Result<(), ComponentError> {
            Err(ComponentError::Storage("injected: unreachable".into()))
        }
        fn active(&self, _: &str) -> Result<Option<String>, ComponentError> {
            Err(ComponentError::Storage("injected: unreachable".into()))
        }
        fn set_active(&self, _: &str, _: Option<&str>) -> Result<(), ComponentError> {
            Err(ComponentError::Storage("injected: unreachable".into()))
        }
    }

    /// A registry whose work dies (a panic on the blocking pool).
    struct Dying;
    impl Components for Dying {
        fn upload(&self, _: &str, _: &[u8]) -> Result<ComponentVersion, ComponentError> {
            panic!("injected")
        }
        fn activate(&self, _: &str, _: &str) -> Result<ComponentVersion, ComponentError> {
            panic!("injected")
        }
        fn list(&self, _: &str) -> Result<Vec<ComponentVersion>, ComponentError> {
            panic!("injected")
        }
        fn deactivate(&self, _: &str) -> Result<(), ComponentError> {
            panic!("injected")
        }
    }

    // The store refuses writes: 500 ingest_failed, and nothing is half-written.
    let server = sluice_tests::start_adjusted(&[], |p| {
        let mut store = sluice_tests::Troubled::around(Arc::clone(&p.store));
        store.fail_writes = true;
        p.store = Arc::new(store);
    })
    .await;
    let (status, error) = server
        .post(
            "/v1/documents",
            &json!({"documents": [{"id": "a", "text": "Refunds take five days."}]}),
        )
        .await;
    assert_eq!((status, code(&error)), (500, "ingest_failed"), "{error}");
    server.assert_nothing_written("default").await;
    server.stop().await;

    // The answer cache unreachable: clearing it is a 503.
    let server = sluice_tests::start_with_cache(&[], Arc::new(sluice_tests::BrokenCache)).await;
    let (status, error) = server.delete("/v1/cache").await;
    assert_eq!(
        (status, code(&error)),
        (503, "cache_unavailable"),
        "{error}"
    );
    server.stop().await;

    // The key table unreachable: every /v1 route is a 503 with Retry-After.
    let server =
        sluice_tests::start_adjusted(&[], |p| p.keys = Some(Arc::new(sluice_tests::BrokenKeys)))
            .await;
    for (method, path, body) in sluice_tests::v1_routes() {
        let r = sluice_tests::http()
            .request(method.clone(), format!("{}{path}", server.url))
            .header("authorization", "Bearer sk-sluice-0000")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{method} {path}");
        assert_eq!(r.headers()["retry-after"], "1", "{method} {path}");
        let error: serde_json::Value = r.json().await.unwrap();
        assert_eq!(code(&error), "auth_unavailable", "{method} {path}");
    }
    server.stop().await;

    // No component registry in this deployment: 404 components_disabled.
    let server = sluice_tests::start_adjusted(&[], |p| {
        p.components = None;
        p.reranker = None;
    })
    .await;
    let (status, error) = server.get("/v1/components/rerank").await;
    assert_eq!(
        (status, code(&error)),
        (404, "components_disabled"),
        "{error}"
    );
    server.stop().await;

    // The component storage unreachable: 500 storage_failed.
    let server = sluice_tests::start_adjusted(&[], |p| {
        sluice_tests::use_registry(p, Arc::new(Unreachable))
    })
    .await;
    let (status, error) = server.get("/v1/components/rerank").await;
    assert_eq!((status, code(&error)), (500, "storage_failed"), "{error}");
    server.stop().await;

    // The registry's work dies: 500 internal, and the server goes on serving.
    let server = sluice_tests::start_adjusted(&[], |p| p.components = Some(Arc::new(Dying))).await;
    let (status, error) = server.get("/v1/components/rerank").await;
    assert_eq!((status, code(&error)), (500, "internal"), "{error}");
    assert_eq!(server.get("/healthz").await.0, 200);
    server.stop().await;
}
