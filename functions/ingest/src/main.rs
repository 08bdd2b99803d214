//! The ingest function, with two triggers:
//!
//! - HTTP (API Gateway, function URL): `POST /v1/documents` of the core router, buffered.
//! - S3 `ObjectCreated` on the document bucket: each uploaded `<tenant>/<name>` is read and
//!   ingested by the service's one ingest operation — the one `POST /v1/documents` runs:
//!   converted by its format (its extension, else its `Content-Type`), chunked, embedded and
//!   written to the tenant's store, replacing any document with the same id.
//!   Each document remembers the object it came from (`origin`: `s3://<bucket>/<key>`), and
//!   its access list is the object's `sluice-access` tag, when it has one. `ObjectTagging`
//!   (a tag set or removed) reads the object again, so a changed access list takes effect.
//! - S3 `ObjectRemoved`: the documents the object made are deleted (and the tenant's corpus
//!   version bumped, so that no cached answer built on them is served again).
//! - An upload under the prefix of one of the tenant's S3 sources is written as that source's
//!   sync writes it (its id, metadata, access and version), so that the next sync finds it
//!   unchanged: the event is the fast path, the sync the reconcile of what events missed.
//! - EventBridge's schedule (every minute): the tenants' sources that are due are synced, one
//!   after another, each stopped by the invocation's deadline at the latest — or, with a sync
//!   queue (`SLUICE_SYNC_QUEUE_URL`), each sent to the queue to be started by an invocation of
//!   its own.
//! - SQS (the sync queue, FIFO, a group per source): a due source's start — a sitemap or an S3
//!   prefix listed, what is gone deleted, what is new or changed sent back to the queue in
//!   batches; a walk by links run whole — or a sync's batch, read and added to its report (the
//!   last batch ends the sync). A message that failed for a reason a retry could fix (the
//!   records store) is reported back as failed, for SQS to deliver again.
//!
//! An S3 invocation is asynchronous: a returned error makes Lambda retry it (twice) and then
//! send it to the dead-letter queue. So only what a retry could fix is an error (S3 or the
//! store failing); an upload that can never be ingested (bad tenant prefix, unknown format,
//! too large, invalid documents) is logged and reported as skipped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use aws_lambda_events::s3::S3Event;
use lambda_http::lambda_runtime::{self, LambdaEvent};
use lambda_http::request::LambdaRequest;
use lambda_http::tower::{Service, ServiceExt};
use serde::Serialize;
use serde_json::{Value, json};
use sluice_aws::documents::{self, Documents, ReadError};
use sluice_contract::codes::Code;
use sluice_contract::sources::SyncMessage;
use sluice_http::Server;
use sluice_http::service::documents::{Upload, Writer};
use tracing::{info, warn};

/// What an S3 invocation did, per object.
#[derive(Debug, Serialize)]
struct S3Report {
    ingested: Vec<Ingested>,
    removed: Vec<Removed>,
    skipped: Vec<Skipped>,
    /// Uploads under a source's prefix, written as its sync writes them.
    synced: Vec<Value>,
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

/// Ingests the objects an S3 notification names through the service's ingest — the one
/// `POST /v1/documents` calls — each counted in the tenant's usage (with no key: an upload has
/// none); `Err` only for what a retry could fix.
async fn ingest_uploads(
    server: &Arc<Server>,
    documents: &Documents,
    event: S3Event,
) -> anyhow::Result<S3Report> {
    let mut report = S3Report {
        ingested: vec![],
        removed: vec![],
        skipped: vec![],
        synced: vec![],
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
            let (total, corpus_version) = (server.forget_origin(&upload.tenant, &origin).await)
                .map_err(|e| {
                    anyhow::anyhow!("deleting the documents of {origin}: {}", e.message)
                })?;
            info!(%bucket, %key, tenant = %upload.tenant, documents = total, "upload removed");
            report.removed.push(Removed {
                key,
                tenant: upload.tenant.to_string(),
                documents: total,
                corpus_version,
            });
            continue;
        }
        match server.sync_object(&upload.tenant, &bucket, &key).await {
            Ok(Some(item)) => {
                info!(%bucket, %key, tenant = %upload.tenant, outcome = %item["outcome"], "upload synced as its source's");
                report.synced.push(item);
                continue;
            }
            Ok(None) => {}
            Err(e) => anyhow::bail!("syncing s3://{bucket}/{key}: {}", e.message),
        }
        let max_bytes = server.limits.max_ingest_bytes;
        let object = match documents.read(&bucket, &key, max_bytes).await {
            Ok(o) => o,
            Err(e @ ReadError::TooLarge { .. }) => {
                skip(e.to_string());
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading s3://{bucket}/{key}")),
        };
        let writer = Writer {
            tenant: &upload.tenant,
            key: None,
            filter: None,
            origin: Some(&origin),
        };
        let file = Upload::File {
            name: Some(upload.name.clone()),
            media_type: object.content_type,
            bytes: object.bytes,
            access: object.access,
        };
        match server.ingest_upload(writer, file).await {
            Ok(done) => {
                info!(%bucket, %key, tenant = %upload.tenant, documents = done.documents, unchanged = done.unchanged, chunks = done.chunks, "upload ingested");
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
            Err(e) if e.code == Code::IngestFailed => {
                anyhow::bail!("ingesting s3://{bucket}/{key}: {}", e.message);
            }
            Err(e) => skip(e.message),
        }
    }
    Ok(report)
}

/// Reads the sync queue's messages of an SQS event, in order; the answer SQS reads back
/// (`ReportBatchItemFailures`): the messages to deliver again — the first that failed and every
/// one after it, since a FIFO group's order must hold. A message that is not a sync's is
/// logged and dropped.
async fn read_batches(server: &Arc<Server>, payload: &Value, ends_by: Instant) -> Value {
    let mut failures = Vec::new();
    for record in payload["Records"].as_array().into_iter().flatten() {
        let id = record["messageId"].as_str().unwrap_or_default();
        if !failures.is_empty() {
            failures.push(json!({ "itemIdentifier": id }));
            continue;
        }
        let body = record["body"].as_str().unwrap_or_default();
        let message: SyncMessage = match serde_json::from_str(body) {
            Ok(message) => message,
            Err(e) => {
                warn!(message = id, error = %e, "not a sync message: dropped");
                continue;
            }
        };
        match server.sync_message(message, Some(ends_by)).await {
            Ok(done) => {
                info!(message = id, status = %done["report"]["status"], "sync message read")
            }
            Err(e) => {
                warn!(message = id, error = %e.message, "sync message failed: delivered again");
                failures.push(json!({ "itemIdentifier": id }));
            }
        }
    }
    json!({ "batchItemFailures": failures })
}

/// What a sync's invocation leaves itself after its syncs or batches, to write their reports.
const DEADLINE_MARGIN: Duration = Duration::from_secs(10);

/// What a sync's invocation without a stated deadline allows itself.
const NO_DEADLINE: Duration = Duration::from_secs(900);

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let server = sluice_app::function("ingest", sluice_app::Role::Documents)
        .await
        .context("building the ingest path")?;
    server.ingest().map_err(|e| anyhow::anyhow!(e.message))?;
    let documents = Arc::new(Documents::connect().await.context("S3 client")?);
    let router = sluice_http::router(Arc::clone(&server));
    let handler = lambda_runtime::service_fn(move |event: LambdaEvent<Value>| {
        let (server, documents, router) = (server.clone(), documents.clone(), router.clone());
        async move {
            let LambdaEvent { payload, context } = event;
            // A sync's time: until a little before the deadline (without a deadline stated,
            // an emulator's, SLUICE_SYNC_TIMEOUT_MS bounds it).
            let left = sluice_app::time_left(context.deadline).unwrap_or(NO_DEADLINE);
            let ends_by = Instant::now() + left.saturating_sub(DEADLINE_MARGIN);
            // EventBridge's schedule: the due syncs.
            if payload["source"] == "aws.events" && payload["detail-type"] == "Scheduled Event" {
                info!(
                    left_ms = left.as_millis() as u64,
                    "scheduled: syncing the due sources"
                );
                let reports = (server.sync_due_until(ends_by).await)
                    .map_err(|e| anyhow::anyhow!(e.message))?;
                return Ok(serde_json::json!({ "syncs": reports }));
            }
            // The sync queue's messages: a due source's start, or a batch of a sync.
            if payload["Records"][0]["eventSource"] == "aws:sqs" {
                return Ok(read_batches(&server, &payload, ends_by).await);
            }
            // An S3 notification has `Records`; anything else is an HTTP event.
            if payload.get("Records").is_some() {
                let event: S3Event = serde_json::from_value(payload).context("S3 event")?;
                let report = ingest_uploads(&server, &documents, event).await?;
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
