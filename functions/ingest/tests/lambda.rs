//! The ingest function under local Lambda emulation (`sluice_tests::lambda`), with S3 and
//! Secrets Manager on the emulator `make test` starts: documents posted to its URL, and
//! uploads announced by S3 notifications (the fixture is the documented event shape).

use std::path::Path;

use serde_json::{Value, json};
use sluice_contract::filter::Filter;
use sluice_contract::{stages::Search, stages::Store};
use sluice_tests::aws;
use sluice_tests::lambda::Function;

const CREATED: &str = include_str!("fixtures/s3-object-created.json");
const REMOVED: &str = include_str!("fixtures/s3-object-removed.json");

/// The `fixture` naming `key` in `bucket` (as S3 encodes keys: a space is `+`).
fn notification(fixture: &str, bucket: &str, key: &str) -> Value {
    let encoded = key.replace(' ', "+");
    serde_json::from_str(&fixture.replace("BUCKET", bucket).replace("KEY", &encoded)).unwrap()
}

fn event(bucket: &str, key: &str) -> Value {
    notification(CREATED, bucket, key)
}

/// The tenant's document ids and origins, listed through the function's URL.
async fn listed(function: &Function) -> Vec<(String, Value)> {
    let r = sluice_tests::http()
        .get(format!("{}/v1/documents?limit=1000", function.url()))
        .header("x-sluice-tenant", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["next_cursor"], Value::Null, "{body}");
    let mut ids: Vec<(String, Value)> = (body["documents"].as_array().unwrap().iter())
        .map(|d| (d["id"].as_str().unwrap().to_string(), d["origin"].clone()))
        .collect();
    ids.sort_by(|a, b| a.0.cmp(&b.0));
    ids
}

/// Stores the tenant's source `name` through the function's URL.
async fn put_source(function: &Function, name: &str, source: Value) {
    let url = format!("{}/v1/sources/{name}", function.url());
    let r = (sluice_tests::http()
        .put(url)
        .header("x-sluice-tenant", "acme"))
    .json(&source)
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(sluice_tests::samples_dir().join(name)).unwrap()
}

#[tokio::test]
async fn uploads_and_posted_documents_are_ingested_with_settings_from_the_secret() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    let bucket = aws::bucket("documents").await;
    // Small chunks come from the secret, not the environment: the function read it at init.
    let secret =
        aws::secret(&json!({"SLUICE_CHUNK_TOKENS": "32", "SLUICE_CHUNK_OVERLAP_TOKENS": "0"}))
            .await;
    let data = tempfile::tempdir().unwrap();
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_ingest")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_SECRETS_ARN", secret),
            ("SLUICE_CHUNK_TOKENS", "256".into()),
            // One heading path per chunk, so that a converted file's sections show as chunks.
            ("SLUICE_PACK_SECTIONS", "false".into()),
        ],
    );

    // An upload: <tenant>/<name>, the format from the extension.
    aws::put_object(&bucket, "acme/cards/lost card.md", sample("lost-card.md")).await;
    let report = function
        .invoke(&event(&bucket, "acme/cards/lost card.md"))
        .await
        .unwrap();
    assert_eq!(report["skipped"], json!([]), "{report}");
    let ingested = &report["ingested"][0];
    assert_eq!(ingested["key"], "acme/cards/lost card.md");
    assert_eq!(ingested["tenant"], "acme");
    assert_eq!(ingested["documents"], 1);
    assert!(
        ingested["chunks"].as_u64().unwrap() >= 4,
        "32-token chunks from the secret: {report}"
    );

    // A JSON Lines upload: one document per line.
    aws::put_object(&bucket, "acme/support.jsonl", sample("support.jsonl")).await;
    let report = function
        .invoke(&event(&bucket, "acme/support.jsonl"))
        .await
        .unwrap();
    assert!(
        report["ingested"][0]["documents"].as_u64().unwrap() >= 2,
        "{report}"
    );

    // A PDF by its extension, and the same file under a key without one, its Content-Type
    // naming the format: each converted into its sections.
    let pages: [&[(f32, &str)]; 2] = [
        &[(16.0, "Cards"), (10.0, "Debit cards are free to hold.")],
        &[(16.0, "Loans"), (10.0, "Loan rates depend on the term.")],
    ];
    let handbook = sluice_testkit::files::pdf(&pages, Default::default());
    aws::put_object(&bucket, "acme/policies/handbook.pdf", handbook.clone()).await;
    aws::put_typed(
        &bucket,
        "acme/policies/handbook",
        handbook,
        Some("application/pdf"),
    )
    .await;
    for key in ["acme/policies/handbook.pdf", "acme/policies/handbook"] {
        let report = function.invoke(&event(&bucket, key)).await.unwrap();
        assert_eq!(report["skipped"], json!([]), "{report}");
        assert_eq!(report["ingested"][0]["documents"], 1, "{report}");
        assert_eq!(
            report["ingested"][0]["chunks"], 2,
            "a chunk a section: {report}"
        );
    }
    // A scan is skipped, saying why.
    let scan = sluice_testkit::files::pdf(&[&[]], Default::default());
    aws::put_object(&bucket, "acme/scan.pdf", scan).await;
    let report = function
        .invoke(&event(&bucket, "acme/scan.pdf"))
        .await
        .unwrap();
    let reason = report["skipped"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("acme/scan.pdf") || reason.contains("scan.pdf"),
        "{report}"
    );
    assert!(reason.contains("no text layer"), "{report}");

    // What can never be ingested is skipped with the reason (a retry would not help) ...
    aws::put_object(&bucket, "acme/photo.png", vec![0x89, b'P', b'N', b'G']).await;
    aws::put_object(&bucket, "no-tenant.md", b"# hi".to_vec()).await;
    for key in ["acme/photo.png", "no-tenant.md"] {
        let report = function.invoke(&event(&bucket, key)).await.unwrap();
        assert_eq!(report["ingested"], json!([]), "{report}");
        assert_eq!(report["skipped"][0]["key"], key, "{report}");
        assert!(report["skipped"][0]["reason"].as_str().unwrap().len() > 10);
    }
    // ... while a failure a retry could fix is an error, so that Lambda retries the event.
    let error = function
        .invoke(&event(&bucket, "acme/deleted-meanwhile.md"))
        .await
        .unwrap_err();
    assert!(error.contains("acme/deleted-meanwhile.md"), "{error}");

    // HTTP: POST /v1/documents through the function URL, as the router answers it anywhere.
    let r = sluice_tests::http()
        .post(format!("{}/v1/documents", function.url()))
        .header("x-sluice-tenant", "acme")
        .json(
            &json!({"documents": [{"id": "fees", "text": "Card replacement is free of charge."}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["documents"], 1, "{body}");
    assert!(body["corpus_version"].as_u64().unwrap() >= 3, "{body}");

    // Each upload's documents remember their object; a posted one has no origin.
    let before = listed(&function).await;
    let origin = |key: &str| json!(format!("s3://{bucket}/{key}"));
    let from_jsonl: Vec<&String> = (before.iter())
        .filter(|(_, o)| *o == origin("acme/support.jsonl"))
        .map(|(id, _)| id)
        .collect();
    assert!(from_jsonl.len() >= 2, "{before:?}");
    assert!(before.contains(&("fees".into(), Value::Null)), "{before:?}");
    assert!(before.contains(&(
        "cards/lost card.md".into(),
        origin("acme/cards/lost card.md")
    )));

    // The object uploaded again holding its first line only: the documents of the lines it
    // no longer has are deleted with it, the posted and the other upload's kept.
    let first_line = sample("support.jsonl")
        .split(|b| *b == b'\n')
        .next()
        .unwrap()
        .to_vec();
    let kept_id: String = serde_json::from_slice::<Value>(&first_line).unwrap()["id"]
        .as_str()
        .unwrap()
        .into();
    aws::put_object(&bucket, "acme/support.jsonl", first_line).await;
    let report = function
        .invoke(&event(&bucket, "acme/support.jsonl"))
        .await
        .unwrap();
    assert_eq!(report["ingested"][0]["documents"], 1, "{report}");
    assert_eq!(
        report["ingested"][0]["removed"],
        from_jsonl.len() - 1,
        "{report}"
    );
    let now = listed(&function).await;
    let expected: Vec<_> = (before.iter())
        .filter(|(id, _)| !from_jsonl.contains(&id) || *id == kept_id)
        .cloned()
        .collect();
    assert_eq!(now, expected);
    let (before, from_jsonl) = (now, vec![&kept_id]);

    // Deleting an object deletes the documents it made, and only those.
    let report = function
        .invoke(&notification(REMOVED, &bucket, "acme/support.jsonl"))
        .await
        .unwrap();
    assert_eq!(
        report["removed"][0]["documents"],
        from_jsonl.len(),
        "{report}"
    );
    let after = listed(&function).await;
    let kept: Vec<_> = (before.iter())
        .filter(|(id, _)| !from_jsonl.contains(&id))
        .cloned()
        .collect();
    assert_eq!(after, kept);
    // A removal of an object that made nothing deletes nothing and fails nothing.
    let report = function
        .invoke(&notification(REMOVED, &bucket, "acme/never-uploaded.md"))
        .await
        .unwrap();
    assert_eq!(report["removed"][0]["documents"], 0, "{report}");

    // DELETE through the function URL (the router's, as anywhere).
    let r = sluice_tests::http()
        .delete(format!("{}/v1/documents/fees", function.url()))
        .header("x-sluice-tenant", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!listed(&function).await.iter().any(|(id, _)| id == "fees"));

    // Bad input gets the router's JSON error, through the same adapter.
    let r = sluice_tests::http()
        .post(format!("{}/v1/documents", function.url()))
        .json(&json!({"documents": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["code"].is_string(), "{body}");

    // The uploaded Markdown file's front matter is its metadata, on every chunk in the store:
    // a filter on it finds that file's chunks and no other's.
    drop(function);
    let store = sluice_retrieve::EdgeStore::open(data.path(), 384).unwrap();
    let filter =
        Filter::parse(&json!({"topic": "cards", "updated_at": {"$gte": "2025-06-01"}})).unwrap();
    let unit = vec![1.0 / (384f32).sqrt(); 384];
    let hits = store
        .search(
            &sluice_tests::tenant("acme"),
            &Search::new("lost card", &unit, 50).filter(Some(&filter)),
        )
        .await
        .unwrap();
    assert!(hits.len() >= 4, "{hits:?}");
    for hit in &hits {
        assert_eq!(hit.document.id, "cards/lost card.md");
        assert_eq!(
            serde_json::to_value(&hit.document.metadata).unwrap(),
            json!({"topic": "cards", "updated_at": "2025-06-02"})
        );
    }
}

#[tokio::test]
async fn an_uploads_access_tag_says_which_end_users_see_its_documents() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    let bucket = aws::bucket("documents").await;
    let data = tempfile::tempdir().unwrap();
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_ingest")),
        &[("SLUICE_DATA_DIR", data.path().display().to_string())],
    );
    let key = "acme/hr/bonus.md";
    let access = |function: &Function| {
        let url = format!("{}/v1/documents/hr%2Fbonus.md", function.url());
        async move {
            let r = sluice_tests::http()
                .get(url)
                .header("x-sluice-tenant", "acme")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let body: Value = r.json().await.unwrap();
            body["metadata"]["_access"].clone()
        }
    };
    let ingest = |name: &'static str| {
        let mut event = event(&bucket, key);
        event["Records"][0]["eventName"] = json!(name);
        let function = &function;
        async move { function.invoke(&event).await.unwrap() }
    };
    // Uploaded, then tagged (principals separated by spaces: S3 tag values take no commas).
    aws::put_object(
        &bucket,
        key,
        b"# Bonus\n\nThe bonus is paid in March.".to_vec(),
    )
    .await;
    aws::tag_access(&bucket, key, Some("group:hr user:alice")).await;
    let report = ingest("ObjectCreated:Put").await;
    assert_eq!(report["ingested"][0]["documents"], 1, "{report}");
    assert_eq!(access(&function).await, json!(["group:hr", "user:alice"]));
    // The tag changed: the object is read again, the access list with it.
    aws::tag_access(&bucket, key, Some("group:finance")).await;
    let report = ingest("ObjectTagging:Put").await;
    assert_eq!(report["ingested"][0]["documents"], 1, "{report}");
    assert_eq!(access(&function).await, json!(["group:finance"]));
    // Removed: open to every end user again.
    aws::tag_access(&bucket, key, None).await;
    ingest("ObjectTagging:Delete").await;
    assert_eq!(access(&function).await, Value::Null);
    // A tag that is not principals: skipped, saying why, and the documents left as they were.
    aws::tag_access(&bucket, key, Some("hr")).await;
    let report = ingest("ObjectTagging:Put").await;
    let reason = report["skipped"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("_access"), "{report}");
    assert_eq!(access(&function).await, Value::Null);
}

/// Tenants' sources on Lambda: kept in the records table (moto), a due one synced when
/// EventBridge's schedule invokes the function (the documented scheduled event), and an upload
/// under an S3 source's prefix, announced by S3, written as that source's sync writes it — so
/// that the sync after finds it unchanged and reads nothing.
#[tokio::test]
async fn sources_are_synced_on_schedule_and_an_upload_under_one_is_written_as_its_own() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    use sluice_testkit::site::{Page, Site};
    let bucket = aws::bucket("documents").await;
    let table = aws::records_table().await;
    let site = Site::serve().await;
    site.put(
        "/help/",
        Page::article("Help", "Cards are replaced within five days.", &[]),
    );
    let data = tempfile::tempdir().unwrap();
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_ingest")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_RECORDS_TABLE", table.clone()),
            ("SLUICE_FETCH_ALLOW", "127.0.0.1/32".into()),
            ("SLUICE_SYNC_HOST_RATE", "1000".into()),
        ],
    );
    put_source(
        &function,
        "help",
        json!({"website": {"start": [site.url("/help/")]}, "every_minutes": 60}),
    )
    .await;
    put_source(
        &function,
        "kb",
        json!({"s3": {"bucket": bucket, "prefix": "acme/kb/"}, "every_minutes": 60}),
    )
    .await;

    // An upload under kb's prefix: written as kb's sync would write it.
    let key = "acme/kb/fees.md";
    aws::put_object(
        &bucket,
        key,
        b"# Fees\n\nSending money abroad costs one percent.".to_vec(),
    )
    .await;
    let report = function.invoke(&event(&bucket, key)).await.unwrap();
    assert_eq!(report["synced"][0]["outcome"], "added", "{report}");
    assert_eq!(report["ingested"], json!([]), "{report}");
    let id = format!("{bucket}/{key}");
    let ids: Vec<String> = listed(&function)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(ids.contains(&id), "{ids:?}");

    // The schedule: both sources are due (never synced); kb finds the upload unchanged.
    let scheduled: Value =
        serde_json::from_str(include_str!("fixtures/eventbridge-scheduled.json")).unwrap();
    let ran = function.invoke(&scheduled).await.unwrap();
    let syncs = ran["syncs"].as_array().unwrap();
    assert_eq!(syncs.len(), 2, "{ran}");
    let of = |name: &str| {
        let sync = syncs.iter().find(|s| s["source"] == name).unwrap();
        sync["report"].clone()
    };
    assert_eq!(
        (of("help")["status"].clone(), of("help")["added"].clone()),
        (json!("done"), json!(1)),
        "{ran}"
    );
    assert_eq!(
        (of("kb")["unchanged"].clone(), of("kb")["bytes"].clone()),
        (json!(1), json!(0)),
        "{ran}"
    );
    // A minute later nothing is due yet.
    let again = function.invoke(&scheduled).await.unwrap();
    assert_eq!(again["syncs"], json!([]), "{again}");
    assert!(
        listed(&function)
            .await
            .iter()
            .any(|(_, origin)| origin == &json!(site.url("/help/")))
    );
}

/// With the sync queue (a FIFO queue in moto, as the SAM template's), the schedule sends a
/// start for each due source through SQS, one group per source; the function, invoked with the
/// messages as Lambda's SQS poller delivers them (the documented event), lists a sitemap and
/// an S3 prefix on their starts and sends what is new in batches back to the queue, reads each
/// batch, and the last of a source's ends its sync.
#[tokio::test]
async fn with_a_sync_queue_each_due_source_is_started_and_read_in_batches_through_sqs() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    use sluice_testkit::site::{Page, Site};
    let bucket = aws::bucket("documents").await;
    let queue = aws::fifo_queue("sync").await;
    let table = aws::records_table().await;
    let site = Site::serve().await;
    let paths: Vec<String> = (0..12).map(|i| format!("/docs/p{i:02}")).collect();
    for p in &paths {
        site.put(p, Page::article(p, &format!("Page {p} of the help."), &[]));
    }
    site.put("/sitemap.xml", site.sitemap(&paths));
    for i in 0..3 {
        let text = format!("# Object {i}\n\nThe text of object {i}.");
        aws::put_object(&bucket, &format!("acme/kb/{i}.md"), text.into_bytes()).await;
    }
    let data = tempfile::tempdir().unwrap();
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_ingest")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_RECORDS_TABLE", table.clone()),
            ("SLUICE_SYNC_QUEUE_URL", queue.clone()),
            ("SLUICE_FETCH_ALLOW", "127.0.0.1/32".into()),
            ("SLUICE_SYNC_HOST_RATE", "1000".into()),
        ],
    );
    let sitemap = json!({"website": {"sitemap": site.url("/sitemap.xml")}, "every_minutes": 60});
    put_source(&function, "help", sitemap).await;
    let prefix = json!({"s3": {"bucket": bucket, "prefix": "acme/kb/"}, "every_minutes": 60});
    put_source(&function, "kb", prefix).await;

    // The schedule starts nothing itself: a start message for each due source.
    let scheduled: Value =
        serde_json::from_str(include_str!("fixtures/eventbridge-scheduled.json")).unwrap();
    let ran = function.invoke(&scheduled).await.unwrap();
    let syncs = ran["syncs"].as_array().unwrap();
    assert_eq!(syncs.len(), 2, "{ran}");
    assert!(syncs.iter().all(|s| s["queued"] == true), "{ran}");
    assert!(listed(&function).await.is_empty());

    // Lambda's poller: messages received, the function invoked with them, until none is left.
    let mut groups: Vec<String> = Vec::new();
    let mut read = 0;
    loop {
        let messages = aws::receive(&queue).await;
        if messages.is_empty() {
            break;
        }
        for (id, group, body) in messages {
            let mut event: Value =
                serde_json::from_str(include_str!("fixtures/sqs-fifo-message.json")).unwrap();
            let record = &mut event["Records"][0];
            record["messageId"] = json!(id);
            record["body"] = json!(body);
            record["attributes"]["MessageGroupId"] = json!(group);
            let answer = function.invoke(&event).await.unwrap();
            assert_eq!(answer, json!({"batchItemFailures": []}));
            if !groups.contains(&group) {
                groups.push(group);
            }
            read += 1;
        }
    }
    assert_eq!(
        (read, groups.len()),
        (5, 2),
        "two starts and three batches, a group per source"
    );

    // Each sync ended with its last batch, its report whole.
    for (name, added) in [("help", 12), ("kb", 3)] {
        let url = format!("{}/v1/sources/{name}/syncs", function.url());
        let r = (sluice_tests::http()
            .get(url)
            .header("x-sluice-tenant", "acme"))
        .send()
        .await
        .unwrap();
        let body: Value = r.json().await.unwrap();
        let report = &body["syncs"][0];
        assert_eq!(report["status"], "done", "{body}");
        assert_eq!(
            (report["added"].clone(), report["listed"].clone()),
            (json!(added), json!(added))
        );
        assert_eq!(
            report["batches"]["read"], report["batches"]["sent"],
            "{body}"
        );
    }
    let held = listed(&function).await;
    assert_eq!(held.len(), 15, "{held:?}");
    assert!(
        held.iter()
            .any(|(_, origin)| origin == &json!(site.url("/docs/p11")))
    );

    // A message that is no batch is dropped, not delivered again (it never could be read).
    let mut event: Value =
        serde_json::from_str(include_str!("fixtures/sqs-fifo-message.json")).unwrap();
    event["Records"][0]["body"] = json!("not a batch");
    let answer = function.invoke(&event).await.unwrap();
    assert_eq!(answer, json!({"batchItemFailures": []}));
}
