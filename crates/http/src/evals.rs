//! `/v1/evals`: a tenant's evaluation sets and runs, over the service's operations
//! ([`crate::service::evals`]). Every route needs the `settings` permission (a run answers as
//! any of the tenant's end users, and its figures judge the tenant's settings); a run is a
//! `text/event-stream` of `run`, `question` per question, and `report` (or `error`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use sluice_contract::auth::Permission;

use crate::answer::sse_response;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;
use crate::service::Caller;
use crate::{Server, StreamDeadline};

/// The caller, admitted to the evaluation routes, with the tenant's settings read (a
/// question is checked as an answer would be, with the tenant's defaults).
async fn admitted(server: &Server, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let mut caller = crate::admit::admit(server, headers, Permission::Settings).await?;
    caller.settings = server.settings_of(&caller.tenant).await?;
    Ok(caller)
}

/// `GET /v1/evals/sets`.
pub(crate) async fn list_sets(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.eval_sets(&caller).await?))
}

/// `GET /v1/evals/sets/{name}`.
pub(crate) async fn get_set(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.eval_set(&caller, &name).await?))
}

/// `PUT /v1/evals/sets/{name}`: the set, replaced whole.
pub(crate) async fn put_set(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let set: Value = parse_json(&bytes)?;
    Ok(Json(server.put_eval_set(&caller, &name, &set).await?))
}

/// `POST /v1/evals/sets/{name}/from-feedback`: the tenant's down-votes that name the source
/// an answer should have come from, added to the set as questions.
pub(crate) async fn set_from_feedback(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.eval_set_from_feedback(&caller, &name).await?))
}

/// `DELETE /v1/evals/sets/{name}`.
pub(crate) async fn delete_set(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.delete_eval_set(&caller, &name).await?))
}

/// `GET /v1/evals/runs` (`?set=`: one set's).
pub(crate) async fn list_runs(
    State(server): State<Arc<Server>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    let set = query.get("set").map(String::as_str);
    Ok(Json(server.eval_runs(&caller, set).await?))
}

/// `GET /v1/evals/runs/{id}`.
pub(crate) async fn get_run(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.eval_run(&caller, &id).await?))
}

/// `POST /v1/evals/runs/{id}/cancel`.
pub(crate) async fn cancel_run(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.cancel_eval_run(&caller, &id)?))
}

/// `POST /v1/evals/runs`: the run, streamed as it goes.
pub(crate) async fn start_run(
    State(server): State<Arc<Server>>,
    deadline: Option<axum::Extension<StreamDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let call = crate::admit::call(&headers, Instant::now(), deadline.as_deref());
    let caller = admitted(&server, &headers).await?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let asked = parse_json(&bytes)?;
    let events = server.start_eval_run(caller, &call, asked).await?;
    let framed = events.map(|e| format!("event: {}\ndata: {}\n\n", e.name, e.data));
    Ok(sse_response(framed, server.sse_keepalive).into_response())
}
