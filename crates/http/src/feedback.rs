//! `POST /v1/feedback` and `GET /v1/feedback`: ratings of answers, over the service's
//! operations ([`crate::service::feedback`]); and `GET /v1/insights/gaps`, what the corpus did
//! not answer ([`crate::service::insights`]). Rating needs the `answer` permission (an end
//! user, with their token, rates only their own answers); reading the tenant's ratings and gaps
//! needs `settings`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde_json::Value;
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;

use crate::Server;
use crate::admit::{admit, admit_reader};
use crate::body::{parse_json, read_body};
use crate::error::ApiError;

/// `POST /v1/feedback`.
pub(crate) async fn rate(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let caller = admit_reader(&server, &headers, Permission::Answer).await?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    Ok(Json(server.feedback(&caller, parse_json(&bytes)?).await?))
}

/// `GET /v1/feedback` (`?rating=down`: only down-votes; `&limit=N`, 1 to 10,000, default
/// 1,000).
pub(crate) async fn list(
    State(server): State<Arc<Server>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = admit(&server, &headers, Permission::Settings).await?;
    let bad = |why: String| ApiError::new(Code::InvalidRequest, why);
    let down = match query.get("rating").map(String::as_str) {
        None => false,
        Some("down") => true,
        Some(other) => return Err(bad(format!("rating={other:?}: only \"down\" filters"))),
    };
    let limit = match query.get("limit") {
        None => 1_000,
        Some(n) => (n.parse::<usize>().ok())
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| bad(format!("limit={n:?}: a whole number from 1 to 10000")))?,
    };
    Ok(Json(server.feedback_list(&caller, down, limit).await?))
}

/// `GET /v1/insights/gaps`.
pub(crate) async fn gaps(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let mut caller = admit(&server, &headers, Permission::Settings).await?;
    caller.settings = server.settings_of(&caller.tenant).await?;
    Ok(Json(server.gaps(&caller).await?))
}
