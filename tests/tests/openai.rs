//! The OpenAI-compatible routes (`POST /v1/chat/completions`, `GET /v1/models`): through the
//! official `openai` Python client from PyPI (`tests/openai/client.py`, in its own venv made
//! by `scripts/setup.sh tools`), and over plain HTTP as curl would use them.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_core::auth::Permission;
use sluice_tests::{http, key_file, sample_documents, start, start_without_llm, venv_tool};

const QUESTION: &str = "How many days does a replacement card take to arrive after I lose my card?";

#[tokio::test]
async fn the_openai_python_client_streams_an_answer_with_its_sources() {
    let (_dir, path, keys) = key_file(&[("acme", &Permission::DEFAULT)]);
    // Keep-alive comments every 50 ms: the local model's prefill takes longer, so the client
    // reads some before the first token, as it would from a loaded fleet, and must skip them.
    let server = start(&[
        ("SLUICE_API_KEYS_FILE", &path),
        ("SLUICE_SSE_KEEPALIVE_MS", "50"),
    ])
    .await;
    server
        .pipeline
        .ingest("acme", sample_documents())
        .await
        .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/openai/client.py");
    let out = tokio::process::Command::new(venv_tool("openai", "python"))
        .args([script, &format!("{}/v1", server.url), &keys[0], QUESTION])
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("the client finished")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(seen["models"], json!(["SmolLM2-135M-Instruct"]), "{seen}");
    let stream = &seen["stream"];
    // The local 135M model sometimes answers in one token: at least one content delta.
    assert!(stream["deltas"].as_u64().unwrap() >= 1, "{stream}");
    assert!(!stream["text"].as_str().unwrap().trim().is_empty());
    assert!(
        matches!(stream["finish_reason"].as_str(), Some("stop" | "length")),
        "{stream}"
    );
    assert_eq!(
        stream["ids"].as_array().unwrap().len(),
        1,
        "one id for every chunk"
    );
    // The extension on the final chunk: the sources, the lost-card page among the top 3.
    let sluice = &stream["sluice"];
    let top3: Vec<&str> = sluice["sources"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(top3.contains(&"samples/lost-card.md"), "{sluice}");
    assert!(sluice["timings"]["ttft_ms"].as_f64().is_some(), "{sluice}");
    assert_eq!(sluice["degraded"], json!([]));

    let whole = &seen["whole"];
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["role"], "assistant");
    assert!(
        !whole["text"].as_str().unwrap().trim().is_empty(),
        "{whole}"
    );
    // The `sluice` options of the request were applied: k = 3, cache bypassed.
    assert_eq!(
        whole["sluice"]["sources"].as_array().unwrap().len(),
        3,
        "{whole}"
    );
    assert_eq!(whole["sluice"]["cache"], "bypass");

    let errors = &seen["errors"];
    assert_eq!(
        errors["bad_key"],
        json!({"status": 401, "code": "invalid_api_key", "type": "authentication_error"})
    );
    assert_eq!(
        errors["no_user_message"],
        json!({"status": 400, "code": "missing_query", "type": "invalid_request_error"})
    );
}

/// `data:` payloads of an SSE body, in order.
fn data_lines(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

#[tokio::test]
async fn chat_completions_over_plain_http() {
    let server = start(&[]).await;
    server.ingest_samples().await;
    let url = format!("{}/v1/chat/completions", server.url);
    let ask = |body: Value| http().post(&url).json(&body).send();
    let messages = json!([{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]);

    let r = ask(json!({"model": "anything", "messages": messages, "stream": true}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let body = r.text().await.unwrap();
    let data = data_lines(&body);
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "SmolLM2-135M-Instruct");
        assert_eq!(c["id"], chunks[0]["id"]);
    }
    let last = chunks.last().unwrap();
    assert!(last["choices"][0]["finish_reason"].is_string(), "{last}");
    assert!(
        last["sluice"]["sources"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    assert!(
        chunks[1..chunks.len() - 1]
            .iter()
            .all(|c| c.get("sluice").is_none())
    );

    // Refusals in OpenAI's shape.
    for (body, status, code) in [
        (json!({"messages": []}), 400, "missing_query"),
        (json!({"messages": messages, "n": 2}), 400, "invalid_n"),
        (json!({"messages": "hello"}), 400, "invalid_json"),
        (
            json!({"messages": messages, "sluice": {"k": 500}}),
            400,
            "invalid_k",
        ),
    ] {
        let r = ask(body.clone()).await.unwrap();
        assert_eq!(r.status(), status, "{body}");
        let error: Value = r.json().await.unwrap();
        assert_eq!(error["error"]["code"], code, "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(error["error"]["message"].is_string());
    }
    let (status, models) = server.get("/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct");
}

#[tokio::test]
async fn an_llm_failure_is_an_openai_error_whole_or_streamed() {
    let server = start_without_llm().await;
    let url = format!("{}/v1/chat/completions", server.url);
    let messages = json!([{"role": "user", "content": "anything"}]);
    let r = http()
        .post(&url)
        .json(&json!({"messages": messages}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let error: Value = r.json().await.unwrap();
    assert_eq!(error["error"]["code"], "llm_unavailable");
    assert_eq!(error["error"]["type"], "server_error");
    // Streamed: the error arrives as a chunk of the same shape, and no [DONE] follows it.
    let r = http()
        .post(&url)
        .json(&json!({"messages": messages, "stream": true}))
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    let data = data_lines(&body);
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "llm_unavailable", "{body}");
    assert_eq!(last["error"]["retryable"], true);
    assert!(!body.contains("[DONE]"));
}
