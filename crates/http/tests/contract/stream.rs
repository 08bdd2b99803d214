//! The stream contract of `POST /v1/answer`: `meta` first with the sources, then the tokens in
//! order, then exactly one `done` (or `error`) with the timings; what the LLM is sent.

use serde_json::json;

use crate::kit::{ANSWER, Kit};

#[tokio::test]
async fn an_answer_streams_meta_tokens_and_done_with_the_sources_the_llm_was_given() {
    let app = Kit::new(&[("SLUICE_MAX_TOKENS", "24")]).app();
    app.ingest("default").await;
    let answer = app
        .answer(&json!({"query": "How long does a replacement card take?", "k": 2, "session_id": "s-42"}))
        .await;
    answer.assert_well_formed();
    assert_eq!(answer.names().last(), Some(&"done"));
    assert_eq!(answer.text(), ANSWER, "every token, in order");

    let meta = answer.meta();
    assert_eq!(meta["tenant"], "default");
    assert_eq!(meta["k"], 2);
    assert_eq!(meta["session_id"], "s-42");
    assert_eq!(meta["model_id"], "scripted-llm");
    assert_eq!(meta["cache"], "miss");
    assert_eq!(meta["degraded"], json!([]));
    assert_eq!(meta["trace_id"].as_str().map(str::len), Some(32));
    assert_eq!(answer.sources().len(), 2, "k sources");
    assert_eq!(answer.sources()[0], "lost-card");
    let first = &meta["documents"][0];
    assert_eq!(first["title"], "Lost card");
    assert_eq!(first["chunk"], 0);
    assert!(first["score"].as_f64().is_some_and(|s| s > 0.0));
    assert!(
        first["snippet"]
            .as_str()
            .is_some_and(|s| s.starts_with("Report a lost card"))
    );
    assert!(meta.get("prompt").is_none(), "no prompt unless asked");
    assert!(meta["timings"].get("ttft_ms").is_none(), "not known yet");

    // The LLM got the question and the sources, numbered as meta lists them, and the cap.
    let calls = app.llm.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].max_tokens, 24);
    let prompt: String = calls[0]
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert!(prompt.contains("How long does a replacement card take?"));
    assert!(prompt.contains("[1]") && prompt.contains("replacement card arrives"));
    assert!(
        calls[0]
            .traceparent
            .contains(meta["trace_id"].as_str().unwrap())
    );

    let done = answer.first("done");
    assert_eq!(done["request_id"], meta["request_id"]);
    assert_eq!(done["session_id"], "s-42");
    assert_eq!(done["model_id"], "scripted-llm");
    assert_eq!(done["cached"], false);
    assert_eq!(done["finish_reason"], "stop");
    let tokens = answer.names().iter().filter(|n| **n == "token").count();
    assert_eq!(done["token_count"], tokens as u64);
    let t = &done["timings"];
    let ms = |k: &str| {
        t[k].as_f64()
            .unwrap_or_else(|| panic!("timings.{k} in {t}"))
    };
    for k in [
        "embed_ms",
        "retrieve_ms",
        "prompt_ms",
        "llm_ttft_ms",
        "ttft_ms",
    ] {
        assert!(ms(k) >= 0.0 && ms(k) <= ms("total_ms"), "{k} in {t}");
    }
    assert!(ms("embed_ms") + ms("retrieve_ms") + ms("prompt_ms") <= ms("ttft_ms"));
    assert!(t.get("rerank_ms").is_none(), "no component, no rerank time");
}

#[tokio::test]
async fn a_session_id_is_made_when_none_is_sent_and_each_request_has_its_own_id() {
    let app = Kit::new(&[]).app();
    let one = app
        .answer(&json!({"query": "a question", "cache": "bypass"}))
        .await;
    let two = app
        .answer(&json!({"query": "a question", "cache": "bypass"}))
        .await;
    assert!(!one.meta()["session_id"].as_str().unwrap().is_empty());
    assert_ne!(one.meta()["request_id"], two.meta()["request_id"]);
}

#[tokio::test]
async fn include_prompt_echoes_the_llm_request() {
    let app = Kit::new(&[("SLUICE_MAX_TOKENS", "24")]).app();
    app.ingest("default").await;
    let query = "What is the ATM limit for premium accounts?";
    let answer = app
        .answer(&json!({"query": query, "include_prompt": true}))
        .await;
    let prompt = &answer.meta()["prompt"];
    assert_eq!(prompt["max_tokens"], 24);
    let sent = &app.llm.calls()[0];
    let messages = prompt["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), sent.messages.len());
    for (echoed, sent) in messages.iter().zip(&sent.messages) {
        assert_eq!(
            echoed["content"],
            sent.content.as_str(),
            "the echo is what was sent"
        );
    }
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(last["content"].as_str().unwrap().contains(query));
}

#[tokio::test]
async fn the_callers_traceparent_is_continued_into_the_llm_call() {
    let app = Kit::new(&[]).app();
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let answer = app
        .answer_with(&[("traceparent", parent)], &json!({"query": "anything"}))
        .await;
    assert_eq!(
        answer.meta()["trace_id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let sent = &app.llm.calls()[0].traceparent;
    assert!(
        sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{sent}"
    );
    assert!(
        !sent.contains("00f067aa0ba902b7"),
        "a child span of the caller's: {sent}"
    );
    // A malformed one starts a new trace rather than failing the request.
    let answer = app
        .answer_with(&[("traceparent", "garbage")], &json!({"query": "anything"}))
        .await;
    assert_eq!(answer.meta()["trace_id"].as_str().map(str::len), Some(32));
}

#[tokio::test]
async fn health_and_readiness_report_each_part() {
    let app = Kit::new(&[]).app();
    let health = app.send(axum::http::Method::GET, "/healthz", &[], "").await;
    assert_eq!(
        (health.status, health.body.clone()),
        (200, json!({"status": "ok"}))
    );
    let ready = app.send(axum::http::Method::GET, "/readyz", &[], "").await;
    assert_eq!(ready.status, 200, "{}", ready.raw);
    assert_eq!(ready.body["ready"], true);
}
