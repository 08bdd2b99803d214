use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use futures::StreamExt;
use serde_json::json;
use sluice_contract::codes::Code;
use sluice_contract::sse::{Event, Token};

use super::*;

/// A server on a free port whose `/v1/answer` records the request's headers and body and
/// answers `events`, and whose `/v1/documents` refuses with Sluice's error body.
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
        } => assert_eq!(
            (status, code.as_str(), message.as_str()),
            (400, "invalid_request", "no documents to ingest")
        ),
        other => panic!("{other:?}"),
    }
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
