//! The OpenAI-compatible routes (`POST /v1/chat/completions`, `GET /v1/models`): through the
//! official `openai` Python client from PyPI (`tests/openai/client.py`, in its own venv made
//! by `scripts/setup.sh tools`). (Their shapes and errors are contract tests:
//! `functions/http/tests/contract/openai.rs`.)

use sluice_testkit::tenant;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_core::auth::Permission;
use sluice_tests::{key_file, sample_documents, start, venv_tool};

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
        .ingest
        .ingest(&tenant("acme"), sample_documents())
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
