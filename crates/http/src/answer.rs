//! `POST /v1/answer`: the service's answer ([`crate::service::answer`]) as
//! `text/event-stream` — the pipeline's events framed, with keep-alive comments while the
//! stream is silent.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use futures::StreamExt;
use sluice_contract::Tenant;
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_contract::sse::Event;
use sluice_contract::tenant_settings::StoredSettings;
use sluice_core::config::AnswerConfig;
use sluice_core::pipeline::AnswerRequest;

use crate::admit::same_site;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;
use crate::service::answer::{AnswerBody, checked_request};
use crate::{Server, StreamDeadline};

pub use crate::service::answer::MAX_QUERY_CHARS;

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
    let call = crate::admit::call(headers, received, None);
    checked_request(config, tenant, key_filter, &call, body, settings)
}

/// `POST /v1/answer`: the caller admitted, the body read, and the service's answer framed.
pub(crate) async fn answer(
    State(server): State<Arc<Server>>,
    deadline: Option<axum::Extension<StreamDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let call = crate::admit::call(&headers, Instant::now(), deadline.as_deref());
    same_site(&headers)?;
    let caller = server
        .admit_reader(&call.credentials, Permission::Answer)
        .await?;
    server.pipeline()?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let events = server.answer(&caller, &call, parse_json(&bytes)?)?;
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
    use sluice_contract::codes::Code;
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
