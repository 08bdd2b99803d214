//! `POST /v1/documents`: documents in, as JSON or as a file's bytes.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sluice_core::auth::Permission;
use sluice_core::codes::Code;
use sluice_core::error::IngestError;
use sluice_core::ingest::Document;

use crate::Server;
use crate::admit::admit;
use crate::answer::{parse_json, read_body};
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentsBody {
    documents: Vec<Document>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct DocumentsQuery {
    filename: Option<String>,
}

/// `{"documents": [...]}`, or with `?filename=NAME` the file itself (.txt, .md, .json,
/// .jsonl), read as `sluice ingest` and the ingest function read files.
pub(crate) async fn documents(
    State(server): State<Arc<Server>>,
    axum::extract::Query(query): axum::extract::Query<DocumentsQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let tenant = admit(&server, &headers, Permission::Documents)
        .await?
        .tenant;
    let ingest = server.ingest()?;
    let bytes = read_body(body, server.limits.max_ingest_bytes).await?;
    let documents = match query.filename {
        Some(name) => sluice_core::ingest::parse_file(&name, &bytes)
            .map_err(|e| ApiError::new(Code::InvalidDocument, e.to_string()))?,
        None => parse_json::<DocumentsBody>(&bytes)?.documents,
    };
    match ingest.ingest(&tenant, documents).await {
        Ok(report) => {
            let mut value = serde_json::to_value(&report).unwrap_or_default();
            value["elapsed_ms"] = json!(started.elapsed().as_millis() as u64);
            Ok(Json(value).into_response())
        }
        Err(IngestError::Invalid(message)) => Err(ApiError::new(Code::InvalidDocument, message)),
        Err(IngestError::TooLarge(message)) => Err(ApiError::new(Code::IngestTooLarge, message)),
        Err(e) => {
            tracing::error!(%tenant, error = %e, "ingest failed");
            Err(ApiError::new(Code::IngestFailed, e.to_string()))
        }
    }
}
