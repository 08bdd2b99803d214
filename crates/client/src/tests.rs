use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use futures::StreamExt;
use serde_json::json;
use sluice_contract::codes::Code;
use sluice_contract::sse::{ErrorEvent, Event, Token};

use super::*;

/// A server on a free port whose `/v1/answer` records the request's headers and body and
/// answers `events`, whose `/v1/documents` refuses with Sluice's error body, and whose
/// `/healthz` answers text where JSON is expected.
async fn server(events: String) -> (String, Arc<Mutex<Vec<(HeaderMap, Bytes)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let app = Router::new()
        .route(
            "/v1/answer",
            post(move |headers: HeaderMap, body: Bytes| async move {
                kept.lock().unwrap().push((headers, body));
                ([("content-type", "text/event-stream")], events)
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok, but not JSON" }))
        .route(
            "/v1/documents",
            post(|| async {
                let error = json!({"error": {"code": "invalid_request", "message": "no documents to ingest"}});
                (StatusCode::BAD_REQUEST, axum::Json(error))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn sse(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

#[tokio::test]
async fn an_answer_is_sent_with_its_hash_and_tenant_and_read_as_events() {
    let token = Event::Token(Token {
        text: "five days".into(),
        index: 0,
    });
    let failed = Event::Error(ErrorEvent::new(Code::LlmTimeout, "slow"));
    let stream = [
        sse("token", &token.data()),
        // A newer server's event: skipped, not an error.
        sse("progress", r#"{"stage":"embed"}"#),
        sse("error", &failed.data()),
    ]
    .concat();
    let (url, seen) = server(stream).await;
    let client = Client::new(&url).unwrap().for_tenant(Some("acme"));
    let body = json!({"query": "How long does a card take?"});
    let events: Vec<Event> = client
        .answer(&body)
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(events, [token, failed]);

    let (headers, sent) = seen.lock().unwrap().pop().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&sent).unwrap(), body);
    assert_eq!(headers[TENANT_HEADER], "acme");
    assert_eq!(
        headers[CONTENT_SHA256_HEADER],
        sluice_contract::sha256_hex(&sent)
    );
    assert_eq!(headers["content-type"], "application/json");
}

#[tokio::test]
async fn an_event_that_breaks_the_contract_is_an_error_not_a_guess() {
    let (url, _) = server(sse("done", r#"{"request_id": 7}"#)).await;
    let client = Client::new(&url).unwrap();
    let mut events = client.answer(&json!({"query": "q"})).await.unwrap();
    let e = events.next().await.unwrap().unwrap_err();
    assert!(
        matches!(e, ClientError::Stream(ref m) if m.contains("a done event")),
        "{e}"
    );
}

#[tokio::test]
async fn a_refusal_carries_the_servers_code_and_message() {
    let (url, _) = server(String::new()).await;
    let e = Client::new(&url).unwrap().ingest(&[]).await.unwrap_err();
    match e {
        ClientError::Server {
            status,
            code,
            message,
            ..
        } => assert_eq!(
            (status, code.as_str(), message.as_str()),
            (400, "invalid_request", "no documents to ingest")
        ),
        other => panic!("{other:?}"),
    }
    // A success whose body is not JSON: the answer is unreadable, the server was there.
    let unreadable = Client::new(&url)
        .unwrap()
        .get("/healthz")
        .await
        .unwrap_err();
    assert!(
        matches!(unreadable, ClientError::Body { url: ref at, .. } if *at == url),
        "{unreadable:?}"
    );
    // Nothing listening: a connection error that names the server.
    let gone = Client::new("http://127.0.0.1:9")
        .unwrap()
        .get("/healthz")
        .await
        .unwrap_err();
    assert!(matches!(gone, ClientError::Connect { ref url, .. } if url == "http://127.0.0.1:9"));
}

#[test]
fn escape_keeps_only_unreserved_bytes() {
    assert_eq!(escape("/docs/a b.md"), "%2Fdocs%2Fa%20b.md");
    assert_eq!(escape("é~"), "%C3%A9~");
}

#[test]
fn answer_options_become_the_requests_optional_fields() {
    let bare = AnswerOptions::default().body("q");
    assert_eq!(bare, json!({"query": "q"}));
    let full = AnswerOptions {
        k: Some(3),
        deadline_ms: Some(250),
        no_cache: true,
        filter: Some(json!({"year": {"$gte": 2025}})),
        rerank_context: Some(json!({"plan": "pro"})),
    };
    assert_eq!(
        full.body("q"),
        json!({"query": "q", "k": 3, "retrieval_deadline_ms": 250, "cache": "bypass",
               "filter": {"year": {"$gte": 2025}}, "rerank_context": {"plan": "pro"}})
    );
}

/// A server whose `DELETE /v1/documents` deletes `batches` documents a call, saying `more`
/// until the last, and records each body; `GET` routes echo their query.
async fn deleting(batches: Vec<u64>) -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    use axum::extract::RawQuery;
    use axum::routing::get;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let left = Arc::new(Mutex::new(batches));
    let app = Router::new()
        .route(
            "/v1/documents",
            axum::routing::delete(move |body: axum::Json<serde_json::Value>| async move {
                kept.lock().unwrap().push(body.0);
                let mut left = left.lock().unwrap();
                let deleted = left.remove(0);
                axum::Json(
                    json!({"deleted": deleted, "more": !left.is_empty(), "corpus_version": 7}),
                )
            })
            .get(|RawQuery(q): RawQuery| async move { axum::Json(json!({ "query": q })) }),
        )
        .route(
            "/v1/usage",
            get(|RawQuery(q): RawQuery| async move { axum::Json(json!({ "query": q })) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test]
async fn deleting_by_selection_confirms_and_calls_until_none_is_left() {
    let (url, seen) = deleting(vec![1000, 1000, 17]).await;
    let client = Client::new(&url).unwrap();
    let mut heard = Vec::new();
    let selection = json!({"filter": {"topic": "cards"}});
    let report = (client.delete_documents(&selection, &mut |n| heard.push(n)))
        .await
        .unwrap();
    assert_eq!(report["deleted"], 2017);
    assert_eq!(report["corpus_version"], 7);
    assert_eq!(
        heard,
        vec![1000, 2000],
        "progress after each call but the last"
    );
    let bodies = seen.lock().unwrap();
    assert_eq!(bodies.len(), 3);
    for body in bodies.iter() {
        assert_eq!(
            *body,
            json!({"filter": {"topic": "cards"}, "confirm": true})
        );
    }
}

#[tokio::test]
async fn listing_and_usage_queries_are_escaped() {
    let (url, _) = deleting(vec![]).await;
    let client = Client::new(&url).unwrap();
    let page = (client.documents(Some(r#"{"a":"b c"}"#), Some("x/y")))
        .await
        .unwrap();
    assert_eq!(
        page["query"],
        "limit=1000&filter=%7B%22a%22%3A%22b%20c%22%7D&cursor=x%2Fy"
    );
    let usage = client.usage(Some("2026-12-01"), None, true).await.unwrap();
    assert_eq!(usage["query"], "from=2026-12-01&keys=true");
    let none = client.usage(None, None, false).await.unwrap();
    assert_eq!(none["query"].as_str().unwrap_or(""), "", "{none}");
}

#[tokio::test]
async fn a_settings_update_keeps_the_other_fields() {
    use axum::routing::get;
    let stored = Arc::new(Mutex::new(
        json!({"k": 3, "prompt": {"instructions": "Be brief."}}),
    ));
    let (read, written) = (Arc::clone(&stored), Arc::clone(&stored));
    let app =
        Router::new().route(
            "/v1/settings",
            get(move || async move {
                axum::Json(json!({"version": 1, "settings": *read.lock().unwrap()}))
            })
            .put(move |body: axum::Json<serde_json::Value>| async move {
                *written.lock().unwrap() = body.0.clone();
                axum::Json(json!({"version": 2, "settings": body.0}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = Client::new(&url).unwrap();
    let reply = (client.update_settings(|s| s["fusion"] = "convex:dense=0.7".into()))
        .await
        .unwrap();
    assert_eq!(reply["version"], 2);
    assert_eq!(
        *stored.lock().unwrap(),
        json!({"k": 3, "prompt": {"instructions": "Be brief."}, "fusion": "convex:dense=0.7"})
    );
}

#[test]
fn sources_show_the_components_score_and_what_it_dropped() {
    let doc = |id: &str, rerank: Option<f32>| -> SourceDoc {
        let mut d = json!({"id": id, "chunk": 0, "score": 0.016, "source": format!("{id}.md"),
                           "title": id.to_uppercase(), "snippet": ""});
        if let Some(r) = rerank {
            d["rerank_score"] = json!(r);
        }
        serde_json::from_value(d).unwrap()
    };
    let none = (None, None);
    let ranked = source_lines(
        &[doc("a", Some(1.5)), doc("b", Some(0.25))],
        &[],
        Some(2),
        none,
    );
    assert_eq!(
        ranked,
        [
            "the tenant's component dropped 2 of the candidates",
            "[1] A (a.md) score 0.016, rerank 1.500",
            "[2] B (b.md) score 0.016, rerank 0.250",
        ]
    );
    // No component: the fused score alone, no drop line.
    assert_eq!(
        source_lines(&[doc("a", None)], &[], Some(0), none),
        ["[1] A (a.md) score 0.016"]
    );
}

#[test]
fn a_components_failure_is_shown_with_its_message_candidates_and_context() {
    let rerank: CallFailure = serde_json::from_value(json!({
        "kind": "panic", "message": "panicked at src/lib.rs:12:5: index out of bounds",
        "context": {"locale": "fr"}, "candidates": ["a#0", "b#1"]}))
    .unwrap();
    let prompt: RerankFailure =
        serde_json::from_value(json!({"kind": "fuel", "message": "ran out of fuel"})).unwrap();
    let degraded = [Degraded::RerankFailed];
    let lines = source_lines(&[], &degraded, None, (Some(&rerank), Some(&prompt)));
    assert_eq!(
        lines,
        [
            "degraded: rerank_failed",
            "the rerank component failed (panic): panicked at src/lib.rs:12:5: index out of \
             bounds\n  candidates: a#0, b#1\n  context: locale=fr",
            "the prompt component failed (fuel): ran out of fuel",
        ]
    );
}

#[test]
fn a_quality_gates_comparison_reads_as_its_figures_what_it_refused_and_what_lost_most() {
    let quality = serde_json::json!({
        "set": "help", "run": "run-1",
        "versus": {"mrr": {"value": -0.5, "ci": [-0.7, -0.3], "n": 3}},
        "live": {"mrr": {"value": 1.0}},
        "refused": [{"figure": "mrr", "max_drop": 0.0}],
        "worst": [{"id": "card", "question": "How long?"}],
    });
    let lines = gate_lines(&quality);
    assert_eq!(lines[0], "quality gate: set \"help\" (run \"run-1\")");
    assert_eq!(
        lines[1],
        "  mrr: -0.500 [-0.700, -0.300] over 3 questions (live 1.000)"
    );
    assert_eq!(lines[2], "  refused: \"mrr\" may drop by 0.0 at most");
    assert_eq!(lines[3], "  lost most: \"card\" \"How long?\"");
}

#[test]
fn a_sync_read_by_batches_says_how_many_are_read_and_how_to_follow_it() {
    let report = serde_json::json!({
        "id": "sync-1-0001", "status": "running", "added": 0, "changed": 0, "unchanged": 4,
        "deleted": 1, "failures": 0, "ms": 12, "listed": 4, "bytes": 0,
        "skipped": {"robots": 0, "noindex": 0, "redirects": 0, "caps": 0, "depth": 0},
        "failed": [], "batches": {"sent": 3, "read": 1},
    });
    let lines = super::sync_report_lines(&report);
    assert_eq!(
        lines[0],
        "sync-1-0001 running: 0 added, 0 changed, 4 unchanged, 1 deleted, 0 failed (12 ms)"
    );
    assert!(
        lines.contains(&"batches: 1 of 3 read (follow it with `sluice sources syncs`)".to_string()),
        "{lines:?}"
    );
    let mut inline = report.clone();
    inline.as_object_mut().unwrap().remove("batches");
    assert!(
        !super::sync_report_lines(&inline)
            .iter()
            .any(|l| l.starts_with("batches"))
    );
}
