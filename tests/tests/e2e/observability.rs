//! What a request carries beyond its answer: the caller's W3C trace context continued into
//! the LLM call, the assembled prompt echoed on request, and files uploaded as they are.
//! The LLM here is the synthetic benchmark fixture behind a layer that records what it is
//! sent (the fixture's tokens do not matter to these tests).

use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::middleware::Next;
use serde_json::{Value, json};
use sluice_bench::synthetic::{Settings, router};
use sluice_http::serve;
use sluice_tests::{http, start};

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The fixture on a free port; returns its `/v1` URL and the `traceparent` of each request.
async fn recording_llm() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = Arc::clone(&seen);
    let app = router(Settings {
        tokens_per_sec: 1000.0,
        tokens: 4,
        answers: sluice_bench::synthetic::Answers::Placeholders,
    })
    .layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let record = Arc::clone(&record);
            async move {
                if request.uri().path().ends_with("/chat/completions") {
                    let header = request
                        .headers()
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    record.lock().expect("lock").push(header);
                }
                next.run(request).await
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    tokio::spawn(serve(
        listener,
        app,
        std::time::Duration::from_secs(10),
        std::future::pending(),
    ));
    (url, seen)
}

/// The data of each SSE event of a whole answer body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_string(), serde_json::from_str(data).ok()?))
        })
        .collect()
}

async fn ask(url: &str, traceparent: Option<&str>, body: &Value) -> Vec<(String, Value)> {
    let mut request = http().post(format!("{url}/v1/answer")).json(body);
    if let Some(t) = traceparent {
        request = request.header("traceparent", t);
    }
    let response = request.send().await.expect("answer");
    assert_eq!(response.status(), 200);
    events(&response.text().await.expect("body"))
}

#[tokio::test]
async fn the_callers_trace_reaches_the_llm_as_a_child_span() {
    sluice_testkit::needs!(Llm, Model);
    let (llm, seen) = recording_llm().await;
    let server = start(&[("SLUICE_LLM_URL", llm.as_str()), ("SLUICE_CACHE", "off")]).await;
    server.ingest_samples().await;

    let answer = ask(
        &server.url,
        Some(CALLER),
        &json!({"query": "How do I reset my password?"}),
    )
    .await;
    let meta = &answer[0];
    assert_eq!(meta.0, "meta");
    assert_eq!(meta.1["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(answer.last().map(|e| e.0.as_str()), Some("done"));
    let sent = seen.lock().expect("lock")[0]
        .clone()
        .expect("a traceparent header");
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!(parts[1], "4bf92f3577b34da6a3ce929d0e0e4736", "same trace");
    assert_ne!(parts[2], "00f067aa0ba902b7", "Sluice is a new span");
    assert_eq!(parts[3], "01", "the caller's sampled flag is kept");

    // Without one (or with garbage), a new trace: meta and the LLM call agree on it.
    let answer = ask(
        &server.url,
        Some("not-a-trace"),
        &json!({"query": "How do I reset my password?"}),
    )
    .await;
    let trace_id = answer[0].1["trace_id"]
        .as_str()
        .expect("trace id")
        .to_string();
    assert_eq!(trace_id.len(), 32);
    assert_ne!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    let sent = seen.lock().expect("lock")[1]
        .clone()
        .expect("a traceparent header");
    assert!(sent.contains(&trace_id), "{sent} vs {trace_id}");
}

#[tokio::test]
async fn a_file_uploads_as_it_is_and_an_unknown_kind_is_refused() {
    sluice_testkit::needs!(Llm, Model);
    let (llm, _) = recording_llm().await;
    let server = start(&[("SLUICE_LLM_URL", llm.as_str())]).await;
    let upload = |name: &str, bytes: &'static str| {
        http()
            .post(format!("{}/v1/documents?filename={name}", server.url))
            .body(bytes)
            .send()
    };
    let response = upload(
        "notes/holidays.md",
        "# Holidays\n\nThe branch closes on public holidays.",
    )
    .await
    .expect("upload");
    assert_eq!(response.status(), 200);
    let report: Value = response.json().await.expect("report");
    assert_eq!(report["documents"], 1, "{report}");
    assert!(report["chunks"].as_u64().unwrap_or(0) >= 1, "{report}");

    let response = upload("photo.png", "not text really")
        .await
        .expect("upload");
    assert_eq!(response.status(), 415);
    let body: Value = response.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "unsupported_format");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("photo.png")),
        "{body}"
    );
}
