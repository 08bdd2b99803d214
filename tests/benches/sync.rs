//! What a website source's sync costs: 1,000 pages served on 127.0.0.1 and listed by a
//! sitemap, synced into a server built as `sluice serve` builds it (the real model, HTML
//! conversion, a Qdrant Edge store; no wait between requests), twice over — one site whose
//! pages send an `ETag`, one whose pages send no validator:
//!
//! - the first sync of each: wall time, pages a second, and this process's CPU time (the
//!   site's serving is in it too: a small share beside conversion and embedding);
//! - three re-syncs of each with nothing changed: the site with `ETag`s answers 304 and sends
//!   nothing; the other sends every page again and its digest finds it unchanged. Neither
//!   embeds anything (checked: the reports say 1,000 unchanged);
//! - the site with `ETag`s synced by batches, as on AWS with a sync queue (here in memory,
//!   its batches read one after another as one FIFO group is): the listing that hands the pages
//!   out (the scheduled invocation's share), then the 100 batches read, first and unchanged.

use std::time::Instant;

use serde_json::{Value, json};
use sluice_client::Client;
use sluice_testkit::site::{Page, Site};

const PAGES: usize = 1_000;

/// This process's CPU time (user and system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct it is given, and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A page's text: a few sentences of the sample documents, told apart by its number.
fn text(i: usize, samples: &[String]) -> String {
    let sample = &samples[i % samples.len()];
    format!("Page {i} of the help centre. {sample}")
}

async fn site(tagged: bool, samples: &[String]) -> std::sync::Arc<Site> {
    let site = Site::serve().await;
    let paths: Vec<String> = (0..PAGES).map(|i| format!("/help/page-{i}")).collect();
    for (i, path) in paths.iter().enumerate() {
        let page = Page::article(&format!("Help page {i}"), &text(i, samples), &[]);
        let page = match tagged {
            true => page.with("etag", &format!("\"v{i}\"")),
            false => page,
        };
        site.put(path, page);
    }
    site.put("/sitemap.xml", site.sitemap(&paths));
    site
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let samples: Vec<String> = (sluice_tests::sample_documents().into_iter())
            .map(|d| d.text.chars().take(1_200).collect())
            .collect();
        let server = sluice_tests::start(&[
            ("SLUICE_FETCH_ALLOW", "127.0.0.1/32"),
            ("SLUICE_SYNC_HOST_RATE", "1000"),
            ("SLUICE_SYNC_MAX_PAGES", "10000"),
        ])
        .await;
        let client = Client::new(&server.url).unwrap();
        let mut lines = Vec::new();
        for (name, tagged) in [("tagged", true), ("plain", false)] {
            let site = site(tagged, &samples).await;
            let source = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "max_pages": PAGES});
            client.put(&format!("/v1/sources/{name}"), &source).await.unwrap();
            let sync = || async {
                let started = Instant::now();
                let report: Value = client.sync_source(name, &mut |_, _| {}).await.unwrap();
                (started.elapsed().as_secs_f64(), report)
            };
            let cpu = cpu_seconds();
            let (first, report) = sync().await;
            let cpu = cpu_seconds() - cpu;
            assert_eq!(report["added"], PAGES, "{report}");
            let mut again = Vec::new();
            for _ in 0..3 {
                let (seconds, report) = sync().await;
                assert_eq!(report["unchanged"], PAGES, "{report}");
                again.push(seconds * 1e3);
            }
            let validators = ["no validator (fetched, digest unchanged)", "ETag (304)"][usize::from(tagged)];
            lines.push(format!(
                "sync: {PAGES} pages with {validators}: first {first:.1} s ({:.0} pages/s, {cpu:.1} s CPU, {:.1} ms CPU a page); unchanged re-sync {:.0} / {:.0} / {:.0} ms ({:.0} pages/s)",
                PAGES as f64 / first,
                cpu * 1e3 / PAGES as f64,
                again[0],
                again[1],
                again[2],
                PAGES as f64 * 3.0 / (again.iter().sum::<f64>() / 1e3),
            ));
        }
        server.stop().await;
        lines.push(batched(&samples).await);
        for line in lines {
            println!("{line}");
        }
    });
}

/// The site with `ETag`s synced by batches through a queue in memory: what the listing and
/// the batches each take, first and unchanged.
async fn batched(samples: &[String]) -> String {
    let queue = std::sync::Arc::new(sluice_testkit::MemoryBatches::default());
    let batches = std::sync::Arc::clone(&queue);
    let overrides = [
        ("SLUICE_FETCH_ALLOW", "127.0.0.1/32"),
        ("SLUICE_SYNC_HOST_RATE", "1000"),
        ("SLUICE_SYNC_MAX_PAGES", "10000"),
    ];
    let server = sluice_tests::start_adjusted(&overrides, |p| p.batches = Some(batches)).await;
    let client = Client::new(&server.url).unwrap();
    let site = site(true, samples).await;
    let source = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "max_pages": PAGES});
    client.put("/v1/sources/batched", &source).await.unwrap();
    let mut runs = Vec::new();
    for expected in ["added", "unchanged"] {
        let started = Instant::now();
        let listed: Value = client.sync_source("batched", &mut |_, _| {}).await.unwrap();
        let listing = started.elapsed().as_secs_f64();
        assert_eq!(listed["status"], "running", "{listed}");
        let started = Instant::now();
        let (mut report, mut sent) = (Value::Null, 0);
        for (_, message) in queue.take() {
            sent += 1;
            report = server.server.sync_message(message, None).await.unwrap()["report"].clone();
        }
        let reading = started.elapsed().as_secs_f64();
        assert_eq!(
            (report["status"].as_str(), report[expected].as_u64()),
            (Some("done"), Some(PAGES as u64)),
            "{report}"
        );
        runs.push((listing, sent, reading));
    }
    server.stop().await;
    let [(list1, sent1, read1), (list2, _, read2)] = [runs[0], runs[1]];
    format!(
        "sync: {PAGES} pages with ETag, by batches: listed and handed out in {:.0} ms ({sent1} batches), read in {read1:.1} s ({:.0} pages/s); unchanged: listed in {:.0} ms, read in {read2:.1} s ({:.0} pages/s)",
        list1 * 1e3,
        PAGES as f64 / read1,
        list2 * 1e3,
        PAGES as f64 / read2,
    )
}
