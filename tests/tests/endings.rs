//! How an answer ends when something outside it says so: the entry point's time is up (on
//! Lambda, the invocation's deadline less a margin: [`AnswerRequest::ends_by`]), or the server
//! is shutting down and its drain time is up. Either way the client gets a retryable `error`
//! instead of a cut stream, and the metrics count the answer under that code — not as
//! `dropped`, which means that the client went away.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use sluice_core::pipeline::AnswerRequest;
use sluice_core::sse::Event;
use sluice_http::answer::answer_stream;
use sluice_tests::stand_in::{Llm, llm};
use sluice_tests::start;

/// An answer request for the default tenant, as the router would make it; the tests read it
/// through [`answer_stream`], which counts it in the server's metrics as the route does.
fn request(server: &sluice_tests::TestServer) -> AnswerRequest {
    sluice_http::answer_request(
        &server.pipeline.config,
        "default".into(),
        &Default::default(),
        json!({"query": "How do I reset my password?"})
            .to_string()
            .as_bytes(),
        Instant::now(),
    )
    .expect("a valid request")
}

fn metric(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[tokio::test]
async fn an_answer_still_streaming_at_the_entry_points_time_ends_deadline_exceeded() {
    // Three tokens, then an upstream that never answers again (nor times out, within this).
    let upstream = llm(Llm::StallAfter(3)).await;
    let server = start(&[("SLUICE_LLM_URL", &upstream)]).await;
    let ends_by = tokio::time::Instant::now() + Duration::from_millis(800);
    let events: Vec<Event> = answer_stream(
        &server.server,
        AnswerRequest {
            ends_by: Some(ends_by),
            ..request(&server)
        },
    )
    .collect()
    .await;
    let names: Vec<&str> = events.iter().map(Event::name).collect();
    assert_eq!(names, ["meta", "token", "token", "token", "error"]);
    let Some(Event::Error(e)) = events.last() else {
        unreachable!()
    };
    assert_eq!((e.code.as_str(), e.retryable), ("deadline_exceeded", true));
    let text = server.server.metrics.encode();
    assert!(
        metric(
            &text,
            "sluice_answer_errors_total{code=\"deadline_exceeded\"} 1"
        ),
        "{text}"
    );
    assert!(
        metric(&text, "sluice_answers_total{ending=\"error\"} 1"),
        "{text}"
    );
    assert!(!text.contains("ending=\"dropped\""), "{text}");
    assert!(
        metric(&text, "sluice_tokens_total{source=\"llm\"} 3"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_drained_server_ends_open_answers_shutting_down_and_counts_them() {
    let upstream = llm(Llm::StallAfter(2)).await;
    let server = start(&[("SLUICE_LLM_URL", &upstream)]).await;
    let mut events = Box::pin(answer_stream(&server.server, request(&server)));
    // Wait until the answer is streaming, then drain.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = events.next().await.expect("an event");
        seen.push(event.name());
    }
    assert_eq!(seen, ["meta", "token", "token"]);
    server.pipeline.drain();
    let rest: Vec<Event> = events.collect().await;
    let names: Vec<&str> = rest.iter().map(Event::name).collect();
    assert_eq!(names, ["error"]);
    let Some(Event::Error(e)) = rest.last() else {
        unreachable!()
    };
    assert_eq!((e.code.as_str(), e.retryable), ("shutting_down", true));
    let text = server.server.metrics.encode();
    assert!(
        metric(
            &text,
            "sluice_answer_errors_total{code=\"shutting_down\"} 1"
        ),
        "{text}"
    );
    assert!(!text.contains("ending=\"dropped\""), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_goes_away_is_counted_as_dropped() {
    let upstream = llm(Llm::StallAfter(2)).await;
    let server = start(&[("SLUICE_LLM_URL", &upstream)]).await;
    let mut events = Box::pin(answer_stream(&server.server, request(&server)));
    for _ in 0..2 {
        events.next().await.expect("an event");
    }
    drop(events);
    let text = server.server.metrics.encode();
    assert!(
        metric(&text, "sluice_answers_total{ending=\"dropped\"} 1"),
        "{text}"
    );
    assert!(!text.contains("sluice_answer_errors_total{"), "{text}");
    server.stop().await;
}
