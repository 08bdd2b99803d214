//! Answers a reader can check: every source in `meta` carries its evidence sentences as spans
//! of its chunk text, `meta.extract` the best of them; `done` carries the verdict on each
//! sentence of the answer, with the facts no source states spanned in the answer. The modes:
//! `annotate` (the default) never caches an unsupported answer, `strict` also says
//! `ungrounded` and a whole completion is refused, `off` checks nothing. A cache hit replays
//! the verdict made with the answer; every answer path carries the same fields.

use axum::http::Method;
use serde_json::{Value, json};
use sluice_testkit::ScriptedLlm;

use crate::kit::{ANSWER, App, Kit, Stream};

const QUESTION: &str = "How long does a replacement card take to arrive?";
/// The lost-card document says 5 working days: this answer changes the number.
const WRONG: &str = "A replacement card arrives within 10 working days [1].";

/// Characters `start..end` of `text`, as the spans count them.
fn span(text: &str, at: &Value) -> String {
    let (start, end) = (at["start"].as_u64().unwrap(), at["end"].as_u64().unwrap());
    text.chars()
        .skip(start as usize)
        .take((end - start) as usize)
        .collect()
}

fn done(answer: &Stream) -> &Value {
    answer.first("done")
}

async fn app_answering(text: &str, overrides: &[(&str, &str)]) -> App {
    Kit::with_llm(overrides, ScriptedLlm::answering(text))
        .ingested("default")
        .await
        .app()
}

async fn settings(app: &App, settings: Value) {
    let reply = app
        .send(Method::PUT, "/v1/settings", &[], settings.to_string())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
}

#[tokio::test]
async fn meta_carries_each_sources_evidence_sentences_and_the_extract() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let answer = app.answer(&json!({"query": QUESTION})).await;
    answer.assert_well_formed();
    let first = &answer.meta()["documents"][0];
    assert_eq!(first["id"], "lost-card");
    let highlight = &first["highlights"][0];
    assert_eq!(
        highlight["text"],
        "A replacement card arrives within 5 working days."
    );
    // The span is of the chunk's text, which the snippet quotes from its start.
    let chunk = crate::kit::documents()["documents"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(span(&chunk, highlight), highlight["text"]);
    let extract = &answer.meta()["extract"];
    assert_eq!(extract["source"], 1);
    assert_eq!(extract["text"], highlight["text"]);
    assert!(answer.meta()["timings"]["evidence_ms"].is_number());
    // Turned off by the request.
    let off = app
        .answer(&json!({"query": QUESTION, "extract": false, "cache": "bypass"}))
        .await;
    assert!(off.meta().get("extract").is_none(), "{}", off.meta());
    assert!(off.meta()["documents"][0]["highlights"].is_array());
}

#[tokio::test]
async fn done_carries_the_verdict_on_every_sentence() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let answer = app.answer(&json!({"query": QUESTION})).await;
    let grounding = &done(&answer)["grounding"];
    assert_eq!(grounding["unsupported"], 0, "{grounding}");
    let sentence = &grounding["sentences"][0];
    assert_eq!(span(&answer.text(), sentence), ANSWER);
    assert_eq!(sentence["supported"], true);
    assert_eq!(sentence["cites"], json!([1]));
    assert_eq!(sentence["evidence"]["source"], 1);
    assert!(done(&answer)["timings"]["grounding_ms"].is_number());
}

#[tokio::test]
async fn a_changed_fact_is_unsupported_spanned_and_never_cached() {
    let app = app_answering(WRONG, &[]).await;
    let first = app.answer(&json!({"query": QUESTION})).await;
    first.assert_well_formed();
    let grounding = &done(&first)["grounding"];
    assert_eq!(grounding["unsupported"], 1, "{grounding}");
    let fact = &grounding["sentences"][0]["unsupported_facts"][0];
    assert_eq!(fact["kind"], "duration");
    assert_eq!(span(&first.text(), fact), "10");
    // Annotate (the default) says so and does not degrade the answer…
    assert!(done(&first).get("degraded").is_none(), "{}", done(&first));
    // …but never replays it to the next asker.
    let second = app.answer(&json!({"query": QUESTION})).await;
    assert_eq!(second.meta()["cache"], "miss");
}

#[tokio::test]
async fn strict_grounding_says_ungrounded_and_a_whole_completion_is_refused() {
    let app = app_answering(WRONG, &[]).await;
    settings(&app, json!({"grounding": "strict"})).await;
    let answer = app.answer(&json!({"query": QUESTION})).await;
    assert_eq!(done(&answer)["degraded"], json!(["ungrounded"]));
    let messages = json!([{"role": "user", "content": QUESTION}]);
    let whole = app
        .post("/v1/chat/completions", &json!({"messages": messages}))
        .await;
    assert_eq!(whole.status, 422, "{}", whole.raw);
    assert_eq!(whole.body["error"]["code"], "ungrounded");
    // Streamed, the verdict and the reason ride on the last chunk.
    let streamed = app
        .post(
            "/v1/chat/completions",
            &json!({"messages": messages, "stream": true}),
        )
        .await;
    let chat = Stream::from_chat(&streamed.raw);
    assert_eq!(chat.first("done")["grounding"]["unsupported"], 1);
    assert_eq!(chat.degraded(), ["ungrounded"]);
    // A grounded answer under strict is not refused.
    let app = app_answering(ANSWER, &[]).await;
    settings(&app, json!({"grounding": "strict"})).await;
    let whole = app
        .post("/v1/chat/completions", &json!({"messages": messages}))
        .await;
    assert_eq!(whole.status, 200, "{}", whole.raw);
    assert_eq!(whole.body["sluice"]["grounding"]["unsupported"], 0);
    assert_eq!(whole.body["sluice"]["extract"]["source"], 1);
}

#[tokio::test]
async fn off_checks_nothing_and_caches_as_before() {
    let app = app_answering(WRONG, &[("SLUICE_GROUNDING", "off")]).await;
    let first = app.answer(&json!({"query": QUESTION})).await;
    assert!(done(&first).get("grounding").is_none(), "{}", done(&first));
    // No evidence either: `off` does no grounding work.
    assert!(first.meta().get("extract").is_none(), "{}", first.meta());
    assert!(first.meta()["documents"][0].get("highlights").is_none());
    let second = app.answer(&json!({"query": QUESTION})).await;
    assert_eq!(second.meta()["cache"], "hit");
    // The tenant's own setting wins over the deployment's.
    let app = app_answering(WRONG, &[("SLUICE_GROUNDING", "strict")]).await;
    settings(&app, json!({"grounding": "off", "extract": false})).await;
    let answer = app.answer(&json!({"query": QUESTION})).await;
    assert!(done(&answer).get("grounding").is_none());
    assert!(answer.meta().get("extract").is_none());
}

#[tokio::test]
async fn a_cache_hit_replays_the_verdict_and_the_evidence_made_with_the_answer() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let first = app.answer(&json!({"query": QUESTION})).await;
    let hit = app.answer(&json!({"query": QUESTION})).await;
    assert_eq!(hit.meta()["cache"], "hit");
    assert_eq!(done(&hit)["grounding"], done(&first)["grounding"]);
    assert_eq!(hit.meta()["extract"], first.meta()["extract"]);
    assert_eq!(
        hit.meta()["documents"][0]["highlights"],
        first.meta()["documents"][0]["highlights"]
    );
}
