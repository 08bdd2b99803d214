//! The OpenAI-compatible surface: a chat completion whole or streamed in OpenAI's shapes, with
//! Sluice's sources alongside; refusals and failures as OpenAI errors.

use axum::http::Method;
use serde_json::{Value, json};
use sluice_core::error::LlmError;
use sluice_testkit::{Reply, ScriptedLlm};

use crate::kit::{ANSWER, Kit};

const QUESTION: &str = "How long does a replacement card take?";

fn messages() -> Value {
    json!([{"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
}

/// The `data:` payloads of an SSE body.
fn data_lines(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

#[tokio::test]
async fn a_whole_completion_in_openais_shape_with_the_sources() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let reply = app
        .post(
            "/v1/chat/completions",
            &json!({"model": "any", "messages": messages()}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let c = &reply.body;
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["model"], "scripted-llm");
    assert_eq!(c["choices"][0]["message"]["role"], "assistant");
    assert_eq!(c["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    assert_eq!(c["sluice"]["sources"][0]["id"], "lost-card", "{c}");
}

#[tokio::test]
async fn a_streamed_completion_is_chunks_then_done() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let body = json!({"model": "any", "messages": messages(), "stream": true});
    let reply = app.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    let data = data_lines(&reply.raw);
    assert_eq!(data.last(), Some(&"[DONE]"), "{}", reply.raw);
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("a JSON chunk"))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "scripted-llm");
        assert_eq!(c["id"], chunks[0]["id"]);
    }
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, ANSWER);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["sluice"]["sources"][0]["id"], "lost-card");
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c.get("sluice").is_none())
    );
}

#[tokio::test]
async fn refusals_are_openai_errors() {
    let app = Kit::new(&[]).app();
    for (body, status, code) in [
        (json!({"messages": []}), 400, "missing_query"),
        (json!({"messages": messages(), "n": 2}), 400, "invalid_n"),
        (json!({"messages": "hello"}), 400, "invalid_json"),
        (
            json!({"messages": messages(), "sluice": {"k": 500}}),
            400,
            "invalid_k",
        ),
    ] {
        let reply = app.post("/v1/chat/completions", &body).await;
        assert_eq!((reply.status, reply.code()), (status, code), "{body}");
        assert_eq!(reply.body["error"]["type"], "invalid_request_error");
        assert!(reply.body["error"]["message"].is_string());
    }
    let models = app.send(Method::GET, "/v1/models", &[], "").await;
    assert_eq!(models.status, 200);
    assert_eq!(models.body["object"], "list");
    assert_eq!(models.body["data"][0]["id"], "scripted-llm");
}

#[tokio::test]
async fn an_llm_failure_is_an_openai_error_whole_or_streamed() {
    let down = Reply::Refuse(LlmError::Unavailable("connection refused".into()));
    let app = Kit::with_llm(&[], ScriptedLlm::new(down)).app();
    let reply = app
        .post("/v1/chat/completions", &json!({"messages": messages()}))
        .await;
    assert_eq!((reply.status, reply.code()), (503, "llm_unavailable"));
    assert_eq!(reply.body["error"]["type"], "server_error");
    // Streamed: the error arrives as a chunk of the same shape, and no [DONE] follows it.
    let reply = app
        .post(
            "/v1/chat/completions",
            &json!({"messages": messages(), "stream": true}),
        )
        .await;
    let data = data_lines(&reply.raw);
    let last: Value = serde_json::from_str(data.last().expect("a chunk")).expect("JSON");
    assert_eq!(last["error"]["code"], "llm_unavailable", "{}", reply.raw);
    assert_eq!(last["error"]["retryable"], true);
    assert!(!reply.raw.contains("[DONE]"));
    // Readiness says so too.
    let ready = app.send(Method::GET, "/readyz", &[], "").await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.body["checks"]["llm"]["ok"], false);
    assert_eq!(ready.body["checks"]["store"]["ok"], true);
}
