//! `POST /v1/answer`: the request's rules, and the answer as `text/event-stream` — the
//! pipeline's events, framed, counted in the metrics, with keep-alive comments while the
//! stream is silent.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use sluice_contract::Tenant;
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::filter::Filter;
use sluice_contract::sse::Event;
use sluice_contract::stages::MAX_K;
use sluice_contract::stages::RerankContext;
use sluice_contract::tenant_settings::{MAX_DEADLINE_MS, StoredSettings};
use sluice_contract::usage::day_string;
use sluice_core::Pipeline;
use sluice_core::config::AnswerConfig;
use sluice_core::pipeline::AnswerRequest;
use sluice_core::prompt::Conversation;
use sluice_core::trace::TraceContext;
use sluice_core::{usage::Hold, usage::OverBudget};

use crate::admit::{Caller, admit_reader, limited};
use crate::error::ApiError;
use crate::{Server, StreamDeadline};

/// Longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 4096;

/// Longest accepted `session_id`.
const MAX_SESSION_ID_CHARS: usize = 128;

/// Reads the whole body, refusing (413) more than `limit` bytes.
pub(crate) async fn read_body(
    server: &Server,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let within = server.limits.body_timeout;
    let too_large = || {
        ApiError::new(
            Code::BodyTooLarge,
            format!("request body is larger than {limit} bytes"),
        )
    };
    // A client that sends its body a byte at a time holds a task and a connection: the
    // whole body has `within` to arrive.
    let read = tokio::time::timeout(within, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| {
            ApiError::new(
                Code::BodyTimeout,
                format!(
                    "the request body did not arrive within {within:?} (SLUICE_BODY_READ_TIMEOUT_MS)"
                ),
            )
        })?;
    read.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if s.is::<http_body_util::LengthLimitError>() {
                return too_large();
            }
            source = s.source();
        }
        ApiError::new(
            Code::UnreadableBody,
            format!("could not read the request body: {e}"),
        )
    })
}

/// Parses JSON, naming the problem (syntax, or a field of the wrong type) in the message.
pub(crate) fn parse_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            Code::InvalidJson,
            format!("request body is not valid JSON for this route: {e}"),
        )
    })
}

/// The body of `POST /v1/answer` (and the `sluice` options of a chat completion).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    pub(crate) query: Option<String>,
    pub(crate) k: Option<serde_json::Value>,
    pub(crate) session_id: Option<String>,
    pub(crate) retrieval_deadline_ms: Option<u64>,
    pub(crate) cache: Option<String>,
    #[serde(default)]
    pub(crate) include_prompt: bool,
    /// A metadata filter ([`Filter`]), checked here.
    pub(crate) filter: Option<serde_json::Value>,
    /// What the tenant's rerank component reads ([`RerankContext`]), checked here.
    pub(crate) rerank_context: Option<serde_json::Value>,
    /// Whether `meta` carries the extract (default: the tenant's setting, else
    /// `SLUICE_EXTRACT`).
    pub(crate) extract: Option<bool>,
}

/// Parses and validates the body of `POST /v1/answer` (with its `Cache-Control` and
/// `traceparent` headers) into a pipeline request for `tenant`, whose key may bind a filter
/// (`key_filter`, ANDed with the one the body sends); defaults from the tenant's `settings`,
/// else from `config`. Request bodies are untrusted input: this is fuzzed (`fuzz/`).
pub fn answer_request(
    config: &AnswerConfig,
    tenant: Tenant,
    key_filter: Option<&Filter>,
    headers: &HeaderMap,
    body: &[u8],
    received: Instant,
    settings: Option<Arc<StoredSettings>>,
) -> Result<AnswerRequest, ApiError> {
    let body: AnswerBody = parse_json(body)?;
    checked_request(
        config, tenant, key_filter, headers, body, received, settings,
    )
}

/// Checks an answer body already parsed (the answer route's, or a chat completion's question
/// with its `sluice` options) into a pipeline request for `tenant`. The effective filter is
/// the key's AND the body's: a request can narrow what its key sees, never widen it. What the
/// body leaves out comes from the tenant's `settings`, else from `config`.
pub(crate) fn checked_request(
    config: &AnswerConfig,
    tenant: Tenant,
    key_filter: Option<&Filter>,
    headers: &HeaderMap,
    body: AnswerBody,
    received: Instant,
    settings: Option<Arc<StoredSettings>>,
) -> Result<AnswerRequest, ApiError> {
    let own = settings.as_ref().map(|s| &s.settings);
    let query = body
        .query
        .ok_or_else(|| ApiError::new(Code::MissingQuery, "\"query\" is required"))?;
    let query = query.trim().to_string();
    if query.is_empty() {
        return Err(ApiError::new(Code::EmptyQuery, "\"query\" is empty"));
    }
    let chars = query.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(ApiError::new(
            Code::QueryTooLong,
            format!("\"query\" has {chars} characters; the limit is {MAX_QUERY_CHARS}"),
        ));
    }
    let k = match body.k {
        None => own.and_then(|s| s.k).unwrap_or(config.top_k),
        Some(k) => match k.as_u64() {
            Some(n) if (1..=MAX_K as u64).contains(&n) => n as usize,
            _ => {
                return Err(ApiError::new(
                    Code::InvalidK,
                    format!("\"k\" is {k}; it must be a whole number from 1 to {MAX_K}"),
                ));
            }
        },
    };
    if let Some(s) = &body.session_id
        && (s.is_empty() || s.chars().count() > MAX_SESSION_ID_CHARS)
    {
        return Err(ApiError::new(
            Code::InvalidSessionId,
            format!("\"session_id\" must have 1 to {MAX_SESSION_ID_CHARS} characters"),
        ));
    }
    let retrieval_deadline = match body.retrieval_deadline_ms {
        None => (own.and_then(|s| s.retrieval_deadline_ms))
            .map_or(config.retrieval_deadline, Duration::from_millis),
        Some(ms) if ms <= MAX_DEADLINE_MS => Duration::from_millis(ms),
        Some(ms) => {
            return Err(ApiError::new(
                Code::InvalidDeadline,
                format!("\"retrieval_deadline_ms\" is {ms}; the limit is {MAX_DEADLINE_MS}"),
            ));
        }
    };
    let bypass_cache = match body.cache.as_deref() {
        None | Some("auto") => no_cache(headers),
        Some("bypass") => true,
        Some(other) => {
            return Err(ApiError::new(
                Code::InvalidCache,
                format!("\"cache\" is {other:?}; it must be \"auto\" or \"bypass\""),
            ));
        }
    };
    let sent = match &body.filter {
        None => None,
        Some(value) => Some(
            Filter::parse(value)
                .map_err(|e| ApiError::new(Code::InvalidFilter, format!("\"filter\": {e}")))?,
        ),
    };
    let rerank_context = match &body.rerank_context {
        None => RerankContext::default(),
        Some(value) => RerankContext::parse(value).map_err(|e| {
            ApiError::new(
                Code::InvalidRerankContext,
                format!("\"rerank_context\": {e}"),
            )
        })?,
    };
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    Ok(AnswerRequest {
        tenant,
        query,
        k,
        filter: Filter::and(key_filter, sent.as_ref()),
        binding: key_filter.map(Filter::digest),
        access: None,
        conversation: Conversation::default(),
        max_tokens: None,
        rerank_context,
        session_id: body.session_id,
        retrieval_deadline,
        received,
        bypass_cache,
        trace: TraceContext::from_header(traceparent),
        include_prompt: body.include_prompt,
        ends_by: None,
        show_rerank_failure: false,
        settings,
        extract: body.extract,
    })
}

/// Whether `Cache-Control` says `no-cache` or `no-store`: the request then neither reads
/// nor writes the answer cache.
pub(crate) fn no_cache(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().to_ascii_lowercase())
        .any(|d| d == "no-cache" || d == "no-store")
}

pub(crate) async fn answer(
    State(server): State<Arc<Server>>,
    deadline: Option<axum::Extension<StreamDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let caller = admit_reader(&server, &headers, Permission::Answer).await?;
    let pipeline = server.answers("POST", "/v1/answer")?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let settings = crate::settings::of_tenant(&server, &caller.tenant, received).await;
    let request = answer_request(
        &pipeline.config,
        caller.tenant.clone(),
        caller.filter.as_ref(),
        &headers,
        &bytes,
        received,
        settings,
    )?;
    let events = open_answer(&server, pipeline, &caller, deadline, request)?;
    Ok(sse_response(
        events.map(|e| frame(&e)),
        server.sse_keepalive,
    ))
}

/// An event in SSE's wire format: an `event:` line, one `data:` line with its JSON, and the
/// blank line that ends it.
pub fn frame(event: &Event) -> String {
    format!("event: {}\ndata: {}\n\n", event.name(), event.data())
}

/// Starts answering `request` for `caller` (its key's and its tenant's token budgets and the
/// tenant's stream quota permitting, all checked from memory): the pipeline's events — which
/// end early, with a closing retryable `error`, when the server's drain time is up or the
/// entry point's [`StreamDeadline`] comes — counted in the metrics and the usage as they
/// pass. The stream holds the tenant's stream permit until it ends or is dropped.
pub(crate) fn open_answer(
    server: &Server,
    pipeline: &Arc<Pipeline>,
    caller: &Caller,
    deadline: Option<axum::Extension<StreamDeadline>>,
    request: AnswerRequest,
) -> Result<futures::stream::BoxStream<'static, Event>, ApiError> {
    if request.include_prompt && !caller.may_see_prompt {
        return Err(ApiError::new(
            Code::PermissionDenied,
            "\"include_prompt\" needs an API key with the \"prompt\" permission",
        ));
    }
    // The most one answer can spend: its prompt and completion share the model's window.
    let most = pipeline.config.context_tokens as u64;
    let hold = match &server.usage {
        Some(meter) => meter
            .reserve(
                &caller.tenant,
                caller.key.as_deref(),
                caller.token_budget,
                most,
            )
            .map_err(|over| over_budget(&caller.tenant, over))?,
        None => None,
    };
    let permit = server
        .quotas
        .stream(&caller.tenant)
        .map_err(|l| limited(&caller.tenant, l))?;
    let request = AnswerRequest {
        ends_by: deadline.map(|axum::Extension(StreamDeadline(at))| at),
        ..caller.asks(request)
    };
    Ok(
        answer_stream(server, pipeline, request, caller.key.clone(), hold)
            .map(move |e| {
                let _held = &permit;
                e
            })
            .boxed(),
    )
}

/// `pipeline`'s answer to `request` (asked with the key whose id is `key`), counted in
/// `server`'s metrics and usage as it passes: what every entry point serves (no quota or
/// budget is checked here; [`open_answer`] does that for the routes, and `hold` is what the
/// answer holds against its budgets, released once its usage is recorded). The usage is written
/// after the last event, before the stream ends — so on Lambda before the invocation does —
/// and never delays an event; a stream dropped early has its usage written by a task.
pub fn answer_stream(
    server: &Server,
    pipeline: &Arc<Pipeline>,
    request: AnswerRequest,
    key: Option<String>,
    hold: Option<Hold>,
) -> impl futures::Stream<Item = Event> + Send + 'static {
    let asker = crate::metrics::Asker {
        tenant: request.tenant.clone(),
        key,
        usage: server.usage.clone(),
        hold,
    };
    let usage = server.usage.clone();
    let written = futures::stream::once(async move {
        if let Some(meter) = usage {
            // A failure is logged by the meter, and its counts kept for the next flush.
            let _ = meter.flush().await;
        }
    })
    .filter_map(|()| std::future::ready(None::<Event>));
    crate::metrics::observed(&server.metrics, asker, pipeline.answer(request)).chain(written)
}

/// The 429 of a spent budget, with `Retry-After` at the start of the next month.
pub(crate) fn over_budget(tenant: &Tenant, over: OverBudget) -> ApiError {
    tracing::warn!(%tenant, whose = over.whose, used = over.used, budget = over.budget, "token budget spent");
    let whose = match over.whose {
        "key" => "this API key's".to_string(),
        _ => format!("tenant {tenant:?}'s"),
    };
    ApiError {
        retry_after: Some(over.retry_after()),
        ..ApiError::new(
            Code::BudgetExceeded,
            format!(
                "{whose} monthly token budget is spent: {} of {} tokens used; it starts again on {} (UTC)",
                over.used,
                over.budget,
                day_string(over.resets_on)
            ),
        )
    }
}

/// A `text/event-stream` response of already-framed events, passed on as they come. After
/// `keepalive` without an event (a loaded fleet can take seconds to its first token) an SSE
/// comment line goes out, which clients ignore, so that proxies and load balancers with idle
/// timeouts do not cut the stream; zero sends none.
pub(crate) fn sse_response(
    events: impl futures::Stream<Item = String> + Send + 'static,
    keepalive: Duration,
) -> Response {
    let events = kept_alive(events, keepalive);
    let body = events.map(|e| Ok::<_, Infallible>(Bytes::from(e)));
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell buffering proxies (nginx and the like) to pass events through at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The SSE comment line of [`sse_response`]'s keep-alive.
pub const KEEPALIVE: &str = ": keep-alive\n\n";

/// `events`, with [`KEEPALIVE`] after every `every` of silence (none when zero).
fn kept_alive(
    events: impl futures::Stream<Item = String> + Send + 'static,
    every: Duration,
) -> futures::stream::BoxStream<'static, String> {
    if every.is_zero() {
        return events.boxed();
    }
    async_stream::stream! {
        let mut events = std::pin::pin!(events);
        loop {
            // Waiting for the next event may stop at any time: nothing is lost.
            match tokio::time::timeout(every, events.next()).await {
                Ok(Some(event)) => yield event,
                Ok(None) => break,
                Err(_) => yield KEEPALIVE.to_string(),
            }
        }
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::sse::{ErrorEvent, Token};

    #[test]
    fn an_event_is_one_event_line_one_json_data_line_and_a_blank_line() {
        let e = Event::Token(Token {
            text: "hi\nthere".into(),
            index: 3,
        });
        let wire = frame(&e);
        assert!(wire.ends_with("\n\n"));
        let lines: Vec<&str> = wire.trim_end().lines().collect();
        assert_eq!(lines.len(), 2, "{wire:?}");
        assert_eq!(lines[0], "event: token");
        let data: Token = serde_json::from_str(lines[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data.text, "hi\nthere");
        let error = frame(&Event::Error(ErrorEvent::new(Code::ShuttingDown, "bye")));
        assert_eq!(
            error,
            "event: error\ndata: {\"code\":\"shutting_down\",\"message\":\"bye\",\"retryable\":true}\n\n"
        );
    }
}
