//! What the corpus cannot answer (`GET /v1/insights/gaps`): the questions whose retrieval found
//! no source, whose answer no source supported, or that a user voted down, grouped by similar
//! question and counted; their text kept only as long as the tenant's settings allow.

use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};

use crate::kit::{App, Kit};

const ACME: [(&str, &str); 1] = [("x-sluice-tenant", "acme")];

/// The gaps, once `settled` says they are all noted (notes are written in the background).
async fn gaps(app: &App, settled: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let reply = app.send(Method::GET, "/v1/insights/gaps", &ACME, "").await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        if settled(&reply.body) {
            return reply.body;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let last = app.send(Method::GET, "/v1/insights/gaps", &ACME, "").await;
    panic!("the gaps never settled: {}", last.raw);
}

fn count(gaps: &Value) -> u64 {
    let grouped: u64 = (gaps["gaps"].as_array().into_iter().flatten())
        .map(|g| g["count"].as_u64().unwrap())
        .sum();
    grouped + gaps["unkept"]["count"].as_u64().unwrap()
}

#[tokio::test]
async fn questions_without_sources_are_grouped_by_similar_question_and_counted() {
    let app = Kit::new(&[]).app();
    for question in [
        "How do I close my savings account?",
        "How do I close my savings account?",
        "How can I close my savings account?",
        "When do the branches open on Saturday?",
    ] {
        app.answer_as("acme", &json!({"query": question})).await;
    }
    let gaps = gaps(&app, |g| count(g) == 4).await;
    let first = &gaps["gaps"][0];
    assert_eq!(first["count"], 3, "{gaps}");
    assert_eq!(first["reasons"], json!({"no_sources": 3}));
    let questions = first["questions"].as_array().unwrap();
    assert_eq!(questions.len(), 2, "each question once: {first}");
    assert_eq!(
        gaps["gaps"][1]["questions"],
        json!(["When do the branches open on Saturday?"])
    );
    assert_eq!(gaps["retention_days"], 30);
    let theirs = app
        .send(
            Method::GET,
            "/v1/insights/gaps",
            &[("x-sluice-tenant", "globex")],
            "",
        )
        .await;
    assert_eq!(
        theirs.body["gaps"],
        json!([]),
        "another tenant's are its own"
    );
}

#[tokio::test]
async fn unsupported_answers_and_down_votes_are_gaps_and_answered_questions_are_not() {
    let app = Kit::new(&[]).app();
    app.ingest("acme").await;
    // The scripted answer is about a replacement card: supported for the card question, not
    // for the mortgage one (whose one source is the mortgage page).
    app.answer_as(
        "acme",
        &json!({"query": "How long does a replacement card take?"}),
    )
    .await;
    let asked = json!({"query": "Can I overpay my mortgage?", "k": 1});
    let mortgage = app.answer_as("acme", &asked).await;
    assert_eq!(mortgage.first("done")["grounding"]["unsupported"], 1);
    let id = mortgage.meta()["request_id"].as_str().unwrap().to_string();
    let vote = json!({"request_id": id, "rating": "down"}).to_string();
    assert_eq!(
        app.send(Method::POST, "/v1/feedback", &ACME, vote)
            .await
            .status,
        200
    );
    let gaps = gaps(&app, |g| count(g) == 2).await;
    assert_eq!(gaps["gaps"].as_array().map(Vec::len), Some(1), "{gaps}");
    let gap = &gaps["gaps"][0];
    assert_eq!(gap["questions"], json!(["Can I overpay my mortgage?"]));
    assert_eq!(gap["reasons"], json!({"ungrounded": 1, "down_voted": 1}));
}

#[tokio::test]
async fn a_tenant_that_keeps_no_questions_gets_counts_only() {
    let app = Kit::new(&[]).app();
    let settings = json!({"question_retention_days": 0}).to_string();
    assert_eq!(
        app.send(Method::PUT, "/v1/settings", &ACME, settings)
            .await
            .status,
        200
    );
    app.answer_as("acme", &json!({"query": "Where is my nearest branch?"}))
        .await;
    let gaps = gaps(&app, |g| count(g) == 1).await;
    assert_eq!(gaps["gaps"], json!([]), "no text kept: {gaps}");
    assert_eq!(
        gaps["unkept"],
        json!({"count": 1, "reasons": {"no_sources": 1}})
    );
    assert_eq!(gaps["retention_days"], 0);
    let listed = serde_json::to_string(&gaps).unwrap();
    assert!(!listed.contains("branch"), "{listed}");
    let bad = json!({"question_retention_days": 400}).to_string();
    let refused = app.send(Method::PUT, "/v1/settings", &ACME, bad).await;
    assert_eq!(refused.code(), "invalid_settings");
}
