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
