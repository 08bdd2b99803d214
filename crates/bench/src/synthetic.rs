//! A synthetic OpenAI-compatible chat upstream: a **benchmark fixture, not a model**. It
//! answers `POST /v1/chat/completions` (streaming only) at a fixed rate, so that load tests of
//! Sluice are not bounded by an LLM: with numbered placeholder tokens, whatever the prompt
//! ([`Answers::Placeholders`]), or with the sentence of the prompt's sources that shares most
//! words with the question, cited ([`Answers::Sources`]: an answer Sluice's grounding check
//! supports, so the whole pipeline — verdict, cache — can be tried without a model).
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

/// What the fixture answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Answers {
    /// Numbered placeholder tokens (` t0 t1 …`), whatever the prompt: never grounded, never
    /// cached; what load tests measure Sluice with.
    #[default]
    Placeholders,
    /// The sentence of the prompt's sources that shares most words with the question, cited
    /// as `[n]` ([`from_sources`]), a word a token.
    Sources,
}

/// How the fixture streams.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Settings {
    /// Tokens per second of every stream (each stream alone; streams do not share a budget).
    #[arg(long, default_value_t = 50.0)]
    pub tokens_per_sec: f64,
    /// Tokens of an answer that its `max_tokens` does not cut (placeholders).
    #[arg(long, default_value_t = 128)]
    pub tokens: u32,
    /// What it answers.
    #[arg(long, value_enum, default_value_t)]
    pub answers: Answers,
}

impl Settings {
    fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.tokens_per_sec.max(1e-3))
    }
}

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: String,
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
    let answers = match settings.answers {
        Answers::Placeholders => format!("{} placeholder tokens", settings.tokens),
        Answers::Sources => "the sources' sentence nearest the question, cited,".into(),
    };
    eprintln!(
        "synthetic LLM fixture (a benchmark fixture, not a model) on http://{}/v1: {answers} at \
         {} tokens/s per stream",
        listener.local_addr().map_err(failed)?,
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
    let words: Vec<String> = match settings.answers {
        Answers::Placeholders => (0..settings.tokens).map(|i| format!(" t{i}")).collect(),
        Answers::Sources => {
            let asked = request.messages.iter().rev().find(|m| m.role == "user");
            let answer = from_sources(asked.map_or("", |m| m.content.as_str()));
            answer.split(' ').map(|w| format!(" {w}")).collect()
        }
    };
    let count = (words.len() as u32).min(limit);
    let finish = if (limit as usize) < words.len() {
        "length"
    } else {
        "stop"
    };
    // About four characters a token, as an English tokenizer makes them: not the model's
    // count, which this fixture has no tokenizer for.
    let prompt_chars: usize = request.messages.iter().map(|m| m.content.len()).sum();
    let prompt_tokens = prompt_chars.div_ceil(4);
    let usage = request.stream_options.is_some_and(|o| o.include_usage);
    let interval = settings.interval();
    let events = async_stream::stream! {
        yield Ok::<_, Infallible>(chunk(json!({"role": "assistant", "content": ""}), None));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        // Never faster than the set rate: a late tick (a busy machine) delays the next ones
        // rather than letting them catch up in a burst.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for word in words.iter().take(count as usize) {
            ticks.tick().await;
            yield Ok(chunk(json!({"content": word}), None));
        }
        yield Ok(chunk(json!({}), Some(finish)));
        if usage {
            let body = json!({
                "id": "chatcmpl-synthetic",
                "object": "chat.completion.chunk",
                "model": MODEL_ID,
                "choices": [],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                          "total_tokens": prompt_tokens + count as usize},
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

/// What [`Answers::Sources`] answers to a user message laid out as Sluice's prompt lays it out
/// (`Sources:`, then `[n] title` and its text for each source, then `Question: …`): the
/// sentence of the sources that holds most of the question's words (of four letters or more;
/// the first on a tie), cited as `[n]`; without sources, or with none sharing a word, that the
/// documents do not say.
pub fn from_sources(user: &str) -> String {
    let (sources, question) = match user.rsplit_once("Question: ") {
        Some((sources, question)) => (sources.strip_prefix("Sources:").unwrap_or(""), question),
        None => ("", user),
    };
    let words = |text: &str| -> std::collections::HashSet<String> {
        (text.split(|c: char| !c.is_alphanumeric()))
            .filter(|w| w.chars().count() >= 4)
            .map(str::to_lowercase)
            .collect()
    };
    let asked = words(question);
    let (mut best, mut best_shared) = (None, 0);
    let mut number = None;
    for line in sources.lines() {
        let cited = (line.strip_prefix('[').and_then(|l| l.split_once("] ")))
            .and_then(|(n, _)| n.parse::<usize>().ok());
        if cited.is_some() {
            // A source's first line is its number and title; its text follows.
            number = cited;
            continue;
        }
        let Some(n) = number else { continue };
        for sentence in line.split_inclusive(['.', '!', '?']) {
            let shared = words(sentence).intersection(&asked).count();
            if shared > best_shared {
                (best, best_shared) = (Some((sentence.trim().to_string(), n)), shared);
            }
        }
    }
    match best {
        Some((sentence, n)) => {
            let sentence = sentence.trim_end_matches(['.', '!', '?']);
            format!("{sentence} [{n}].")
        }
        None => "I could not find this in the documents.".to_string(),
    }
}
