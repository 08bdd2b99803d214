//! `/v1/sources`: a tenant's sources, checked and kept; a sync reconciles the tenant's
//! documents with a website served on 127.0.0.1 (the operator's allow-list here:
//! `127.0.0.1/32`) or with a bucket stand-in — added, changed, unchanged, gone — and reports
//! numbers that add up; a second sync of an unchanged source embeds nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::sources::{
    Listed, Object, ObjectPage, Objects, ObjectsError, SyncBatch, SyncMessage,
};
use sluice_testkit::MemoryBatches;
use sluice_testkit::site::{Page, Site};

use crate::kit::{App, Kit, Stream, key_for};

/// Syncs reach 127.0.0.1 and do not wait between requests.
const OPEN: &[(&str, &str)] = &[
    ("SLUICE_FETCH_ALLOW", "127.0.0.1/32"),
    ("SLUICE_SYNC_HOST_RATE", "1000"),
];

/// The app over `overrides`, and how many texts it has embedded.
fn counted(overrides: &[(&str, &str)]) -> (App, Arc<AtomicUsize>) {
    let embedded = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&embedded);
    let mut kit = Kit::new(overrides);
    kit.parts.embedder = Some(Arc::new(sluice_testkit::Hooked::new().on_embed(
        move |texts| {
            counter.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(())
        },
    )));
    (kit.app(), embedded)
}

async fn put(app: &App, name: &str, source: &Value) -> crate::kit::Reply {
    app.send(
        Method::PUT,
        &format!("/v1/sources/{name}"),
        &[],
        source.to_string(),
    )
    .await
}

/// Runs a sync of `name` to its end: its events, and its report.
async fn sync(app: &App, name: &str) -> (Stream, Value) {
    let reply = (app.send(Method::POST, &format!("/v1/sources/{name}/sync"), &[], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let stream = Stream::parse(&reply.raw);
    assert_eq!(
        stream.names().first(),
        Some(&"sync"),
        "{:?}",
        stream.names()
    );
    let report = stream.first("report").clone();
    // The numbers add up: every page or object listed is one of the four outcomes.
    let n = |k: &str| report[k].as_u64().unwrap();
    assert_eq!(
        n("listed"),
        n("added") + n("changed") + n("unchanged") + n("failures"),
        "{report}"
    );
    let items = stream.events.iter().filter(|(e, _)| e == "item").count() as u64;
    assert!(items >= n("listed") + n("deleted"), "{report}");
    (stream, report)
}

/// A site of one page, `/docs/`, whose `robots.txt` asks `delay` seconds between requests:
/// a sync of it waits before its first page.
async fn slow_site(delay: u32) -> Arc<Site> {
    let site = Site::serve().await;
    site.put(
        "/robots.txt",
        Page::text(&format!("User-agent: *\nCrawl-delay: {delay}\n")),
    );
    site.put("/docs/", Page::article("Index", "The index.", &[]));
    site
}

/// A site whose index at `/docs/` links `pages` pages, its `robots.txt` asking `delay` seconds
/// between requests: a walk of it takes `pages` × `delay` at least.
async fn linked_site(pages: usize, delay: &str) -> Arc<Site> {
    let site = Site::serve().await;
    site.put(
        "/robots.txt",
        Page::text(&format!("User-agent: *\nCrawl-delay: {delay}\n")),
    );
    let names: Vec<String> = (0..pages).map(|i| format!("p{i}")).collect();
    let links: Vec<&str> = names.iter().map(String::as_str).collect();
    site.put("/docs/", Page::article("Index", "The index.", &links));
    for p in &names {
        site.put(&format!("/docs/{p}"), Page::article(p, "A page.", &[]));
    }
    site
}

/// Cancels the walk of source `slow` through `app` while `reading` reads its stream: its
/// report, checked stopped by the cancel before it had added all its `pages` pages.
async fn cancel_walk(
    app: &App,
    reading: tokio::task::JoinHandle<crate::kit::Reply>,
    pages: u64,
) -> Value {
    let canceled = app
        .send(Method::POST, "/v1/sources/slow/sync/cancel", &[], "")
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.raw);
    let stream = Stream::parse(&reading.await.unwrap().raw);
    let report = stream.first("report").clone();
    assert_eq!(report["status"], "stopped", "{report}");
    let cut = report["cut"].as_str().unwrap_or_default();
    assert!(cut.contains("cancel"), "{report}");
    assert!(report["added"].as_u64().unwrap() < pages, "{report}");
    report
}

/// Two processes over one records store they share (two Lambda environments).
fn two_processes() -> (App, App) {
    let shared: Arc<dyn sluice_contract::evals::Records> =
        Arc::new(sluice_testkit::MemoryRecords::across_processes());
    let process = |records: Arc<dyn sluice_contract::evals::Records>| {
        let mut kit = Kit::new(OPEN);
        kit.parts.records = Some(records);
        kit.app()
    };
    (process(Arc::clone(&shared)), process(shared))
}

/// A sync of `name` begun, its stream unread: it goes on while the response is held.
async fn open_sync(app: &App, name: &str) -> axum::response::Response {
    let path = format!("/v1/sources/{name}/sync");
    app.open(crate::kit::request(Method::POST, &path, &[], ""))
        .await
}

/// The tenant's documents: id → (origin, title).
async fn documents(app: &App) -> BTreeMap<String, (String, String)> {
    let reply = (app.send(Method::GET, "/v1/documents?limit=1000", &[], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    (reply.body["documents"].as_array().unwrap().iter())
        .map(|d| {
            let origin = d["origin"].as_str().unwrap_or_default().to_string();
            let title = d["title"].as_str().unwrap_or_default().to_string();
            (d["id"].as_str().unwrap().to_string(), (origin, title))
        })
        .collect()
}

fn counts(report: &Value) -> [u64; 4] {
    ["added", "changed", "unchanged", "deleted"].map(|k| report[k].as_u64().unwrap())
}

#[tokio::test]
async fn sources_are_checked_kept_listed_and_deleted() {
    let app = Kit::new(OPEN).app();
    for (source, field) in [
        (
            json!({"website": {"start": ["ftp://docs.example.com/"]}}),
            "website.start[0]",
        ),
        (
            json!({"website": {"start": ["https://u:p@docs.example.com/"]}}),
            "website.start[0]",
        ),
        (
            json!({"s3": {"bucket": "docs"}, "website": {"start": ["https://e.com/"]}}),
            "source",
        ),
        (
            json!({"s3": {"bucket": "docs"}, "max_pages": 10_001}),
            "max_pages",
        ),
    ] {
        let reply = put(&app, "docs", &source).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_source"),
            "{}",
            reply.raw
        );
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{}",
            reply.raw
        );
    }
    assert_eq!(
        put(&app, "no%20spaces", &json!({"s3": {"bucket": "docs"}}))
            .await
            .status,
        400
    );
    let site = json!({"website": {"start": ["https://docs.example.com/"], "scope": ["/guide/"]}, "every_minutes": 60});
    let reply = put(&app, "docs", &site).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["version"], 1);
    assert_eq!(
        reply.body["source"]["max_pages"], 1000,
        "the default cap is shown"
    );
    let listed = app.send(Method::GET, "/v1/sources", &[], "").await;
    assert_eq!(listed.body["sources"][0]["name"], "docs");
    let one = app.send(Method::GET, "/v1/sources/docs", &[], "").await;
    assert_eq!(one.body["source"]["every_minutes"], 60);
    let missing = app.send(Method::GET, "/v1/sources/nope", &[], "").await;
    assert_eq!((missing.status, missing.code()), (404, "unknown_source"));
    let gone = app.send(Method::DELETE, "/v1/sources/docs", &[], "").await;
    assert_eq!(gone.status, 200, "{}", gone.raw);
    let again = app.send(Method::DELETE, "/v1/sources/docs", &[], "").await;
    assert_eq!(again.code(), "unknown_source");
}

#[tokio::test]
async fn sources_need_the_documents_permission() {
    let (keys, key) = key_for("acme", &[Permission::Answer, Permission::Settings]);
    let app = Kit::new(OPEN).keys(keys).app();
    let bearer = format!("Bearer {key}");
    let reply = (app.send(
        Method::GET,
        "/v1/sources",
        &[("authorization", &bearer)],
        "",
    ))
    .await;
    assert_eq!(reply.status, 403, "{}", reply.raw);
}

/// The whole cycle on a site: the first sync adds every page in scope; after the site
/// changes, the next adds, rewrites, keeps and deletes exactly what changed; a third, with
/// nothing changed, embeds nothing and asks each tagged page with its validator.
#[tokio::test]
async fn a_website_sync_makes_the_tenants_documents_the_sites_pages() {
    let site = Site::serve().await;
    site.put(
        "/robots.txt",
        Page::text("User-agent: *\nDisallow: /docs/private\n"),
    );
    let index = |links: &[&str]| Page::article("Docs", "Welcome to the docs.", links);
    site.put("/docs/", index(&["a", "b", "c", "private/x", "/blog/out"]));
    site.put(
        "/docs/a",
        Page::article("Alpha", "Alpha pages are tagged.", &[]).with("etag", "\"a1\""),
    );
    site.put(
        "/docs/b",
        Page::article("Beta", "Beta explains limits.", &[]).with("etag", "\"b1\""),
    );
    site.put(
        "/docs/c",
        Page::article("Gamma", "Gamma has no validator.", &[]),
    );
    site.put(
        "/docs/private/x",
        Page::article("Private", "Not for crawlers.", &[]),
    );
    site.put("/blog/out", Page::article("Blog", "Out of scope.", &[]));
    let (app, embedded) = counted(OPEN);
    let source = json!({
        "website": {"start": [site.url("/docs/")], "scope": ["/docs/"]},
        "metadata": {"team": "docs"},
    });
    assert_eq!(put(&app, "site", &source).await.status, 200);

    let (_, first) = sync(&app, "site").await;
    assert_eq!(first["status"], "done", "{first}");
    assert_eq!(counts(&first), [4, 0, 0, 0], "{first}");
    assert_eq!(first["skipped"]["robots"], 1);
    let held = documents(&app).await;
    let host = site.base.trim_start_matches("http://").to_string();
    let ids: Vec<String> = ["/docs/", "/docs/a", "/docs/b", "/docs/c"]
        .iter()
        .map(|p| format!("{host}{p}"))
        .collect();
    assert_eq!(held.keys().cloned().collect::<Vec<_>>(), {
        let mut sorted = ids.clone();
        sorted.sort();
        sorted
    });
    assert_eq!(held[&ids[1]], (site.url("/docs/a"), "Alpha".to_string()));
    // The source's metadata and name are on its documents: a filter finds them.
    let filtered = app
        .send(
            Method::GET,
            "/v1/documents?filter=%7B%22team%22%3A%22docs%22%2C%22sluice_source%22%3A%22site%22%7D",
            &[],
            "",
        )
        .await;
    assert_eq!(
        filtered.body["documents"].as_array().unwrap().len(),
        4,
        "{}",
        filtered.raw
    );

    // The site changes: b rewritten, c removed (404), d added, a untouched, and a redirect.
    site.put("/docs/", index(&["a", "b", "c", "d", "moved"]));
    site.put(
        "/docs/b",
        Page::article("Beta", "Beta explains the new limits.", &[]).with("etag", "\"b2\""),
    );
    site.remove("/docs/c");
    site.put("/docs/d", Page::article("Delta", "Delta is new.", &[]));
    site.put("/docs/moved", Page::redirect("/docs/a"));
    let before = embedded.load(Ordering::SeqCst);
    let (_, second) = sync(&app, "site").await;
    assert_eq!(second["status"], "done", "{second}");
    // Added d; changed b; unchanged a (304) and the index (its text is the same: the links
    // are not); deleted c.
    assert_eq!(counts(&second), [1, 1, 2, 1], "{second}");
    assert_eq!(second["skipped"]["redirects"], 1);
    let held = documents(&app).await;
    assert!(!held.contains_key(&format!("{host}/docs/c")));
    assert!(held.contains_key(&format!("{host}/docs/d")));
    assert_eq!(held.len(), 4);
    assert!(embedded.load(Ordering::SeqCst) > before);

    // Nothing changed: nothing embedded, tagged pages asked with their validators.
    let before = embedded.load(Ordering::SeqCst);
    let (_, third) = sync(&app, "site").await;
    assert_eq!(counts(&third), [0, 0, 4, 0], "{third}");
    assert_eq!(
        embedded.load(Ordering::SeqCst),
        before,
        "an unchanged sync embeds nothing"
    );
    let asked = site.requests();
    assert!(
        asked.contains(&("/docs/b".into(), Some("\"b2\"".into()))),
        "{asked:?}"
    );
    // A new validator on the same text: fetched again, found unchanged, not embedded.
    let retag = Page::article("Alpha", "Alpha pages are tagged.", &[]).with("etag", "\"a2\"");
    site.put("/docs/a", retag);
    let (_, retagged) = sync(&app, "site").await;
    assert_eq!(counts(&retagged), [0, 0, 4, 0], "{retagged}");
    assert_eq!(
        embedded.load(Ordering::SeqCst),
        before,
        "a new ETag alone embeds nothing"
    );

    // The reports are kept, newest first; the source shows its last.
    let syncs = app
        .send(Method::GET, "/v1/sources/site/syncs", &[], "")
        .await;
    let kept = syncs.body["syncs"].as_array().unwrap();
    assert_eq!(kept.len(), 4);
    assert_eq!(kept[0]["id"], retagged["id"]);
    let shown = app.send(Method::GET, "/v1/sources/site", &[], "").await;
    assert_eq!(shown.body["last_sync"]["id"], retagged["id"]);

    // Deleting the source deletes its documents (unless asked to keep them).
    let deleted = app.send(Method::DELETE, "/v1/sources/site", &[], "").await;
    assert_eq!(deleted.body["documents"], 4, "{}", deleted.raw);
    assert!(documents(&app).await.is_empty());
}

/// A sync that cannot list its source, or is cut by a cap, deletes nothing it did not see.
#[tokio::test]
async fn a_sync_that_cannot_see_the_whole_source_deletes_nothing_unseen() {
    let site = Site::serve().await;
    let pages: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    let links: Vec<&str> = pages.iter().map(String::as_str).collect();
    site.put("/docs/", Page::article("Index", "The index.", &links));
    for p in &pages {
        site.put(
            &format!("/docs/{p}"),
            Page::article(p, "A page of the docs.", &[]),
        );
    }
    site.put(
        "/sitemap.xml",
        site.sitemap(&["/docs/p0", "/docs/p1", "/docs/p2"]),
    );
    let app = Kit::new(OPEN).app();
    let mapped = json!({"website": {"sitemap": site.url("/sitemap.xml")}});
    assert_eq!(put(&app, "mapped", &mapped).await.status, 200);
    let (_, first) = sync(&app, "mapped").await;
    assert_eq!(counts(&first), [3, 0, 0, 0], "{first}");
    // The sitemap fails: the sync fails and deletes nothing.
    site.put("/sitemap.xml", Page::status(503));
    let (_, failed) = sync(&app, "mapped").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["error"].as_str().unwrap().contains("503"),
        "{failed}"
    );
    assert_eq!(documents(&app).await.len(), 3);
    // Dropped from the sitemap: deleted.
    site.put("/sitemap.xml", site.sitemap(&["/docs/p0"]));
    let (_, dropped) = sync(&app, "mapped").await;
    assert_eq!(counts(&dropped), [0, 0, 1, 2], "{dropped}");

    // A page cap: the walk is cut; the pages it did not reach stay.
    let linked = json!({"website": {"start": [site.url("/docs/")]}, "max_pages": 7});
    assert_eq!(put(&app, "linked", &linked).await.status, 200);
    let (_, whole) = sync(&app, "linked").await;
    assert_eq!(counts(&whole)[0], 7, "{whole}");
    let capped = json!({"website": {"start": [site.url("/docs/")]}, "max_pages": 2});
    assert_eq!(put(&app, "linked", &capped).await.status, 200);
    let (_, cut) = sync(&app, "linked").await;
    assert_eq!(cut["status"], "stopped", "{cut}");
    assert!(cut["cut"].as_str().unwrap().contains("page cap"), "{cut}");
    assert_eq!(cut["deleted"], 0);
    assert_eq!(cut["skipped"]["caps"], 5, "{cut}");
}

/// Without the operator's allow-list a site on a loopback address is refused, before any
/// connection, and the report says why; nothing is written.
#[tokio::test]
async fn a_site_inside_the_network_is_refused_at_sync_time() {
    let site = Site::serve().await;
    site.put("/docs/", Page::article("Index", "The index.", &[]));
    let app = Kit::new(&[("SLUICE_SYNC_HOST_RATE", "1000")]).app();
    let source = json!({"website": {"start": [site.url("/docs/")]}});
    assert_eq!(put(&app, "inside", &source).await.status, 200);
    let (_, report) = sync(&app, "inside").await;
    assert_eq!(report["failures"], 1, "{report}");
    let why = report["failed"][0]["reason"].as_str().unwrap();
    assert!(
        why.contains("loopback") && why.contains("public addresses"),
        "{why}"
    );
    assert_eq!(site.requests().len(), 0, "nothing reached the site");
    assert!(documents(&app).await.is_empty());
}

/// One sync of a source at a time: a second is refused with 409 while the first goes; a
/// cancel stops it after the page in hand, and it deletes nothing it did not see.
#[tokio::test]
async fn one_sync_at_a_time_and_a_cancel_stops_it() {
    let site = linked_site(20, "0.3").await;
    let app = Kit::new(OPEN).app();
    let source = json!({"website": {"start": [site.url("/docs/")]}});
    assert_eq!(put(&app, "slow", &source).await.status, 200);
    let open = open_sync(&app, "slow").await;
    assert_eq!(open.status(), 200);
    let reading = tokio::spawn(crate::kit::Reply::read(open));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let second = app
        .send(Method::POST, "/v1/sources/slow/sync", &[], "")
        .await;
    assert_eq!(
        (second.status, second.code()),
        (409, "sync_running"),
        "{}",
        second.raw
    );
    let going = app.send(Method::GET, "/v1/sources/slow", &[], "").await;
    assert!(going.body["syncing"]["id"].is_string(), "{}", going.raw);
    cancel_walk(&app, reading, 21).await;
    let none = app
        .send(Method::POST, "/v1/sources/slow/sync/cancel", &[], "")
        .await;
    assert_eq!(none.code(), "unknown_source");
}

/// A scheduled source is synced when it is due, and not again before its time.
#[tokio::test]
async fn due_syncs_run_once_per_schedule() {
    let site = Site::serve().await;
    site.put("/docs/", Page::article("Index", "The index.", &[]));
    let app = Kit::new(OPEN).app();
    let every = json!({"website": {"start": [site.url("/docs/")]}, "every_minutes": 60});
    let manual = json!({"website": {"start": [site.url("/docs/")]}});
    assert_eq!(put(&app, "hourly", &every).await.status, 200);
    assert_eq!(put(&app, "manual", &manual).await.status, 200);
    assert_eq!(app.server.run_due_syncs().await.unwrap(), 1);
    assert_eq!(
        app.server.run_due_syncs().await.unwrap(),
        0,
        "going already"
    );
    // Its report, once it has ended.
    let mut report = Value::Null;
    for _ in 0..200 {
        let syncs = app
            .send(Method::GET, "/v1/sources/hourly/syncs", &[], "")
            .await;
        report = syncs.body["syncs"][0].clone();
        if report["status"] == "done" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(report["trigger"], "schedule", "{report}");
    assert_eq!(report["added"], 1, "{report}");
    assert_eq!(
        app.server.run_due_syncs().await.unwrap(),
        0,
        "not due again yet"
    );
    let none = app
        .send(Method::GET, "/v1/sources/manual/syncs", &[], "")
        .await;
    assert_eq!(none.body["syncs"], json!([]));
}

/// An object of the [`Bucket`]: its text, ETag and access tag.
type Stored = (String, String, Option<String>);

/// A bucket in memory: objects by key, each with its ETag and access tag.
#[derive(Default)]
struct Bucket {
    objects: Mutex<BTreeMap<String, Stored>>,
    reads: AtomicUsize,
}

impl Bucket {
    fn put(&self, key: &str, text: &str, access: Option<&str>) {
        let etag = format!("\"{}\"", &sluice_contract::sha256_hex(text.as_bytes())[..8]);
        let mut objects = self.objects.lock().unwrap();
        objects.insert(key.into(), (text.into(), etag, access.map(str::to_string)));
    }
}

#[async_trait::async_trait]
impl Objects for Bucket {
    async fn list(
        &self,
        _bucket: &str,
        prefix: &str,
        after: Option<String>,
    ) -> Result<ObjectPage, ObjectsError> {
        // Two objects a page, to walk the pages.
        let objects = self.objects.lock().unwrap();
        let listed: Vec<Listed> = (objects.iter())
            .filter(|(k, _)| k.starts_with(prefix) && after.as_ref().is_none_or(|a| *k > a))
            .take(2)
            .map(|(k, (text, etag, access))| Listed {
                key: k.clone(),
                etag: etag.clone(),
                size: text.len() as u64,
                access: access.clone(),
            })
            .collect();
        let next = (listed.len() == 2).then(|| listed[1].key.clone());
        Ok(ObjectPage {
            objects: listed,
            next,
        })
    }

    async fn read(&self, _bucket: &str, key: &str, _max: usize) -> Result<Object, ObjectsError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let objects = self.objects.lock().unwrap();
        let (text, _, _) = objects.get(key).ok_or(ObjectsError::Gone)?;
        Ok(Object {
            bytes: text.clone().into_bytes(),
            content_type: None,
        })
    }
}

/// The access list of the document `id`.
async fn access(app: &App, id: &str) -> Value {
    let doc = app
        .send(Method::GET, &format!("/v1/documents/{id}"), &[], "")
        .await;
    doc.body["metadata"]["_access"].clone()
}

/// An S3 prefix: objects added, changed, re-tagged and deleted with no event delivered are
/// reconciled; an unchanged object is not read again; its tag is its access list.
#[tokio::test]
async fn an_s3_prefix_sync_follows_the_bucket_and_its_tags() {
    let bucket = Arc::new(Bucket::default());
    bucket.put("kb/a.md", "# Alpha\n\nAlpha text.", None);
    bucket.put("kb/b.md", "# Beta\n\nBeta text.", Some("group:hr"));
    bucket.put("kb/c.txt", "Gamma text.", None);
    bucket.put("other/x.md", "# Outside\n\nNot under the prefix.", None);
    let objects = Arc::clone(&bucket);
    let reads = &bucket.reads;
    let app = Kit::new(OPEN).app_with(move |server| server.objects = Some(objects));
    let source = json!({"s3": {"bucket": "docs", "prefix": "kb/"}, "access": "group:staff"});
    assert_eq!(put(&app, "kb", &source).await.status, 200);
    let (_, first) = sync(&app, "kb").await;
    assert_eq!(counts(&first), [3, 0, 0, 0], "{first}");
    let held = documents(&app).await;
    assert_eq!(
        held.keys().cloned().collect::<Vec<_>>(),
        ["docs/kb/a.md", "docs/kb/b.md", "docs/kb/c.txt"]
    );
    assert_eq!(
        access(&app, "docs/kb/b.md").await,
        json!(["group:hr"]),
        "the tag's list"
    );
    assert_eq!(
        access(&app, "docs/kb/a.md").await,
        json!(["group:staff"]),
        "the source's list"
    );

    // No event delivered: a changed, a re-tagged (same bytes, same ETag), one deleted, one new.
    bucket.put("kb/a.md", "# Alpha\n\nAlpha text, changed.", None);
    bucket.put("kb/b.md", "# Beta\n\nBeta text.", Some("group:legal"));
    bucket.objects.lock().unwrap().remove("kb/c.txt");
    bucket.put("kb/d.md", "# Delta\n\nDelta text.", None);
    let before = reads.load(Ordering::SeqCst);
    let (_, second) = sync(&app, "kb").await;
    assert_eq!(counts(&second), [1, 2, 0, 1], "{second}");
    assert_eq!(reads.load(Ordering::SeqCst) - before, 3, "a, b and d read");
    assert_eq!(access(&app, "docs/kb/b.md").await, json!(["group:legal"]));
    assert!(!documents(&app).await.contains_key("docs/kb/c.txt"));
    let before = reads.load(Ordering::SeqCst);
    let (_, third) = sync(&app, "kb").await;
    assert_eq!(counts(&third), [0, 0, 3, 0], "{third}");
    assert_eq!(reads.load(Ordering::SeqCst), before, "nothing read again");
}

/// Without a bucket client (no AWS region), an S3 source's sync fails and says why.
#[tokio::test]
async fn an_s3_source_without_aws_fails_saying_why() {
    let app = Kit::new(OPEN).app();
    assert_eq!(
        put(&app, "kb", &json!({"s3": {"bucket": "docs"}}))
            .await
            .status,
        200
    );
    let (_, report) = sync(&app, "kb").await;
    assert_eq!(report["status"], "failed");
    assert!(
        report["error"].as_str().unwrap().contains("AWS_REGION"),
        "{report}"
    );
}

/// Two processes over one shared records table (two Lambda environments): while one syncs a
/// source, the other refuses to sync it (409 `sync_running`) and does not count it due; once
/// it has ended, the other may. Over a store only one process reads, no record is kept while
/// a sync runs (a restart leaves nothing to wait for).
#[tokio::test]
async fn a_sync_going_in_one_process_is_seen_by_another_sharing_the_records() {
    let site = slow_site(60).await;
    let (one, other) = two_processes();
    let source = json!({"website": {"start": [site.url("/docs/")]}, "every_minutes": 1});
    assert_eq!(put(&one, "slow", &source).await.status, 200);
    // Held at its first request: the site asks for a minute between requests.
    let held = open_sync(&one, "slow").await;
    assert_eq!(held.status(), 200);
    let refused = other
        .send(Method::POST, "/v1/sources/slow/sync", &[], "")
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (409, "sync_running"),
        "{}",
        refused.raw
    );
    assert!(refused.raw.contains("another process"), "{}", refused.raw);
    assert!(other.server.due_syncs().await.unwrap().is_empty());
    let syncs = other
        .send(Method::GET, "/v1/sources/slow/syncs", &[], "")
        .await;
    assert_eq!(syncs.body["syncs"][0]["status"], "running", "{}", syncs.raw);
    // Its stream dropped (its client left): it stops, and gives its slot back, but its record
    // stays until it is stale; a cancel from any process ends it at once, and then the other
    // may sync it.
    drop(held);
    let canceled = other
        .send(Method::POST, "/v1/sources/slow/sync/cancel", &[], "")
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.raw);
    let again = one
        .send(Method::POST, "/v1/sources/slow/sync/cancel", &[], "")
        .await;
    assert_eq!(again.code(), "unknown_source", "{}", again.raw);
    let syncs = other
        .send(Method::GET, "/v1/sources/slow/syncs", &[], "")
        .await;
    assert_eq!(syncs.body["syncs"][0]["status"], "stopped", "{}", syncs.raw);
    let restarted = open_sync(&other, "slow").await;
    assert_eq!(restarted.status(), 200, "no longer refused as running");
    drop(restarted);

    // Over a store one process reads, nothing is kept while a sync runs.
    let alone = Kit::new(OPEN).app();
    assert_eq!(put(&alone, "slow", &source).await.status, 200);
    let _going = open_sync(&alone, "slow").await;
    let kept = alone
        .send(Method::GET, "/v1/sources/slow/syncs", &[], "")
        .await;
    assert_eq!(
        kept.body["syncs"].as_array().unwrap().len(),
        1,
        "{}",
        kept.raw
    );
    assert!(kept.body["syncs"][0].get("started_at").is_some());
}

/// A walk going in one process is canceled from another sharing the records (a Lambda
/// environment other than the one running it): the cancel marks its record, and the walk,
/// looking at it every ten pages, stops there, keeping what it wrote.
#[tokio::test]
async fn a_walk_going_in_one_process_is_canceled_from_another() {
    let site = linked_site(40, "0.2").await;
    let (one, other) = two_processes();
    let source = json!({"website": {"start": [site.url("/docs/")]}});
    assert_eq!(put(&one, "slow", &source).await.status, 200);
    let reading = tokio::spawn(crate::kit::Reply::read(open_sync(&one, "slow").await));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // 41 pages at 0.2 s apart take 8 s whole: it stops long before.
    let report = cancel_walk(&other, reading, 41).await;
    assert_eq!(
        documents(&one).await.len() as u64,
        report["added"].as_u64().unwrap()
    );
}

/// A source larger than one sync's cap is read whole over several: each sync starts after the
/// page or object where the last stopped (and comes round to the start); what the sitemap or
/// the bucket no longer lists is deleted by the listing, however much of it a sync then reads.
#[tokio::test]
async fn a_source_larger_than_one_sync_is_read_whole_over_several() {
    let site = Site::serve().await;
    let paths: Vec<String> = (0..5).map(|i| format!("/docs/p{i}")).collect();
    for p in &paths {
        site.put(
            p,
            Page::article(p, "A page of the docs, read in turn.", &[]),
        );
    }
    site.put("/sitemap.xml", site.sitemap(&paths));
    let bucket = Arc::new(Bucket::default());
    for k in ["a", "b", "c", "d", "e"] {
        bucket.put(
            &format!("kb/{k}.md"),
            &format!("# {k}\n\nObject {k}."),
            None,
        );
    }
    let objects = Arc::clone(&bucket);
    let app = Kit::new(OPEN).app_with(move |server| server.objects = Some(objects));
    let mapped = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "max_pages": 2});
    assert_eq!(put(&app, "site", &mapped).await.status, 200);
    let turns = [
        ([2, 0, 0, 0], "stopped", "/docs/p1"),
        ([2, 0, 0, 0], "stopped", "/docs/p3"),
        ([1, 0, 1, 0], "stopped", "/docs/p0"),
    ];
    for (expected, status, resume) in turns {
        let (_, report) = sync(&app, "site").await;
        assert_eq!(
            (counts(&report), report["status"].as_str().unwrap()),
            (expected, status),
            "{report}"
        );
        assert_eq!(report["resume_after"], json!(site.url(resume)), "{report}");
    }
    assert_eq!(
        documents(&app).await.len(),
        5,
        "every page, over three syncs"
    );
    // Two pages dropped from the sitemap: deleted by the listing of a sync its cap stops.
    site.put("/sitemap.xml", site.sitemap(&paths[2..]));
    let (_, dropped) = sync(&app, "site").await;
    assert_eq!(
        (dropped["deleted"].clone(), dropped["status"].clone()),
        (json!(2), json!("stopped")),
        "{dropped}"
    );
    assert_eq!(documents(&app).await.len(), 3);

    // An S3 prefix: the cap counts objects read; unchanged ones cost none.
    let prefix = json!({"s3": {"bucket": "docs", "prefix": "kb/"}, "max_pages": 2});
    assert_eq!(put(&app, "kb", &prefix).await.status, 200);
    let (_, first) = sync(&app, "kb").await;
    assert_eq!(
        (counts(&first), first["resume_after"].clone()),
        ([2, 0, 0, 0], json!("s3://docs/kb/b.md")),
        "{first}"
    );
    let (_, second) = sync(&app, "kb").await;
    assert_eq!(counts(&second), [2, 0, 0, 0], "{second}");
    let (_, third) = sync(&app, "kb").await;
    assert_eq!(
        (counts(&third), third["status"].clone()),
        ([1, 0, 4, 0], json!("done")),
        "{third}"
    );
    bucket.objects.lock().unwrap().remove("kb/a.md");
    for k in ["c", "d", "e"] {
        bucket.put(
            &format!("kb/{k}.md"),
            &format!("# {k}\n\nObject {k}, changed."),
            None,
        );
    }
    let (_, cut) = sync(&app, "kb").await;
    assert_eq!(
        (
            cut["deleted"].clone(),
            cut["changed"].clone(),
            cut["status"].clone()
        ),
        (json!(1), json!(2), json!("stopped")),
        "{cut}"
    );
}

/// A sync waiting on a site's long `Crawl-delay` is stopped by a cancel, or by its time limit,
/// during the wait — not after it.
#[tokio::test]
async fn a_long_crawl_delay_does_not_outlast_a_cancel_or_the_time_limit() {
    let site = slow_site(600).await;
    let source = json!({"website": {"start": [site.url("/docs/")]}});
    let app = Kit::new(OPEN).app();
    assert_eq!(put(&app, "slow", &source).await.status, 200);
    let reading = tokio::spawn(crate::kit::Reply::read(open_sync(&app, "slow").await));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let canceled = app
        .send(Method::POST, "/v1/sources/slow/sync/cancel", &[], "")
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.raw);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), reading).await;
    let report = Stream::parse(&ended.expect("stopped during the wait").unwrap().raw);
    assert!(
        report.first("report")["cut"]
            .as_str()
            .unwrap()
            .contains("canceled")
    );
    // The time limit, the same way.
    let timed = Kit::new(&[OPEN[0], OPEN[1], ("SLUICE_SYNC_TIMEOUT_MS", "1000")]).app();
    assert_eq!(put(&timed, "slow", &source).await.status, 200);
    let started = std::time::Instant::now();
    let (_, report) = sync(&timed, "slow").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(
        report["cut"].as_str().unwrap().contains("time limit"),
        "{report}"
    );
}

/// Reads `messages` in order, as the queue's consumer does: the last one's report.
async fn read(app: &App, messages: Vec<(String, SyncMessage)>) -> Value {
    let mut last = Value::Null;
    for (_, message) in messages {
        last = app.server.sync_message(message, None).await.unwrap();
    }
    last["report"].clone()
}

/// The batch a message carries.
fn batch(message: &SyncMessage) -> &SyncBatch {
    match message {
        SyncMessage::Batch(batch) => batch,
        other => panic!("not a batch: {other:?}"),
    }
}

/// With a queue (on AWS), a sitemap or a prefix is listed by the sync, what is gone deleted
/// there, and what is new or changed sent in batches of ten in one group per source; each
/// batch read adds to the sync's report, which stays `running` until the last ends it. The
/// numbers add up as an inline sync's do; an unchanged prefix sends no batch at all.
#[tokio::test]
async fn with_a_queue_a_sitemap_or_a_prefix_is_read_by_batches_and_the_last_ends_the_sync() {
    let site = Site::serve().await;
    let paths: Vec<String> = (0..23).map(|i| format!("/docs/p{i:02}")).collect();
    for p in &paths {
        let page = Page::article(p, &format!("Page {p} of the docs."), &[]);
        site.put(p, page.with("etag", &format!("\"{p}-1\"")));
    }
    site.put("/sitemap.xml", site.sitemap(&paths));
    let bucket = Arc::new(Bucket::default());
    for i in 0..12 {
        bucket.put(
            &format!("kb/{i:02}.md"),
            &format!("# O{i}\n\nObject {i}."),
            None,
        );
    }
    let queue = Arc::new(MemoryBatches::default());
    let (objects, batches) = (Arc::clone(&bucket), Arc::clone(&queue));
    let mut kit = Kit::new(OPEN);
    let embedded = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&embedded);
    kit.parts.embedder = Some(Arc::new(sluice_testkit::Hooked::new().on_embed(
        move |texts| {
            counter.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(())
        },
    )));
    let app = kit.app_with(move |server| {
        server.objects = Some(objects);
        server.batches = Some(batches);
    });
    let mapped = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "every_minutes": 1});
    assert_eq!(put(&app, "site", &mapped).await.status, 200);

    // The sync lists and hands out: every page queued, none read yet.
    let (stream, sent) = sync(&app, "site").await;
    assert_eq!(sent["status"], "running", "{sent}");
    assert_eq!(sent["batches"], json!({"sent": 3, "read": 0}), "{sent}");
    let queued = (stream.events.iter()).filter(|(e, d)| e == "item" && d["outcome"] == "queued");
    assert_eq!(queued.count(), 23);
    assert!(
        documents(&app).await.is_empty(),
        "nothing read by the lister"
    );
    assert_eq!(site.asked("/docs/p00"), 0);
    // Running: not due again, and another sync of it is refused.
    assert!(app.server.due_syncs().await.unwrap().is_empty());
    let listed = app.send(Method::GET, "/v1/sources/site", &[], "").await;
    assert_eq!(
        listed.body["last_sync"]["status"], "running",
        "{}",
        listed.raw
    );
    let batches = queue.take();
    assert_eq!(batches.len(), 3);
    let group = &batches[0].0;
    assert!(
        batches.iter().all(|(g, _)| g == group),
        "one group per source"
    );
    let sizes: Vec<(usize, usize, usize)> = (batches.iter())
        .map(|(_, m)| (batch(m).index, batch(m).of, batch(m).items.len()))
        .collect();
    assert_eq!(sizes, [(0, 3, 10), (1, 3, 10), (2, 3, 3)]);

    // The batches read in order: the first two leave it running, the last ends it.
    let first = app
        .server
        .sync_message(batches[0].1.clone(), None)
        .await
        .unwrap();
    assert_eq!(first["report"]["status"], "running", "{first}");
    assert_eq!(first["report"]["added"], 10, "{first}");
    let done = read(&app, batches[1..].to_vec()).await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(counts(&done), [23, 0, 0, 0], "{done}");
    assert_eq!(
        (done["listed"].clone(), done["batches"]["read"].clone()),
        (json!(23), json!(3))
    );
    assert!(done["ended_at"].is_string(), "{done}");
    assert_eq!(documents(&app).await.len(), 23);
    let kept = app
        .send(Method::GET, "/v1/sources/site/syncs", &[], "")
        .await;
    assert_eq!(
        kept.body["syncs"][0], done,
        "the report kept is the last batch's"
    );

    // One page changed, one dropped from the sitemap (deleted by the lister), one gone (404,
    // deleted by its batch); the rest answer 304 and embed nothing.
    site.put(
        "/docs/p03",
        Page::article("p03", "Page three, rewritten.", &[]).with("etag", "\"p03-2\""),
    );
    site.put("/docs/p07", Page::status(404));
    let mut fewer = paths.clone();
    fewer.retain(|p| p != "/docs/p11");
    site.put("/sitemap.xml", site.sitemap(&fewer));
    let before = embedded.load(Ordering::SeqCst);
    let (_, sent) = sync(&app, "site").await;
    assert_eq!(
        (sent["deleted"].clone(), sent["batches"]["sent"].clone()),
        (json!(1), json!(3))
    );
    let done = read(&app, queue.take()).await;
    assert_eq!(counts(&done), [0, 1, 20, 2], "{done}");
    assert_eq!(done["status"], "done", "{done}");
    assert!(
        embedded.load(Ordering::SeqCst) - before <= 2,
        "only the changed page embedded"
    );
    assert_eq!(documents(&app).await.len(), 21);

    // A prefix: new objects read by batches; unchanged, nothing is sent.
    let prefix = json!({"s3": {"bucket": "docs", "prefix": "kb/"}});
    assert_eq!(put(&app, "kb", &prefix).await.status, 200);
    let (_, sent) = sync(&app, "kb").await;
    assert_eq!(sent["batches"], json!({"sent": 2, "read": 0}), "{sent}");
    let done = read(&app, queue.take()).await;
    assert_eq!(
        (done["status"].clone(), counts(&done)),
        (json!("done"), [12, 0, 0, 0]),
        "{done}"
    );
    let reads = bucket.reads.load(Ordering::SeqCst);
    let (_, again) = sync(&app, "kb").await;
    assert_eq!(
        (again["status"].clone(), counts(&again)),
        (json!("done"), [0, 0, 12, 0]),
        "{again}"
    );
    assert_eq!(again.get("batches"), None, "{again}");
    assert!(queue.take().is_empty());
    assert_eq!(
        bucket.reads.load(Ordering::SeqCst),
        reads,
        "nothing read again"
    );
}

/// A sync read in batches is canceled from any process sharing the records (a Lambda
/// environment other than the one that listed it): the batches not read yet are dropped, what
/// was read stays, and the report says it was canceled. A link walk is never split.
#[tokio::test]
async fn a_batched_sync_is_canceled_from_another_process_and_its_batches_dropped() {
    let bucket = Arc::new(Bucket::default());
    for i in 0..25 {
        bucket.put(
            &format!("kb/{i:02}.md"),
            &format!("# O{i}\n\nObject {i}."),
            None,
        );
    }
    let shared: Arc<dyn sluice_contract::evals::Records> =
        Arc::new(sluice_testkit::MemoryRecords::across_processes());
    let queue = Arc::new(MemoryBatches::default());
    let (objects, batches, records) =
        (Arc::clone(&bucket), Arc::clone(&queue), Arc::clone(&shared));
    let mut kit = Kit::new(OPEN);
    kit.parts.records = Some(records);
    let one = kit.app_with(move |server| {
        server.objects = Some(objects);
        server.batches = Some(batches);
    });
    let mut kit = Kit::new(OPEN);
    kit.parts.records = Some(shared);
    let other = kit.app();
    let prefix = json!({"s3": {"bucket": "docs", "prefix": "kb/"}});
    assert_eq!(put(&one, "kb", &prefix).await.status, 200);
    let (_, sent) = sync(&one, "kb").await;
    assert_eq!(sent["batches"]["sent"], 3, "{sent}");
    let batches = queue.take();
    let first = one
        .server
        .sync_message(batches[0].1.clone(), None)
        .await
        .unwrap();
    assert_eq!(first["report"]["added"], 10, "{first}");
    // Another process sees it running, refuses a second, and cancels it.
    let refused = other
        .send(Method::POST, "/v1/sources/kb/sync", &[], "")
        .await;
    assert_eq!(refused.code(), "sync_running", "{}", refused.raw);
    let canceled = other
        .send(Method::POST, "/v1/sources/kb/sync/cancel", &[], "")
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.raw);
    assert_eq!(canceled.body["canceled"], sent["id"]);
    for (_, message) in &batches[1..] {
        let dropped = one
            .server
            .sync_message(message.clone(), None)
            .await
            .unwrap();
        assert!(dropped["dropped"].is_string(), "{dropped}");
    }
    let kept = other
        .send(Method::GET, "/v1/sources/kb/syncs", &[], "")
        .await;
    let report = &kept.body["syncs"][0];
    assert_eq!(
        (report["status"].clone(), report["added"].clone()),
        (json!("stopped"), json!(10))
    );
    assert!(
        report["cut"].as_str().unwrap().contains("canceled"),
        "{report}"
    );
    assert_eq!(documents(&one).await.len(), 10);
    // Nothing to cancel now.
    let again = other
        .send(Method::POST, "/v1/sources/kb/sync/cancel", &[], "")
        .await;
    assert_eq!(again.code(), "unknown_source", "{}", again.raw);

    // A walk by links (no sitemap) is read by the sync itself, queue or not.
    let site = Site::serve().await;
    site.put("/docs/", Page::article("Index", "The index.", &["a"]));
    site.put("/docs/a", Page::article("A", "Page a.", &[]));
    let walked = json!({"website": {"start": [site.url("/docs/")]}});
    assert_eq!(put(&one, "walk", &walked).await.status, 200);
    let (_, report) = sync(&one, "walk").await;
    assert_eq!(
        (report["status"].clone(), counts(&report)),
        (json!("done"), [2, 0, 0, 0])
    );
    assert!(queue.take().is_empty());
}

/// A batch whose site asks for time between requests (`Crawl-delay`) may not fit in one
/// invocation: what its time did not reach is sent again behind it, until every page is read;
/// a batch that could not read even one page in its time ends the sync, saying why.
#[tokio::test]
async fn a_batch_longer_than_its_time_sends_the_rest_again() {
    let site = Site::serve().await;
    site.put("/robots.txt", Page::text("User-agent: *\nCrawl-delay: 1\n"));
    let paths: Vec<String> = (0..5).map(|i| format!("/docs/p{i}")).collect();
    for p in &paths {
        site.put(p, Page::article(p, &format!("Page {p}."), &[]));
    }
    site.put("/sitemap.xml", site.sitemap(&paths));
    let open = [OPEN[0], OPEN[1], ("SLUICE_SYNC_TIMEOUT_MS", "3000")];
    let queue = Arc::new(MemoryBatches::default());
    let batches = Arc::clone(&queue);
    let app = Kit::new(&open).app_with(move |server| server.batches = Some(batches));
    let mapped = json!({"website": {"sitemap": site.url("/sitemap.xml")}});
    assert_eq!(put(&app, "slow", &mapped).await.status, 200);
    let (_, sent) = sync(&app, "slow").await;
    assert_eq!(sent["batches"]["sent"], 1, "{sent}");
    // Read as SQS hands them out, the rest of a batch behind it.
    let mut last = Value::Null;
    for _ in 0..10 {
        let pending = queue.take();
        if pending.is_empty() {
            break;
        }
        last = read(&app, pending).await;
    }
    assert_eq!(last["status"], "done", "{last}");
    assert_eq!(counts(&last), [5, 0, 0, 0], "{last}");
    let batched = &last["batches"];
    assert!(batched["sent"].as_u64().unwrap() >= 2, "{last}");
    assert_eq!(batched["read"], batched["sent"], "{last}");
    assert_eq!(documents(&app).await.len(), 5);

    // A delay longer than a batch's time: not one page read; the sync ends, saying why.
    site.put(
        "/robots.txt",
        Page::text("User-agent: *\nCrawl-delay: 30\n"),
    );
    let app = {
        let batches = Arc::clone(&queue);
        let open = [OPEN[0], OPEN[1], ("SLUICE_SYNC_TIMEOUT_MS", "1000")];
        Kit::new(&open).app_with(move |server| server.batches = Some(batches))
    };
    assert_eq!(put(&app, "slow", &mapped).await.status, 200);
    sync(&app, "slow").await;
    let report = read(&app, queue.take()).await;
    assert_eq!(report["status"], "stopped", "{report}");
    assert!(
        report["cut"]
            .as_str()
            .unwrap()
            .contains("SLUICE_SYNC_TIMEOUT_MS"),
        "{report}"
    );
    assert!(queue.take().is_empty(), "nothing sent again");
}

/// With a queue, the schedule starts nothing itself: each due source gets a start message in
/// its own group (an invocation of its own on AWS, so one long walk holds no other source
/// back); a start lists its source (a prefix's batches follow in the queue) or walks it whole,
/// and a start delivered again, its source no longer due, is dropped.
#[tokio::test]
async fn with_a_queue_the_schedule_sends_each_due_source_a_start_of_its_own() {
    let bucket = Arc::new(Bucket::default());
    for k in ["a", "b", "c"] {
        bucket.put(
            &format!("kb/{k}.md"),
            &format!("# {k}\n\nObject {k}."),
            None,
        );
    }
    let site = Site::serve().await;
    site.put("/docs/", Page::article("Index", "The index.", &["a"]));
    site.put("/docs/a", Page::article("A", "Page a.", &[]));
    let queue = Arc::new(MemoryBatches::default());
    let (objects, batches) = (Arc::clone(&bucket), Arc::clone(&queue));
    let app = Kit::new(OPEN).app_with(move |server| {
        server.objects = Some(objects);
        server.batches = Some(batches);
    });
    let prefix = json!({"s3": {"bucket": "docs", "prefix": "kb/"}, "every_minutes": 1});
    assert_eq!(put(&app, "kb", &prefix).await.status, 200);
    let walked = json!({"website": {"start": [site.url("/docs/")]}, "every_minutes": 1});
    assert_eq!(put(&app, "walk", &walked).await.status, 200);

    let ends_by = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let queued = app.server.sync_due_until(ends_by).await.unwrap();
    assert_eq!(queued.len(), 2, "{queued:?}");
    assert!(queued.iter().all(|q| q["queued"] == true), "{queued:?}");
    assert!(
        documents(&app).await.is_empty(),
        "nothing synced by the schedule"
    );
    let starts = queue.take();
    let sources: Vec<&SyncMessage> = starts.iter().map(|(_, m)| m).collect();
    assert!(
        sources
            .iter()
            .all(|m| matches!(m, SyncMessage::Start { .. })),
        "{sources:?}"
    );
    assert_ne!(starts[0].0, starts[1].0, "a group per source");

    // Each start read: the prefix listed (its batch queued), the walk read whole.
    for (_, start) in starts.clone() {
        let ended = app.server.sync_message(start, None).await.unwrap();
        let expected = match ended["source"].as_str() {
            Some("kb") => "running",
            _ => "done",
        };
        assert_eq!(ended["report"]["status"], expected, "{ended}");
    }
    let walk = app
        .send(Method::GET, "/v1/sources/walk/syncs", &[], "")
        .await;
    assert_eq!(counts(&walk.body["syncs"][0]), [2, 0, 0, 0], "{}", walk.raw);
    let done = read(&app, queue.take()).await;
    assert_eq!(
        (done["status"].clone(), counts(&done)),
        (json!("done"), [3, 0, 0, 0])
    );
    assert_eq!(documents(&app).await.len(), 5);

    // The same start delivered again: synced a moment ago, not due, dropped.
    for (_, start) in starts {
        let again = app.server.sync_message(start, None).await.unwrap();
        assert!(
            again["dropped"].as_str().unwrap().contains("not due"),
            "{again}"
        );
    }
    assert!(queue.take().is_empty());
}
