//! `/v1/documents`: documents in (`POST`, as JSON or as a file's bytes), listed and read
//! (`GET`, permission `documents`), deleted (`DELETE`, permission `documents:delete`). A key
//! that binds a filter lists, reads, deletes and writes only the documents that pass it: a
//! document it sends must pass it (403 `outside_key_filter`), and the id of a document outside
//! it is, to that key, an id that does not exist (404 `unknown_document`, never replaced).

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
use sluice_contract::filter::Filter;
use sluice_contract::{document::DEFAULT_PAGE, document::Document, document::MAX_PAGE};
use sluice_contract::{error::IngestError, error::StoreError};
use sluice_convert::Format;

use crate::Server;
use crate::admit::{admit, admit_reader};
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
    let tenant = caller.tenant;
    let ingest = server.ingest()?;
    let bytes = read_body(&server, body, server.limits.max_ingest_bytes).await?;
    let content_type =
        (headers.get(axum::http::header::CONTENT_TYPE)).and_then(|v| v.to_str().ok());
    // A file by its name, or by a Content-Type that names a file format; JSON (and text,
    // which clients send JSON as) without a file name is the `{"documents": [...]}` body.
    let file_type = content_type
        .and_then(Format::from_media_type)
        .filter(|f| !matches!(f, Format::Json | Format::Text));
    if query.access.is_some() && query.filename.is_none() && file_type.is_none() {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "\"access\" goes with a file upload; a JSON document carries its own \
             (metadata._access)",
        ));
    }
    let documents = match (query.filename, file_type) {
        (None, None) => parse_json::<DocumentsBody>(&bytes)?.documents,
        (name, _) => {
            let format = Format::of(name.as_deref(), content_type).ok_or_else(|| {
                ApiError::new(
                    Code::UnsupportedFormat,
                    format!(
                        "{}: unsupported file type (use {}, or a Content-Type that names one)",
                        name.as_deref().unwrap_or("the body"),
                        Format::EXTENSIONS
                    ),
                )
            })?;
            // Without a name, the content names the document: the same file sent again
            // replaces it.
            let name = name.unwrap_or_else(|| {
                let digest = sluice_contract::sha256_hex(&bytes);
                format!("upload-{}.{}", &digest[..16], format.extension())
            });
            let limits = server.convert.clone();
            let mut parsed = sluice_convert::parse_upload(format, name, bytes.to_vec(), limits)
                .await
                .map_err(ingest_refusal)?;
            if let Some(access) = &query.access {
                parsed.iter_mut().for_each(|doc| doc.set_access(access));
            }
            parsed
        }
    };
    match (ingest.ingest_within(&tenant, caller.filter.as_ref(), documents)).await {
        Ok(report) => {
            if let Some(meter) = &server.usage {
                meter.record(
                    &tenant,
                    caller.key.as_deref(),
                    sluice_core::usage::counts_of_ingest(&report),
                );
                // Written before the answer, as an ingest is not latency-bound; a failure
                // keeps the counts for the next flush and is not the client's problem.
                let _ = meter.flush().await;
            }
            let mut value = serde_json::to_value(&report).unwrap_or_default();
            value["elapsed_ms"] = json!(started.elapsed().as_millis() as u64);
            Ok(Json(value).into_response())
        }
        Err(e @ (IngestError::Embed(_) | IngestError::Store(_))) => {
            tracing::error!(%tenant, error = %e, "ingest failed");
            Err(ApiError::new(Code::IngestFailed, e.to_string()))
        }
        Err(e) => Err(ingest_refusal(e)),
    }
}

/// Why an ingest was refused, as clients see it (the model's or the store's failure aside).
fn ingest_refusal(e: IngestError) -> ApiError {
    let code = match &e {
        IngestError::Invalid(_) => Code::InvalidDocument,
        IngestError::Unsupported(_) => Code::UnsupportedFormat,
        IngestError::NoTextLayer(_) => Code::NoTextLayer,
        IngestError::Encrypted(_) => Code::EncryptedDocument,
        IngestError::Unreadable(_) => Code::UnreadableDocument,
        IngestError::TooLarge(_) => Code::IngestTooLarge,
        IngestError::OutsideScope(_) => Code::OutsideKeyFilter,
        // As for reading or deleting it: to this key the id does not exist.
        IngestError::HiddenId(_) => Code::UnknownDocument,
        IngestError::Embed(_) | IngestError::Store(_) => Code::IngestFailed,
    };
    ApiError::new(code, e.to_string())
}

/// What went wrong in a listing or a deletion, as clients see it.
fn store_error(tenant: &sluice_contract::Tenant, e: IngestError) -> ApiError {
    match e {
        IngestError::Invalid(m) | IngestError::Store(StoreError::Invalid(m)) => {
            ApiError::new(Code::InvalidPage, m)
        }
        e => {
            tracing::error!(%tenant, error = %e, "documents: store failed");
            ApiError::new(Code::StoreUnavailable, e.to_string())
        }
    }
}

/// A `filter` sent as JSON text (a query parameter) or as JSON (a body), checked.
fn parse_filter(value: &serde_json::Value) -> Result<Filter, ApiError> {
    Filter::parse(value).map_err(|e| ApiError::new(Code::InvalidFilter, format!("\"filter\": {e}")))
}

/// `GET /v1/documents?limit=N&cursor=C&filter=JSON`: a page of the tenant's documents (those
/// the key may see that pass `filter`), with the cursor of the next page (`null` on the last).
pub(crate) async fn list_documents(
    State(server): State<Arc<Server>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit_reader(&server, &headers, Permission::Documents).await?;
    let ingest = server.ingest()?;
    let Query(params) = params?;
    crate::error::once_each(&params)?;
    let (mut limit, mut cursor, mut filter) = (DEFAULT_PAGE, None, None);
    for (name, value) in &params {
        match name.as_str() {
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        ApiError::new(
                            Code::InvalidPage,
                            format!(
                                "limit must be a whole number from 1 to {MAX_PAGE}, not {value:?}"
                            ),
                        )
                    })?
            }
            "cursor" => cursor = Some(value.as_str()),
            "filter" => {
                let json = serde_json::from_str(value).map_err(|e| {
                    ApiError::new(Code::InvalidFilter, format!("\"filter\" is not JSON: {e}"))
                })?;
                filter = Some(parse_filter(&json)?);
            }
            other => {
                return Err(ApiError::new(
                    Code::InvalidPage,
                    format!("unknown query parameter {other:?} (use limit, cursor, filter)"),
                ));
            }
        }
    }
    let filter = Filter::and(caller.reads().as_ref(), filter.as_ref());
    let page = (ingest
        .list(&caller.tenant, filter.as_ref(), limit, cursor)
        .await)
        .map_err(|e| store_error(&caller.tenant, e))?;
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
    let ingest = server.ingest()?;
    match ingest
        .get(&caller.tenant, caller.reads().as_ref(), &id)
        .await
    {
        Ok(Some(document)) => Ok(Json(document).into_response()),
        Ok(None) => Err(unknown(&id)),
        Err(e) => Err(store_error(&caller.tenant, e)),
    }
}

fn unknown(id: &str) -> ApiError {
    ApiError::new(
        Code::UnknownDocument,
        format!("no document {id:?} for this tenant"),
    )
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
    let ingest = server.ingest()?;
    match ingest
        .delete(&caller.tenant, caller.filter.as_ref(), &id)
        .await
    {
        Ok(Some(report)) => {
            tracing::info!(tenant = %caller.tenant, id, "document deleted");
            Ok(Json(report).into_response())
        }
        Ok(None) => Err(unknown(&id)),
        Err(e) => Err(store_error(&caller.tenant, e)),
    }
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
    let ingest = server.ingest()?;
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
    let filter = Filter::and(caller.filter.as_ref(), sent.as_ref());
    let report = (ingest
        .delete_matching(&caller.tenant, filter.as_ref())
        .await)
        .map_err(|e| store_error(&caller.tenant, e))?;
    tracing::info!(tenant = %caller.tenant, deleted = report.deleted, "documents deleted by filter");
    Ok(Json(report).into_response())
}
