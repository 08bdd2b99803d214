//! `POST /v1/search`: the sources an answer would be built from, as JSON, without the LLM —
//! the service's search ([`crate::service::answer`]): the same key permissions (`search`,
//! which `answer` includes), key-bound filter, end user's access, tenant's fusion and rerank
//! component, retrieval deadline and rate limit as the answers, counted in the usage as
//! `searches`. No token budget is spent.

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
use sluice_core::prompt::Conversation;

use crate::Server;
use crate::admit::same_site;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;
use crate::openai::{Message, conversation_of, question_of};
use crate::service::answer::AnswerBody;

/// The body: an answer's retrieval fields, and the question either as `query` or as a
/// conversation's `messages` (the last user message, the earlier turns read for retrieval
/// as the chat route reads them).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchBody {
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
    let call = crate::admit::call(&headers, Instant::now(), None);
    same_site(&headers)?;
    let caller = server
        .admit_reader(&call.credentials, Permission::Search)
        .await?;
    server.pipeline()?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let (asked, conversation) = asked(parse_json(&bytes)?)?;
    Ok(Json(
        server.search(&caller, &call, asked, conversation).await?,
    ))
}

/// A search's body as the service asks it: the question (or a conversation's last user
/// message, the earlier turns read for retrieval) with the answer's retrieval fields.
pub(crate) fn asked(body: SearchBody) -> Result<(AnswerBody, Conversation), ApiError> {
    let (query, conversation) = match (body.query, &body.messages) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                Code::InvalidJson,
                "send \"query\" or \"messages\", not both",
            ));
        }
        (query, None) => (query, Conversation::default()),
        (None, Some(messages)) => (Some(question_of(messages)?), conversation_of(messages)?),
    };
    let asked = AnswerBody {
        query,
        k: body.k,
        retrieval_deadline_ms: body.retrieval_deadline_ms,
        filter: body.filter,
        rerank_context: body.rerank_context,
        extract: body.extract,
        ..AnswerBody::default()
    };
    Ok((asked, conversation))
}
