//! How an answer ends when something outside it says so: the entry point's time is up (on
//! Lambda, the invocation's deadline less a margin), or the server is shutting down and its
//! drain time is up. Either way the client gets a retryable `error` instead of a cut stream,
//! and the metrics count the answer under that code — not as `dropped`, which means that the
//! client went away.

use std::time::Duration;

use axum::http::Method;
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::json;
use sluice_http::StreamDeadline;
use sluice_testkit::{Reply, ScriptedLlm};

use crate::kit::{self, App, Kit, Stream};

/// An app whose LLM streams `tokens` and then nothing, ever.
fn stalling(tokens: &[&str]) -> App {
    let reply = Reply::StallAfter(tokens.iter().map(|t| t.to_string()).collect());
    Kit::with_llm(&[("SLUICE_CACHE", "off")], ScriptedLlm::new(reply)).app()
}

fn ask() -> String {
    json!({"query": "How do I reset my password?"}).to_string()
}

fn counted(app: &App, line: &str) -> bool {
    app.server.metrics.encode().lines().any(|l| l == line)
}

#[tokio::test]
async fn an_answer_still_streaming_at_the_entry_points_time_ends_deadline_exceeded() {
    let app = stalling(&["one ", "two ", "three "]);
    let mut request = kit::request(Method::POST, "/v1/answer", &[], ask());
    let at = tokio::time::Instant::now() + Duration::from_millis(800);
    request.extensions_mut().insert(StreamDeadline(at));
    let answer = Stream::parse(&app.call(request).await.raw);
    assert_eq!(answer.names(), ["meta", "token", "token", "token", "error"]);
    let error = answer.first("error");
    assert_eq!(
        (error["code"].as_str(), error["retryable"].as_bool()),
        (Some("deadline_exceeded"), Some(true))
    );
    assert!(counted(
        &app,
        "sluice_answer_errors_total{code=\"deadline_exceeded\"} 1"
    ));
    assert!(counted(&app, "sluice_answers_total{ending=\"error\"} 1"));
    assert!(counted(&app, "sluice_tokens_total{source=\"llm\"} 3"));
    assert!(!app.server.metrics.encode().contains("ending=\"dropped\""));
}

#[tokio::test]
async fn answers_in_flight_together_each_end_at_their_own_deadline() {
    // One process, several invocations at once (Lambda Managed Instances): the deadline is
    // the request's, so the early one ends and the later ones keep streaming until theirs.
    let app = stalling(&["one "]);
    let start = tokio::time::Instant::now();
    let deadlines = [900, 300, 600].map(Duration::from_millis);
    let answers = deadlines.map(|after| {
        let mut request = kit::request(Method::POST, "/v1/answer", &[], ask());
        request
            .extensions_mut()
            .insert(StreamDeadline(start + after));
        let app = app.clone();
        tokio::spawn(async move {
            let raw = app.call(request).await.raw;
            (tokio::time::Instant::now() - start, raw)
        })
    });
    for (after, answer) in deadlines.into_iter().zip(answers) {
        let (ended, raw) = answer.await.unwrap();
        let answer = Stream::parse(&raw);
        assert_eq!(answer.names(), ["meta", "token", "error"], "{after:?}");
        assert_eq!(answer.first("error")["code"], "deadline_exceeded");
        // Not before its own deadline, and not held until the next one's (300 ms later).
        assert!(ended >= after, "ended at {ended:?}, deadline {after:?}");
        assert!(
            ended < after + Duration::from_millis(300),
            "ended at {ended:?}, deadline {after:?}"
        );
    }
    assert!(counted(
        &app,
        "sluice_answer_errors_total{code=\"deadline_exceeded\"} 3"
    ));
}

#[tokio::test]
async fn a_drained_server_ends_open_answers_shutting_down_and_counts_them() {
    let app = stalling(&["one ", "two "]);
    let response = app
        .open(kit::request(Method::POST, "/v1/answer", &[], ask()))
        .await;
    let mut body = response.into_body().into_data_stream();
    // Wait until the answer is streaming (meta and both tokens), then drain.
    let mut seen = String::new();
    while seen.matches("\n\n").count() < 3 {
        let chunk = body.next().await.expect("more").expect("a chunk");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    app.server.answers.as_ref().expect("answers").drain();
    while let Some(chunk) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
    }
    let answer = Stream::parse(&seen);
    assert_eq!(answer.names(), ["meta", "token", "token", "error"]);
    let error = answer.first("error");
    assert_eq!(
        (error["code"].as_str(), error["retryable"].as_bool()),
        (Some("shutting_down"), Some(true))
    );
    assert!(counted(
        &app,
        "sluice_answer_errors_total{code=\"shutting_down\"} 1"
    ));
    assert!(!app.server.metrics.encode().contains("ending=\"dropped\""));
}

#[tokio::test]
async fn a_client_that_goes_away_is_counted_as_dropped() {
    let app = stalling(&["one ", "two "]);
    let response = app
        .open(kit::request(Method::POST, "/v1/answer", &[], ask()))
        .await;
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.data_ref().is_some());
    drop(body);
    assert!(counted(&app, "sluice_answers_total{ending=\"dropped\"} 1"));
    assert!(
        !app.server
            .metrics
            .encode()
            .contains("sluice_answer_errors_total{")
    );
}

#[tokio::test]
async fn a_quiet_stream_carries_keep_alives_until_its_first_token() {
    let llm = ScriptedLlm::answering("late but sure").first_token_after(Duration::from_millis(700));
    let app = Kit::with_llm(&[("SLUICE_SSE_KEEPALIVE_MS", "200")], llm).app();
    let answer = app.answer(&json!({"query": "anything"})).await;
    answer.assert_well_formed();
    assert!(answer.comments >= 2, "{} keep-alives", answer.comments);
    assert_eq!(answer.text(), "late but sure");
}

#[tokio::test]
async fn the_llm_call_is_under_way_when_meta_is_sent_and_let_go_of_when_the_client_leaves() {
    // The sources' evidence is computed while the upstream reads the prompt: the LLM is asked
    // before `meta` goes out, not when the client reads past it.
    let app = stalling(&["one "]);
    let response = app
        .open(kit::request(Method::POST, "/v1/answer", &[], ask()))
        .await;
    let mut body = response.into_body();
    let mut seen = String::new();
    while !seen.contains("event: meta") {
        let frame = body.frame().await.expect("a frame").expect("data");
        if let Some(data) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(data));
        }
    }
    let waited = std::time::Instant::now();
    while app.llm.calls().is_empty() {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the LLM was not asked until the client read past meta"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(body);
    while app.llm.streams_ended() < 1 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the upstream stream was never let go of"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(app.llm.calls().len(), 1);
}
