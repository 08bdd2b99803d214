//! `/v1/documents`: documents in (`POST`, as JSON or as a file's bytes), listed and read
//! (`GET`, permission `documents`), deleted (`DELETE`, permission `documents:delete`) — the
//! service's document operations ([`crate::service::documents`]), read from HTTP.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::document::Document;

use crate::Server;
use crate::admit::{admit, admit_reader};
use crate::body::{parse_json, read_body};
use crate::error::ApiError;
use crate::service::documents::{Listing, Upload, parse_filter};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentsBody {
    documents: Vec<Document>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct DocumentsQuery {
    filename: Option<String>,
    /// An uploaded file's access list ([`sluice_contract::access::access_list`]'s form).
    access: Option<String>,
}

/// `{"documents": [...]}`, or the file itself: with `?filename=NAME` (its extension names the
/// format) or a `Content-Type` that names one (`application/pdf`, `text/html`, …), read as
/// `sluice ingest` and the ingest function read files.
pub(crate) async fn documents(
    State(server): State<Arc<Server>>,
    query: Result<Query<DocumentsQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let caller = admit(&server, &headers, Permission::Documents).await?;
    let Query(query) = query?;
    server.ingest()?;
    let bytes = read_body(&server, body, server.limits.max_ingest_bytes).await?;
    let content_type =
        (headers.get(axum::http::header::CONTENT_TYPE)).and_then(|v| v.to_str().ok());
    // A file by its name, or by a Content-Type that names a file format; JSON (and text,
    // which clients send JSON as) without a file name is the `{"documents": [...]}` body.
    let file_type =
        content_type.filter(|t| (server.converter.as_ref()).is_some_and(|c| c.reads_media_type(t)));
    if query.access.is_some() && query.filename.is_none() && file_type.is_none() {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "\"access\" goes with a file upload; a JSON document carries its own \
             (metadata._access)",
        ));
    }
    let upload = match (query.filename, file_type) {
        (None, None) => Upload::Documents(parse_json::<DocumentsBody>(&bytes)?.documents),
        (name, _) => Upload::File {
            name,
            media_type: content_type.map(str::to_string),
            bytes: bytes.to_vec(),
            access: query.access,
        },
    };
    let report = server.ingest_upload((&caller).into(), upload).await?;
    let mut value = serde_json::to_value(&report).unwrap_or_default();
    value["elapsed_ms"] = json!(started.elapsed().as_millis() as u64);
    Ok(Json(value).into_response())
}

/// `GET /v1/documents?limit=N&cursor=C&filter=JSON`: a page of the tenant's documents (those
/// the key may see that pass `filter`), with the cursor of the next page (`null` on the last).
pub(crate) async fn list_documents(
    State(server): State<Arc<Server>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit_reader(&server, &headers, Permission::Documents).await?;
    server.ingest()?;
    let Query(params) = params?;
    crate::error::once_each(&params)?;
    let mut listing = Listing::default();
    for (name, value) in params {
        match name.as_str() {
            "limit" => {
                listing.limit = Some(value.parse().map_err(|_| {
                    ApiError::new(
                        Code::InvalidPage,
                        format!(
                            "limit must be a whole number from 1 to {}, not {value:?}",
                            sluice_contract::document::MAX_PAGE
                        ),
                    )
                })?)
            }
            "cursor" => listing.cursor = Some(value),
            "filter" => {
                let json = serde_json::from_str(&value).map_err(|e| {
                    ApiError::new(Code::InvalidFilter, format!("\"filter\" is not JSON: {e}"))
                })?;
                listing.filter = Some(parse_filter(&json)?);
            }
            other => {
                return Err(ApiError::new(
                    Code::InvalidPage,
                    format!("unknown query parameter {other:?} (use limit, cursor, filter)"),
                ));
            }
        }
    }
    let page = server.list_documents(&caller, listing).await?;
    Ok(Json(json!({"documents": page.documents, "next_cursor": page.next})).into_response())
}

/// `GET /v1/documents/{id}`: one document (404 `unknown_document` when the tenant has none
/// with that id the key may see).
pub(crate) async fn get_document(
    State(server): State<Arc<Server>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit_reader(&server, &headers, Permission::Documents).await?;
    let Path(id) = id?;
    Ok(Json(server.get_document(&caller, &id).await?).into_response())
}

/// `DELETE /v1/documents/{id}`: every chunk of the document; the corpus version is bumped,
/// so no cached answer built on it is served again.
pub(crate) async fn delete_document(
    State(server): State<Arc<Server>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit(&server, &headers, Permission::DocumentsDelete).await?;
    let Path(id) = id?;
    Ok(Json(server.delete_document(&caller, &id).await?).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteBody {
    filter: Option<serde_json::Value>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    confirm: bool,
}

/// `DELETE /v1/documents` with `{"filter": …, "confirm": true}` (or `{"all": true, "confirm":
/// true}`): the documents that match — within what the key may see — up to a thousand a
/// call (`"more": true` says to call again), counted in the answer.
pub(crate) async fn delete_documents(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = admit(&server, &headers, Permission::DocumentsDelete).await?;
    server.ingest()?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let body: DeleteBody = parse_json(&bytes)?;
    let sent = match (&body.filter, body.all) {
        (Some(filter), false) => Some(parse_filter(filter)?),
        (None, true) => None,
        (Some(_), true) => {
            return Err(ApiError::new(
                Code::InvalidFilter,
                "send \"filter\" or \"all\": true, not both",
            ));
        }
        (None, false) => {
            return Err(ApiError::new(
                Code::ConfirmationRequired,
                "a deletion of many documents needs {\"filter\": …, \"confirm\": true} or {\"all\": true, \"confirm\": true} (one document: DELETE /v1/documents/{id})",
            ));
        }
    };
    if !body.confirm {
        return Err(ApiError::new(
            Code::ConfirmationRequired,
            "deleting every document that matches needs \"confirm\": true",
        ));
    }
    Ok(Json(server.delete_matching(&caller, sent.as_ref()).await?).into_response())
}
