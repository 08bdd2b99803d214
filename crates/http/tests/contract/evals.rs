//! A tenant's evaluation sets and runs (`/v1/evals`): sets stored per tenant, checked whole
//! and as answers to their questions would be; a run asks each question through the tenant's
//! own pipeline — retrieval only, or whole answers — and reports each question scored, the
//! figures with their intervals, and what changed since the last run of the set; one run at a
//! time per tenant, stopped by a cancel, its time limit or its client leaving.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_testkit::{Reply as LlmReply, ScriptedLlm};

use crate::kit::{self, App, Kit, Reply, Stream, UNCHECKED, key_for};

fn acme() -> [(&'static str, &'static str); 1] {
    [("x-sluice-tenant", "acme")]
}

/// Three questions about the kit's documents, each expecting the one that answers it.
fn set() -> Value {
    json!({"description": "the help pages", "questions": [
        {"id": "card", "question": "How long does a replacement card take to arrive?",
         "documents": ["lost-card"], "first": "lost-card", "facts": ["5 working days"]},
        {"id": "atm", "question": "What is the daily ATM withdrawal limit?",
         "documents": ["atm-*"]},
        {"id": "mortgage", "question": "Can I overpay my fixed-rate mortgage?",
         "documents": ["mortgage"]},
    ]})
}

async fn put_set(app: &App, tenant: &str, name: &str, set: &Value) -> Reply {
    let path = format!("/v1/evals/sets/{name}");
    (app.send(
        Method::PUT,
        &path,
        &[("x-sluice-tenant", tenant)],
        set.to_string(),
    ))
    .await
}

async fn app() -> App {
    app_with(UNCHECKED).await
}

async fn app_with(overrides: &[(&str, &str)]) -> App {
    let app = Kit::new(overrides).app();
    app.ingest("acme").await;
    let put = put_set(&app, "acme", "help", &set()).await;
    assert_eq!(put.status, 200, "{}", put.raw);
    app
}

/// Runs `asked` as acme; the events and the report.
async fn run(app: &App, asked: &Value) -> (Stream, Value) {
    let reply = (app.send(Method::POST, "/v1/evals/runs", &acme(), asked.to_string())).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    let stream = Stream::parse(&reply.raw);
    let (name, report) = stream.events.last().cloned().expect("events");
    assert_eq!(name, "report", "{}", reply.raw);
    (stream, report)
}

fn question<'a>(report: &'a Value, id: &str) -> &'a Value {
    (report["questions"].as_array().expect("questions").iter())
        .find(|q| q["id"] == id)
        .unwrap_or_else(|| panic!("no question {id} in {report}"))
}

#[tokio::test]
async fn sets_are_kept_per_tenant_versioned_listed_and_deleted() {
    let app = app().await;
    let again = put_set(&app, "acme", "help", &set()).await;
    assert_eq!(
        (
            again.body["version"].clone(),
            again.body["questions"].clone()
        ),
        (json!(2), json!(3))
    );
    let got = app
        .send(Method::GET, "/v1/evals/sets/help", &acme(), "")
        .await;
    assert_eq!(got.status, 200, "{}", got.raw);
    assert_eq!(
        got.body["set"]["questions"][1]["documents"],
        json!(["atm-*"])
    );
    let listed = app.send(Method::GET, "/v1/evals/sets", &acme(), "").await;
    assert_eq!(listed.body["sets"][0]["name"], "help");
    assert_eq!(listed.body["sets"][0]["description"], "the help pages");
    assert!(
        listed.body["sets"][0].get("set").is_none(),
        "a listing leaves the questions out"
    );

    let other = [("x-sluice-tenant", "globex")];
    let theirs = app
        .send(Method::GET, "/v1/evals/sets/help", &other, "")
        .await;
    assert_eq!((theirs.status, theirs.code()), (404, "unknown_eval_set"));
    let deleted = app
        .send(Method::DELETE, "/v1/evals/sets/help", &acme(), "")
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.raw);
    let gone = app
        .send(Method::GET, "/v1/evals/sets/help", &acme(), "")
        .await;
    assert_eq!(gone.code(), "unknown_eval_set");
    let twice = app
        .send(Method::DELETE, "/v1/evals/sets/help", &acme(), "")
        .await;
    assert_eq!(twice.code(), "unknown_eval_set");
}

#[tokio::test]
async fn a_bad_set_is_refused_naming_the_field_and_nothing_is_stored() {
    let app = Kit::new(&[]).app();
    let long = "word ".repeat(1000);
    let cases = [
        (
            "bad name",
            json!({"questions": [{"question": "a?"}]}),
            "name",
        ),
        (
            "help",
            json!({"questions": [{"question": "a?", "expected": ["x"]}]}),
            "set",
        ),
        ("help", json!({"questions": []}), "questions"),
        (
            "help",
            json!({"questions": [{"question": long}]}),
            "questions[0]",
        ),
        (
            "help",
            json!({"questions": [{"question": " "}]}),
            "questions[0]",
        ),
        (
            "help",
            json!({"questions": [{"question": "a?"}, {"question": "b?", "filter": {"n": {"$gt": "x"}}}]}),
            "questions[1]",
        ),
        (
            "help",
            json!({"questions": [{"question": "a?", "rerank_context": {"a": 1}}]}),
            "questions[0]",
        ),
        (
            "help",
            json!({"questions": [{"question": "a?", "principals": ["hr"]}]}),
            "questions[0].principals[0]",
        ),
        (
            "help",
            json!({"questions": [{"question": "a?", "documents": [""]}]}),
            "questions[0].documents[0]",
        ),
    ];
    for (name, set, field) in cases {
        let path = format!("/v1/evals/sets/{}", name.replace(' ', "%20"));
        let reply = app.send(Method::PUT, &path, &[], set.to_string()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_eval_set"),
            "{set}: {}",
            reply.raw
        );
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{field}:")),
            "{field}: {message}"
        );
    }
    let listed = app.send(Method::GET, "/v1/evals/sets", &[], "").await;
    assert_eq!(listed.body["sets"], json!([]), "nothing stored");
    let not_json = app.send(Method::PUT, "/v1/evals/sets/help", &[], "{").await;
    assert_eq!(not_json.status, 400);
}

#[tokio::test]
async fn a_retrieval_run_scores_each_question_streams_its_progress_and_keeps_its_report() {
    let app = app().await;
    let (stream, report) = run(&app, &json!({"set": "help"})).await;
    let names: Vec<&str> = stream.events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["run", "question", "question", "question", "report"]);
    let started = &stream.events[0].1;
    assert_eq!(
        (started["total"].clone(), started["status"].clone()),
        (json!(3), json!("running"))
    );
    let progress: Vec<u64> = (stream.events[1..4].iter())
        .map(|(_, q)| q["done"].as_u64().unwrap())
        .collect();
    assert_eq!(progress, [1, 2, 3]);

    assert_eq!(
        (report["status"].clone(), report["mode"].clone()),
        (json!("finished"), json!("retrieval"))
    );
    assert_eq!(
        (report["done"].clone(), report["tokens"].clone()),
        (json!(3), json!(0))
    );
    let card = question(&report, "card");
    assert_eq!(card["sources"][0], "lost-card", "{card}");
    assert_eq!(
        (card["recall"].clone(), card["first_source"].clone()),
        (json!(1.0), json!(true))
    );
    assert!(
        card.get("facts_found").is_none(),
        "a retrieval run states no facts"
    );
    let atm = question(&report, "atm");
    assert_eq!(atm["recall"], 1.0, "the glob matches atm-limits: {atm}");
    let recall = &report["figures"]["recall"];
    assert_eq!(
        (recall["value"].clone(), recall["n"].clone()),
        (json!(1.0), json!(3))
    );
    assert_eq!(report["figures"]["first_source"]["n"], 1);
    assert!(
        report["figures"]["stages"]["retrieve_ms"].is_array(),
        "{report}"
    );
    assert!(
        report.get("baseline").is_none(),
        "the first run has nothing to compare with"
    );

    let id = report["id"].as_str().unwrap();
    let kept = app
        .send(Method::GET, &format!("/v1/evals/runs/{id}"), &acme(), "")
        .await;
    assert_eq!(kept.body, report, "the report is kept as streamed");
    let listed = app
        .send(Method::GET, "/v1/evals/runs?set=help", &acme(), "")
        .await;
    assert_eq!(listed.body["runs"][0]["id"], id);
    assert!(listed.body["runs"][0].get("questions").is_none());
    let none = app
        .send(Method::GET, "/v1/evals/runs?set=other", &acme(), "")
        .await;
    assert_eq!(none.body["runs"], json!([]));
    let usage = app.send(Method::GET, "/v1/usage", &acme(), "").await;
    assert_eq!(
        usage.body["total"]["searches"], 3,
        "each question is a search: {}",
        usage.raw
    );
}

#[tokio::test]
async fn a_run_is_compared_question_by_question_with_the_last_finished_run_of_its_set() {
    let app = app().await;
    let (_, first) = run(&app, &json!({"set": "help", "k": 3})).await;
    // One source per question: the expected documents stay first, so nothing is lost…
    let (_, second) = run(&app, &json!({"set": "help", "k": 1})).await;
    assert_eq!(second["baseline"], first["id"]);
    let recall = &second["versus"]["recall"];
    assert_eq!(
        (recall["value"].clone(), recall["n"].clone()),
        (json!(0.0), json!(3))
    );
    let card = question(&second, "card");
    assert_eq!(card["changed"]["added"], json!(null), "{card}");
    assert_eq!(
        card["changed"]["removed"].as_array().map(Vec::len),
        Some(2),
        "{card}"
    );
    // …while a set whose expected document is ranked second loses it, and says so.
    let harder = json!({"questions": [
        {"id": "card", "question": "How long does a replacement card take to arrive?",
         "documents": ["atm-limits"]}
    ]});
    assert_eq!(put_set(&app, "acme", "hard", &harder).await.status, 200);
    let (_, wide) = run(&app, &json!({"set": "hard", "k": 3})).await;
    let (_, narrow) = run(&app, &json!({"set": "hard", "k": 1})).await;
    assert_eq!(
        narrow["baseline"], wide["id"],
        "the last run of the same set"
    );
    assert_eq!(question(&wide, "card")["recall"], 1.0, "{wide}");
    assert_eq!(narrow["versus"]["recall"]["value"], -1.0, "{narrow}");
    assert_eq!(question(&narrow, "card")["changed"]["recall"], -1.0);
    // A run can name the one it is compared with.
    let (_, named) = run(&app, &json!({"set": "hard", "compare_to": wide["id"]})).await;
    assert_eq!(named["baseline"], wide["id"]);
}

#[tokio::test]
async fn an_answer_run_reports_the_verdict_the_facts_stated_and_the_tokens_spent() {
    let app = app_with(&[]).await;
    let (_, report) = run(&app, &json!({"set": "help", "mode": "answer"})).await;
    assert_eq!(report["status"], "finished", "{report}");
    let card = question(&report, "card");
    assert_eq!(card["answer"], kit::ANSWER);
    assert_eq!(card["facts_found"], json!(["5 working days"]), "{card}");
    assert!(
        card["grounded"].is_boolean() && card["refused"].is_boolean(),
        "{card}"
    );
    assert!(report["tokens"].as_u64().unwrap() > 0);
    assert!(report["figures"]["facts"]["value"] == 1.0, "{report}");
    assert!(
        report["figures"]["stages"]["ttft_ms"].is_array(),
        "{report}"
    );
    assert_eq!(
        app.llm.calls().len(),
        3,
        "each question answered, the cache bypassed"
    );
    let usage = app.send(Method::GET, "/v1/usage", &acme(), "").await;
    assert_eq!(
        usage.body["total"]["answers"], 3,
        "billed as answers: {}",
        usage.raw
    );
}

#[tokio::test]
async fn a_question_asked_as_an_end_user_sees_only_what_its_principals_may() {
    let app = Kit::new(UNCHECKED).app();
    let doc = |id: &str, access: Value| {
        json!({"id": id, "title": id,
        "text": format!("A replacement card takes 5 days ({id})."), "metadata": {"_access": access}})
    };
    let documents =
        json!({"documents": [doc("hr-only", json!(["group:hr"])), doc("nobody", json!([]))]});
    assert_eq!(
        app.post_as("acme", "/v1/documents", &documents)
            .await
            .status,
        200
    );
    let set = json!({"questions": [
        {"id": "hr", "question": "How long does a replacement card take?", "principals": ["group:hr"]},
        {"id": "staff", "question": "How long does a replacement card take?", "principals": ["group:staff"]},
        {"id": "admin", "question": "How long does a replacement card take?"},
    ]});
    assert_eq!(put_set(&app, "acme", "access", &set).await.status, 200);
    let (_, report) = run(&app, &json!({"set": "access", "k": 10})).await;
    let sources = |id: &str| {
        let mut s: Vec<String> =
            serde_json::from_value(question(&report, id)["sources"].clone()).unwrap();
        s.sort();
        s
    };
    assert_eq!(sources("hr"), ["hr-only"]);
    assert!(sources("staff").is_empty());
    assert_eq!(
        sources("admin"),
        ["hr-only", "nobody"],
        "as the key that runs the set"
    );
}

/// Starts a run of `set` as `tenant` and holds its stream without reading it.
async fn open_run(app: &App, tenant: &str, asked: &Value) -> axum::response::Response {
    let request = kit::request(
        Method::POST,
        "/v1/evals/runs",
        &[("x-sluice-tenant", tenant)],
        asked.to_string(),
    );
    app.open(request).await
}

/// The next SSE event of a held stream.
async fn next_event(body: &mut axum::body::Body) -> (String, Value) {
    let mut text = String::new();
    loop {
        let frame = body.frame().await.expect("an event").expect("a frame");
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        if text.ends_with("\n\n") && !text.starts_with(':') {
            let stream = Stream::parse(&text);
            return stream.events.into_iter().next().expect("one event");
        }
        if text.starts_with(':') {
            text.clear();
        }
    }
}

#[tokio::test]
async fn one_run_at_a_time_per_tenant_a_cancel_stops_it_and_its_slot_is_given_back() {
    let llm =
        ScriptedLlm::new(LlmReply::text(kit::ANSWER)).first_token_after(Duration::from_secs(2));
    let app = Kit::with_llm(UNCHECKED, llm).app();
    app.ingest("acme").await;
    assert_eq!(put_set(&app, "acme", "help", &set()).await.status, 200);
    let asked = json!({"set": "help", "mode": "answer"});
    let held = open_run(&app, "acme", &asked).await;
    assert_eq!(held.status(), 200);
    let again = open_run(&app, "acme", &asked).await;
    assert_eq!(again.status(), 409, "one run at a time");
    let refused = Reply::read(again).await;
    assert_eq!(refused.code(), "eval_run_active");
    assert_eq!(put_set(&app, "globex", "help", &set()).await.status, 200);
    let theirs = open_run(&app, "globex", &json!({"set": "help"})).await;
    assert_eq!(theirs.status(), 200, "another tenant's run is its own");

    let mut body = held.into_body();
    let (name, started) = next_event(&mut body).await;
    assert_eq!(name, "run");
    let id = started["id"].as_str().unwrap().to_string();
    let going = app
        .send(Method::GET, &format!("/v1/evals/runs/{id}"), &acme(), "")
        .await;
    assert_eq!(going.body["status"], "running", "{}", going.raw);
    let cancel = app
        .send(
            Method::POST,
            &format!("/v1/evals/runs/{id}/cancel"),
            &acme(),
            "",
        )
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.raw);
    let mut last = next_event(&mut body).await;
    while last.0 == "question" {
        last = next_event(&mut body).await;
    }
    assert_eq!(last.0, "report");
    assert_eq!(last.1["status"], "canceled", "{}", last.1);
    assert!(last.1["done"].as_u64().unwrap() < 3, "{}", last.1);
    drop(body);
    let after = open_run(&app, "acme", &json!({"set": "help"})).await;
    assert_eq!(
        after.status(),
        200,
        "the slot is given back when the run ends"
    );
}

#[tokio::test]
async fn a_client_that_leaves_stops_its_run_and_a_run_past_its_time_limit_stops_there() {
    let llm = ScriptedLlm::new(LlmReply::StallAfter(vec!["A".into()]));
    let app = Kit::with_llm(
        &[
            ("SLUICE_EVAL_RUN_TIMEOUT_MS", "1000"),
            ("SLUICE_GROUNDING", "off"),
        ],
        llm,
    )
    .app();
    app.ingest("acme").await;
    assert_eq!(put_set(&app, "acme", "help", &set()).await.status, 200);
    let asked = json!({"set": "help", "mode": "answer"});
    drop(open_run(&app, "acme", &asked).await);
    let (_, report) = run(&app, &asked).await;
    assert_eq!(report["status"], "timed_out", "{report}");
    assert_eq!(report["done"], 0, "the first answer never ended");
}

#[tokio::test]
async fn the_evaluation_routes_need_the_settings_permission() {
    let (keys, answers_only) = key_for("acme", &[Permission::Answer, Permission::Search]);
    let admin = keys.add("acme", &[Permission::Settings]);
    let app = Kit::new(&[]).keys(Arc::clone(&keys)).app();
    let bearer = |key: &str| format!("Bearer {key}");
    for (method, path) in [
        (Method::GET, "/v1/evals/sets"),
        (Method::PUT, "/v1/evals/sets/help"),
        (Method::POST, "/v1/evals/runs"),
        (Method::GET, "/v1/evals/runs"),
    ] {
        let auth = bearer(&answers_only);
        let body = set().to_string();
        let reply = app
            .send(method, path, &[("authorization", &auth)], body)
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "permission_denied"),
            "{path}"
        );
    }
    let auth = bearer(&admin);
    let reply = app
        .send(
            Method::PUT,
            "/v1/evals/sets/help",
            &[("authorization", &auth)],
            set().to_string(),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
}
