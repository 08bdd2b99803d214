//! `POST /v1/search`: an answer's sources without the answer — the same sources, keys,
//! filters, end users, deadline and usage as the answers, and no LLM call.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_testkit::users::{identity, token};
use sluice_testkit::{MemoryKeys, Troubled};

use crate::kit::{App, Kit, Reply, UNCHECKED};

const QUESTION: &str = "How long does a replacement card take?";

async fn search(app: &App, headers: &[(&str, &str)], body: &Value) -> Reply {
    app.send(Method::POST, "/v1/search", headers, body.to_string())
        .await
}

fn found(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.raw);
    serde_json::from_str(&reply.raw).unwrap()
}

fn ids(found: &Value) -> Vec<String> {
    (found["documents"].as_array().unwrap().iter())
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_search_returns_the_sources_an_answer_has_and_calls_no_llm() {
    let app = Kit::new(UNCHECKED).ingested("default").await.app();
    let body = json!({"query": QUESTION, "k": 2});
    let found = found(&search(&app, &[], &body).await);
    assert!(app.llm.calls().is_empty(), "no LLM call");
    let answer = app
        .answer(&json!({"query": QUESTION, "k": 2, "cache": "bypass"}))
        .await;
    // The same sources, field for field, in the same order; the same timings' stages.
    assert_eq!(found["documents"], answer.meta()["documents"]);
    assert_eq!(ids(&found).len(), 2);
    assert_eq!(found["degraded"], json!([]));
    assert_eq!(
        (found["k"].as_u64(), found["tenant"].as_str()),
        (Some(2), Some("default"))
    );
    for stage in ["embed_ms", "retrieve_ms", "total_ms"] {
        assert!(
            found["timings"][stage].as_f64().is_some(),
            "{stage}: {found}"
        );
    }
    assert!(found["timings"]["llm_ttft_ms"].is_null(), "{found}");
    assert_eq!(found["trace_id"].as_str().map(str::len), Some(32));
}

#[tokio::test]
async fn a_conversation_is_searched_by_its_last_question_and_the_turn_before() {
    let app = Kit::new(UNCHECKED).ingested("default").await.app();
    let messages = json!({"messages": [
        {"role": "user", "content": "What is the daily ATM withdrawal limit?"},
        {"role": "assistant", "content": "500 pounds."},
        {"role": "user", "content": "And for premium accounts?"},
    ], "k": 1});
    assert_eq!(
        ids(&found(&search(&app, &[], &messages).await)),
        ["atm-limits"]
    );
    for (body, code) in [
        (
            json!({"query": QUESTION, "messages": [{"role": "user", "content": "x"}]}),
            "invalid_json",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": "x"}]}),
            "missing_query",
        ),
        (json!({}), "missing_query"),
        (json!({"query": " "}), "empty_query"),
        (json!({"query": QUESTION, "k": 0}), "invalid_k"),
        (
            json!({"query": QUESTION, "filter": {"$bad": 1}}),
            "invalid_filter",
        ),
        (
            json!({"query": QUESTION, "include_prompt": true}),
            "invalid_json",
        ),
        (
            json!({"query": QUESTION, "retrieval_deadline_ms": 10_000_000}),
            "invalid_deadline",
        ),
    ] {
        let reply = search(&app, &[], &body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, code),
            "{body}: {}",
            reply.raw
        );
    }
}

#[tokio::test]
async fn keys_filters_and_end_users_bound_a_search_as_they_bound_an_answer() {
    let keys = Arc::new(MemoryKeys::default());
    let searcher = keys.add("acme", &[Permission::Search]);
    let answerer = keys.add("acme", &[Permission::Answer]);
    let writer = keys.add("acme", &[Permission::Documents, Permission::Settings]);
    let bound = keys.add_filtered(
        "acme",
        &[Permission::Search],
        Some(Filter::parse(&json!({"topic": "cards"})).unwrap()),
    );
    let app = Kit::new(UNCHECKED).keys(Arc::clone(&keys)).app();
    let bearer = |k: &str| format!("Bearer {k}");
    let (w, s, a, b) = (
        bearer(&writer),
        bearer(&searcher),
        bearer(&answerer),
        bearer(&bound),
    );
    let docs = json!({"documents": [
        {"id": "cards", "text": "A replacement card takes 5 days.", "metadata": {"topic": "cards"}},
        {"id": "hr-cards", "text": "Staff replacement cards take 2 days.",
         "metadata": {"topic": "cards", "_access": ["group:hr"]}},
        {"id": "loans", "text": "A replacement loan offer takes 5 days.", "metadata": {"topic": "loans"}},
    ]});
    let sent = app
        .send(
            Method::POST,
            "/v1/documents",
            &[("authorization", &w)],
            docs.to_string(),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.raw);
    let body = json!({"query": QUESTION, "k": 10});
    // `search`, and `answer` (which includes it), may search; a key with neither may not; a
    // `search` key may not answer.
    let mut every: Vec<String> = ids(&found(&search(&app, &[("authorization", &s)], &body).await));
    every.sort();
    assert_eq!(every, ["cards", "hr-cards", "loans"]);
    assert_eq!(
        search(&app, &[("authorization", &a)], &body).await.status,
        200
    );
    let refused = search(&app, &[("authorization", &w)], &body).await;
    assert_eq!((refused.status, refused.code()), (403, "permission_denied"));
    let answer = app
        .send(
            Method::POST,
            "/v1/answer",
            &[("authorization", &s)],
            body.to_string(),
        )
        .await;
    assert_eq!((answer.status, answer.code()), (403, "permission_denied"));
    // The key's filter, narrowed (never widened) by the request's.
    let mut within: Vec<String> = ids(&found(&search(&app, &[("authorization", &b)], &body).await));
    within.sort();
    assert_eq!(within, ["cards", "hr-cards"]);
    let wider = json!({"query": QUESTION, "k": 10, "filter": {"topic": "loans"}});
    assert_eq!(
        ids(&found(
            &search(&app, &[("authorization", &b)], &wider).await
        )),
        Vec::<String>::new()
    );
    // An end user sees what their access allows.
    let put = app
        .send(
            Method::PUT,
            "/v1/settings",
            &[("authorization", &w)],
            json!({"identity": identity(false)}).to_string(),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.raw);
    let sales = token("erin", &["sales"]);
    let as_user = [
        ("authorization", s.as_str()),
        ("x-sluice-user", sales.as_str()),
    ];
    let mut seen = ids(&found(&search(&app, &as_user, &body).await));
    seen.sort();
    assert_eq!(seen, ["cards", "loans"]);
    let hr = token("bob", &["hr"]);
    let as_hr = [
        ("authorization", s.as_str()),
        ("x-sluice-user", hr.as_str()),
    ];
    assert!(ids(&found(&search(&app, &as_hr, &body).await)).contains(&"hr-cards".to_string()));
    let bad = [
        ("authorization", s.as_str()),
        ("x-sluice-user", "not-a-token"),
    ];
    assert_eq!(search(&app, &bad, &body).await.code(), "invalid_user_token");
    assert!(app.llm.calls().is_empty());
}

#[tokio::test]
async fn past_the_deadline_a_search_returns_what_it_found_and_says_so() {
    let mut kit = Kit::new(UNCHECKED).ingested("default").await;
    let mut store = Troubled::around(kit.store());
    store.delay = Duration::from_secs(30);
    kit.parts.store = Some(Arc::new(store));
    let app = kit.app();
    let started = tokio::time::Instant::now();
    let found = found(
        &search(
            &app,
            &[],
            &json!({"query": QUESTION, "retrieval_deadline_ms": 200}),
        )
        .await,
    );
    assert_eq!(found["degraded"], json!(["retrieval_timeout"]));
    assert_eq!(found["documents"], json!([]));
    // A bound, not a measurement: 30 s of store time must not be waited for.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn searches_are_counted_as_their_own_line_and_spend_no_tokens() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add(
        "acme",
        &[Permission::Search, Permission::Documents, Permission::Usage],
    );
    let app = Kit::new(UNCHECKED).keys(keys).app();
    let auth = format!("Bearer {admin}");
    let headers = [("authorization", auth.as_str())];
    let docs = crate::kit::documents();
    assert_eq!(
        app.send(Method::POST, "/v1/documents", &headers, docs.to_string())
            .await
            .status,
        200
    );
    for _ in 0..3 {
        found(&search(&app, &headers, &json!({"query": QUESTION})).await);
    }
    let usage = app.send(Method::GET, "/v1/usage", &headers, "").await;
    let body: Value = serde_json::from_str(&usage.raw).unwrap();
    let total = &body["total"];
    assert_eq!(total["searches"], 3, "{body}");
    assert_eq!(
        (total["answers"].as_u64(), total["prompt_tokens"].as_u64()),
        (Some(0), Some(0)),
        "{body}"
    );
}
