//! An OpenAI-compatible LLM stand-in on 127.0.0.1 that misbehaves (or answers at once) as
//! told: for the transport and timing faults no real model can be made to show. A stand-in
//! for the upstream's protocol only; what the answers say is not checked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use serde_json::json;

/// What the LLM stand-in does with every request.
#[derive(Clone, Copy, Debug)]
pub enum Llm {
    /// Answers with this status and a JSON error.
    Status(u16),
    /// Sends the response headers, then nothing.
    StallBefore,
    /// Streams `n` tokens, then nothing.
    StallAfter(usize),
    /// Streams `n` tokens, then closes the stream without a finish or `[DONE]`.
    CutAfter(usize),
    /// Streams something that is not SSE JSON.
    Garbage,
    /// Sends an SSE line of 100 KB that never ends, then nothing.
    EndlessLine,
    /// Streams `n` tokens at once, then finishes: a fast model.
    Tokens(usize),
    /// Streams nothing for this long, then 3 tokens and finishes: a loaded fleet.
    SlowFirst(Duration),
    /// Streams `n` tokens, one each interval (the first after one), then finishes: a model
    /// writing at a steady rate.
    Paced(usize, Duration),
}

/// The `traceparent` header of every request the stand-in received, in arrival order
/// (empty for a request without one).
pub type Traces = Arc<Mutex<Vec<String>>>;

/// The end of a well-behaved stream.
pub const FINISH: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// The `n`-th token chunk of a stream (text `w<n> `), as an SSE event.
pub fn token(n: usize) -> String {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": format!("w{n} ")}}]});
    format!("data: {chunk}\n\n")
}

/// Starts an OpenAI-compatible stand-in on 127.0.0.1 that answers every chat completion as
/// `mode` says; its base URL (`http://127.0.0.1:PORT/v1`).
pub async fn llm(mode: Llm) -> String {
    llm_traced(mode).await.0
}

/// [`llm`], and the trace context of every request it receives.
pub async fn llm_traced(mode: Llm) -> (String, Traces) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let traces = Traces::default();
    let seen = Arc::clone(&traces);
    let handler = move |headers: axum::http::HeaderMap| {
        let traceparent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        seen.lock().unwrap().push(traceparent.to_string());
        respond(mode)
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(handler));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, traces)
}

/// The stand-in's answer to one request.
async fn respond(mode: Llm) -> axum::response::Response {
    let sse = |body: Body| {
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap()
    };
    match mode {
        Llm::Status(code) => axum::response::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"error":{"message":"injected"}}"#))
            .unwrap(),
        Llm::StallBefore => sse(Body::from_stream(futures::stream::pending::<
            Result<String, std::io::Error>,
        >())),
        Llm::StallAfter(n) => {
            let tokens = futures::stream::iter((0..n).map(|i| Ok(token(i))));
            sse(Body::from_stream(futures::StreamExt::chain(
                tokens,
                futures::stream::pending::<Result<String, std::io::Error>>(),
            )))
        }
        Llm::CutAfter(n) => {
            let tokens = (0..n).map(token).collect::<String>();
            sse(Body::from(tokens))
        }
        Llm::Garbage => sse(Body::from("data: <html>502 Bad Gateway</html>\n\n")),
        Llm::EndlessLine => {
            let line =
                futures::stream::once(async { Ok(format!("data: {}", "x".repeat(100_000))) });
            sse(Body::from_stream(futures::StreamExt::chain(
                line,
                futures::stream::pending::<Result<String, std::io::Error>>(),
            )))
        }
        Llm::Tokens(n) => sse(Body::from((0..n).map(token).collect::<String>() + FINISH)),
        Llm::SlowFirst(wait) => {
            let body = futures::stream::once(async move {
                tokio::time::sleep(wait).await;
                Ok::<_, std::io::Error>((0..3).map(token).collect::<String>() + FINISH)
            });
            sse(Body::from_stream(body))
        }
        Llm::Paced(n, every) => {
            let tokens = futures::stream::unfold(0, move |i| async move {
                if i == n {
                    return None;
                }
                tokio::time::sleep(every).await;
                Some((Ok::<_, std::io::Error>(token(i)), i + 1))
            });
            let end = futures::stream::once(async { Ok(FINISH.to_string()) });
            sse(Body::from_stream(futures::StreamExt::chain(tokens, end)))
        }
    }
}
