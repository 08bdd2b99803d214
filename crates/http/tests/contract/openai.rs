//! The OpenAI-compatible surface: a chat completion whole or streamed in OpenAI's shapes, with
//! Sluice's sources alongside; refusals and failures as OpenAI errors.

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::error::LlmError;
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
    assert!(c["sluice"].get("prompt").is_none(), "only when asked: {c}");
}

#[tokio::test]
async fn the_sluice_options_act_as_on_the_answer_route_the_prompt_included() {
    let app = Kit::new(&[]).ingested("default").await.app();
    for stream in [false, true] {
        let asked = json!({"model": "any", "messages": messages(), "stream": stream,
                           "sluice": {"include_prompt": true, "k": 1, "cache": "bypass"}});
        let reply = app.post("/v1/chat/completions", &asked).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        let sluice = match stream {
            false => reply.body["sluice"].clone(),
            true => {
                let chunks = data_lines(&reply.raw);
                let last = chunks.iter().rev().find(|c| c.contains("\"sluice\""));
                serde_json::from_str::<Value>(last.expect("a chunk with sources")).unwrap()
                    ["sluice"]
                    .clone()
            }
        };
        let prompt = sluice["prompt"]["messages"].to_string();
        assert!(prompt.contains(QUESTION), "the prompt as sent: {sluice}");
        assert_eq!(
            sluice["sources"].as_array().unwrap().len(),
            1,
            "k 1: {sluice}"
        );
    }
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
async fn a_whole_completion_that_fails_answers_with_its_codes_status() {
    let cases = [
        (
            Reply::Refuse(LlmError::Unavailable("refused".into())),
            503,
            "llm_unavailable",
        ),
        (
            Reply::Refuse(LlmError::Status {
                status: 503,
                body: "overloaded".into(),
            }),
            503,
            "llm_unavailable",
        ),
        (
            Reply::Refuse(LlmError::Status {
                status: 400,
                body: "bad request".into(),
            }),
            502,
            "llm_rejected",
        ),
        (
            Reply::Refuse(LlmError::Timeout("first-token")),
            504,
            "llm_timeout",
        ),
        (
            Reply::BreakAfter(vec!["A ".into()], LlmError::Stream("cut".into())),
            502,
            "llm_stream_failed",
        ),
    ];
    for (reply, status, code) in cases {
        let app = Kit::with_llm(&[], ScriptedLlm::new(reply)).app();
        let whole = app
            .post("/v1/chat/completions", &json!({"messages": messages()}))
            .await;
        assert_eq!(
            (whole.status, whole.code()),
            (status, code),
            "{}",
            whole.raw
        );
        assert!(
            whole.body.get("choices").is_none(),
            "no partial answer: {}",
            whole.raw
        );
    }
    // A server shutting down ends a whole completion in flight with 503 `shutting_down`.
    let app = Kit::with_llm(&[], ScriptedLlm::new(Reply::StallAfter(vec!["A ".into()]))).app();
    let pipeline = app.server.answers.clone().expect("answers");
    let asked = {
        let app = app.clone();
        tokio::spawn(async move {
            app.post("/v1/chat/completions", &json!({"messages": messages()}))
                .await
        })
    };
    // Drained once the LLM has been called (the answer is in flight), not after a guess.
    while app.llm.calls().is_empty() {
        tokio::task::yield_now().await;
    }
    pipeline.drain();
    let whole = asked.await.expect("the request ends");
    assert_eq!(
        (whole.status, whole.code()),
        (503, "shutting_down"),
        "{}",
        whole.raw
    );
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

// ---- conversations, usage, max_tokens ------------------------------------------------------

/// A conversation: a system message, two earlier turns, and a follow-up that names nothing of
/// what it refers to ("how soon" shares no word with any document).
fn conversation() -> Value {
    json!([
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "I lost my card, what do I do?"},
        {"role": "assistant", "content": "Report the lost card in the app [1]."},
        {"role": "user", "content": "How soon?"},
    ])
}

#[tokio::test]
async fn earlier_turns_reach_the_model_and_a_follow_up_is_retrieved_by_what_it_refers_to() {
    let kit = Kit::new(&[]).ingested("default").await;
    let llm = kit.llm.clone();
    let app = kit.app();
    let reply = app
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": conversation()}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    // The earlier user turn was retrieved with the follow-up: the lost-card page first.
    assert_eq!(
        reply.body["sluice"]["sources"][0]["id"], "lost-card",
        "{}",
        reply.body
    );
    let sent = &llm.calls()[0].messages;
    let roles: Vec<&str> = sent.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    // Sluice's instructions first, then the client's system message, in one system message.
    assert!(
        sent[0]
            .content
            .starts_with("Answer using only the numbered sources"),
        "{}",
        sent[0].content
    );
    assert!(
        sent[0].content.ends_with("\n\nAnswer in one sentence."),
        "{}",
        sent[0].content
    );
    assert_eq!(sent[1].content, "I lost my card, what do I do?");
    assert_eq!(sent[2].content, "Report the lost card in the app [1].");
    assert!(
        sent[3].content.starts_with("Sources:"),
        "{}",
        sent[3].content
    );
    assert!(
        sent[3].content.ends_with("Question: How soon?"),
        "{}",
        sent[3].content
    );
    assert!(
        reply.body["sluice"]["degraded"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn one_question_in_two_conversations_is_two_cache_entries() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let ask = |messages: Value| {
        let app = &app;
        async move {
            let body = json!({"model": "m", "messages": messages});
            let reply = app.post("/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            reply.body["sluice"]["cache"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(ask(conversation()).await, "miss");
    assert_eq!(ask(conversation()).await, "hit");
    let other = json!([
        {"role": "user", "content": "Can I overpay my mortgage?"},
        {"role": "assistant", "content": "Yes, up to 10 percent [1]."},
        {"role": "user", "content": "How soon?"},
    ]);
    assert_eq!(ask(other).await, "miss", "another conversation");
    let alone = json!([{"role": "user", "content": "How soon?"}]);
    assert_eq!(ask(alone).await, "miss", "the question alone");
}

#[tokio::test]
async fn usage_comes_whole_and_with_include_usage_as_a_last_chunk() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let whole = app
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": messages()}),
        )
        .await;
    let usage = &whole.body["usage"];
    let words = ANSWER.split_whitespace().count() as u64;
    // The scripted model streams one token per word and reports no prompt count: the
    // prompt's tokens are Sluice's own estimate (the sources and the question at least).
    assert_eq!(usage["completion_tokens"], words, "{usage}");
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 20, "{usage}");
    assert_eq!(usage["total_tokens"], prompt + words);

    let streamed = |options: Value| {
        let app = &app;
        async move {
            let body = json!({"model": "m", "messages": messages(), "stream": true,
                              "stream_options": options, "sluice": {"cache": "bypass"}});
            let reply = app.post("/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            data_lines(&reply.raw)
                .iter()
                .filter(|d| **d != "[DONE]")
                .map(|d| serde_json::from_str::<Value>(d).unwrap())
                .collect::<Vec<_>>()
        }
    };
    let chunks = streamed(json!({"include_usage": true})).await;
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]), "{last}");
    assert_eq!(last["usage"], *usage, "the same counts streamed");
    assert_eq!(last["id"], chunks[0]["id"]);
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c.get("usage").is_none())
    );
    let chunks = streamed(json!({"include_usage": false})).await;
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));

    // From the cache: no prompt was sent.
    let cached = app
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": messages()}),
        )
        .await;
    assert_eq!(cached.body["sluice"]["cache"], "hit");
    assert_eq!(
        cached.body["usage"],
        json!({"prompt_tokens": 0, "completion_tokens": words, "total_tokens": words})
    );
}

#[tokio::test]
async fn max_tokens_is_honoured_up_to_the_servers_cap() {
    let kit = Kit::new(&[("SLUICE_MAX_TOKENS", "300")])
        .ingested("default")
        .await;
    let llm = kit.llm.clone();
    let app = kit.app();
    for (extra, sent) in [
        (json!({}), 300),
        (json!({"max_tokens": 40}), 40),
        (json!({"max_completion_tokens": 50}), 50),
        (json!({"max_tokens": 40, "max_completion_tokens": 60}), 60),
        (json!({"max_tokens": 5000}), 300),
        (json!({"max_tokens": null}), 300),
    ] {
        let mut body = json!({"model": "m", "messages": messages(), "sluice": {"cache": "bypass"}});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let reply = app.post("/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 200, "{extra}: {}", reply.raw);
        assert_eq!(llm.calls().last().unwrap().max_tokens, sent, "{extra}");
    }
    for bad in [json!(0), json!(-1), json!(2.5), json!("40")] {
        let body = json!({"model": "m", "messages": messages(), "max_tokens": bad});
        let reply = app.post("/v1/chat/completions", &body).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.body["error"]["code"], "invalid_max_tokens", "{bad}");
    }
}

/// A conversation of more than `MAX_MESSAGES` messages (or more than
/// `MAX_CONVERSATION_BYTES` of earlier turns) is refused before any of it is tokenised: the
/// embedder here panics if asked to count. One of exactly that many messages is answered.
#[tokio::test]
async fn a_conversation_over_its_caps_is_refused_before_any_tokenising() {
    use sluice_http::openai::{MAX_CONVERSATION_BYTES, MAX_MESSAGES};
    let mut kit = Kit::new(&[]);
    let never_counts = sluice_testkit::Hooked::new().on_count(|text| {
        panic!(
            "tokenised {} bytes of a conversation over its caps",
            text.len()
        )
    });
    kit.parts.embedder = Some(std::sync::Arc::new(never_counts));
    let app = kit.app();
    let turns = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": format!("turn {i}")})
            })
            .collect()
    };
    let over = json!({"model": "m", "messages": turns(MAX_MESSAGES + 1)});
    let reply = app.post("/v1/chat/completions", &over).await;
    assert_eq!(
        (reply.status, reply.code()),
        (413, "conversation_too_long"),
        "{}",
        reply.raw
    );
    assert!(
        reply.raw.contains(&MAX_MESSAGES.to_string()),
        "{}",
        reply.raw
    );
    let long = json!({"model": "m", "messages": [
        {"role": "user", "content": "x".repeat(MAX_CONVERSATION_BYTES + 1)},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "and now?"},
    ]});
    let reply = app.post("/v1/chat/completions", &long).await;
    assert_eq!(
        (reply.status, reply.code()),
        (413, "conversation_too_long"),
        "{}",
        reply.raw
    );
    // At the cap the request goes on (to the counting, here).
    let mut at = Kit::new(&[]);
    at.parts.embedder = Some(std::sync::Arc::new(sluice_testkit::HashEmbedder::new()));
    let mut messages = turns(MAX_MESSAGES - 1);
    messages.push(json!({"role": "user", "content": "and now?"}));
    let reply = at
        .app()
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": messages}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
}

/// Everything the client sends counts before the LLM is asked. System messages that cannot
/// fit half of the prompt's budget beside the question are refused (413), uncounted when their
/// bytes already say so; a long earlier turn is read by retrieval only up to its first
/// `MAX_FOLLOW_UP_BYTES` (what is tokenised before the deadline stays small) and left out of
/// the prompt, which stays within its budget.
#[tokio::test]
async fn what_the_client_sends_counts_against_the_budget_before_the_llm_is_asked() {
    use sluice_core::pipeline::MAX_FOLLOW_UP_BYTES;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (counted, embedded) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, e) = (Arc::clone(&counted), Arc::clone(&embedded));
    let hooked = sluice_testkit::Hooked::new()
        .on_count(move |text| {
            c.fetch_max(text.len(), Ordering::SeqCst);
        })
        .on_embed(move |texts| {
            let longest = texts.iter().map(|t| t.len()).max().unwrap_or(0);
            e.fetch_max(longest, Ordering::SeqCst);
            Ok(())
        });
    let mut kit = Kit::new(&[]);
    kit.parts.embedder = Some(Arc::new(hooked));
    let kit = kit.ingested("default").await;
    let llm = kit.llm.clone();
    let app = kit.app();
    counted.store(0, Ordering::SeqCst);
    embedded.store(0, Ordering::SeqCst);
    let chat = |system: String, earlier: String| {
        json!({"model": "m", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": earlier},
            {"role": "assistant", "content": "Yes."},
            {"role": "user", "content": "How long does a replacement card take?"},
        ]})
    };
    for system in ["policy ".repeat(24_000), "x".repeat(500_000)] {
        let reply = app
            .post("/v1/chat/completions", &chat(system, "Hi".into()))
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (413, "conversation_too_long"),
            "{}",
            reply.raw
        );
    }
    assert!(llm.calls().is_empty(), "the LLM was not asked");
    assert!(
        counted.load(Ordering::SeqCst) < 1_000,
        "over the floor: nothing counted"
    );

    let earlier = "card ".repeat(80_000);
    let reply = app
        .post("/v1/chat/completions", &chat("Be brief.".into(), earlier))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let question = "How long does a replacement card take?";
    let longest = embedded.load(Ordering::SeqCst);
    assert!(
        longest <= question.len() + 1 + MAX_FOLLOW_UP_BYTES,
        "{longest} bytes embedded"
    );
    let sent = &llm.calls()[0].messages;
    let roles: Vec<&str> = sent.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(
        roles,
        ["system", "assistant", "user"],
        "the long turn left out"
    );
    let degraded = reply.body["sluice"]["degraded"].to_string();
    assert!(degraded.contains("history_truncated"), "{degraded}");
}
