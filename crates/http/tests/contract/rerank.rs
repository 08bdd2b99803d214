//! What a tenant's rerank component is given and what it may decide, through the API: the
//! caller's `rerank_context` (on `/v1/answer` and in a chat completion's `sluice` options)
//! reaches the component, checked and capped; candidates it drops leave the sources and are
//! counted in `meta.rerank_dropped`; each kept source carries the component's own score
//! (`rerank_score`) beside the fused one; the call's fuel and time are in `done.timings`; answers
//! made under one context are never served from the cache to another. The components are
//! scripted here (`sluice-testkit`); the real sandbox and the example `policy` component are
//! tested in `sluice-rerank` and end to end in `tests/`.

use std::sync::Arc;

use serde_json::{Value, json};
use sluice_testkit::{SCRIPTED_FUEL_PER_HIT, ScriptedReranker, Verdict};

use crate::kit::{App, Kit, UNCHECKED};

/// Three plans' documents sharing their words, and one for everyone.
fn documents() -> Value {
    let doc = |id: &str, metadata: Value| {
        json!({"id": id, "title": id,
               "text": format!("The card limit {id} is a thousand dollars a day."),
               "metadata": metadata})
    };
    json!({"documents": [
        doc("free", json!({"audience": ["free", "pro"]})),
        doc("pro", json!({"audience": "pro"})),
        doc("enterprise", json!({"audience": ["enterprise"]})),
        doc("everyone", json!({"audience": ["free", "pro", "enterprise"]})),
    ]})
}

/// An app whose every tenant runs a component keeping the documents whose `audience` holds
/// the context's `plan`.
async fn app() -> App {
    let mut kit = Kit::new(UNCHECKED);
    kit.parts.reranker = Some(Arc::new(ScriptedReranker::new(Verdict::KeepWhereContext {
        key: "plan".into(),
        field: "audience".into(),
    })));
    let app = kit.app();
    let reply = app.post("/v1/documents", &documents()).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    app
}

fn ask(context: Value) -> Value {
    json!({"query": "what is the card limit", "k": 4, "rerank_context": context})
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[tokio::test]
async fn the_context_reaches_the_component_and_what_it_drops_leaves_the_sources() {
    let app = app().await;
    let pro = app.answer(&ask(json!({"plan": "pro"}))).await;
    pro.assert_well_formed();
    assert_eq!(sorted(pro.sources()), ["everyone", "free", "pro"]);
    assert_eq!(pro.meta()["rerank_dropped"], 1);
    assert_eq!(pro.degraded(), Vec::<String>::new());
    // The call's cost: fuel (the scripted component's, per candidate) and its time.
    let timings = &pro.first("done")["timings"];
    assert_eq!(timings["rerank_fuel"], 4 * SCRIPTED_FUEL_PER_HIT);
    assert!(timings["rerank_ms"].as_f64().is_some(), "{timings}");

    let enterprise = app.answer(&ask(json!({"plan": "enterprise"}))).await;
    assert_eq!(sorted(enterprise.sources()), ["enterprise", "everyone"]);
    assert_eq!(enterprise.meta()["rerank_dropped"], 2);
}

/// Each source's (fused score, the component's score).
fn scores(sources: &Value) -> Vec<(f64, Option<f64>)> {
    (sources.as_array().unwrap().iter())
        .map(|d| (d["score"].as_f64().unwrap(), d["rerank_score"].as_f64()))
        .collect()
}

#[tokio::test]
async fn each_source_shows_the_components_score_beside_the_fused_one() {
    let app = app().await;
    // The scripted component scores what it keeps 1, 2/3, 1/3 in its order.
    let pro = app.answer(&ask(json!({"plan": "pro"}))).await;
    let given: Vec<f64> = (scores(&pro.meta()["documents"]).iter())
        .map(|(_, component)| component.expect("a component score on every source"))
        .collect();
    let expected = [1.0, 2.0 / 3.0, 1.0 / 3.0];
    assert_eq!(given.len(), 3);
    for (g, e) in given.iter().zip(expected) {
        assert!((g - e).abs() < 1e-6, "{given:?}");
    }
    assert!(
        (scores(&pro.meta()["documents"]).iter()).all(|(fused, _)| *fused > 0.0),
        "the fused score stays"
    );
    // The chat route's extension carries the same.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "what is the card limit"}],
                      "sluice": {"k": 4, "rerank_context": {"plan": "pro"}}});
    let reply = app.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let chat = scores(&reply.body["sluice"]["sources"]);
    assert_eq!(chat.len(), 3);
    assert!(chat.iter().all(|(_, c)| c.is_some()), "{chat:?}");
    // No component, no component score.
    let plain = Kit::new(&[]).ingested("default").await.app();
    let answer = plain
        .answer(&json!({"query": "what is the card limit"}))
        .await;
    let none = scores(&answer.meta()["documents"]);
    assert!(
        !none.is_empty() && none.iter().all(|(_, c)| c.is_none()),
        "{none:?}"
    );
}

#[tokio::test]
async fn a_component_may_drop_every_candidate_and_the_answer_still_streams() {
    let app = app().await;
    // No plan: nothing matches, everything is dropped; the answer goes on without sources,
    // and says how many were dropped.
    let none = app
        .answer(&json!({"query": "what is the card limit", "k": 4}))
        .await;
    none.assert_well_formed();
    assert_eq!(none.sources(), Vec::<String>::new());
    assert_eq!(none.meta()["rerank_dropped"], 4);
    assert_eq!(none.names().last(), Some(&"done"));
}

#[tokio::test]
async fn the_chat_route_takes_a_rerank_context_in_its_sluice_options() {
    let app = app().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "what is the card limit"}],
                      "sluice": {"k": 4, "rerank_context": {"plan": "enterprise"}}});
    let reply = app.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let ids: Vec<String> = reply.body["sluice"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sorted(ids), ["enterprise", "everyone"]);
    assert_eq!(reply.body["sluice"]["rerank_dropped"], 2);
}

#[tokio::test]
async fn a_bad_rerank_context_is_refused_with_what_is_wrong() {
    let app = app().await;
    let long = "x".repeat(257);
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let big: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("k{i}"), json!("v".repeat(250))))
        .collect();
    for (context, says) in [
        (json!("pro"), "must be an object"),
        (
            json!({"plan": ["pro"]}),
            "\"plan\": the value must be a string",
        ),
        (
            json!({"plan": {"$ne": "free"}}),
            "the value must be a string",
        ),
        (json!({"plan": null}), "the value must be a string"),
        (json!({"bad key": "x"}), "not a valid key"),
        (json!({"plan": long}), "longer than 256 characters"),
        (Value::Object(many), "17 entries; at most 16"),
        (Value::Object(big), "bytes of keys and values; at most 2048"),
    ] {
        let reply = app.post("/v1/answer", &ask(context.clone())).await;
        assert_eq!(reply.status, 400, "{context}: {}", reply.raw);
        assert_eq!(reply.code(), "invalid_rerank_context", "{context}");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"rerank_context\""), "{message}");
        assert!(message.contains(says), "{context}: {message}");
    }
    // The chat route checks its `sluice.rerank_context` the same way (OpenAI's error shape).
    let body = json!({"messages": [{"role": "user", "content": "limits?"}],
                      "sluice": {"rerank_context": {"plan": 3}}});
    let reply = app.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.body["error"]["code"], "invalid_rerank_context");
}

#[tokio::test]
async fn an_answer_made_under_one_context_is_never_served_under_another() {
    let app = app().await;
    let first = app.answer(&ask(json!({"plan": "pro"}))).await;
    assert_eq!(first.meta()["cache"], "miss");
    let again = app.answer(&ask(json!({"plan": "pro"}))).await;
    assert_eq!(again.meta()["cache"], "hit");
    assert_eq!(again.sources(), first.sources());
    // Another plan sees other sources: never the pro answer from the cache.
    let other = app.answer(&ask(json!({"plan": "free"}))).await;
    assert_eq!(other.meta()["cache"], "miss");
    assert_eq!(sorted(other.sources()), ["everyone", "free"]);
    // The same entries in another order are the same context.
    let two = json!({"plan": "pro", "locale": "de"});
    let swapped = json!({"locale": "de", "plan": "pro"});
    assert_eq!(app.answer(&ask(two)).await.meta()["cache"], "miss");
    assert_eq!(app.answer(&ask(swapped)).await.meta()["cache"], "hit");
}

#[tokio::test]
async fn why_a_component_failed_is_told_to_the_callers_that_manage_components_only() {
    use sluice_contract::auth::Permission;
    let keys = Arc::new(sluice_testkit::MemoryKeys::default());
    let admin = keys.add("acme", &[Permission::Answer, Permission::Components]);
    let reader = keys.add("acme", &[Permission::Answer]);
    let mut kit = Kit::new(&[]).ingested("acme").await.keys(keys);
    kit.parts.reranker = Some(Arc::new(ScriptedReranker::new(Verdict::Fail(
        "no plan in the context".into(),
    ))));
    let app = kit.app();
    let ask = json!({"query": "what is the card limit", "rerank_context": {"locale": "de"}});
    let as_key = |key: &str| format!("Bearer {key}");
    let told = app
        .answer_with(&[("authorization", &as_key(&admin))], &ask)
        .await;
    told.assert_well_formed();
    assert_eq!(told.degraded(), ["rerank_failed"]);
    // With the call's context and its candidates: the fused order, kept.
    let kept: Vec<String> = (told.meta()["documents"].as_array().unwrap().iter())
        .map(|d| format!("{}#{}", d["id"].as_str().unwrap(), d["chunk"]))
        .collect();
    let failure = &told.meta()["rerank_error"];
    assert_eq!(
        (&failure["kind"], &failure["message"], &failure["context"]),
        (
            &json!("component_error"),
            &json!("no plan in the context"),
            &json!({"locale": "de"})
        ),
        "{failure}"
    );
    let candidates: Vec<String> = (failure["candidates"].as_array().unwrap().iter())
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(!kept.is_empty(), "{}", told.meta());
    assert!(
        kept.iter().all(|k| candidates.contains(k)),
        "{candidates:?} {kept:?}"
    );
    // A key that only answers gets the same answer, degraded, without the reason.
    let untold = app
        .answer_with(&[("authorization", &as_key(&reader))], &ask)
        .await;
    assert_eq!(untold.degraded(), ["rerank_failed"]);
    assert!(
        untold.meta().get("rerank_error").is_none(),
        "{}",
        untold.meta()
    );
}
