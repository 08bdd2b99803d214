//! A synthetic OpenAI-compatible chat upstream: a **benchmark fixture, not a model**. It
//! answers `POST /v1/chat/completions` (streaming only) with numbered placeholder tokens at a
//! fixed rate, whatever the prompt, so that load tests of Sluice are not bounded by an LLM.
//! Everything it sends says what it is: the model id is [`MODEL_ID`] and every chunk carries
//! `system_fingerprint: "sluice-synthetic-fixture"`.
//!
//! Per request: the first token after one token interval, then one per interval; at most
//! `min(max_tokens, tokens)` tokens, ending with `finish_reason` `length` when the request's
//! `max_tokens` cut it and `stop` otherwise; a `usage` chunk when
//! `stream_options.include_usage` is set (as vLLM does); then `[DONE]`. `GET /v1/models`
//! lists the model, `GET /health` answers 200.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

/// The model id the fixture reports.
pub const MODEL_ID: &str = "sluice-synthetic-fixture";

/// How the fixture streams.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Tokens per second of every stream (each stream alone; streams do not share a budget).
    pub tokens_per_sec: f64,
    /// Tokens of an answer that its `max_tokens` does not cut.
    pub tokens: u32,
}

impl Settings {
    fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.tokens_per_sec.max(1e-3))
    }
}

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The fixture's routes.
pub fn router(settings: Settings) -> axum::Router {
    axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route(
            "/v1/models",
            get(|| async { Json(json!({"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "sluice-benchmark-fixture"}]})) }),
        )
        .route("/health", get(|| async { "ok" }))
        .with_state(settings)
}

/// Serves the fixture on `listener` until the task is dropped, with `TCP_NODELAY` as Sluice
/// and vLLM's server set it: without it, each token written after the first waits for the
/// client's delayed ACK, and the fixture would add 40 ms to every time to first token.
pub async fn serve(listener: tokio::net::TcpListener, settings: Settings) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        // A socket that refuses the option still serves, only slower.
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(settings)).await
}

/// `sluice fixture llm`: the fixture on `addr` with `settings` (checked first), until the
/// process is stopped; says where it listens on standard error.
pub async fn run(addr: std::net::SocketAddr, settings: Settings) -> Result<(), crate::BenchError> {
    if !(settings.tokens_per_sec > 0.0 && settings.tokens_per_sec.is_finite()) {
        let why = "--tokens-per-sec must be a positive number";
        return Err(crate::BenchError::Setup(why.into()));
    }
    let failed = |e: std::io::Error| crate::BenchError::Setup(format!("serving on {addr}: {e}"));
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(failed)?;
    eprintln!(
        "synthetic LLM fixture (a benchmark fixture, not a model) on http://{}/v1: {} tokens at \
         {} tokens/s per stream",
        listener.local_addr().map_err(failed)?,
        settings.tokens,
        settings.tokens_per_sec
    );
    serve(listener, settings).await.map_err(failed)
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-synthetic",
        "object": "chat.completion.chunk",
        "model": MODEL_ID,
        "system_fingerprint": "sluice-synthetic-fixture",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {body}\n\n")
}

async fn chat(State(settings): State<Settings>, body: axum::body::Bytes) -> Response {
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(format!("not a chat completion request: {e}")),
    };
    if !request.stream {
        return error("the synthetic fixture only streams: send \"stream\": true".into());
    }
    let limit = request.max_tokens.unwrap_or(u32::MAX);
    let count = settings.tokens.min(limit);
    let finish = if limit < settings.tokens {
        "length"
    } else {
        "stop"
    };
    let usage = request.stream_options.is_some_and(|o| o.include_usage);
    let interval = settings.interval();
    let events = async_stream::stream! {
        yield Ok::<_, Infallible>(chunk(json!({"role": "assistant", "content": ""}), None));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        // Never faster than the set rate: a late tick (a busy machine) delays the next ones
        // rather than letting them catch up in a burst.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for i in 0..count {
            ticks.tick().await;
            yield Ok(chunk(json!({"content": format!(" t{i}")}), None));
        }
        yield Ok(chunk(json!({}), Some(finish)));
        if usage {
            let body = json!({
                "id": "chatcmpl-synthetic",
                "object": "chat.completion.chunk",
                "model": MODEL_ID,
                "choices": [],
                "usage": {"prompt_tokens": 0, "completion_tokens": count, "total_tokens": count},
            });
            yield Ok(format!("data: {body}\n\n"));
        }
        yield Ok("data: [DONE]\n\n".to_string());
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn error(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
    )
        .into_response()
}
