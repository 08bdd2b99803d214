//! A client that goes away mid-answer must not keep a GPU busy: when the client of
//! `POST /v1/answer` disconnects, Sluice drops its upstream LLM request, and the LLM server
//! sees its response stream closed.
//!
//! The LLM here is a stand-in on 127.0.0.1 speaking OpenAI's streaming chat protocol — one
//! chunk every 20 ms, never finishing — that records when its response body is dropped (its
//! client, Sluice, closed the connection). A real model could not be made to stream forever.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use futures::StreamExt;
use serde_json::json;
use sluice_tests::{http, start};

#[derive(Default)]
struct Upstream {
    requests: AtomicUsize,
    chunks_sent: AtomicUsize,
    /// When the response body of the stream was dropped.
    dropped_at: Mutex<Option<Instant>>,
}

/// Sets `dropped_at` when the response body it rides along with is dropped.
struct DropGuard(Arc<Upstream>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        *self.0.dropped_at.lock().unwrap() = Some(Instant::now());
    }
}

async fn endless_stream(state: Arc<Upstream>) -> axum::response::Response {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let guard = DropGuard(Arc::clone(&state));
    let chunks = futures::stream::unfold((guard, 0usize), |(guard, n)| async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        guard.0.chunks_sent.fetch_add(1, Ordering::SeqCst);
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 0,
                           "model": "stand-in", "choices": [{"index": 0,
                           "delta": {"content": format!("word{n} ")}, "finish_reason": null}]});
        let event = Bytes::from(format!("data: {chunk}\n\n"));
        Some((Ok::<_, std::io::Error>(event), (guard, n + 1)))
    });
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(chunks))
        .unwrap()
}

async fn upstream() -> (Arc<Upstream>, String) {
    let state = Arc::new(Upstream::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post({
            let state = Arc::clone(&state);
            move || endless_stream(Arc::clone(&state))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, url)
}

#[tokio::test]
async fn a_client_that_disconnects_mid_answer_cancels_the_upstream_request() {
    sluice_testkit::needs!(Llm, Model);
    let (upstream, url) = upstream().await;
    let server = start(&[
        ("SLUICE_LLM_URL", url.as_str()),
        ("SLUICE_MAX_TOKENS", "32768"),
        ("SLUICE_CACHE", "off"),
    ])
    .await;
    let response = http()
        .post(format!("{}/v1/answer", server.url))
        .json(&json!({"query": "Tell me everything about cards."}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while seen.matches("event: token").count() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("tokens arrive")
            .expect("stream open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        upstream.dropped_at.lock().unwrap().is_none(),
        "the upstream stream runs while the client reads"
    );

    // The client goes away.
    drop(body);
    let gone = Instant::now();
    let dropped = loop {
        if let Some(at) = *upstream.dropped_at.lock().unwrap() {
            break at;
        }
        // How soon is `make bench`'s to say (printed below); this holds on a busy machine.
        assert!(
            gone.elapsed() < Duration::from_secs(30),
            "the upstream request was still streaming 30 s after the client left"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let after = upstream.chunks_sent.load(Ordering::SeqCst);
    // The answer's stream has ended on the server too (its guard is dropped): nothing of
    // that answer runs any more, so a retry or another chunk would have been asked for by now.
    let ending = Instant::now();
    while server.server.metrics.active_streams() > 0 {
        assert!(
            ending.elapsed() < Duration::from_secs(60),
            "the answer's stream never ended on the server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        upstream.chunks_sent.load(Ordering::SeqCst),
        after,
        "nothing generated after the cancel"
    );
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 1, "no retry");
    eprintln!(
        "upstream cancelled {} ms after the client disconnected",
        dropped.saturating_duration_since(gone).as_millis()
    );
}
