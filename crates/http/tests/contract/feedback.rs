//! Feedback on answers (`POST /v1/feedback`, `GET /v1/feedback`): a rating names an answer,
//! search or chat completion by its `request_id` and is kept with the question, the sources and
//! the verdict of what it rates; an end user rates only their own answers; a down-vote forgets
//! the answer from the cache, wherever it is held, and keeps the question's answer out of the
//! cache until the documents change.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::evals::{Records, Shelf};
use sluice_testkit::users::{identity, token};
use sluice_testkit::{MemoryRecords, tenant};

use crate::kit::{App, Kit, Reply, UNCHECKED, key_for};

const QUESTION: &str = "How long does a replacement card take?";
const ACME: [(&str, &str); 1] = [("x-sluice-tenant", "acme")];

async fn rate(app: &App, headers: &[(&str, &str)], body: Value) -> Reply {
    app.send(Method::POST, "/v1/feedback", headers, body.to_string())
        .await
}

/// Asks `QUESTION` as acme — through a filter every document passes, when `filtered`: the
/// same answer under another cache key — the answer's request id and whether the cache
/// answered.
async fn ask(app: &App, filtered: bool) -> (String, String) {
    let mut body = json!({"query": QUESTION, "k": 3});
    if filtered {
        body["filter"] = json!({"topic": {"$exists": false}});
    }
    let answer = app.answer_as("acme", &body).await;
    let meta = answer.meta();
    (
        meta["request_id"].as_str().unwrap().to_string(),
        meta["cache"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn a_rating_is_kept_with_what_it_rates_listed_and_counted() {
    let app = Kit::new(&[]).app();
    app.ingest("acme").await;
    let (id, _) = ask(&app, false).await;
    let rated = rate(
        &app,
        &ACME,
        json!({"request_id": id, "rating": "up", "comment": "clear"}),
    )
    .await;
    assert_eq!(rated.status, 200, "{}", rated.raw);
    assert_eq!(rated.body["rating"], "up");
    let again = rate(
        &app,
        &ACME,
        json!({"request_id": id, "rating": "down", "expected_source": "lost-card"}),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.raw);

    let listed = app.send(Method::GET, "/v1/feedback", &ACME, "").await;
    let all = listed.body["feedback"].as_array().expect("a list").clone();
    assert_eq!(
        all.len(),
        1,
        "a second rating replaces the first: {}",
        listed.raw
    );
    let one = &all[0];
    assert_eq!(
        (one["rating"].clone(), one["expected_source"].clone()),
        (json!("down"), json!("lost-card"))
    );
    assert_eq!(one["answer"]["question"], QUESTION);
    assert_eq!(one["answer"]["kind"], "answer");
    assert_eq!(one["answer"]["sources"][0], "lost-card", "{one}");
    assert!(
        one["answer"]["grounded"].is_boolean(),
        "the verdict it rated: {one}"
    );
    let down = app
        .send(Method::GET, "/v1/feedback?rating=down", &ACME, "")
        .await;
    assert_eq!(down.body["feedback"].as_array().map(Vec::len), Some(1));
    let usage = app.send(Method::GET, "/v1/usage", &ACME, "").await;
    assert_eq!(usage.body["total"]["feedback"], 2, "{}", usage.raw);
    let metrics = app.server.metrics.encode();
    assert!(
        metrics.contains("sluice_feedback_total{rating=\"down\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn searches_and_chat_completions_are_rated_by_the_request_id_they_carry() {
    let app = Kit::new(&[]).app();
    app.ingest("acme").await;
    let found = app
        .post_as("acme", "/v1/search", &json!({"query": QUESTION}))
        .await;
    let id = found.body["request_id"].as_str().unwrap().to_string();
    let rated = rate(&app, &ACME, json!({"request_id": id, "rating": "up"})).await;
    assert_eq!(rated.status, 200, "{}", rated.raw);
    let chat = json!({"model": "any", "messages": [{"role": "user", "content": QUESTION}]});
    let completion = app.post_as("acme", "/v1/chat/completions", &chat).await;
    let id = completion.body["sluice"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let rated = rate(&app, &ACME, json!({"request_id": id, "rating": "down"})).await;
    assert_eq!(rated.status, 200, "{}", rated.raw);
    let listed = app.send(Method::GET, "/v1/feedback", &ACME, "").await;
    let kinds: Vec<&str> = (listed.body["feedback"].as_array().unwrap().iter())
        .map(|f| f["answer"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.len(), 2);
    assert!(
        kinds.contains(&"search") && kinds.contains(&"answer"),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_down_vote_forgets_the_answer_wherever_it_is_cached_until_the_documents_change() {
    let app = Kit::new(UNCHECKED).app();
    app.ingest("acme").await;
    // The same answer cached under two keys (with and without a filter).
    let (id, first) = ask(&app, false).await;
    assert_eq!(first, "miss");

    assert_eq!(ask(&app, true).await.1, "miss");
    assert_eq!(ask(&app, false).await.1, "hit");
    let down = rate(&app, &ACME, json!({"request_id": id, "rating": "down"})).await;
    assert_eq!(down.status, 200, "{}", down.raw);
    assert_eq!(
        (down.body["evicted"].clone(), down.body["blocked"].clone()),
        (json!(2), json!(true))
    );
    let calls = app.llm.calls().len();
    assert_eq!(ask(&app, false).await.1, "miss", "forgotten");
    assert_eq!(ask(&app, false).await.1, "miss", "and not cached again");
    assert_eq!(ask(&app, true).await.1, "miss");
    assert_eq!(app.llm.calls().len(), calls + 3);
    // Another question's answers are untouched by the mark.
    let other = json!({"query": "What is the daily ATM limit?", "k": 3});
    app.answer_as("acme", &other).await;
    assert_eq!(app.answer_as("acme", &other).await.meta()["cache"], "hit");
    // New documents: the question's answer may be cached again.
    let more = json!({"documents": [{"id": "new", "text": "Branches open at nine."}]});
    assert_eq!(
        app.post_as("acme", "/v1/documents", &more).await.status,
        200
    );
    assert_eq!(ask(&app, false).await.1, "miss");
    assert_eq!(
        ask(&app, false).await.1,
        "hit",
        "cached again once the corpus changed"
    );
}

#[tokio::test]
async fn an_end_user_rates_only_their_own_answers() {
    let app = Kit::new(UNCHECKED).app();
    let put = app
        .send(
            Method::PUT,
            "/v1/settings",
            &ACME,
            json!({"identity": identity(false)}).to_string(),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.raw);
    app.ingest("acme").await;
    let (alice, bob) = (token("alice", &["sales"]), token("bob", &["hr"]));
    fn as_user(t: &str) -> [(&str, &str); 2] {
        [("x-sluice-tenant", "acme"), ("x-sluice-user", t)]
    }
    let answer = app
        .answer_with(&as_user(&alice), &json!({"query": QUESTION}))
        .await;
    let id = answer.meta()["request_id"].as_str().unwrap().to_string();
    let bobs = rate(
        &app,
        &as_user(&bob),
        json!({"request_id": id, "rating": "down"}),
    )
    .await;
    assert_eq!(
        (bobs.status, bobs.code()),
        (404, "unknown_request"),
        "{}",
        bobs.raw
    );
    let alices = rate(
        &app,
        &as_user(&alice),
        json!({"request_id": id, "rating": "down"}),
    )
    .await;
    assert_eq!(alices.status, 200, "{}", alices.raw);
    let listed = app.send(Method::GET, "/v1/feedback", &ACME, "").await;
    assert_eq!(
        listed.body["feedback"][0]["by"], "user:alice",
        "{}",
        listed.raw
    );
    // The tenant's own key (no end user) may rate any of its answers.
    let key = rate(&app, &ACME, json!({"request_id": id, "rating": "up"})).await;
    assert_eq!(key.status, 200, "{}", key.raw);
}

#[tokio::test]
async fn a_rating_of_an_answer_not_kept_here_or_a_bad_body_is_refused_and_nothing_is_stored() {
    let app = Kit::new(&[]).app();
    app.ingest("acme").await;
    let (id, _) = ask(&app, false).await;
    let globex = [("x-sluice-tenant", "globex")];
    let theirs = rate(&app, &globex, json!({"request_id": id, "rating": "up"})).await;
    assert_eq!(
        (theirs.status, theirs.code()),
        (404, "unknown_request"),
        "another tenant's"
    );
    let never = rate(
        &app,
        &ACME,
        json!({"request_id": "never-made", "rating": "up"}),
    )
    .await;
    assert_eq!(never.code(), "unknown_request");
    let long = "x".repeat(2001);
    for (body, field) in [
        (json!({"request_id": id, "rating": "meh"}), "rating"),
        (
            json!({"request_id": id, "rating": "up", "comment": long}),
            "comment",
        ),
        (
            json!({"request_id": id, "rating": "up", "expected_source": ""}),
            "expected_source",
        ),
    ] {
        let reply = rate(&app, &ACME, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_feedback"),
            "{}",
            reply.raw
        );
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field)
        );
    }
    let missing = rate(&app, &ACME, json!({"rating": "up"})).await;
    assert_eq!(missing.status, 400);
    let listed = app.send(Method::GET, "/v1/feedback", &ACME, "").await;
    assert_eq!(listed.body["feedback"], json!([]));
}

/// Two environments of one deployment (two Lambda environments): one store, and the tenants'
/// records either shared by both (DynamoDB) or each its own.
fn environments(records: MemoryRecords) -> (App, App, Arc<MemoryRecords>) {
    let records = Arc::new(records);
    let (mut first, mut second) = (Kit::new(&[]), Kit::new(&[]));
    second.parts.store = Some(first.store());
    first.parts.records = Some(records.clone());
    second.parts.records = Some(records.clone());
    (first.app(), second.app(), records)
}

#[tokio::test]
async fn an_answer_made_in_one_environment_is_rated_in_another_when_the_records_are_shared() {
    let (answering, rating, records) = environments(MemoryRecords::across_processes());
    answering.ingest("acme").await;
    let (id, _) = ask(&answering, false).await;
    // Kept before the answer's stream ended: nothing is written after it.
    let kept = records.get(&tenant("acme"), Shelf::Answers, &id).await;
    assert!(kept.unwrap().is_some(), "kept by the time the stream ended");
    let found = (answering)
        .post_as("acme", "/v1/search", &json!({"query": QUESTION}))
        .await;
    let search = found.body["request_id"].as_str().unwrap().to_string();
    for (id, kind) in [(&id, "answer"), (&search, "search")] {
        let globex = [("x-sluice-tenant", "globex")];
        let theirs = rate(&rating, &globex, json!({"request_id": id, "rating": "up"})).await;
        assert_eq!(theirs.code(), "unknown_request", "another tenant's");
        let rated = rate(&rating, &ACME, json!({"request_id": id, "rating": "down"})).await;
        assert_eq!(rated.status, 200, "{}", rated.raw);
        let listed = rating.send(Method::GET, "/v1/feedback", &ACME, "").await;
        let all = listed.body["feedback"].as_array().unwrap().clone();
        let one = all.iter().find(|f| f["request_id"] == id.as_str()).unwrap();
        assert_eq!(one["answer"]["kind"], kind);
        assert_eq!(one["answer"]["question"], QUESTION);
        assert_eq!(one["answer"]["sources"][0], "lost-card", "{one}");
        assert!(one["answer"].get("digest").is_none(), "{one}");
    }
    // An answer past the time it may be rated is not, though the table still holds it.
    let mut old = records.get(&tenant("acme"), Shelf::Answers, &id).await;
    let mut body = old.as_mut().unwrap().as_mut().unwrap().body.clone();
    body["kept_until"] = json!(1);
    records
        .put(&tenant("acme"), Shelf::Answers, "old", body)
        .await
        .unwrap();
    let late = rate(&rating, &ACME, json!({"request_id": "old", "rating": "up"})).await;
    assert_eq!((late.status, late.code()), (404, "unknown_request"));
}

#[tokio::test]
async fn records_of_one_process_keep_no_answers_and_another_environment_cannot_rate_them() {
    let (answering, rating, records) = environments(MemoryRecords::default());
    answering.ingest("acme").await;
    let (id, _) = ask(&answering, false).await;
    let kept = records.get(&tenant("acme"), Shelf::Answers, &id).await;
    assert!(kept.unwrap().is_none(), "kept in memory only");
    let elsewhere = rate(&rating, &ACME, json!({"request_id": id, "rating": "up"})).await;
    assert_eq!(
        (elsewhere.status, elsewhere.code()),
        (404, "unknown_request")
    );
    let here = rate(&answering, &ACME, json!({"request_id": id, "rating": "up"})).await;
    assert_eq!(here.status, 200, "{}", here.raw);
}

#[tokio::test]
async fn rating_needs_the_answer_permission_and_reading_the_ratings_needs_settings() {
    let (keys, searcher) = key_for("acme", &[Permission::Search]);
    let answerer = keys.add("acme", &[Permission::Answer]);
    let app = Kit::new(&[]).keys(Arc::clone(&keys)).app();
    let bearer = |k: &str| format!("Bearer {k}");
    let (s, a) = (bearer(&searcher), bearer(&answerer));
    let body = json!({"request_id": "r", "rating": "up"});
    let refused = rate(&app, &[("authorization", &s)], body.clone()).await;
    assert_eq!((refused.status, refused.code()), (403, "permission_denied"));
    let allowed = rate(&app, &[("authorization", &a)], body).await;
    assert_eq!(
        allowed.code(),
        "unknown_request",
        "admitted, then nothing to rate"
    );
    let list = app
        .send(Method::GET, "/v1/feedback", &[("authorization", &a)], "")
        .await;
    assert_eq!((list.status, list.code()), (403, "permission_denied"));
}

#[tokio::test]
async fn down_votes_that_name_the_right_source_become_questions_of_a_set_in_one_call() {
    let app = Kit::new(&[]).app();
    app.ingest("acme").await;
    let mut ids = Vec::new();
    for question in [
        QUESTION,
        "What is the daily ATM limit?",
        "Can I overpay my mortgage?",
    ] {
        let answer = app.answer_as("acme", &json!({"query": question})).await;
        ids.push(answer.meta()["request_id"].as_str().unwrap().to_string());
    }
    let votes = [
        json!({"request_id": ids[0], "rating": "down", "expected_source": "lost-card"}),
        json!({"request_id": ids[1], "rating": "down"}),
        json!({"request_id": ids[2], "rating": "up", "expected_source": "mortgage"}),
    ];
    for vote in votes {
        assert_eq!(rate(&app, &ACME, vote).await.status, 200);
    }
    let path = "/v1/evals/sets/from-users/from-feedback";
    let made = app.send(Method::POST, path, &ACME, "").await;
    assert_eq!(made.status, 200, "{}", made.raw);
    assert_eq!(
        made.body["added"], 1,
        "only the down-vote that names a source"
    );
    let question = &made.body["set"]["questions"][0];
    assert_eq!(question["question"], QUESTION);
    assert_eq!(
        (question["documents"].clone(), question["first"].clone()),
        (json!(["lost-card"]), json!("lost-card"))
    );
    let again = app.send(Method::POST, path, &ACME, "").await;
    assert_eq!(
        (again.body["added"].clone(), again.body["questions"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(again.body["version"], 2);
}
