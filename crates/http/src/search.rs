//! `POST /v1/search`: the sources an answer would be built from, as JSON, without the LLM —
//! under the same key permissions (`search`, which `answer` includes), key-bound filter, end
//! user's access, tenant's fusion and rerank component, retrieval deadline and rate limit as
//! the answers, and counted in the usage as `searches`. No token budget is spent.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::search::Found;
use sluice_contract::usage::Counts;

use crate::Server;
use crate::admit::admit_reader;
use crate::answer::{AnswerBody, checked_request, parse_json, read_body};
use crate::error::ApiError;
use crate::openai::{Message, conversation_of, question_of};

/// The body: an answer's retrieval fields, and the question either as `query` or as a
/// conversation's `messages` (the last user message, the earlier turns read for retrieval
/// as the chat route reads them).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchBody {
    query: Option<String>,
    messages: Option<Vec<Message>>,
    k: Option<serde_json::Value>,
    retrieval_deadline_ms: Option<u64>,
    filter: Option<serde_json::Value>,
    rerank_context: Option<serde_json::Value>,
    extract: Option<bool>,
}

pub(crate) async fn search(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Found>, ApiError> {
    let received = Instant::now();
    let caller = admit_reader(&server, &headers, Permission::Search).await?;
    let pipeline = server.answers("POST", "/v1/search")?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let body: SearchBody = parse_json(&bytes)?;
    let (query, conversation) = match (body.query, &body.messages) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                Code::InvalidJson,
                "send \"query\" or \"messages\", not both",
            ));
        }
        (query, None) => (query, Default::default()),
        (None, Some(messages)) => (Some(question_of(messages)?), conversation_of(messages)?),
    };
    let settings = crate::settings::of_tenant(&server, &caller.tenant, received).await;
    let asked = AnswerBody {
        query,
        k: body.k,
        retrieval_deadline_ms: body.retrieval_deadline_ms,
        filter: body.filter,
        rerank_context: body.rerank_context,
        extract: body.extract,
        ..AnswerBody::default()
    };
    let mut request = checked_request(
        &pipeline.config,
        caller.tenant.clone(),
        caller.filter.as_ref(),
        &headers,
        asked,
        received,
        settings,
    )?;
    request.conversation = conversation;
    let found = pipeline.search(&caller.asks(request)).await;
    if let Some(meter) = &server.usage {
        let counted = Counts {
            searches: 1,
            ..Counts::default()
        };
        meter.record(&caller.tenant, caller.key.as_deref(), counted);
        // Written before the response, as a buffered response ends a Lambda invocation and
        // work after it would be frozen (an answer writes its usage after its last event
        // instead). A failure keeps the counts for the next flush and is logged by the meter.
        let _ = meter.flush().await;
    }
    Ok(Json(found))
}
