//! `/v1/sources`: a tenant's sources and their syncs, over the service's operations
//! ([`crate::service::sources`]). Every route needs the `documents` permission (a sync writes
//! and deletes the tenant's documents); a sync is a `text/event-stream` of `sync`, an `item`
//! per page or object, and `report` (or `error`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use sluice_contract::auth::Permission;

use crate::Server;
use crate::answer::sse_response;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;
use crate::service::Caller;
use crate::service::sources::Trigger;

async fn admitted(server: &Server, headers: &HeaderMap) -> Result<Caller, ApiError> {
    crate::admit::admit(server, headers, Permission::Documents).await
}

/// `GET /v1/sources`.
pub(crate) async fn list(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.sources(&caller).await?))
}

/// `GET /v1/sources/{name}`.
pub(crate) async fn get(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.source(&caller, &name).await?))
}

/// `PUT /v1/sources/{name}`: the source, replaced whole.
pub(crate) async fn put(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let source: Value = parse_json(&bytes)?;
    Ok(Json(server.put_source(&caller, &name, &source).await?))
}

/// `DELETE /v1/sources/{name}` (`?keep_documents=true`: its documents stay).
pub(crate) async fn delete(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    let keep = query.get("keep_documents").is_some_and(|v| v == "true");
    Ok(Json(server.delete_source(&caller, &name, keep).await?))
}

/// `GET /v1/sources/{name}/syncs`.
pub(crate) async fn syncs(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.syncs_of(&caller, &name).await?))
}

/// `POST /v1/sources/{name}/sync`: the sync, streamed as it goes.
pub(crate) async fn sync(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admitted(&server, &headers).await?;
    let events = (server.start_sync(&caller.tenant, &name, Trigger::Manual, None)).await?;
    let framed = events.map(|e| format!("event: {}\ndata: {}\n\n", e.name, e.data));
    Ok(sse_response(framed, server.sse_keepalive).into_response())
}

/// `POST /v1/sources/{name}/sync/cancel`.
pub(crate) async fn cancel(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admitted(&server, &headers).await?;
    Ok(Json(server.cancel_sync(&caller, &name).await?))
}
