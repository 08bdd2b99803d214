//! What a website source's sync costs: 1,000 pages served on 127.0.0.1 and listed by a
//! sitemap, synced into a server built as `sluice serve` builds it (the real model, HTML
//! conversion, a Qdrant Edge store; no wait between requests), twice over — one site whose
//! pages send an `ETag`, one whose pages send no validator:
//!
//! - the first sync of each: wall time, pages a second, and this process's CPU time (the
//!   site's serving is in it too: a small share beside conversion and embedding);
//! - three re-syncs of each with nothing changed: the site with `ETag`s answers 304 and sends
//!   nothing; the other sends every page again and its digest finds it unchanged. Neither
//!   embeds anything (checked: the reports say 1,000 unchanged).

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
    let mut urls = String::new();
    for i in 0..PAGES {
        let path = format!("/help/page-{i}");
        let page = Page::article(&format!("Help page {i}"), &text(i, samples), &[]);
        let page = match tagged {
            true => page.with("etag", &format!("\"v{i}\"")),
            false => page,
        };
        site.put(&path, page);
        urls.push_str(&format!("<url><loc>{}</loc></url>", site.url(&path)));
    }
    site.put(
        "/sitemap.xml",
        Page::xml(&format!("<urlset>{urls}</urlset>")),
    );
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
        for line in lines {
            println!("{line}");
        }
    });
}
