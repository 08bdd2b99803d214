//! Documents: in (JSON documents, or a file converted by its format — the same operation for
//! `POST /v1/documents` and an S3 upload), listed, read and deleted. A key that binds a filter
//! lists, reads, deletes and writes only the documents that pass it: a document it sends must
//! pass it (403 `outside_key_filter`), and the id of a document outside it is, to that key, an
//! id that does not exist (404 `unknown_document`, never replaced).

use std::sync::Arc;

use sluice_contract::Tenant;
use sluice_contract::codes::Code;
use sluice_contract::document::{DEFAULT_PAGE, DeleteReport, Document, IngestReport, MAX_PAGE};
use sluice_contract::error::{IngestError, StoreError};
use sluice_contract::filter::Filter;
use sluice_contract::stages::{DocumentPage, StoredDocument};
use sluice_core::Ingest;

use super::Caller;
use crate::Server;
use crate::error::ApiError;

/// What is sent to be ingested.
pub enum Upload {
    /// Documents as JSON.
    Documents(Vec<Document>),
    /// A file, converted by its format (named by `name`'s extension, else `media_type`).
    File {
        /// Its name (without one, the content names the document: the same file sent again
        /// replaces it).
        name: Option<String>,
        /// The `Content-Type` it came with.
        media_type: Option<String>,
        /// Its bytes.
        bytes: Vec<u8>,
        /// Its documents' access list ([`sluice_contract::access::access_list`]'s form).
        access: Option<String>,
    },
}

/// Who an ingest is for: a caller admitted with the `documents` permission, or an upload
/// to the tenant's folder of the document bucket (no key; its origin the object).
pub struct Writer<'a> {
    /// The tenant the documents are for.
    pub tenant: &'a Tenant,
    /// The key's id, under which the usage is counted.
    pub key: Option<&'a str>,
    /// The key's filter, which every document must pass.
    pub filter: Option<&'a Filter>,
    /// Where the documents came from (`s3://bucket/key`): a later version of the same origin
    /// replaces them, and its removal deletes them.
    pub origin: Option<&'a str>,
}

impl<'a> From<&'a Caller> for Writer<'a> {
    fn from(caller: &'a Caller) -> Self {
        Self {
            tenant: &caller.tenant,
            key: caller.key.as_deref(),
            filter: caller.filter.as_ref(),
            origin: None,
        }
    }
}

/// A page of a listing, as asked.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Documents per page (1 to [`MAX_PAGE`]; default [`DEFAULT_PAGE`]).
    pub(crate) limit: Option<usize>,
    /// Where the last page ended.
    pub(crate) cursor: Option<String>,
    /// Only the documents that pass it (within what the caller may read).
    pub(crate) filter: Option<Filter>,
}

impl Server {
    /// The document path, or the 404 of a process that serves no documents (another
    /// function does).
    pub fn ingest(&self) -> Result<&Arc<Ingest>, ApiError> {
        (self.ingest.as_ref()).ok_or_else(|| {
            ApiError::new(
                Code::NotFound,
                "this process does not serve documents (the ingest function does)",
            )
        })
    }

    /// Ingests `upload` for `writer`: a file converted first (under the conversion's caps and
    /// time budget), then chunked, embedded and stored, counted in the usage (written before
    /// it returns: an ingest is not latency-bound). A refusal is the upload's fault, except
    /// `ingest_failed` (the model or the store failed), which a retry may fix.
    pub async fn ingest_upload(
        &self,
        writer: Writer<'_>,
        upload: Upload,
    ) -> Result<IngestReport, ApiError> {
        let ingest = self.ingest()?;
        let documents = match upload {
            Upload::Documents(documents) => documents,
            Upload::File {
                name,
                media_type,
                bytes,
                access,
            } => {
                let converter = self.converter.as_ref().ok_or_else(|| {
                    ApiError::new(
                        Code::UnsupportedFormat,
                        "this process reads no files (the ingest function does)",
                    )
                })?;
                let mut parsed = (converter.convert(name, media_type.as_deref(), bytes).await)
                    .map_err(|e| ApiError::of(&e))?;
                if let Some(access) = &access {
                    parsed.iter_mut().for_each(|doc| doc.set_access(access));
                }
                parsed
            }
        };
        let written = match writer.origin {
            Some(origin) => {
                ingest
                    .ingest_from(writer.tenant, documents, Some(origin))
                    .await
            }
            None => (ingest.ingest_within(writer.tenant, writer.filter, documents)).await,
        };
        let report = written.map_err(|e| {
            if matches!(e, IngestError::Embed(_) | IngestError::Store(_)) {
                tracing::error!(tenant = %writer.tenant, error = %e, "ingest failed");
            }
            ApiError::of(&e)
        })?;
        if let Some(meter) = &self.usage {
            let counted = sluice_core::usage::counts_of_ingest(&report);
            meter.record(writer.tenant, writer.key, counted);
            // A failure keeps the counts for the next flush and is not the client's problem.
            let _ = meter.flush().await;
        }
        Ok(report)
    }

    /// Deletes every document read from `origin` (an object of the document bucket that was
    /// removed), a thousand a call until none is left, each call bumping the tenant's corpus
    /// version: the documents deleted, and the version after the last.
    pub async fn forget_origin(
        &self,
        tenant: &Tenant,
        origin: &str,
    ) -> Result<(usize, u64), ApiError> {
        let ingest = self.ingest()?;
        let mut total = 0;
        loop {
            let done = (ingest.delete_origin(tenant, origin).await).map_err(|e| {
                tracing::error!(%tenant, origin, error = %e, "deleting an origin's documents failed");
                ApiError::new(Code::StoreUnavailable, e.to_string())
            })?;
            total += done.deleted;
            if !done.more {
                return Ok((total, done.corpus_version));
            }
        }
    }

    /// A page of the documents `caller` may read that pass `listing`'s filter, with the
    /// cursor of the next page.
    pub(crate) async fn list_documents(
        &self,
        caller: &Caller,
        listing: Listing,
    ) -> Result<DocumentPage, ApiError> {
        let ingest = self.ingest()?;
        let limit = listing.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ApiError::new(
                Code::InvalidPage,
                format!("limit must be a whole number from 1 to {MAX_PAGE}, not {limit}"),
            ));
        }
        let filter = Filter::and(caller.manages().as_ref(), listing.filter.as_ref());
        (ingest.list(
            &caller.tenant,
            filter.as_ref(),
            limit,
            listing.cursor.as_deref(),
        ))
        .await
        .map_err(|e| store_error(&caller.tenant, e))
    }

    /// The document `id`, if `caller` may read it (404 `unknown_document` otherwise).
    pub(crate) async fn get_document(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<StoredDocument, ApiError> {
        let ingest = self.ingest()?;
        match (ingest.get(&caller.tenant, caller.manages().as_ref(), id)).await {
            Ok(Some(document)) => Ok(document),
            Ok(None) => Err(unknown(id)),
            Err(e) => Err(store_error(&caller.tenant, e)),
        }
    }

    /// Deletes every chunk of the document `id`, if `caller` may see it; the corpus version
    /// is bumped, so no cached answer built on it is served again.
    pub(crate) async fn delete_document(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<DeleteReport, ApiError> {
        let ingest = self.ingest()?;
        match (ingest.delete(&caller.tenant, caller.manages().as_ref(), id)).await {
            Ok(Some(report)) => {
                tracing::info!(tenant = %caller.tenant, id, "document deleted");
                Ok(report)
            }
            Ok(None) => Err(unknown(id)),
            Err(e) => Err(store_error(&caller.tenant, e)),
        }
    }

    /// Deletes the documents that pass `filter` (all without one) within what `caller` may
    /// see, up to a thousand a call (`more` says to call again).
    pub(crate) async fn delete_matching(
        &self,
        caller: &Caller,
        filter: Option<&Filter>,
    ) -> Result<DeleteReport, ApiError> {
        let ingest = self.ingest()?;
        let filter = Filter::and(caller.manages().as_ref(), filter);
        let report = (ingest
            .delete_matching(&caller.tenant, filter.as_ref())
            .await)
            .map_err(|e| store_error(&caller.tenant, e))?;
        tracing::info!(tenant = %caller.tenant, deleted = report.deleted, "documents deleted by filter");
        Ok(report)
    }
}

/// A metadata filter sent as JSON, checked.
pub(crate) fn parse_filter(value: &serde_json::Value) -> Result<Filter, ApiError> {
    Filter::parse(value).map_err(|e| ApiError::new(Code::InvalidFilter, format!("\"filter\": {e}")))
}

/// What went wrong in a listing or a deletion, as clients see it.
fn store_error(tenant: &Tenant, e: IngestError) -> ApiError {
    match e {
        // A request the store cannot run as asked: a cursor it never handed out.
        IngestError::Invalid(m) => ApiError::new(Code::InvalidPage, m),
        IngestError::Store(e @ StoreError::Invalid(_)) => ApiError::of(&e),
        e => {
            tracing::error!(%tenant, error = %e, "documents: store failed");
            ApiError::new(Code::StoreUnavailable, e.to_string())
        }
    }
}

/// 404 for a document the caller does not see: it may not exist, or its access list or the
/// key's filter may hide it — the message never says which.
fn unknown(id: &str) -> ApiError {
    ApiError::new(
        Code::UnknownDocument,
        format!(
            "no document {id:?} that this caller may see (the tenant has none by that id, or              the key's filter or the end user's access hides it)"
        ),
    )
}
