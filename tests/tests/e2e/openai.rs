//! The OpenAI-compatible routes (`POST /v1/chat/completions`, `GET /v1/models`): through the
//! official `openai` Python client from PyPI (`tests/openai/client.py`, in its own venv made
//! by `scripts/setup.sh tools`). (Their shapes and errors are contract tests:
//! `crates/http/tests/contract/openai.rs`.)

use sluice_testkit::tenant;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_tests::{key_file, sample_documents, start, venv_tool};

/// Runs `tests/openai/NAME.py` with `args` in the openai venv, within `secs`; what it printed.
pub(crate) async fn python(name: &str, args: &[&str], secs: u64) -> Value {
    let script = sluice_tests::repo().join(format!("tests/openai/{name}.py"));
    let out = tokio::process::Command::new(venv_tool("openai", "python"))
        .arg(&script)
        .args(args)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(secs), out)
        .await
        .expect("the client finished")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}.py: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A server with auth on and the samples in tenant acme, `env` on top; the key file's folder
/// (kept while the server runs), the server, acme's key.
pub(crate) async fn acme_with_samples(
    env: &[(&str, &str)],
) -> (tempfile::TempDir, sluice_tests::TestServer, String) {
    let (dir, path, mut keys) = key_file(&[("acme", &Permission::DEFAULT)]);
    let mut overrides = vec![("SLUICE_API_KEYS_FILE", path.as_str())];
    overrides.extend_from_slice(env);
    let server = start(&overrides).await;
    server
        .ingest
        .ingest(&tenant("acme"), sample_documents())
        .await
        .unwrap();
    (dir, server, keys.remove(0))
}

const QUESTION: &str = "How many days does a replacement card take to arrive after I lose my card?";

#[tokio::test]
async fn the_openai_python_client_streams_an_answer_with_its_sources() {
    sluice_testkit::needs!(Llm, Model, Tools);
    // Keep-alive comments every 50 ms: the local model's prefill takes longer, so the client
    // reads some before the first token, as it would from a loaded fleet, and must skip them.
    let (_dir, server, key) = acme_with_samples(&[("SLUICE_SSE_KEEPALIVE_MS", "50")]).await;
    let seen = python(
        "client",
        &[&format!("{}/v1", server.url), &key, QUESTION],
        120,
    )
    .await;

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

/// The two token counts of a usage object, by their names.
fn counts(usage: &Value, prompt: &str, completion: &str) -> (u64, u64) {
    let count = |name: &str| {
        usage[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in {usage}"))
    };
    (count(prompt), count(completion))
}

/// A conversation sent whole, as chat front-ends send it, through the official client and
/// LangChain's `ChatOpenAI` (`tests/openai/conversation.py`): the follow-up is answered from
/// the source it refers to, `usage` comes streamed and whole, `max_tokens` is honoured.
#[tokio::test]
async fn multi_turn_conversations_through_the_openai_client_and_langchain() {
    sluice_testkit::needs!(Llm, Model, Tools);
    let (_dir, server, key) = acme_with_samples(&[]).await;
    let seen = python("conversation", &[&format!("{}/v1", server.url), &key], 240).await;

    // "How soon will the new one arrive?" names no card: the earlier turn is what finds it.
    let stream = &seen["openai_stream"];
    let top3: Vec<&str> = stream["sluice"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(top3.contains(&"samples/lost-card.md"), "{stream}");
    assert!(
        !stream["text"].as_str().unwrap().trim().is_empty(),
        "{stream}"
    );
    // Usage as llama-server counted it: the prompt holds the sources and three turns.
    let usage = &stream["usage"];
    let (prompt, completion) = counts(usage, "prompt_tokens", "completion_tokens");
    assert!(prompt > 100, "{usage}");
    assert!((1..=24).contains(&completion), "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + completion);

    let whole = &seen["openai_whole"];
    assert_eq!(whole["usage"]["completion_tokens"], 4, "{whole}");
    assert_eq!(whole["finish_reason"], "length", "{whole}");

    for name in ["langchain_invoke", "langchain_stream"] {
        let lc = &seen[name];
        assert!(
            !lc["text"].as_str().unwrap().trim().is_empty(),
            "{name}: {lc}"
        );
        let usage = &lc["usage"];
        let (input, output) = counts(usage, "input_tokens", "output_tokens");
        assert!(input > 100 && (1..=24).contains(&output), "{name}: {usage}");
        assert!(
            matches!(lc["finish_reason"].as_str(), Some("stop" | "length")),
            "{name}: {lc}"
        );
    }
}

/// How a second turn is retrieved, on the two-turn conversations of
/// `tests/fixtures/conversations.json`: whether the expected source comes first (hit@1) for
/// the conversation as sent (the follow-up read with the earlier user turn) and for the second
/// turn sent alone. Prints the figures the README reports.
#[tokio::test]
async fn follow_up_questions_are_retrieved_by_what_they_refer_to() {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[]).await;
    server
        .ingest
        .ingest(&tenant("default"), sample_documents())
        .await
        .unwrap();
    let fixture: Value =
        serde_json::from_str(include_str!("../../fixtures/conversations.json")).unwrap();
    let ask = |messages: Value| {
        let url = format!("{}/v1/chat/completions", server.url);
        async move {
            // One token: what is measured is retrieval.
            let body = json!({"model": "m", "messages": messages, "max_tokens": 1,
                              "sluice": {"k": 1, "cache": "bypass"}});
            let reply: Value = sluice_tests::http()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            reply["sluice"]["sources"]
                .as_array()
                .unwrap_or_else(|| panic!("{reply}"))
                .iter()
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        }
    };
    // (kind, conversation hits, alone hits, count)
    let mut tally: std::collections::BTreeMap<String, (usize, usize, usize)> = Default::default();
    for c in fixture["conversations"].as_array().unwrap() {
        let turns: Vec<&str> = c["turns"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let expected = c["expected"].as_str().unwrap();
        let conversation = json!([
            {"role": "user", "content": turns[0]},
            {"role": "assistant", "content": "(the earlier answer)"},
            {"role": "user", "content": turns[1]},
        ]);
        let with = ask(conversation).await.iter().any(|id| id == expected);
        let alone = ask(json!([{"role": "user", "content": turns[1]}]))
            .await
            .iter()
            .any(|id| id == expected);
        let row = tally
            .entry(c["kind"].as_str().unwrap().to_string())
            .or_default();
        row.0 += usize::from(with);
        row.1 += usize::from(alone);
        row.2 += 1;
    }
    for (kind, (with, alone, n)) in &tally {
        eprintln!(
            "{kind}: hit@1 read with the earlier turn {with}/{n}, the turn alone {alone}/{n}"
        );
    }
    let (with, alone, n) = tally["follow-up"];
    assert!(
        with >= alone + n / 3 && with * 4 >= n * 3,
        "follow-ups: {with}/{n} with the earlier turn, {alone}/{n} alone"
    );
    let (with, alone, n) = tally["switch"];
    assert!(
        with + 1 >= alone && with * 4 >= n * 3,
        "a change of subject: {with}/{n} with the earlier turn, {alone}/{n} alone"
    );
}

/// Behind CloudFront with origin access control (its stand-in: a POST whose
/// `x-amz-content-sha256` does not match its body is refused, `Authorization` dropped), the
/// official client answers once given the two lines the deployment guide shows
/// (`tests/openai/edge.py`), and is refused without them.
#[tokio::test]
async fn the_openai_python_client_answers_through_an_edge_that_signs_for_a_function_url() {
    sluice_testkit::needs!(Llm, Model, Tools);
    let (_dir, server, key) = acme_with_samples(&[]).await;
    let edge = sluice_tests::proxy::signing_edge(&server.url).await;
    let seen = python("edge", &[&format!("{edge}/v1"), &key, QUESTION], 120).await;
    assert!(!seen["text"].as_str().unwrap().trim().is_empty(), "{seen}");
    let top3: Vec<&str> = seen["sources"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .filter_map(Value::as_str)
        .collect();
    assert!(top3.contains(&"samples/lost-card.md"), "{seen}");
    assert_eq!(seen["without_hook"], 403, "{seen}");
}
