//! Sources for real: a website served on 127.0.0.1 (the operator's allow-list names it) and an
//! S3 prefix in moto, synced through the server `sluice serve` builds — the real model, HTML
//! and Markdown conversion, Qdrant Edge — until the tenant's documents are exactly what the
//! source holds, and a search finds a page by what it says.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use sluice_client::Client;
use sluice_testkit::site::{Page, Site};
use sluice_tests::aws;

/// A server whose syncs reach 127.0.0.1 without waiting between requests.
async fn server() -> sluice_tests::TestServer {
    sluice_tests::start(&[
        ("SLUICE_FETCH_ALLOW", "127.0.0.1/32"),
        ("SLUICE_SYNC_HOST_RATE", "1000"),
    ])
    .await
}

/// A sync of `name` to its end: the report (its numbers checked to add up).
async fn sync(client: &Client, name: &str) -> Value {
    let report = client
        .sync_source(name, &mut |_, _| {})
        .await
        .expect("a sync");
    let n = |k: &str| report[k].as_u64().unwrap();
    assert_eq!(
        n("listed"),
        n("added") + n("changed") + n("unchanged") + n("failures"),
        "{report}"
    );
    report
}

fn counts(report: &Value) -> [u64; 4] {
    ["added", "changed", "unchanged", "deleted"].map(|k| report[k].as_u64().unwrap())
}

/// The tenant's documents' origins.
async fn origins(client: &Client) -> BTreeSet<String> {
    let listed = client
        .get("/v1/documents?limit=1000")
        .await
        .expect("documents");
    (listed["documents"].as_array().unwrap().iter())
        .map(|d| d["origin"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_website_is_synced_to_exactly_its_pages() {
    let site = Site::serve().await;
    site.put(
        "/robots.txt",
        Page::text("User-agent: *\nDisallow: /help/internal\n"),
    );
    let article = |title: &str, text: &str| Page::article(title, text, &[]);
    site.put(
        "/help/cards",
        article(
            "Lost cards",
            "Report a lost card in the app; a replacement card arrives within five working days.",
        )
        .with("etag", "\"c1\""),
    );
    site.put(
        "/help/limits",
        article(
            "ATM limits",
            "The daily ATM withdrawal limit is 500 pounds.",
        ),
    );
    site.put(
        "/help/mortgage",
        article(
            "Mortgage overpayments",
            "A fixed-rate mortgage may be overpaid by ten percent a year.",
        ),
    );
    site.put("/help/internal", article("Internal", "Staff rota."));
    site.put("/help/old-fees", Page::redirect("/help/fees"));
    site.put(
        "/help/fees",
        article("Fees", "Sending money abroad costs one percent."),
    );
    for i in 0..5 {
        site.put(
            &format!("/help/extra{i}"),
            article("Extra", "Over the cap."),
        );
    }
    site.put(
        "/sitemap.xml",
        site.sitemap(&[
            "/help/cards",
            "/help/limits",
            "/help/mortgage",
            "/help/internal",
            "/help/old-fees",
            "/help/missing",
        ]),
    );
    let server = server().await;
    let client = Client::new(&server.url).unwrap();
    let source = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "max_pages": 20});
    client
        .put("/v1/sources/help", &source)
        .await
        .expect("the source");

    let first = sync(&client, "help").await;
    assert_eq!(first["status"], "done", "{first}");
    // cards, limits, mortgage and fees (the redirect's target) are pages; internal is
    // disallowed; missing answers 404.
    assert_eq!(counts(&first), [4, 0, 0, 0], "{first}");
    assert_eq!(first["skipped"]["robots"], 1);
    let pages = |paths: &[&str]| paths.iter().map(|p| site.url(p)).collect::<BTreeSet<_>>();
    assert_eq!(
        origins(&client).await,
        pages(&[
            "/help/cards",
            "/help/limits",
            "/help/mortgage",
            "/help/fees"
        ])
    );
    // A search finds a page by what it says, and cites its URL.
    let found = client
        .search(&json!({"query": "What is the daily ATM withdrawal limit?"}))
        .await
        .expect("a search");
    assert_eq!(
        found.documents[0].source,
        site.url("/help/limits"),
        "{found:?}"
    );

    // Nothing changed: nothing embedded (the usage's chunks stay), cards asked for with its
    // ETag.
    let chunks = |usage: Value| usage["total"]["chunks"].as_u64().unwrap_or(0);
    let before = chunks(client.get("/v1/usage").await.unwrap());
    let again = sync(&client, "help").await;
    assert_eq!(counts(&again), [0, 0, 4, 0], "{again}");
    assert_eq!(chunks(client.get("/v1/usage").await.unwrap()), before);
    assert!(
        site.requests()
            .contains(&("/help/cards".into(), Some("\"c1\"".into())))
    );

    // Changed, dropped from the sitemap, gone (404), and a cap: limits rewritten, mortgage
    // dropped, fees gone, five new pages of which the cap leaves some unread.
    site.put(
        "/help/limits",
        article(
            "ATM limits",
            "The daily ATM withdrawal limit is now 700 pounds.",
        ),
    );
    site.remove("/help/fees");
    let mut listed = vec!["/help/cards", "/help/limits", "/help/old-fees"];
    let extras: Vec<String> = (0..5).map(|i| format!("/help/extra{i}")).collect();
    listed.extend(extras.iter().map(String::as_str));
    site.put("/sitemap.xml", site.sitemap(&listed));
    let changed = sync(&client, "help").await;
    assert_eq!(changed["status"], "done", "{changed}");
    assert_eq!(counts(&changed), [5, 1, 1, 2], "{changed}");
    let mut expected = pages(&["/help/cards", "/help/limits"]);
    expected.extend(extras.iter().map(|p| site.url(p)));
    assert_eq!(origins(&client).await, expected);
    // Over its cap, a sync stops and deletes nothing it did not reach.
    let capped = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "max_pages": 3});
    client.put("/v1/sources/help", &capped).await.unwrap();
    let cut = sync(&client, "help").await;
    assert_eq!(cut["status"], "stopped", "{cut}");
    assert_eq!(cut["deleted"], 0);
    assert_eq!(origins(&client).await, expected);
    server.stop().await;
}

#[tokio::test]
async fn an_s3_prefix_in_moto_is_synced_without_events() {
    let bucket = aws::bucket("sources").await;
    let text = |t: &str| t.as_bytes().to_vec();
    aws::put_object(
        &bucket,
        "kb/cards.md",
        text("# Lost cards\n\nA replacement card arrives within five working days."),
    )
    .await;
    aws::put_object(
        &bucket,
        "kb/limits.txt",
        text("The daily ATM withdrawal limit is 500 pounds."),
    )
    .await;
    aws::put_object(
        &bucket,
        "kb/hr/leave.md",
        text("# Leave\n\nStaff get 25 days of leave."),
    )
    .await;
    aws::tag_access(&bucket, "kb/hr/leave.md", Some("group:hr")).await;
    aws::put_object(
        &bucket,
        "other/outside.md",
        text("# Outside\n\nNot under the prefix."),
    )
    .await;
    let server = server().await;
    let client = Client::new(&server.url).unwrap();
    let source = json!({"s3": {"bucket": bucket, "prefix": "kb/"}});
    client
        .put("/v1/sources/kb", &source)
        .await
        .expect("the source");
    let first = sync(&client, "kb").await;
    assert_eq!(counts(&first), [3, 0, 0, 0], "{first}");
    let leave = client
        .get(&format!("/v1/documents/{bucket}/kb/hr/leave.md"))
        .await
        .unwrap();
    assert_eq!(leave["metadata"]["_access"], json!(["group:hr"]), "{leave}");

    // No event reaches Sluice: one changed, one re-tagged, one deleted, one new.
    aws::put_object(
        &bucket,
        "kb/limits.txt",
        text("The daily ATM withdrawal limit is 700 pounds."),
    )
    .await;
    aws::tag_access(&bucket, "kb/hr/leave.md", Some("group:hr group:managers")).await;
    sluice_aws::s3_client(&aws::sdk().await)
        .delete_object()
        .bucket(&bucket)
        .key("kb/cards.md")
        .send()
        .await
        .unwrap();
    aws::put_object(
        &bucket,
        "kb/fees.md",
        text("# Fees\n\nSending money abroad costs one percent."),
    )
    .await;
    let second = sync(&client, "kb").await;
    assert_eq!(counts(&second), [1, 2, 0, 1], "{second}");
    let leave = client
        .get(&format!("/v1/documents/{bucket}/kb/hr/leave.md"))
        .await
        .unwrap();
    assert_eq!(
        leave["metadata"]["_access"],
        json!(["group:hr", "group:managers"])
    );
    let s3 = |k: &str| format!("s3://{bucket}/{k}");
    let expected: BTreeSet<String> = ["kb/limits.txt", "kb/hr/leave.md", "kb/fees.md"]
        .iter()
        .map(|k| s3(k))
        .collect();
    assert_eq!(origins(&client).await, expected);
    // Twice in a row with nothing changed: nothing read, nothing written.
    let third = sync(&client, "kb").await;
    assert_eq!(counts(&third), [0, 0, 3, 0], "{third}");
    assert_eq!(third["bytes"], 0, "no object read again");
    server.stop().await;
}
