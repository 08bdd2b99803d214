//! One sync's work: what the tenant holds from the source, the source walked or listed, each
//! page or object written or found unchanged, and what is gone deleted — the report counted
//! as it goes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::document::{Document, MAX_PAGE};
use sluice_contract::metadata::MetaValue;
use sluice_contract::sources::{
    BATCH_ITEMS, BatchItem, Batched, Listed, ObjectsError, SOURCE_KEY, Source, SyncBatch,
    SyncMessage, SyncReport, SyncStatus, VERSION_KEY, Website, object_version,
};
use sluice_fetch::{Crawl, Found, Site, Validator, Visit};

use super::{Live, Trigger, id_of, of_source};
use crate::Server;
use crate::service::documents::{Upload, Writer};

/// A sync in progress: what it holds, what it has seen, its report.
pub(super) struct Syncing {
    pub(super) server: Arc<Server>,
    pub(super) tenant: Tenant,
    pub(super) source: Source,
    /// The held documents' origins, each with the version it was read at.
    pub(super) held: HashMap<String, Option<String>>,
    /// The origins the source holds now (read, found unchanged, or failed: kept).
    pub(super) seen: HashSet<String>,
    pub(super) report: SyncReport,
    /// Where the last sync stopped, when it stopped before the end of its listing.
    pub(super) resume: Option<String>,
    /// When the sync hands what it listed out in batches (a queue to other processes): the
    /// new or changed objects, and the sitemap's pages, to be read there.
    pub(super) fanned: Option<Vec<BatchItem>>,
    /// Bytes of the objects handed out (their listed sizes), against the byte cap.
    planned: u64,
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

/// `work`, unless the sync's cancel is raised or its time runs out first (looked at every
/// tenth of a second).
async fn until_stopped<T>(
    live: &Live,
    work: impl std::future::Future<Output = T>,
) -> Result<T, sluice_contract::cancel::Stopped> {
    live.cancel.check()?;
    tokio::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => return Ok(done),
            () = tokio::time::sleep(std::time::Duration::from_millis(100)) => live.cancel.check()?,
        }
    }
}

/// The queue's message group of a tenant's source: its messages are read one at a time, in
/// order.
pub(super) fn group(tenant: &Tenant, source: &str) -> String {
    format!("{tenant}/{source}")
}

/// An `item` event's data.
pub(super) fn item(place: &str, outcome: &str, reason: Option<&str>) -> Value {
    match reason {
        Some(reason) => json!({"item": place, "outcome": outcome, "reason": reason}),
        None => json!({"item": place, "outcome": outcome}),
    }
}

impl Syncing {
    /// A sync of `source` (named `name`) for `tenant`, started at `started_at`, with nothing
    /// held or seen yet.
    pub(super) fn new(
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
            resume: None,
            fanned: None,
            planned: 0,
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
                resume_after: None,
                batches: None,
            },
        }
    }

    /// Reads what the tenant holds from the source.
    pub(super) async fn load_held(&mut self) -> Result<(), String> {
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

    /// Hands `origin` out to be read by a batch, when the sync fans out: its `queued` item.
    fn hand_out(&mut self, origin: &str, object: Option<&Listed>) -> Option<Value> {
        let fanned = self.fanned.as_mut()?;
        let held = self.held.get(origin);
        fanned.push(BatchItem {
            origin: origin.to_string(),
            held: held.is_some(),
            version: held.cloned().flatten(),
            object: object.cloned(),
        });
        self.planned += object.map_or(0, |o| o.size);
        self.seen.insert(origin.to_string());
        Some(item(origin, "queued", None))
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

    /// Deletes every held origin that `kept` (what a whole listing found) does not hold.
    pub(super) async fn sweep(&mut self, kept: &HashSet<String>, why: &str) -> Vec<Value> {
        let mut gone: Vec<String> = (self.held.keys())
            .filter(|o| !kept.contains(*o))
            .cloned()
            .collect();
        gone.sort();
        let mut items = Vec::new();
        for origin in gone {
            items.extend(self.gone(&origin, why).await);
        }
        items
    }

    /// Walks the website: an `item` for each page (the stream's `Err` says why the listing
    /// failed).
    pub(super) fn walk<'a>(
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
            let fetcher = self.server.fetcher();
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
            // A sitemap read whole lists the site, so that what it no longer lists is gone even
            // when this sync stops before it has read every page (below).
            let listed: Option<HashSet<String>> =
                site.sitemap.is_some().then(|| crawl.queued().into_iter().collect());
            if let Some(after) = self.resume.clone() {
                crawl.start_after(&after);
            }
            let mut last = None;
            if self.fanned.is_some() {
                // Handed out whole (up to the page cap), to be read by batches.
                let queued = crawl.queued();
                let most = self.source.max_pages;
                for url in queued.iter().take(most) {
                    live.done.fetch_add(1, Ordering::SeqCst);
                    yield Ok(self.hand_out(url, None).unwrap_or_default());
                }
                if queued.len() > most {
                    self.report.cut = Some(format!("the page cap ({most}) was reached"));
                    self.report.skipped.caps += queued.len() - most;
                    last = most.checked_sub(1).and_then(|i| queued.get(i)).cloned();
                }
            } else {
                loop {
                    // A page may wait long for its turn (a site's Crawl-delay): a cancel or
                    // the time limit stops the wait too.
                    let visit = match until_stopped(live, crawl.next()).await {
                        Ok(Some(visit)) => visit,
                        Ok(None) => break,
                        Err(why) => {
                            self.report.cut = Some(stopped(why));
                            break;
                        }
                    };
                    live.done.fetch_add(1, Ordering::SeqCst);
                    last = Some(visit.url.clone());
                    yield Ok(self.visited(visit).await);
                }
                let (queued, deeper) = crawl.not_reached();
                self.report.skipped.caps += queued;
                self.report.skipped.depth += deeper;
                if self.report.cut.is_none() {
                    self.report.cut = crawl.cut().map(str::to_string);
                }
            }
            if self.report.cut.is_some() {
                self.report.resume_after = last;
                // Stopped early: the pages the sitemap no longer lists go, those it lists stay
                // for the next sync, and so does every page this one reached (a redirect's
                // target among them). A target not reached yet is not known to be one: it
                // goes, and comes back when its redirect is read. A sync that reads the whole
                // site keeps every page it reached and deletes the rest, after the walk.
                if let Some(mut kept) = listed {
                    kept.extend(self.seen.iter().cloned());
                    for data in self.sweep(&kept, "no longer in the sitemap").await {
                        yield Ok(data);
                    }
                }
            }
        }
    }

    /// What a sync makes of a page its walk came to: its `item`.
    async fn visited(&mut self, visit: Visit) -> Value {
        let url = visit.url;
        match visit.found {
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
                    self.write(&url, id, page.media_type, page.bytes, Some(version), None)
                        .await
                }
            }
            Found::Unchanged => {
                self.seen.insert(url.clone());
                self.report.unchanged += 1;
                item(&url, "unchanged", None)
            }
            Found::Gone(status) => {
                let why = format!("it answered {status}");
                self.gone(&url, &why)
                    .await
                    .unwrap_or_else(|| item(&url, "gone", Some(&why)))
            }
            Found::Moved(to) => {
                self.report.skipped.redirects += 1;
                let why = format!("it redirects to {to}");
                self.gone(&url, &why)
                    .await
                    .unwrap_or_else(|| item(&url, "redirect", Some(&why)))
            }
            Found::NoIndex => {
                self.report.skipped.noindex += 1;
                let why = "it asks not to be indexed";
                self.gone(&url, why)
                    .await
                    .unwrap_or_else(|| item(&url, "skipped", Some(why)))
            }
            Found::Disallowed => {
                self.report.skipped.robots += 1;
                let why = "robots.txt disallows it";
                self.gone(&url, why)
                    .await
                    .unwrap_or_else(|| item(&url, "skipped", Some(why)))
            }
            Found::Failed(why) => self.failed(&url, &why),
        }
    }

    /// Keeps the report as running, with the number of batches, and sends `items` to the
    /// queue in batches of [`BATCH_ITEMS`], in the source's group: read one after another,
    /// the last writes the report. The report is kept first: a batch read before it would
    /// find no sync running and drop itself.
    pub(super) async fn send_batches(&mut self, items: Vec<BatchItem>) -> Result<(), String> {
        let batches: Vec<Vec<BatchItem>> = items.chunks(BATCH_ITEMS).map(<[_]>::to_vec).collect();
        let of = batches.len();
        self.report.batches = Some(Batched { sent: of, read: 0 });
        (self.server.keep_report(&self.tenant, &self.report).await).map_err(|e| e.message)?;
        for (index, items) in batches.into_iter().enumerate() {
            let batch = SyncBatch {
                tenant: self.tenant.to_string(),
                source: self.report.source.clone(),
                sync: self.report.id.clone(),
                index,
                of,
                items,
            };
            self.send_batch(batch).await?;
        }
        Ok(())
    }

    /// Sends one batch of this sync, in the source's group.
    pub(super) async fn send_batch(&self, batch: SyncBatch) -> Result<(), String> {
        let Some(queue) = self.server.batches.clone() else {
            return Err("this process has no queue to send batches to".into());
        };
        let group = group(&self.tenant, &self.report.source);
        let dedup = format!("{}/{}", self.report.id, batch.index);
        let (index, of) = (batch.index, batch.of);
        (queue.send(&group, &dedup, &SyncMessage::Batch(batch)).await)
            .map_err(|e| format!("the sync queue refused batch {} of {of}: {e}", index + 1))
    }

    /// Reads the pages or objects of a batch another process handed out: an `item` for each,
    /// and those its time did not reach (to be sent again: a site's `Crawl-delay` may make a
    /// batch longer than an invocation). The sync's byte cap holds across its batches; a
    /// cancel stops it between items (or during a wait for a site's turn).
    pub(super) async fn read_batch(
        &mut self,
        items: Vec<BatchItem>,
        live: &Live,
    ) -> (Vec<Value>, Vec<BatchItem>) {
        let mut done = Vec::new();
        let max_bytes = self.source.max_bytes;
        for item in items.iter().filter(|i| i.held) {
            self.held.insert(item.origin.clone(), item.version.clone());
        }
        // What the time limit did not leave room for goes back; a cancel ends the sync.
        let mut out_of_time = false;
        let mut stop = |report: &mut SyncReport, why| match why {
            sluice_contract::cancel::Stopped::TimedOut => out_of_time = true,
            why => report.cut = Some(stopped(why)),
        };
        if let Some(s3) = self.source.s3.clone() {
            let Some(objects) = self.server.objects.clone() else {
                let why = "this process reads no S3 buckets (it has no AWS region: set AWS_REGION)";
                let failed = (items.iter()).map(|i| self.failed(&i.origin, why));
                return (failed.collect(), Vec::new());
            };
            for (i, batch_item) in items.iter().enumerate() {
                if let Err(why) = live.cancel.check() {
                    stop(&mut self.report, why);
                    break;
                }
                if self.report.bytes > max_bytes {
                    self.report.cut = Some(format!("the byte cap ({max_bytes} bytes) was reached"));
                    self.report.skipped.caps += items.len() - i;
                    break;
                }
                let Some(object) = &batch_item.object else {
                    done.push(
                        self.failed(&batch_item.origin, "the batch did not say which object"),
                    );
                    continue;
                };
                done.push(self.object(&s3.bucket, object, &objects).await);
            }
        } else if let Some(site) = self.source.website.clone() {
            let held: HashMap<String, Validator> = (self.held.iter())
                .filter_map(|(origin, v)| {
                    Some((origin.clone(), Validator::from_kept(v.as_deref()?)?))
                })
                .collect();
            let interval = self.server.limits.sync.interval();
            let walked = Site {
                sitemap: None,
                start: items.iter().map(|i| i.origin.clone()).collect(),
                scope: site.scope(),
                max_pages: items.len(),
                max_depth: 0,
                max_bytes: max_bytes.saturating_sub(self.report.bytes),
                max_page_bytes: self.server.limits.max_ingest_bytes,
                interval,
            };
            let fetcher = self.server.fetcher();
            let mut crawl = match Crawl::new(&fetcher, walked, held) {
                Ok(c) => c,
                Err(refused) => {
                    let why = format!("a URL of the batch {refused}");
                    let failed = (items.iter()).map(|i| self.failed(&i.origin, &why));
                    return (failed.collect(), Vec::new());
                }
            };
            // The batch before this one asked the same site a moment ago: its turn first.
            match until_stopped(live, tokio::time::sleep(interval)).await {
                Err(why) => stop(&mut self.report, why),
                Ok(()) => loop {
                    match until_stopped(live, crawl.next()).await {
                        Ok(Some(visit)) => done.push(self.visited(visit).await),
                        Ok(None) => break,
                        Err(why) => {
                            stop(&mut self.report, why);
                            break;
                        }
                    }
                },
            }
            if !out_of_time {
                if self.report.cut.is_none() {
                    self.report.cut = crawl.cut().map(str::to_string);
                }
                self.report.skipped.caps += crawl.not_reached().0;
            }
        }
        let left = match out_of_time {
            true => {
                let reached: HashSet<&str> =
                    (done.iter()).filter_map(|d| d["item"].as_str()).collect();
                (items.iter())
                    .filter(|i| !reached.contains(i.origin.as_str()))
                    .cloned()
                    .collect()
            }
            false => Vec::new(),
        };
        (done, left)
    }

    /// Lists the S3 prefix whole (up to `SLUICE_SYNC_MAX_PAGES` objects), deletes what it no
    /// longer holds, then reads what is new or changed — at most the source's `max_pages` and
    /// `max_bytes` — starting after where the last sync stopped: an `item` for each object
    /// (the stream's `Err` says why the listing failed).
    pub(super) fn list_objects<'a>(
        &'a mut self,
        s3: sluice_contract::sources::S3Prefix,
        live: &'a Live,
    ) -> impl futures::Stream<Item = Result<Value, String>> + 'a {
        async_stream::stream! {
            let Some(objects) = self.server.objects.clone() else {
                yield Err("this process reads no S3 buckets (it has no AWS region: set AWS_REGION)".to_string());
                return;
            };
            let most = self.server.limits.sync.max_pages;
            let (mut listed, mut after, mut whole) = (Vec::new(), None, true);
            'listing: loop {
                let page = match objects.list(&s3.bucket, &s3.prefix, after.take()).await {
                    Ok(page) => page,
                    Err(e) => {
                        yield Err(format!("s3://{}/{} could not be listed: {e}", s3.bucket, s3.prefix));
                        return;
                    }
                };
                // A "folder" is a key ending in / with nothing in it.
                for object in page.objects.into_iter().filter(|o| !(o.key.ends_with('/') && o.size == 0)) {
                    if listed.len() >= most {
                        whole = false;
                        break 'listing;
                    }
                    listed.push(object);
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            let origin = |o: &Listed| format!("s3://{}/{}", s3.bucket, o.key);
            if whole {
                let kept: HashSet<String> = listed.iter().map(origin).collect();
                for data in self.sweep(&kept, "no longer in the bucket").await {
                    yield Ok(data);
                }
            } else {
                self.report.cut = Some(format!("the prefix holds more than {most} objects (SLUICE_SYNC_MAX_PAGES)"));
            }
            if let Some(at) = (self.resume.as_ref()).and_then(|r| listed.iter().position(|o| origin(o) == *r)) {
                listed.rotate_left(at + 1);
            }
            let (mut read, mut last) = (0usize, None);
            for (i, object) in listed.iter().enumerate() {
                if let Err(why) = live.cancel.check() {
                    self.report.cut = Some(stopped(why));
                    break;
                }
                let unchanged = self.held.get(&origin(object)) == Some(&Some(object_version(object)));
                if !unchanged && read >= self.source.max_pages {
                    self.report.cut = Some(format!("the object cap ({}) was reached", self.source.max_pages));
                    self.report.skipped.caps += listed.len() - i;
                    break;
                }
                if !unchanged && self.report.bytes + self.planned > self.source.max_bytes {
                    self.report.cut = Some(format!("the byte cap ({} bytes) was reached", self.source.max_bytes));
                    self.report.skipped.caps += listed.len() - i;
                    break;
                }
                read += usize::from(!unchanged);
                last = Some(origin(object));
                live.done.fetch_add(1, Ordering::SeqCst);
                yield Ok(self.object(&s3.bucket, object, &objects).await);
            }
            if self.report.cut.is_some() {
                self.report.resume_after = last;
            }
        }
    }

    /// One listed object: unchanged (its ETag and access tag are the ones held), or read and
    /// written.
    pub(super) async fn object(
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
        if let Some(queued) = self.hand_out(&origin, Some(object)) {
            return queued;
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
