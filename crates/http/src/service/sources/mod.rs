//! A tenant's sources and their syncs. A source (a website, an S3 prefix) is kept in the
//! records store like a set; a sync reconciles what the tenant holds from it with what it
//! holds now:
//!
//! 1. **What is held**: the tenant's documents whose [`SOURCE_KEY`] is the source's name, by
//!    origin (the page's URL, `s3://bucket/key`), each with the [`VERSION_KEY`] it was read at.
//! 2. **What the source holds**: the site walked ([`sluice_fetch::Crawl`]: sitemap or links,
//!    robots, caps, per-host rate, conditional requests) or the prefix listed (ETag and access
//!    tag per object). A page or object whose version is the one held is not read again; one
//!    read is written through the one ingest path ([`Server::ingest_upload`]), where a text
//!    that did not change costs no embedding either.
//! 3. **What is gone**: a page that answers 404 or 410, redirects, asks not to be indexed or
//!    is disallowed, at once; and every held origin a whole listing does not hold — a sitemap
//!    read whole or a prefix listed whole, even when the reading stops early; pages found by
//!    links only once the walk has finished.
//!
//! One sync per source at a time ([`Syncs`] in a process; a record in a shared store across
//! processes); it stops at its time limit (`SLUICE_SYNC_TIMEOUT_MS`), at a cancel, or when its
//! client leaves, keeping what it wrote, and the next starts after where it stopped. Its
//! report is kept ([`REPORTS_KEPT`] per source) and streamed as it goes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::cancel::Cancel;
use sluice_contract::codes::Code;
use sluice_contract::document::MAX_ID_CHARS;
use sluice_contract::evals::{Record, RecordsError, Shelf};
use sluice_contract::filter::Filter;
use sluice_contract::metadata::MetaValue;
use sluice_contract::sources::{
    MAX_SOURCES, REPORTS_KEPT, SOURCE_KEY, Source, SyncBatch, SyncMessage, SyncReport, SyncStatus,
    VERSION_KEY, check_source_name,
};

mod sync;

use sync::{Syncing, item};

use super::Caller;
use super::evals::RunEvent;
use crate::Server;
use crate::error::ApiError;

/// The syncs going in this process, by tenant and source.
#[derive(Default)]
pub(crate) struct Syncs {
    live: Mutex<HashMap<(Tenant, String), Live>>,
}

/// A sync going now.
#[derive(Clone)]
struct Live {
    id: String,
    started_at: String,
    done: Arc<AtomicUsize>,
    cancel: Cancel,
}

/// A source's slot, given back when its sync's stream ends or is dropped.
struct Slot {
    syncs: Arc<Syncs>,
    key: (Tenant, String),
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut live = self.syncs.live.lock().unwrap_or_else(|e| e.into_inner());
        live.remove(&self.key);
    }
}

impl Syncs {
    fn claim(self: &Arc<Self>, tenant: &Tenant, name: &str, sync: Live) -> Result<Slot, ApiError> {
        let key = (tenant.clone(), name.to_string());
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(going) = live.get(&key) {
            return Err(ApiError::new(
                Code::SyncRunning,
                format!(
                    "source {name:?} is being synced ({}, started {}): wait for it, or cancel it",
                    going.id, going.started_at
                ),
            ));
        }
        live.insert(key.clone(), sync);
        Ok(Slot {
            syncs: Arc::clone(self),
            key,
        })
    }

    fn find(&self, tenant: &Tenant, name: &str) -> Option<Live> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.get(&(tenant.clone(), name.to_string())).cloned()
    }
}

/// Why a sync was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Asked for (`POST /v1/sources/{name}/sync`, `sluice sources sync`).
    Manual,
    /// Its schedule came due.
    Schedule,
}

fn invalid(message: impl std::fmt::Display) -> ApiError {
    ApiError::new(Code::InvalidSource, message.to_string())
}

fn unknown(name: &str) -> ApiError {
    ApiError::new(
        Code::UnknownSource,
        format!("the tenant has no source {name:?}"),
    )
}

/// 503 `sources_unavailable` for a records store that failed (its error is logged: it may
/// name files or tables).
fn unavailable(e: RecordsError) -> ApiError {
    tracing::error!(error = %e, "the sources' store failed");
    ApiError::new(
        Code::SourcesUnavailable,
        "the tenant's sources and their reports cannot be read or written right now; try again",
    )
}

/// A new sync's id: the time in ms and this process's count.
fn sync_id() -> String {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    format!("sync-{}-{:04x}", super::now_ms(), n & 0xffff)
}

/// A document's id from where it was read (`host/path?query`, `bucket/key`): ids are the
/// tenant's, so the source's place is in them; one too long keeps its start and a digest.
fn id_of(place: &str) -> String {
    if place.chars().count() <= MAX_ID_CHARS {
        return place.to_string();
    }
    let digest = sluice_contract::sha256_hex(place.as_bytes());
    let start: String = place.chars().take(MAX_ID_CHARS - 18).collect();
    format!("{start}~{}", &digest[..16])
}

impl Server {
    /// The records store and the ingest path a source needs, or 404 `sources_disabled`.
    fn sources_store(&self) -> Result<&Arc<dyn sluice_contract::evals::Records>, ApiError> {
        match (&self.records, &self.ingest) {
            (Some(records), Some(_)) => Ok(records),
            _ => Err(ApiError::new(
                Code::SourcesDisabled,
                "this process keeps no sources (it writes no documents, or has no records store)",
            )),
        }
    }

    /// Stores `body` as the tenant's source `name`, checked whole (at most [`MAX_SOURCES`]).
    pub(crate) async fn put_source(
        &self,
        caller: &Caller,
        name: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let records = self.sources_store()?;
        check_source_name(name).map_err(invalid)?;
        let sync = &self.limits.sync;
        let source = Source::parse(body, sync.max_pages, sync.max_bytes).map_err(invalid)?;
        let tenant = &caller.tenant;
        let kept = (records.list(tenant, Shelf::Sources).await).map_err(unavailable)?;
        if kept.len() >= MAX_SOURCES && !kept.iter().any(|r| r.name == name) {
            return Err(invalid(format!(
                "name: the tenant keeps {MAX_SOURCES} sources, the most it may: delete one first"
            )));
        }
        let body = serde_json::to_value(&source).map_err(invalid)?;
        let record =
            (records.put(tenant, Shelf::Sources, name, body).await).map_err(unavailable)?;
        tracing::info!(%tenant, source = name, version = record.version, "source stored");
        let last = self.reports_of(tenant, name).await?.into_iter().next();
        Ok(self.shown_source(tenant, &record, last.as_ref()))
    }

    /// A source as shown: its record, whether a sync of it is going, and its last sync.
    fn shown_source(&self, tenant: &Tenant, record: &Record, last: Option<&Value>) -> Value {
        json!({
            "name": record.name,
            "version": record.version,
            "updated_at": record.updated_at,
            "source": record.body,
            "syncing": self.syncs.find(tenant, &record.name).map(|l| json!({
                "id": l.id, "started_at": l.started_at, "done": l.done.load(Ordering::SeqCst),
            })),
            "last_sync": last,
        })
    }

    /// The tenant's source `name`.
    pub(crate) async fn source(&self, caller: &Caller, name: &str) -> Result<Value, ApiError> {
        let record = self.source_record(&caller.tenant, name).await?;
        let last = self
            .reports_of(&caller.tenant, name)
            .await?
            .into_iter()
            .next();
        Ok(self.shown_source(&caller.tenant, &record, last.as_ref()))
    }

    async fn source_record(&self, tenant: &Tenant, name: &str) -> Result<Record, ApiError> {
        (self
            .sources_store()?
            .get(tenant, Shelf::Sources, name)
            .await)
            .map_err(unavailable)?
            .ok_or_else(|| unknown(name))
    }

    /// The tenant's sources, by name.
    pub(crate) async fn sources(&self, caller: &Caller) -> Result<Value, ApiError> {
        let records = self.sources_store()?;
        let kept = (records.list(&caller.tenant, Shelf::Sources).await).map_err(unavailable)?;
        let reports = self.reports(&caller.tenant).await?;
        let shown: Vec<Value> = (kept.iter())
            .map(|r| {
                let last = reports.get(&r.name).and_then(|r| r.first());
                self.shown_source(&caller.tenant, r, last)
            })
            .collect();
        Ok(json!({ "sources": shown }))
    }

    /// Deletes the tenant's source `name` and its reports, and — unless `keep_documents` —
    /// the documents synced from it. A sync of it going is canceled first.
    pub(crate) async fn delete_source(
        &self,
        caller: &Caller,
        name: &str,
        keep_documents: bool,
    ) -> Result<Value, ApiError> {
        let records = self.sources_store()?;
        let tenant = &caller.tenant;
        self.source_record(tenant, name).await?;
        if let Some(live) = self.syncs.find(tenant, name) {
            live.cancel.cancel();
        }
        let mut deleted = 0;
        if !keep_documents {
            let ingest = self.ingest()?;
            let filter = of_source(name).map_err(invalid)?;
            loop {
                let done = (ingest.delete_matching(tenant, Some(&filter)).await).map_err(|e| {
                    tracing::error!(%tenant, error = %e, "deleting a source's documents failed");
                    ApiError::new(Code::StoreUnavailable, e.to_string())
                })?;
                deleted += done.deleted;
                if !done.more {
                    break;
                }
            }
        }
        for report in (records.list(tenant, Shelf::Syncs).await).map_err(unavailable)? {
            if report.name.starts_with(&format!("{name}/")) {
                (records.delete(tenant, Shelf::Syncs, &report.name).await).map_err(unavailable)?;
            }
        }
        (records.delete(tenant, Shelf::Sources, name).await).map_err(unavailable)?;
        tracing::info!(%tenant, source = name, documents = deleted, "source deleted");
        Ok(json!({"deleted": name, "documents": deleted}))
    }

    /// The reports of the tenant's syncs kept, by source, newest first (one read of the shelf).
    async fn reports(&self, tenant: &Tenant) -> Result<HashMap<String, Vec<Value>>, ApiError> {
        let records = self.sources_store()?;
        let mut kept = (records.list(tenant, Shelf::Syncs).await).map_err(unavailable)?;
        kept.sort_by(|a, b| b.name.cmp(&a.name));
        let mut by_source: HashMap<String, Vec<Value>> = HashMap::new();
        for record in kept {
            if let Some((source, _)) = record.name.split_once('/') {
                by_source
                    .entry(source.to_string())
                    .or_default()
                    .push(record.body);
            }
        }
        Ok(by_source)
    }

    /// The reports of the source's last syncs, newest first.
    async fn reports_of(&self, tenant: &Tenant, name: &str) -> Result<Vec<Value>, ApiError> {
        Ok(self.reports(tenant).await?.remove(name).unwrap_or_default())
    }

    /// The source's syncs: the one going, then the reports kept, newest first.
    pub(crate) async fn syncs_of(&self, caller: &Caller, name: &str) -> Result<Value, ApiError> {
        self.source_record(&caller.tenant, name).await?;
        let going = self.syncs.find(&caller.tenant, name).map(|l| {
            json!({"id": l.id, "status": SyncStatus::Running, "started_at": l.started_at,
                   "done": l.done.load(Ordering::SeqCst)})
        });
        let mut syncs: Vec<Value> = going.into_iter().collect();
        syncs.extend(self.reports_of(&caller.tenant, name).await?);
        Ok(json!({ "syncs": syncs }))
    }

    /// Cancels the sync of `name`: one going in this process stops after the page or object
    /// in hand, keeps what it wrote and deletes nothing it did not see. One going elsewhere is
    /// marked stopped in the shared store: its batches not read yet are dropped, and a process
    /// reading it whole stops within [`CANCEL_LOOKED_FOR_EVERY`] pages or objects.
    pub(crate) async fn cancel_sync(&self, caller: &Caller, name: &str) -> Result<Value, ApiError> {
        if let Some(live) = self.syncs.find(&caller.tenant, name) {
            live.cancel.cancel();
            return Ok(json!({"canceled": live.id}));
        }
        let newest = self
            .reports_of(&caller.tenant, name)
            .await?
            .into_iter()
            .next();
        let elsewhere = newest.and_then(|r| serde_json::from_value::<SyncReport>(r).ok());
        match elsewhere {
            Some(mut report) if self.running_elsewhere(Some(&json!(report)))?.is_some() => {
                report.status = SyncStatus::Stopped;
                report.cut = Some("the sync was canceled".into());
                report.ended_at = Some(sluice_contract::tenant_settings::now());
                self.keep_report(&caller.tenant, &report).await?;
                Ok(json!({"canceled": report.id}))
            }
            _ => Err(ApiError::new(
                Code::UnknownSource,
                format!("no sync of source {name:?} is going in this process"),
            )),
        }
    }

    /// Starts a sync of the tenant's source `name`: a stream of `sync`, an `item` per page or
    /// object, and `report` (or `error`); the sync stops if the stream is dropped.
    pub(crate) async fn start_sync(
        self: &Arc<Self>,
        tenant: &Tenant,
        name: &str,
        trigger: Trigger,
        ends_by: Option<std::time::Instant>,
    ) -> Result<BoxStream<'static, RunEvent>, ApiError> {
        let record = self.source_record(tenant, name).await?;
        let source: Source = serde_json::from_value(record.body).map_err(invalid)?;
        let live = Live {
            id: sync_id(),
            started_at: sluice_contract::tenant_settings::now(),
            done: Arc::default(),
            cancel: Cancel::new().with_deadline(self.sync_deadline(ends_by)),
        };
        let slot = self.syncs.claim(tenant, name, live.clone())?;
        let last = self.reports_of(tenant, name).await?.into_iter().next();
        if let Some(going) = self.running_elsewhere(last.as_ref())? {
            return Err(ApiError::new(
                Code::SyncRunning,
                format!(
                    "source {name:?} is being synced ({going}, in another process): wait for it"
                ),
            ));
        }
        let mut sync = Syncing::new(
            Arc::clone(self),
            tenant,
            name,
            source,
            trigger,
            &live.started_at,
        );
        sync.report.id = live.id.clone();
        // Where the last sync stopped before the end of its listing, this one starts.
        sync.resume = last
            .filter(|r| r["status"] == json!(SyncStatus::Stopped))
            .and_then(|r| r["resume_after"].as_str().map(str::to_string));
        // A sitemap or a prefix, listed whole here, is read by batches elsewhere where there
        // is a queue; a walk by links cannot be split (its pages come from pages).
        let listed_whole = match (&sync.source.website, &sync.source.s3) {
            (Some(site), _) => site.sitemap.is_some() && site.depth() == 0,
            (_, s3) => s3.is_some(),
        };
        if self.batches.is_some() && listed_whole {
            sync.fanned = Some(Vec::new());
        }
        // Its record says it is going, to the processes that share the store.
        if self.sources_store()?.shared() {
            self.keep_report(tenant, &sync.report).await?;
        }
        tracing::info!(%tenant, source = name, sync = %live.id, ?trigger, "sync started");
        let watch = (self.sources_store()?.shared()).then(|| {
            (
                Arc::clone(self),
                tenant.clone(),
                format!("{name}/{}", live.id),
            )
        });
        let started = std::time::Instant::now();
        Ok(async_stream::stream! {
            let _slot = slot;
            yield RunEvent { name: "sync", data: json!({"id": live.id, "source": sync.report.source, "started_at": live.started_at}) };
            let listed = match sync.load_held().await {
                Err(e) => Err(e),
                Ok(()) => {
                    let (website, s3) = (sync.source.website.clone(), sync.source.s3.clone());
                    let mut items: std::pin::Pin<Box<dyn futures::Stream<Item = Result<Value, String>> + Send + '_>> =
                        match (website, s3) {
                            (Some(site), _) => Box::pin(sync.walk(site, &live)),
                            (_, Some(s3)) => Box::pin(sync.list_objects(s3, &live)),
                            _ => Box::pin(futures::stream::once(async {
                                Err("the source names neither a website nor an S3 prefix".to_string())
                            })),
                        };
                    let mut result = Ok(());
                    let mut seen = 0usize;
                    while let Some(item) = items.next().await {
                        match item {
                            Ok(data) => yield RunEvent { name: "item", data },
                            Err(e) => result = Err(e),
                        }
                        // A cancel from a process sharing the store marks the record.
                        seen += 1;
                        if let Some((server, tenant, key)) = &watch
                            && seen.is_multiple_of(CANCEL_LOOKED_FOR_EVERY)
                            && server.stopped_elsewhere(tenant, key).await.unwrap_or(false)
                        {
                            live.cancel.cancel();
                        }
                    }
                    result
                }
            };
            match listed {
                Err(why) => {
                    sync.report.status = SyncStatus::Failed;
                    sync.report.error = Some(why);
                }
                Ok(()) if sync.report.cut.is_some() => sync.report.status = SyncStatus::Stopped,
                Ok(()) => {
                    // The whole source was seen: what it no longer holds goes.
                    let seen = sync.seen.clone();
                    for data in sync.sweep(&seen, "no longer in the source").await {
                        yield RunEvent { name: "item", data };
                    }
                    sync.report.status = match sync.report.error {
                        Some(_) => SyncStatus::Failed,
                        None => SyncStatus::Done,
                    };
                }
            }
            let report = &mut sync.report;
            report.ms = started.elapsed().as_millis() as u64;
            report.count_listed();
            let fanned = sync.fanned.take().unwrap_or_default();
            let kept = if !fanned.is_empty() && report.status != SyncStatus::Failed {
                // The rest is read by the batches; the last ends the sync.
                report.status = SyncStatus::Running;
                match sync.send_batches(fanned).await {
                    Ok(()) => Ok(()),
                    Err(why) => {
                        sync.report.status = SyncStatus::Failed;
                        sync.report.error = Some(why);
                        sync.report.ended_at = Some(sluice_contract::tenant_settings::now());
                        sync.server.keep_report(&sync.tenant, &sync.report).await
                    }
                }
            } else {
                report.ended_at = Some(sluice_contract::tenant_settings::now());
                sync.server.keep_report(&sync.tenant, &sync.report).await
            };
            let report = sync.report.clone();
            tracing::info!(tenant = %sync.tenant, source = %report.source, sync = %report.id, status = ?report.status, added = report.added, changed = report.changed, unchanged = report.unchanged, deleted = report.deleted, failures = report.failures, batches = ?report.batches, "sync ended here");
            match kept {
                Ok(()) => yield RunEvent { name: "report", data: json!(report) },
                Err(e) => yield RunEvent {
                    name: "error",
                    data: json!({"code": e.code, "message": e.message, "retryable": e.code.retryable()}),
                },
            }
        }
        .boxed())
    }

    /// Whether the record of the sync `key` (`source/id`) says it is no longer running: a
    /// process sharing the store canceled it.
    async fn stopped_elsewhere(&self, tenant: &Tenant, key: &str) -> Result<bool, ApiError> {
        let records = self.sources_store()?;
        let record = (records.get(tenant, Shelf::Syncs, key).await).map_err(unavailable)?;
        Ok(record.is_some_and(|r| r.body["status"] != json!(SyncStatus::Running)))
    }

    /// When a sync started now must stop: after `SLUICE_SYNC_TIMEOUT_MS`, or at `ends_by` (a
    /// Lambda invocation's deadline) when that comes first.
    fn sync_deadline(&self, ends_by: Option<std::time::Instant>) -> std::time::Instant {
        let limit = std::time::Instant::now() + self.limits.sync.timeout;
        ends_by.map_or(limit, |by| by.min(limit))
    }

    /// Starts a scheduled sync of `name` and runs it here to its end: `{tenant, source}` with
    /// its `report` (or `error`); `Err` when it could not start.
    async fn run_sync(
        self: &Arc<Self>,
        tenant: &Tenant,
        name: &str,
        ends_by: Option<std::time::Instant>,
    ) -> Result<Value, ApiError> {
        let mut events = (self.start_sync(tenant, name, Trigger::Schedule, ends_by)).await?;
        let mut ended = json!({"tenant": tenant, "source": name});
        while let Some(event) = events.next().await {
            if event.name == "report" || event.name == "error" {
                ended[event.name] = event.data;
            }
        }
        Ok(ended)
    }

    /// Keeps a sync's report, and forgets the source's oldest past [`REPORTS_KEPT`].
    async fn keep_report(&self, tenant: &Tenant, report: &SyncReport) -> Result<(), ApiError> {
        let records = self.sources_store()?;
        let name = format!("{}/{}", report.source, report.id);
        let body = serde_json::to_value(report).map_err(invalid)?;
        (records.put(tenant, Shelf::Syncs, &name, body).await).map_err(unavailable)?;
        let prefix = format!("{}/", report.source);
        let mut kept: Vec<String> = (records.list(tenant, Shelf::Syncs).await)
            .map_err(unavailable)?
            .into_iter()
            .map(|r| r.name)
            .filter(|n| n.starts_with(&prefix))
            .collect();
        kept.sort();
        if kept.len() > REPORTS_KEPT {
            for old in &kept[..kept.len() - REPORTS_KEPT] {
                (records.delete(tenant, Shelf::Syncs, old).await).map_err(unavailable)?;
            }
        }
        Ok(())
    }

    /// The id of a sync that a process sharing the store is running, by `newest`, the record
    /// of the source's newest sync (one newer than `SLUICE_SYNC_TIMEOUT_MS`: an older one's
    /// process died); none over a store no other process reads.
    fn running_elsewhere(&self, newest: Option<&Value>) -> Result<Option<String>, ApiError> {
        if !self.sources_store()?.shared() {
            return Ok(None);
        }
        // Alive while it did something within the time limit: it started, or (a sync read in
        // batches) its last batch was read, that recently.
        let fresh = |r: &Value| {
            let active = started_ms(r).unwrap_or(0) + r["ms"].as_u64().unwrap_or(0);
            super::now_ms().saturating_sub(active) < self.limits.sync.timeout.as_millis() as u64
        };
        Ok(newest
            .filter(|r| r["status"] == json!(SyncStatus::Running) && fresh(r))
            .map(|r| r["id"].as_str().unwrap_or_default().to_string()))
    }

    /// The sources that are due: scheduled, their last sync started more than their
    /// `every_minutes` ago (or never), none going.
    pub async fn due_syncs(&self) -> Result<Vec<(Tenant, String)>, ApiError> {
        let records = self.sources_store()?;
        let mut due = Vec::new();
        for tenant in (records.tenants(Shelf::Sources).await).map_err(unavailable)? {
            let reports = self.reports(&tenant).await?;
            for record in (records.list(&tenant, Shelf::Sources).await).map_err(unavailable)? {
                if self.is_due(&tenant, &record, &reports)? {
                    due.push((tenant.clone(), record.name));
                }
            }
        }
        Ok(due)
    }

    /// Whether the source `record` is due, by the tenant's `reports`: scheduled, its last sync
    /// started more than its `every_minutes` ago (or never), none going.
    fn is_due(
        &self,
        tenant: &Tenant,
        record: &Record,
        reports: &HashMap<String, Vec<Value>>,
    ) -> Result<bool, ApiError> {
        let Some(every) = record.body["every_minutes"].as_u64() else {
            return Ok(false);
        };
        let newest = reports.get(&record.name).and_then(|r| r.first());
        let last_ms = newest.and_then(started_ms);
        let going = self.syncs.find(tenant, &record.name).is_some()
            || self.running_elsewhere(newest)?.is_some();
        let now = super::now_ms();
        Ok(!going && last_ms.is_none_or(|at| now.saturating_sub(at) >= every * 60_000))
    }

    /// Starts the syncs that are due, each on a task of its own; how many started.
    /// `sluice serve` calls it every [`DUE_EVERY`].
    pub async fn run_due_syncs(self: &Arc<Self>) -> Result<usize, ApiError> {
        let mut started = 0;
        for (tenant, name) in self.due_syncs().await? {
            match self
                .start_sync(&tenant, &name, Trigger::Schedule, None)
                .await
            {
                Ok(events) => {
                    tokio::spawn(events.for_each(|_| async {}));
                    started += 1;
                }
                // Started meanwhile (asked for by hand).
                Err(e) if e.code == Code::SyncRunning => {}
                Err(e) => {
                    tracing::warn!(%tenant, source = %name, error = %e.message, "a due sync did not start")
                }
            }
        }
        Ok(started)
    }

    /// Runs the syncs that are due one after another, each stopped by `ends_by` at the latest
    /// (a Lambda invocation's deadline): their reports. With a sync queue, each is sent to be
    /// started by an invocation of its own instead (a `queued` line each). A scheduled
    /// invocation of the ingest function calls it.
    pub async fn sync_due_until(
        self: &Arc<Self>,
        ends_by: std::time::Instant,
    ) -> Result<Vec<Value>, ApiError> {
        let mut reports = Vec::new();
        if let Some(queue) = self.batches.clone() {
            // Once per source and minute, however often the schedule's event is delivered.
            let minute = super::now_ms() / 60_000;
            for (tenant, name) in self.due_syncs().await? {
                let start = SyncMessage::Start {
                    tenant: tenant.to_string(),
                    source: name.clone(),
                };
                let dedup = format!("start/{tenant}/{name}/{minute}");
                let sent = queue
                    .send(&sync::group(&tenant, &name), &dedup, &start)
                    .await;
                reports.push(match sent {
                    Ok(()) => json!({"tenant": tenant, "source": name, "queued": true}),
                    Err(e) => json!({"tenant": tenant, "source": name, "error": e.to_string()}),
                });
            }
            return Ok(reports);
        }
        for (tenant, name) in self.due_syncs().await? {
            if std::time::Instant::now() >= ends_by {
                break;
            }
            match self.run_sync(&tenant, &name, Some(ends_by)).await {
                Ok(ended) => reports.push(ended),
                Err(e) if e.code == Code::SyncRunning => {}
                Err(e) => {
                    reports.push(json!({"tenant": tenant, "source": name, "error": e.message}))
                }
            }
        }
        Ok(reports)
    }

    /// Writes the object `key` of `bucket` as the tenant's S3 source that covers it would (its
    /// id, metadata, access and version), when one does: an upload to the document bucket
    /// announced by S3, so that the next sync finds it unchanged. `None` when no source of the
    /// tenant covers the object.
    pub async fn sync_object(
        self: &Arc<Self>,
        tenant: &Tenant,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Value>, ApiError> {
        let (Some(records), Some(objects)) = (&self.records, self.objects.clone()) else {
            return Ok(None);
        };
        let sources = (records.list(tenant, Shelf::Sources).await).map_err(unavailable)?;
        let covering = sources.into_iter().find_map(|r| {
            let source: Source = serde_json::from_value(r.body).ok()?;
            let s3 = source.s3.as_ref()?;
            (s3.bucket == bucket && key.starts_with(&s3.prefix)).then_some((r.name, source))
        });
        let Some((name, source)) = covering else {
            return Ok(None);
        };
        let listed = (objects.list(bucket, key, None).await)
            .map_err(|e| ApiError::new(Code::IngestFailed, e.to_string()))?
            .objects
            .into_iter()
            .find(|o| o.key == key);
        let Some(listed) = listed else {
            return Ok(Some(item(&format!("s3://{bucket}/{key}"), "gone", None)));
        };
        let mut sync = Syncing::new(
            Arc::clone(self),
            tenant,
            &name,
            source,
            Trigger::Schedule,
            "",
        );
        let origin = format!("s3://{bucket}/{key}");
        if let Ok(Some(held)) = self
            .ingest()?
            .get(tenant, None, &id_of(&format!("{bucket}/{key}")))
            .await
        {
            let version = match held.document.metadata.get(VERSION_KEY) {
                Some(MetaValue::Text(v)) => Some(v.clone()),
                _ => None,
            };
            sync.held.insert(origin, version);
        }
        Ok(Some(sync.object(bucket, &listed, &objects).await))
    }
}

impl Server {
    /// Reads a message of the sync queue ([`SyncMessage`]): a due source's sync started (and,
    /// a walk by links, run whole), or a batch of a sync read. What it did, as JSON; `Err` only
    /// for what a retry could fix (the records store failing). Its time is
    /// `SLUICE_SYNC_TIMEOUT_MS`, or less when `ends_by` (a Lambda invocation's deadline) comes
    /// first.
    pub async fn sync_message(
        self: &Arc<Self>,
        message: SyncMessage,
        ends_by: Option<std::time::Instant>,
    ) -> Result<Value, ApiError> {
        match message {
            SyncMessage::Batch(batch) => self.sync_batch(batch, ends_by).await,
            SyncMessage::Start { tenant, source } => {
                self.start_due(&tenant, &source, ends_by).await
            }
        }
    }

    /// Starts the sync of `source` the schedule sent, if it is still due (a sync of it may
    /// have started since: asked for, or the same start delivered twice), and runs it to its
    /// end here (or to its batches sent).
    async fn start_due(
        self: &Arc<Self>,
        tenant: &str,
        source: &str,
        ends_by: Option<std::time::Instant>,
    ) -> Result<Value, ApiError> {
        let dropped = |why: &str| {
            tracing::info!(%tenant, %source, why, "sync start dropped");
            Ok(json!({"tenant": tenant, "source": source, "dropped": why}))
        };
        let Ok(tenant) = Tenant::new(tenant) else {
            return dropped("its tenant is not a tenant id");
        };
        let records = self.sources_store()?;
        let Some(record) =
            (records.get(&tenant, Shelf::Sources, source).await).map_err(unavailable)?
        else {
            return dropped("its source was deleted");
        };
        let reports = self.reports(&tenant).await?;
        if !self.is_due(&tenant, &record, &reports)? {
            return dropped("it is not due (synced since, or going)");
        }
        match self.run_sync(&tenant, source, ends_by).await {
            Ok(ended) => Ok(ended),
            Err(e) if e.code == Code::SyncRunning => dropped("a sync of it is going"),
            Err(e) if e.code == Code::SourcesUnavailable => Err(e),
            Err(e) => Ok(json!({"tenant": tenant, "source": source, "error": e.message})),
        }
    }

    /// Reads a batch a sync sent through the queue ([`SyncBatch`]), adds what it did to the
    /// sync's report, and — the last batch — ends the sync. A batch of a sync that is no longer
    /// running (canceled, failed, its source deleted) is dropped. `Err` only for what a retry
    /// could fix (the records store failing). Its time is `SLUICE_SYNC_TIMEOUT_MS`, or less
    /// when `ends_by` (a Lambda invocation's deadline) comes first.
    async fn sync_batch(
        self: &Arc<Self>,
        mut batch: SyncBatch,
        ends_by: Option<std::time::Instant>,
    ) -> Result<Value, ApiError> {
        let dropped = |why: &str| {
            tracing::info!(source = %batch.source, sync = %batch.sync, batch = batch.index, why, "sync batch dropped");
            Ok(json!({"sync": batch.sync, "batch": batch.index, "dropped": why}))
        };
        let Ok(tenant) = Tenant::new(&batch.tenant) else {
            return dropped("its tenant is not a tenant id");
        };
        let records = self.sources_store()?;
        let name = format!("{}/{}", batch.source, batch.sync);
        let stored = (records.get(&tenant, Shelf::Syncs, &name).await).map_err(unavailable)?;
        let Some(report) = stored.and_then(|r| serde_json::from_value::<SyncReport>(r.body).ok())
        else {
            return dropped("its sync is not kept (its source was deleted)");
        };
        if report.status != SyncStatus::Running {
            return dropped("its sync is no longer running");
        }
        let Some(record) =
            (records.get(&tenant, Shelf::Sources, &batch.source).await).map_err(unavailable)?
        else {
            return dropped("its source was deleted");
        };
        let source: Source = serde_json::from_value(record.body).map_err(invalid)?;
        let mut sync = Syncing::new(
            Arc::clone(self),
            &tenant,
            &batch.source,
            source,
            Trigger::Schedule,
            &report.started_at,
        );
        sync.report = report;
        let live = Live {
            id: batch.sync.clone(),
            started_at: sync.report.started_at.clone(),
            done: Arc::default(),
            cancel: Cancel::new().with_deadline(self.sync_deadline(ends_by)),
        };
        let (items, left) = sync
            .read_batch(std::mem::take(&mut batch.items), &live)
            .await;
        // What its time did not reach goes back to the queue, behind the batches sent; the
        // sync ends when every batch sent has been read.
        if !left.is_empty() && items.is_empty() {
            // Not one page in an invocation's time (a Crawl-delay longer than it): sending it
            // again would not help.
            sync.report.cut = Some(format!(
                "a batch's time (SLUICE_SYNC_TIMEOUT_MS) ran out before its first page: the \
                 site asks for more time between requests; {} left unread",
                left.len()
            ));
            sync.report.skipped.caps += left.len();
        } else if !left.is_empty() {
            let sent = sync.report.batches.map_or(batch.of, |b| b.sent);
            if let Some(batches) = &mut sync.report.batches {
                batches.sent += 1;
            }
            let again = SyncBatch {
                index: sent,
                of: sent + 1,
                items: left,
                ..batch.clone()
            };
            sync.send_batch(again).await.map_err(|why| {
                tracing::error!(%tenant, source = %batch.source, error = %why, "a batch's rest could not be sent again");
                ApiError::new(Code::SourcesUnavailable, why)
            })?;
        }
        // Canceled meanwhile (from another process): what this batch did counts, the sync
        // stays ended.
        let ended = self.stopped_elsewhere(&tenant, &name).await?;
        let report = &mut sync.report;
        report.ms = super::now_ms().saturating_sub(id_started_ms(&batch.sync).unwrap_or(0));
        report.count_listed();
        if let Some(batches) = &mut report.batches {
            batches.read += 1;
        }
        let last = report.batches.is_none_or(|b| b.read >= b.sent);
        if ended {
            report.status = SyncStatus::Stopped;
            report
                .cut
                .get_or_insert_with(|| "the sync was canceled".into());
        } else if last {
            report.status = match (&report.error, &report.cut) {
                (Some(_), _) => SyncStatus::Failed,
                (None, Some(_)) => SyncStatus::Stopped,
                (None, None) => SyncStatus::Done,
            };
        }
        if report.status != SyncStatus::Running {
            report
                .ended_at
                .get_or_insert_with(sluice_contract::tenant_settings::now);
        }
        self.keep_report(&tenant, &sync.report).await?;
        tracing::info!(%tenant, source = %batch.source, sync = %batch.sync, batch = batch.index, of = batch.of, status = ?sync.report.status, "sync batch read");
        Ok(json!({"sync": batch.sync, "batch": batch.index, "items": items, "report": sync.report}))
    }
}

/// When a sync started, from its report's id.
fn started_ms(report: &Value) -> Option<u64> {
    id_started_ms(report["id"].as_str()?)
}

/// When a sync started, from its id (`sync-<ms>-<n>`).
fn id_started_ms(id: &str) -> Option<u64> {
    id.split('-').nth(1)?.parse().ok()
}

/// How many pages or objects a sync reads between two looks at its record for a cancel from
/// another process (over a shared store).
pub const CANCEL_LOOKED_FOR_EVERY: usize = 10;

/// How often `sluice serve` looks for due syncs.
pub const DUE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts the due syncs every [`DUE_EVERY`] for as long as the process runs (`sluice serve`;
/// on AWS a schedule invokes the sync function instead).
pub fn keep_syncing(server: Arc<Server>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(DUE_EVERY);
        loop {
            every.tick().await;
            if let Err(e) = server.run_due_syncs().await {
                tracing::warn!(error = %e.message, "the due syncs could not be looked for");
            }
        }
    })
}

/// The filter of the documents synced from source `name`.
fn of_source(name: &str) -> Result<Filter, String> {
    Filter::parse(&json!({ SOURCE_KEY: name })).map_err(|e| e.to_string())
}
