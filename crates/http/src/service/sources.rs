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
//! 3. **What is gone**: a page that answers 404 or 410, redirects or asks not to be indexed,
//!    at once; and — only when the whole source was listed (no cap reached, not stopped, no
//!    listing failed) — every held origin the listing did not find.
//!
//! One sync per source at a time in a process ([`Syncs`]); it stops at its time limit
//! (`SLUICE_SYNC_TIMEOUT_MS`), at a cancel, or when its client leaves, keeping what it wrote.
//! Its report is kept ([`REPORTS_KEPT`] per source) and streamed as it goes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::cancel::Cancel;
use sluice_contract::codes::Code;
use sluice_contract::document::{Document, MAX_ID_CHARS, MAX_PAGE};
use sluice_contract::evals::{Record, RecordsError, Shelf};
use sluice_contract::filter::Filter;
use sluice_contract::metadata::MetaValue;
use sluice_contract::sources::{
    Listed, MAX_SOURCES, ObjectsError, REPORTS_KEPT, SOURCE_KEY, Source, SyncReport, SyncStatus,
    VERSION_KEY, Website, check_source_name, object_version,
};
use sluice_fetch::{Crawl, Found, Site, Validator};

use super::Caller;
use super::documents::{Upload, Writer};
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
        Ok(self.shown_source(tenant, &record).await)
    }

    /// A source as shown: its record, whether a sync of it is going, and its last sync.
    async fn shown_source(&self, tenant: &Tenant, record: &Record) -> Value {
        let last = self.reports_of(tenant, &record.name).await.ok();
        let last = last.and_then(|r| r.into_iter().next());
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
        Ok(self.shown_source(&caller.tenant, &record).await)
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
        let mut shown = Vec::with_capacity(kept.len());
        for record in &kept {
            shown.push(self.shown_source(&caller.tenant, record).await);
        }
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

    /// The reports of the source's last syncs, newest first.
    async fn reports_of(&self, tenant: &Tenant, name: &str) -> Result<Vec<Value>, ApiError> {
        let records = self.sources_store()?;
        let mut kept: Vec<Record> = (records.list(tenant, Shelf::Syncs).await)
            .map_err(unavailable)?
            .into_iter()
            .filter(|r| r.name.starts_with(&format!("{name}/")))
            .collect();
        kept.sort_by(|a, b| b.name.cmp(&a.name));
        Ok(kept.into_iter().map(|r| r.body).collect())
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

    /// Cancels the sync of `name` going in this process: it stops after the page or object in
    /// hand, keeps what it wrote and deletes nothing it did not see.
    pub(crate) fn cancel_sync(&self, caller: &Caller, name: &str) -> Result<Value, ApiError> {
        let live = (self.syncs.find(&caller.tenant, name)).ok_or_else(|| {
            ApiError::new(
                Code::UnknownSource,
                format!("no sync of source {name:?} is going in this process"),
            )
        })?;
        live.cancel.cancel();
        Ok(json!({"canceled": live.id}))
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
        let limit = std::time::Instant::now() + self.limits.sync.timeout;
        let live = Live {
            id: sync_id(),
            started_at: sluice_contract::tenant_settings::now(),
            done: Arc::default(),
            cancel: Cancel::new().with_deadline(ends_by.map_or(limit, |by| by.min(limit))),
        };
        let slot = self.syncs.claim(tenant, name, live.clone())?;
        if let Some(going) = self.running_elsewhere(tenant, name).await? {
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
        // Its record says it is going, to the processes that share the store.
        if self.sources_store()?.shared() {
            self.keep_report(tenant, &sync.report).await?;
        }
        tracing::info!(%tenant, source = name, sync = %live.id, ?trigger, "sync started");
        let started = std::time::Instant::now();
        Ok(async_stream::stream! {
            let _slot = slot;
            yield RunEvent { name: "sync", data: json!({"id": live.id, "source": sync.report.source, "started_at": live.started_at}) };
            let listed = match sync.load_held().await {
                Err(e) => Err(e),
                Ok(()) => match (sync.source.website.clone(), sync.source.s3.clone()) {
                    (Some(site), _) => {
                        let mut items = Box::pin(sync.walk(site, &live));
                        let mut result = Ok(());
                        while let Some(item) = items.next().await {
                            match item {
                                Ok(data) => yield RunEvent { name: "item", data },
                                Err(e) => result = Err(e),
                            }
                        }
                        result
                    }
                    (_, Some(s3)) => {
                        let mut items = Box::pin(sync.list_objects(s3, &live));
                        let mut result = Ok(());
                        while let Some(item) = items.next().await {
                            match item {
                                Ok(data) => yield RunEvent { name: "item", data },
                                Err(e) => result = Err(e),
                            }
                        }
                        result
                    }
                    _ => Err("the source names neither a website nor an S3 prefix".to_string()),
                },
            };
            match listed {
                Err(why) => {
                    sync.report.status = SyncStatus::Failed;
                    sync.report.error = Some(why);
                }
                Ok(()) if sync.report.cut.is_some() => sync.report.status = SyncStatus::Stopped,
                Ok(()) => {
                    // The whole source was seen: what it no longer holds goes.
                    for data in sync.sweep().await {
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
            report.ended_at = Some(sluice_contract::tenant_settings::now());
            report.listed = report.added + report.changed + report.unchanged + report.failures;
            let report = sync.report.clone();
            tracing::info!(tenant = %sync.tenant, source = %report.source, sync = %report.id, status = ?report.status, added = report.added, changed = report.changed, unchanged = report.unchanged, deleted = report.deleted, failures = report.failures, "sync ended");
            match sync.server.keep_report(&sync.tenant, &report).await {
                Ok(()) => yield RunEvent { name: "report", data: json!(report) },
                Err(e) => yield RunEvent {
                    name: "error",
                    data: json!({"code": e.code, "message": e.message, "retryable": e.code.retryable()}),
                },
            }
        }
        .boxed())
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

    /// A sync of `name` that another process sharing the store is running, by the record it
    /// keeps while it runs (newer than `SLUICE_SYNC_TIMEOUT_MS`: an older one's process died).
    async fn running_elsewhere(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<String>, ApiError> {
        if !self.sources_store()?.shared() {
            return Ok(None);
        }
        let newest = self.reports_of(tenant, name).await?.into_iter().next();
        let fresh = |r: &Value| {
            let started = started_ms(r).unwrap_or(0);
            super::now_ms().saturating_sub(started) < self.limits.sync.timeout.as_millis() as u64
        };
        Ok(newest
            .filter(|r| r["status"] == json!(SyncStatus::Running) && fresh(r))
            .map(|r| r["id"].as_str().unwrap_or_default().to_string()))
    }

    /// The sources that are due: scheduled, their last sync started more than their
    /// `every_minutes` ago (or never), none going.
    pub async fn due_syncs(&self) -> Result<Vec<(Tenant, String)>, ApiError> {
        let records = self.sources_store()?;
        let now = super::now_ms();
        let mut due = Vec::new();
        for tenant in (records.tenants(Shelf::Sources).await).map_err(unavailable)? {
            for record in (records.list(&tenant, Shelf::Sources).await).map_err(unavailable)? {
                let Some(every) = record.body["every_minutes"].as_u64() else {
                    continue;
                };
                let last = self.reports_of(&tenant, &record.name).await?;
                let last_ms = last.first().and_then(started_ms);
                let going = self.syncs.find(&tenant, &record.name).is_some()
                    || self
                        .running_elsewhere(&tenant, &record.name)
                        .await?
                        .is_some();
                if !going && last_ms.is_none_or(|at| now.saturating_sub(at) >= every * 60_000) {
                    due.push((tenant.clone(), record.name));
                }
            }
        }
        Ok(due)
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
    /// (a Lambda invocation's deadline): their reports. A scheduled invocation of the ingest
    /// function calls it.
    pub async fn sync_due_until(
        self: &Arc<Self>,
        ends_by: std::time::Instant,
    ) -> Result<Vec<Value>, ApiError> {
        let mut reports = Vec::new();
        for (tenant, name) in self.due_syncs().await? {
            if std::time::Instant::now() >= ends_by {
                break;
            }
            match self
                .start_sync(&tenant, &name, Trigger::Schedule, Some(ends_by))
                .await
            {
                Ok(mut events) => {
                    while let Some(event) = events.next().await {
                        if event.name == "report" || event.name == "error" {
                            reports.push(
                                json!({"tenant": tenant, "source": name, event.name: event.data}),
                            );
                        }
                    }
                }
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

/// When a sync started, from its id (`sync-<ms>-<n>`).
fn started_ms(report: &Value) -> Option<u64> {
    report["id"].as_str()?.split('-').nth(1)?.parse().ok()
}

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

/// A sync in progress: what it holds, what it has seen, its report.
struct Syncing {
    server: Arc<Server>,
    tenant: Tenant,
    source: Source,
    /// The held documents' origins, each with the version it was read at.
    held: HashMap<String, Option<String>>,
    /// The origins the source holds now (read, found unchanged, or failed: kept).
    seen: HashSet<String>,
    report: SyncReport,
}

/// Why a sync stopped early, for its report.
fn stopped(why: sluice_contract::cancel::Stopped) -> String {
    match why {
        sluice_contract::cancel::Stopped::Cancelled => "the sync was canceled".into(),
        sluice_contract::cancel::Stopped::TimedOut => {
            "the sync ran past its time limit (SLUICE_SYNC_TIMEOUT_MS)".into()
        }
    }
}

/// An `item` event's data.
fn item(place: &str, outcome: &str, reason: Option<&str>) -> Value {
    match reason {
        Some(reason) => json!({"item": place, "outcome": outcome, "reason": reason}),
        None => json!({"item": place, "outcome": outcome}),
    }
}

impl Syncing {
    /// A sync of `source` (named `name`) for `tenant`, started at `started_at`, with nothing
    /// held or seen yet.
    fn new(
        server: Arc<Server>,
        tenant: &Tenant,
        name: &str,
        source: Source,
        trigger: Trigger,
        started_at: &str,
    ) -> Self {
        Self {
            server,
            tenant: tenant.clone(),
            source,
            held: HashMap::new(),
            seen: HashSet::new(),
            report: SyncReport {
                id: String::new(),
                source: name.to_string(),
                trigger: match trigger {
                    Trigger::Manual => "manual".into(),
                    Trigger::Schedule => "schedule".into(),
                },
                status: SyncStatus::Running,
                started_at: started_at.to_string(),
                ended_at: None,
                ms: 0,
                listed: 0,
                added: 0,
                changed: 0,
                unchanged: 0,
                deleted: 0,
                failed: Vec::new(),
                failures: 0,
                skipped: Default::default(),
                bytes: 0,
                cut: None,
                error: None,
            },
        }
    }

    /// Reads what the tenant holds from the source.
    async fn load_held(&mut self) -> Result<(), String> {
        let ingest = self.server.ingest().map_err(|e| e.message)?;
        let filter = of_source(&self.report.source)?;
        let mut cursor: Option<String> = None;
        loop {
            let page = (ingest.list(&self.tenant, Some(&filter), MAX_PAGE, cursor.as_deref()))
                .await
                .map_err(|e| format!("the documents held could not be listed: {e}"))?;
            for stored in page.documents {
                let Some(origin) = stored.document.origin else {
                    continue;
                };
                let version = match stored.document.metadata.get(VERSION_KEY) {
                    Some(MetaValue::Text(v)) => Some(v.clone()),
                    _ => None,
                };
                self.held.insert(origin, version);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// Writes what was read from `origin` as its documents: converted by its format, given
    /// the source's metadata and access list (unless it carries its own), its version and
    /// the source's name; the outcome's name.
    async fn write(
        &mut self,
        origin: &str,
        id: String,
        media_type: Option<String>,
        bytes: Vec<u8>,
        version: Option<String>,
        access: Option<String>,
    ) -> Value {
        self.seen.insert(origin.to_string());
        self.report.bytes += bytes.len() as u64;
        let server = Arc::clone(&self.server);
        let converter = match server.converter.as_ref() {
            Some(c) => c,
            None => return self.failed(origin, "this process reads no files"),
        };
        // A media type the converter reads names the format; else the id's extension does.
        let name = match media_type.as_deref() {
            Some(t) if converter.reads_media_type(t) => None,
            _ => Some(id.clone()),
        };
        let mut documents: Vec<Document> =
            match converter.convert(name, media_type.as_deref(), bytes).await {
                Ok(d) => d,
                Err(e) => return self.failed(origin, &e.to_string()),
            };
        let single = documents.len() == 1;
        for doc in &mut documents {
            if single {
                doc.id = id.clone();
            }
            // Cited as where it was read.
            doc.source = Some(origin.to_string());
            for (key, value) in &self.source.metadata {
                doc.metadata.entry(key.clone()).or_insert(value.clone());
            }
            if let Some(access) = access.as_deref().or(self.source.access.as_deref()) {
                doc.set_access(access);
            }
            doc.metadata
                .insert(SOURCE_KEY.into(), json!(self.report.source));
            match &version {
                Some(v) => doc.metadata.insert(VERSION_KEY.into(), json!(v)),
                None => doc.metadata.remove(VERSION_KEY),
            };
        }
        let writer = Writer {
            tenant: &self.tenant,
            key: None,
            filter: None,
            origin: Some(origin),
        };
        match server
            .ingest_upload(writer, Upload::Documents(documents))
            .await
        {
            Ok(done) => {
                let outcome = if !self.held.contains_key(origin) {
                    self.report.added += 1;
                    "added"
                } else if done.unchanged == done.documents && done.removed == 0 {
                    self.report.unchanged += 1;
                    "unchanged"
                } else {
                    self.report.changed += 1;
                    "changed"
                };
                item(origin, outcome, None)
            }
            Err(e) => self.failed(origin, &e.message),
        }
    }

    /// Notes that `origin` could not be read or written (its documents, if held, stay).
    fn failed(&mut self, origin: &str, reason: &str) -> Value {
        self.seen.insert(origin.to_string());
        self.report.fail(origin, reason);
        item(origin, "failed", Some(reason))
    }

    /// Deletes the documents of `origin`, gone from the source, if the tenant holds any.
    async fn gone(&mut self, origin: &str, why: &str) -> Option<Value> {
        self.held.contains_key(origin).then_some(())?;
        self.held.remove(origin);
        match self.server.forget_origin(&self.tenant, origin).await {
            Ok(_) => {
                self.report.deleted += 1;
                Some(item(origin, "deleted", Some(why)))
            }
            Err(e) => {
                self.report.error =
                    Some(format!("deleting the documents of {origin}: {}", e.message));
                Some(item(origin, "failed", Some(&e.message)))
            }
        }
    }

    /// Deletes every held origin the (whole) listing did not find.
    async fn sweep(&mut self) -> Vec<Value> {
        let mut gone: Vec<String> = (self.held.keys())
            .filter(|o| !self.seen.contains(*o))
            .cloned()
            .collect();
        gone.sort();
        let mut items = Vec::new();
        for origin in gone {
            items.extend(self.gone(&origin, "no longer in the source").await);
        }
        items
    }

    /// Walks the website: an `item` for each page (the stream's `Err` says why the listing
    /// failed).
    fn walk<'a>(
        &'a mut self,
        site: Website,
        live: &'a Live,
    ) -> impl futures::Stream<Item = Result<Value, String>> + 'a {
        async_stream::stream! {
            let limits = self.server.limits.sync.clone();
            let held: HashMap<String, Validator> = (self.held.iter())
                .filter_map(|(origin, v)| Some((origin.clone(), Validator::from_kept(v.as_deref()?)?)))
                .collect();
            let walked = Site {
                sitemap: site.sitemap.clone(),
                start: site.start.clone(),
                scope: site.scope(),
                max_pages: self.source.max_pages,
                max_depth: site.depth(),
                max_bytes: self.source.max_bytes,
                max_page_bytes: self.server.limits.max_ingest_bytes,
                interval: limits.interval(),
            };
            let fetcher = Arc::clone(&self.server.fetcher);
            let mut crawl = match Crawl::new(&fetcher, walked, held) {
                Ok(c) => c,
                Err(refused) => {
                    yield Err(format!("a URL of the website {refused}"));
                    return;
                }
            };
            if let Err(why) = crawl.list().await {
                yield Err(why);
                return;
            }
            loop {
                if let Err(why) = live.cancel.check() {
                    self.report.cut = Some(stopped(why));
                    break;
                }
                let Some(visit) = crawl.next().await else { break };
                live.done.fetch_add(1, Ordering::SeqCst);
                let url = visit.url;
                let data = match visit.found {
                    Found::Page(page) => {
                        // Without a validator, the body's digest tells a page sent again as
                        // it was (nothing converted or written).
                        let version = match &page.validator {
                            Some(v) => v.kept(),
                            None => format!("sha256:{}", sluice_contract::sha256_hex(&page.bytes)),
                        };
                        if self.held.get(&url) == Some(&Some(version.clone())) {
                            self.report.bytes += page.bytes.len() as u64;
                            self.seen.insert(url.clone());
                            self.report.unchanged += 1;
                            item(&url, "unchanged", None)
                        } else {
                            let id = id_of(url.split_once("://").map_or(url.as_str(), |(_, rest)| rest));
                            self.write(&url, id, page.media_type, page.bytes, Some(version), None).await
                        }
                    }
                    Found::Unchanged => {
                        self.seen.insert(url.clone());
                        self.report.unchanged += 1;
                        item(&url, "unchanged", None)
                    }
                    Found::Gone(status) => {
                        let why = format!("it answered {status}");
                        self.gone(&url, &why).await.unwrap_or_else(|| item(&url, "gone", Some(&why)))
                    }
                    Found::Moved(to) => {
                        self.report.skipped.redirects += 1;
                        let why = format!("it redirects to {to}");
                        self.gone(&url, &why).await.unwrap_or_else(|| item(&url, "redirect", Some(&why)))
                    }
                    Found::NoIndex => {
                        self.report.skipped.noindex += 1;
                        let why = "it asks not to be indexed";
                        self.gone(&url, why).await.unwrap_or_else(|| item(&url, "skipped", Some(why)))
                    }
                    Found::Disallowed => {
                        self.report.skipped.robots += 1;
                        item(&url, "skipped", Some("robots.txt disallows it"))
                    }
                    Found::Failed(why) => self.failed(&url, &why),
                };
                yield Ok(data);
            }
            let (queued, deeper) = crawl.not_reached();
            self.report.skipped.caps += queued;
            self.report.skipped.depth += deeper;
            if self.report.cut.is_none() {
                self.report.cut = crawl.cut().map(str::to_string);
            }
        }
    }

    /// Lists the S3 prefix: an `item` for each object (the stream's `Err` says why the
    /// listing failed).
    fn list_objects<'a>(
        &'a mut self,
        s3: sluice_contract::sources::S3Prefix,
        live: &'a Live,
    ) -> impl futures::Stream<Item = Result<Value, String>> + 'a {
        async_stream::stream! {
            let Some(objects) = self.server.objects.clone() else {
                yield Err("this process reads no S3 buckets (it has no AWS region: set AWS_REGION)".to_string());
                return;
            };
            let (mut after, mut count) = (None, 0usize);
            'pages: loop {
                let page = match objects.list(&s3.bucket, &s3.prefix, after.take()).await {
                    Ok(page) => page,
                    Err(e) => {
                        yield Err(format!("s3://{}/{} could not be listed: {e}", s3.bucket, s3.prefix));
                        return;
                    }
                };
                for (i, object) in page.objects.iter().enumerate() {
                    // A "folder" is a key ending in / with nothing in it.
                    if object.key.ends_with('/') && object.size == 0 {
                        continue;
                    }
                    if let Err(why) = live.cancel.check() {
                        self.report.cut = Some(stopped(why));
                        break 'pages;
                    }
                    if count >= self.source.max_pages {
                        self.report.cut = Some(format!("the object cap ({}) was reached", self.source.max_pages));
                        self.report.skipped.caps += page.objects.len() - i;
                        break 'pages;
                    }
                    count += 1;
                    live.done.fetch_add(1, Ordering::SeqCst);
                    yield Ok(self.object(&s3.bucket, object, &objects).await);
                    if self.report.bytes > self.source.max_bytes {
                        self.report.cut = Some(format!("the byte cap ({} bytes) was reached", self.source.max_bytes));
                        self.report.skipped.caps += page.objects.len() - i - 1;
                        break 'pages;
                    }
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
    }

    /// One listed object: unchanged (its ETag and access tag are the ones held), or read and
    /// written.
    async fn object(
        &mut self,
        bucket: &str,
        object: &Listed,
        objects: &Arc<dyn sluice_contract::sources::Objects>,
    ) -> Value {
        let origin = format!("s3://{bucket}/{}", object.key);
        let version = object_version(object);
        if self.held.get(&origin) == Some(&Some(version.clone())) {
            self.seen.insert(origin.clone());
            self.report.unchanged += 1;
            return item(&origin, "unchanged", None);
        }
        let max = self.server.limits.max_ingest_bytes;
        match objects.read(bucket, &object.key, max).await {
            Ok(read) => {
                let id = id_of(&format!("{bucket}/{}", object.key));
                let access = object.access.clone();
                (self.write(
                    &origin,
                    id,
                    read.content_type,
                    read.bytes,
                    Some(version),
                    access,
                ))
                .await
            }
            // Deleted between the listing and the read: gone.
            Err(ObjectsError::Gone) => {
                let why = "deleted while the sync ran";
                self.gone(&origin, why)
                    .await
                    .unwrap_or_else(|| item(&origin, "gone", Some(why)))
            }
            Err(e) => self.failed(&origin, &e.to_string()),
        }
    }
}
