//! The OpenAI-compatible surface, for any OpenAI client:
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/chat/completions` | the last user message is the question; the answer streams as `chat.completion.chunk`s (`"stream": true`) or comes whole as a `chat.completion` |
//! | `GET /v1/models` | the one model that answers |
//!
//! It is the same pipeline as `POST /v1/answer` — cache, retrieval under the deadline, rerank,
//! prompt, generation — with the same auth (the client's `api_key` is the Sluice key) and
//! limits. What OpenAI's schema has no field for travels in a `sluice` object: on the final
//! chunk (the one with `finish_reason`) and on the whole completion, `{"request_id",
//! "sources", "extract", "cache", "degraded", "timings", "grounding"}`. Under `strict`
//! grounding a whole completion with a sentence no source supports is refused (422
//! `ungrounded`). Errors have OpenAI's shape,
//! `{"error": {"message", "type", "param", "code"}}`; one during a stream arrives as a chunk
//! of that shape, which OpenAI's clients raise as an error.
//!
//! A conversation is read whole: the last user message is the question; the user and
//! assistant turns before it go to the model (within the prompt budget, the oldest left out
//! first: `history_truncated`), and the last earlier user turn is retrieved with the question
//! so that a follow-up finds what it refers to; system (and `developer`) messages are added
//! to Sluice's instructions. `usage` comes with a whole completion and, with
//! `stream_options.include_usage`, as a last chunk without choices, as OpenAI sends them.
//! `max_tokens` (or `max_completion_tokens`) is honoured up to `SLUICE_MAX_TOKENS`. `model`
//! is accepted whatever it names (the deployment's model answers, and the responses say
//! which); `temperature` and the other sampling fields are accepted and not used.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use sluice_contract::auth::Permission;
use sluice_contract::codes::{Code, Degraded};
use sluice_contract::sse::{Done, ErrorEvent, Event, Meta};
use sluice_contract::stages::{ChatMessage, MAX_BYTES_PER_TOKEN};
use sluice_core::Pipeline;
use sluice_core::pipeline::AnswerRequest;
use sluice_core::prompt::Conversation;

use crate::admit::{admit_reader, same_site};
use crate::answer::sse_response;
use crate::body::read_body;
use crate::error::ApiError;
use crate::service::answer::AnswerBody;
use crate::{Server, StreamDeadline};

/// Longest conversation a chat request may send besides its question: the bytes of its
/// earlier turns and system messages together. Four times what fits the largest usual window
/// (32k tokens of English); what does not fit the model's window is left out, oldest turns
/// first (`history_truncated`), but every byte sent is tokenised, so this bounds that work.
pub const MAX_CONVERSATION_BYTES: usize = 512 << 10;
/// Most messages one chat request may send.
pub const MAX_MESSAGES: usize = 512;

/// An error in OpenAI's shape, with the status and headers (`Retry-After`,
/// `WWW-Authenticate`) of the Sluice error it stands for.
pub(crate) struct OpenAiError(ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

/// OpenAI's error `type` for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        let body = json!({"error": {
            "message": self.0.message,
            "type": error_type(status),
            "param": Value::Null,
            "code": self.0.code,
        }});
        // Keep the Sluice response's headers (Retry-After, WWW-Authenticate).
        let mut response = self.0.into_response();
        *response.body_mut() = Body::from(body.to_string());
        response
    }
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    max_tokens: Option<Value>,
    #[serde(default)]
    max_completion_tokens: Option<Value>,
    /// Sluice's own options: `k`, `retrieval_deadline_ms`, `cache`, `session_id`,
    /// `include_prompt`, as `POST /v1/answer` takes them (and checks them).
    #[serde(default)]
    sluice: Option<AnswerBody>,
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// A chat message (the chat route's, and a search's `messages`).
#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// A message's content: a string, or parts of which the text ones count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// What a chat request asks besides its question: the turns before the question, the
/// client's system messages, and a `max_tokens`.
struct ChatParts {
    conversation: Conversation,
    max_tokens: Option<u32>,
}

/// The turns of `messages` before the last user message, and their system messages, as the
/// pipeline takes them (capped in count and bytes).
pub(crate) fn conversation_of(messages: &[Message]) -> Result<Conversation, ApiError> {
    let sent = messages.len();
    if sent > MAX_MESSAGES {
        return Err(ApiError::new(
            Code::ConversationTooLong,
            format!("{sent} messages; the limit is {MAX_MESSAGES}"),
        ));
    }
    let last_user = messages.iter().rposition(|m| m.role == "user");
    let text = |m: &Message| m.content.as_ref().map(Content::text).unwrap_or_default();
    let system: Vec<String> = messages
        .iter()
        .filter(|m| m.role == "system" || m.role == "developer")
        .map(text)
        .filter(|t| !t.trim().is_empty())
        .collect();
    let history: Vec<ChatMessage> = messages[..last_user.unwrap_or(0)]
        .iter()
        .filter(|m| m.role == "user" || m.role == "assistant")
        .map(|m| ChatMessage::new(&m.role, text(m)))
        .filter(|m| !m.content.trim().is_empty())
        .collect();
    let bytes: usize = (history.iter())
        .map(|m| m.content.len())
        .chain(system.iter().map(String::len))
        .sum();
    if bytes > MAX_CONVERSATION_BYTES {
        return Err(ApiError::new(
            Code::ConversationTooLong,
            format!(
                "the earlier turns and system messages have {bytes} bytes; the limit is \
                 {MAX_CONVERSATION_BYTES} (what does not fit the model's window is left out \
                 anyway, oldest first)"
            ),
        ));
    }
    Ok(Conversation {
        history,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
    })
}

/// Refuses (413 `conversation_too_long`) a request whose system messages and question take
/// more than half of the prompt's token budget, counted before the LLM is asked (on the
/// blocking pool): what the client sends is always sent whole, so it must fit beside the
/// tenant's instructions (at most a quarter), Sluice's rules and at least some sources.
/// Earlier turns are not refused: those that do not fit are left out, oldest first. Text
/// whose floor of tokens is already over is refused uncounted.
async fn fits(pipeline: &Arc<Pipeline>, request: &AnswerRequest) -> Result<(), ApiError> {
    let config = &pipeline.config;
    let output = request.max_tokens_under(config.max_tokens) as usize;
    let most = sluice_core::prompt::input_budget(config.context_tokens, output) / 2;
    let system = request.conversation.system.clone().unwrap_or_default();
    let question = request.query.clone();
    let floor = (system.len() + question.len()) / MAX_BYTES_PER_TOKEN;
    let tokens = match floor > most {
        true => None,
        false => {
            let embedder = Arc::clone(&pipeline.embedder);
            let counting = tokio::task::spawn_blocking(move || {
                embedder.count_tokens(&system) + embedder.count_tokens(&question)
            });
            Some(counting.await.unwrap_or(usize::MAX))
        }
    };
    match tokens {
        Some(tokens) if tokens <= most => Ok(()),
        counted => Err(ApiError::new(
            Code::ConversationTooLong,
            format!(
                "the system messages and the question are {} tokens; they may take {most}, \
                 half of the prompt's budget (SLUICE_LLM_CONTEXT_TOKENS less max_tokens and \
                 a margin)",
                counted.map_or(format!("at least {floor}"), |t| t.to_string()),
            ),
        )),
    }
}

/// The question `messages` ask: the last user message's text.
pub(crate) fn question_of(messages: &[Message]) -> Result<String, ApiError> {
    (messages.iter().rev())
        .find(|m| m.role == "user")
        .and_then(|m| m.content.as_ref())
        .map(Content::text)
        .ok_or_else(|| {
            ApiError::new(
                Code::MissingQuery,
                "\"messages\" has no user message to answer",
            )
        })
}

/// The turns before the last user message and the system messages, as the pipeline takes
/// them; `max_tokens` (or its newer name) checked.
fn chat_parts(request: &ChatRequest) -> Result<ChatParts, ApiError> {
    let conversation = conversation_of(&request.messages)?;
    let max_tokens = match request
        .max_completion_tokens
        .as_ref()
        .or(request.max_tokens.as_ref())
    {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => {
                return Err(ApiError::new(
                    Code::InvalidMaxTokens,
                    format!("\"max_tokens\" is {v}; it must be a whole number from 1"),
                ));
            }
        },
    };
    Ok(ChatParts {
        conversation,
        max_tokens,
    })
}

/// The question a chat request asks — its last user message — with the `sluice` options, as
/// an `/v1/answer` body. Refuses what cannot be answered here.
fn answer_body(bytes: &[u8]) -> Result<(ChatRequest, AnswerBody), ApiError> {
    let mut request: ChatRequest = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            Code::InvalidJson,
            format!("request body is not a valid chat completion request: {e}"),
        )
    })?;
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::new(
            Code::InvalidN,
            "\"n\" must be 1: Sluice gives one answer per request",
        ));
    }
    let question = question_of(&request.messages)?;
    let mut body = request.sluice.take().unwrap_or_default();
    if body.query.is_some() {
        return Err(ApiError::new(
            Code::InvalidJson,
            "\"sluice\" may not carry \"query\": the last user message is the question",
        ));
    }
    body.query = Some(question);
    Ok((request, body))
}

/// Seconds since the epoch, for `created`.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `sluice` extension: sources and how the answer was made (why the tenant's component
/// failed only where `meta` says it).
fn extension(meta: &Meta, done: &Done) -> Value {
    let degraded: Vec<Degraded> = (meta.degraded.iter().chain(&done.degraded))
        .copied()
        .collect();
    let mut extension = json!({
        "request_id": meta.request_id,
        "sources": meta.documents,
        "cache": meta.cache,
        "degraded": degraded,
        "rerank_dropped": meta.rerank_dropped,
        "timings": done.timings,
        "cached": done.cached,
    });
    if let Some(extract) = &meta.extract {
        extension["extract"] = json!(extract);
    }
    if let Some(grounding) = &done.grounding {
        extension["grounding"] = json!(grounding);
    }
    if let Some(failure) = &meta.rerank_error {
        extension["rerank_error"] = json!(failure);
    }
    // Asked for with `"sluice": {"include_prompt": true}` (and a key that may see it).
    if let Some(prompt) = &meta.prompt {
        extension["prompt"] = json!(prompt);
    }
    extension
}

/// Why a whole completion is refused under `strict` grounding.
fn ungrounded(done: &Done) -> String {
    let (unsupported, sentences) = done
        .grounding
        .as_ref()
        .map_or((0, 0), |g| (g.unsupported, g.sentences.len()));
    format!(
        "the answer was refused: {unsupported} of its {sentences} sentences are not supported by \
         the sources (the tenant's grounding check is strict)"
    )
}

/// OpenAI's `usage` of an answer: the prompt's tokens (the upstream's count, else Sluice's
/// estimate; 0 from the cache) and the completion's.
fn usage(done: &Done) -> Value {
    json!({
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.token_count,
        "total_tokens": done.prompt_tokens + done.token_count,
    })
}

/// An error event mid-stream in OpenAI's error shape.
fn stream_error(e: &ErrorEvent) -> Value {
    json!({"error": {
        "message": e.message,
        "type": "server_error",
        "param": Value::Null,
        "code": e.code,
        "retryable": e.retryable,
    }})
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(server): State<Arc<Server>>,
    deadline: Option<axum::Extension<StreamDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    let call = crate::admit::call(&headers, Instant::now(), deadline.as_deref());
    same_site(&headers)?;
    let caller = server
        .admit_reader(&call.credentials, Permission::Answer)
        .await?;
    let pipeline = server.pipeline()?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let (chat, answer) = answer_body(&bytes)?;
    let parts = chat_parts(&chat)?;
    let mut request = server.request(&caller, &call, answer)?;
    request.conversation = parts.conversation;
    request.max_tokens = parts.max_tokens;
    fits(pipeline, &request).await?;
    let events = server.open_answer(&caller, &call, request)?;
    let created = now();
    if chat.stream {
        let usage = chat.stream_options.is_some_and(|o| o.include_usage);
        Ok(sse_response(
            stream_chunks(events, created, usage),
            server.sse_keepalive,
        ))
    } else {
        whole(events, created).await
    }
}

/// The pipeline's events as `chat.completion.chunk` SSE lines, ending with `data: [DONE]`
/// (or an error chunk).
fn stream_chunks(
    events: futures::stream::BoxStream<'static, Event>,
    created: u64,
    include_usage: bool,
) -> impl futures::Stream<Item = String> + Send + 'static {
    let mut meta: Option<Box<Meta>> = None;
    let chunk = move |meta: &Meta, choices: Value| {
        json!({
            "id": format!("chatcmpl-{}", meta.request_id),
            "object": "chat.completion.chunk",
            "created": created,
            "model": meta.model_id,
            "choices": choices,
        })
    };
    let line = |chunk: Value| format!("data: {chunk}\n\n");
    events.filter_map(move |event| {
        let out = match event {
            Event::Meta(m) => {
                let first = chunk(
                    &m,
                    json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
                );
                meta = Some(m);
                Some(line(first))
            }
            Event::Token(t) => meta.as_deref().map(|m| {
                line(chunk(
                    m,
                    json!([{"index": 0, "delta": {"content": t.text}, "finish_reason": null}]),
                ))
            }),
            Event::Done(d) => meta.as_deref().map(|m| {
                let mut last = chunk(
                    m,
                    json!([{"index": 0, "delta": {}, "finish_reason": d.finish_reason}]),
                );
                last["sluice"] = extension(m, &d);
                let mut out = line(last);
                // As OpenAI sends it: a last chunk with no choices and the usage.
                if include_usage {
                    let mut totals = chunk(m, json!([]));
                    totals["usage"] = usage(&d);
                    out.push_str(&line(totals));
                }
                out.push_str("data: [DONE]\n\n");
                out
            }),
            Event::Error(e) => Some(line(stream_error(&e))),
        };
        futures::future::ready(out)
    })
}

/// The whole answer as one `chat.completion`, sent once the answer stream has ended (its
/// cache write included); an error before the end is an error response (the tokens before it
/// are dropped: a partial answer would pass for a complete one).
async fn whole(
    mut events: futures::stream::BoxStream<'static, Event>,
    created: u64,
) -> Result<Response, OpenAiError> {
    let mut meta = None;
    let mut text = String::new();
    while let Some(event) = events.next().await {
        match event {
            Event::Meta(m) => meta = Some(m),
            Event::Token(t) => text.push_str(&t.text),
            // The stream's code, with its status (504 for a timeout, 503 for an unavailable
            // upstream or a server shutting down, 502 for an upstream that misbehaved).
            Event::Error(e) => return Err(ApiError::new(e.code, e.message).into()),
            Event::Done(d) => {
                let Some(m) = meta else { break };
                // The stream ends once its cache write has finished (see `Pipeline::answer`):
                // answering before that would leave the write to be frozen with a Lambda
                // invocation that is over.
                while events.next().await.is_some() {}
                if d.degraded.contains(&Degraded::Ungrounded) {
                    return Err(ApiError::new(Code::Ungrounded, ungrounded(&d)).into());
                }
                let body = json!({
                    "id": format!("chatcmpl-{}", m.request_id),
                    "object": "chat.completion",
                    "created": created,
                    "model": m.model_id,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": d.finish_reason,
                    }],
                    "usage": usage(&d),
                    "sluice": extension(&m, &d),
                });
                return Ok(Json(body).into_response());
            }
        }
    }
    Err(ApiError::new(Code::LlmStreamFailed, "the answer ended without finishing").into())
}

/// `GET /v1/models`.
pub(crate) async fn models(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Response, OpenAiError> {
    admit_reader(&server, &headers, Permission::Answer).await?;
    let pipeline = server.pipeline()?;
    let mut response = Json(json!({
        "object": "list",
        "data": [{
            "id": pipeline.llm.model_id(),
            "object": "model",
            "created": 0,
            "owned_by": "sluice",
        }],
    }))
    .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}
