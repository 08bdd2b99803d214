//! The ingest function, with two triggers:
//!
//! - HTTP (API Gateway, function URL): `POST /v1/documents` of the core router, buffered.
//! - S3 `ObjectCreated` on the document bucket: each uploaded `<tenant>/<name>` is read,
//!   parsed by its extension (.txt, .md, .json, .jsonl — as `sluice ingest` does), chunked,
//!   embedded and written to the tenant's store, replacing any document with the same id.
//!   Each document remembers the object it came from (`origin`: `s3://<bucket>/<key>`), and
//!   its access list is the object's `sluice-access` tag, when it has one. `ObjectTagging`
//!   (a tag set or removed) reads the object again, so a changed access list takes effect.
//! - S3 `ObjectRemoved`: the documents the object made are deleted (and the tenant's corpus
//!   version bumped, so that no cached answer built on them is served again).
//!
//! An S3 invocation is asynchronous: a returned error makes Lambda retry it (twice) and then
//! send it to the dead-letter queue. So only what a retry could fix is an error (S3 or the
//! store failing); an upload that can never be ingested (bad tenant prefix, unknown format,
//! too large, invalid documents) is logged and reported as skipped.

use std::sync::Arc;

use anyhow::Context;
use aws_lambda_events::s3::S3Event;
use lambda_http::lambda_runtime::{self, LambdaEvent};
use lambda_http::request::LambdaRequest;
use lambda_http::tower::{Service, ServiceExt};
use serde::Serialize;
use serde_json::Value;
use sluice_aws::documents::{self, Documents, ReadError};
use sluice_contract::error::IngestError;
use sluice_convert::Format;
use sluice_convert::{ConvertLimits, parse_upload};
use sluice_core::Ingest;
use sluice_core::usage::Meter;
use tracing::{info, warn};

/// What an S3 invocation did, per object.
#[derive(Debug, Serialize)]
struct S3Report {
    ingested: Vec<Ingested>,
    removed: Vec<Removed>,
    skipped: Vec<Skipped>,
}

#[derive(Debug, Serialize)]
struct Removed {
    key: String,
    tenant: String,
    documents: usize,
    corpus_version: u64,
}

#[derive(Debug, Serialize)]
struct Ingested {
    key: String,
    tenant: String,
    documents: usize,
    /// Of those, documents stored already exactly as the object holds them (nothing written).
    unchanged: usize,
    chunks: usize,
    /// Documents an earlier version of the object made that this one no longer holds.
    removed: usize,
    corpus_version: u64,
}

#[derive(Debug, Serialize)]
struct Skipped {
    key: String,
    reason: String,
}

/// Ingests the objects an S3 notification names, counting each in the tenant's usage (with
/// no key: an upload has none); `Err` only for what a retry could fix.
async fn ingest_uploads(
    ingest: &Ingest,
    usage: Option<&Meter>,
    max_bytes: usize,
    convert: &ConvertLimits,
    documents: &Documents,
    event: S3Event,
) -> anyhow::Result<S3Report> {
    let mut report = S3Report {
        ingested: vec![],
        removed: vec![],
        skipped: vec![],
    };
    for record in event.records {
        let (Some(bucket), Some(raw_key)) = (record.s3.bucket.name, record.s3.object.key) else {
            continue;
        };
        let event_name = record.event_name.as_deref().unwrap_or_default();
        let (created, removed) = (
            event_name.starts_with("ObjectCreated") || event_name.starts_with("ObjectTagging"),
            event_name.starts_with("ObjectRemoved"),
        );
        if !created && !removed {
            continue;
        }
        let key = documents::decode_key(&raw_key)?;
        let origin = format!("s3://{bucket}/{key}");
        let mut skip = |reason: String| {
            warn!(%bucket, %key, %reason, "upload skipped");
            report.skipped.push(Skipped {
                key: key.clone(),
                reason,
            });
        };
        let Some(upload) = documents::upload(&key) else {
            skip("the key must be <tenant>/<name>, with a valid tenant id first".into());
            continue;
        };
        if removed {
            // Up to a thousand documents per call; an object that made more is deleted over
            // several calls here, each bumping the version.
            let mut total = 0;
            let done = loop {
                let done = (ingest.delete_origin(&upload.tenant, &origin).await)
                    .with_context(|| format!("deleting the documents of {origin}"))?;
                total += done.deleted;
                if !done.more {
                    break done;
                }
            };
            info!(%bucket, %key, tenant = %upload.tenant, documents = total, "upload removed");
            report.removed.push(Removed {
                key,
                tenant: upload.tenant.to_string(),
                documents: total,
                corpus_version: done.corpus_version,
            });
            continue;
        }
        let object = match documents.read(&bucket, &key, max_bytes).await {
            Ok(o) => o,
            Err(e @ ReadError::TooLarge { .. }) => {
                skip(e.to_string());
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading s3://{bucket}/{key}")),
        };
        let Some(format) = Format::of(Some(&upload.name), object.content_type.as_deref()) else {
            skip(format!(
                "{}: unsupported file type (use {}, or a Content-Type that names one)",
                upload.name,
                Format::EXTENSIONS
            ));
            continue;
        };
        let limits = convert.clone();
        let parsed = match parse_upload(format, upload.name.clone(), object.bytes, limits).await {
            Ok(mut d) => {
                if let Some(access) = &object.access {
                    d.iter_mut().for_each(|doc| doc.set_access(access));
                }
                d
            }
            Err(e) => {
                skip(e.to_string());
                continue;
            }
        };
        match ingest
            .ingest_from(&upload.tenant, parsed, Some(&origin))
            .await
        {
            Ok(done) => {
                info!(%bucket, %key, tenant = %upload.tenant, documents = done.documents, unchanged = done.unchanged, chunks = done.chunks, "upload ingested");
                if let Some(meter) = usage {
                    meter.record(
                        &upload.tenant,
                        None,
                        sluice_core::usage::counts_of_ingest(&done),
                    );
                }
                report.ingested.push(Ingested {
                    key,
                    tenant: upload.tenant.to_string(),
                    documents: done.documents,
                    unchanged: done.unchanged,
                    chunks: done.chunks,
                    removed: done.removed,
                    corpus_version: done.corpus_version,
                });
            }
            // What a retry could fix fails the invocation; the rest is the upload's own fault.
            Err(e @ (IngestError::Embed(_) | IngestError::Store(_))) => {
                return Err(e).with_context(|| format!("ingesting s3://{bucket}/{key}"));
            }
            Err(e) => skip(e.to_string()),
        }
    }
    if let Some(meter) = usage {
        // Before the invocation ends; a failure keeps the counts for this environment's next
        // flush (and is logged), it does not fail the uploads.
        let _ = meter.flush().await;
    }
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let server = sluice_app::function("ingest", sluice_app::Role::Documents)
        .await
        .context("building the ingest path")?;
    let ingest = Arc::clone(server.ingest.as_ref().context("the ingest path")?);
    let max_bytes = server.limits.max_ingest_bytes;
    let convert = server.convert.clone();
    let documents = Arc::new(Documents::connect().await.context("S3 client")?);
    let usage = server.usage.clone();
    let router = sluice_http::router(server);
    let handler = lambda_runtime::service_fn(move |event: LambdaEvent<Value>| {
        let (ingest, documents, router) = (ingest.clone(), documents.clone(), router.clone());
        let (usage, convert) = (usage.clone(), convert.clone());
        async move {
            let LambdaEvent { payload, context } = event;
            // An S3 notification has `Records`; anything else is an HTTP event.
            if payload.get("Records").is_some() {
                let event: S3Event = serde_json::from_value(payload).context("S3 event")?;
                let report = ingest_uploads(
                    &ingest,
                    usage.as_deref(),
                    max_bytes,
                    &convert,
                    &documents,
                    event,
                )
                .await?;
                return Ok::<Value, lambda_runtime::Error>(serde_json::to_value(report)?);
            }
            let request: LambdaRequest =
                serde_json::from_value(payload).context("not an S3 or HTTP event")?;
            // lambda_http's own adapter (as `lambda_http::run` uses): event → request,
            // router, response → the event source's response format.
            let mut adapter = lambda_http::Adapter::from(router);
            let response = adapter
                .ready()
                .await?
                .call(LambdaEvent::new(request, context))
                .await?;
            Ok(serde_json::to_value(response)?)
        }
    });
    lambda_runtime::run(handler).await
}
