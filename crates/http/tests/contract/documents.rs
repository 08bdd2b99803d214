//! Documents as a tenant's administrator sees them: listed a page at a time (and filtered),
//! read one by one, deleted one by one or by filter — each deletion retiring the answers
//! cached from the tenant's documents — within what the key may see and do.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_testkit::MemoryKeys;

use crate::kit::{App, Kit, Reply, UNCHECKED};

/// Six documents for tenant `acme`, two per year, some for finance.
fn policies() -> Value {
    let doc = |id: &str, year: u32, groups: &[&str], text: &str| {
        let mut metadata = json!({"year": year});
        if !groups.is_empty() {
            metadata["groups"] = json!(groups);
        }
        json!({"id": id, "title": format!("Policy {id}"), "text": text,
               "source": format!("policies/{id}.md"), "metadata": metadata})
    };
    json!({"documents": [
        doc("cards/lost", 2024, &["support"], "Report a lost card in the app; a new card arrives in five days."),
        doc("cards/fees", 2025, &["finance"], "Card replacement costs five pounds after the second one."),
        doc("atm", 2024, &["support"], "The daily ATM withdrawal limit is 500 pounds."),
        doc("mortgage", 2025, &["finance"], "A fixed-rate mortgage can be overpaid by 10 percent a year."),
        doc("savings", 2023, &["finance", "support"], "Savings accounts pay interest monthly."),
        doc("travel", 2023, &[], "Tell us before you travel abroad with your card."),
    ]})
}

async fn app_with_policies(kit: Kit, headers: &[(&str, &str)]) -> App {
    let app = kit.app();
    let mut all = headers.to_vec();
    all.push(("x-sluice-tenant", "acme"));
    let reply = app
        .send(Method::POST, "/v1/documents", &all, policies().to_string())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    app
}

async fn get(app: &App, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut all = headers.to_vec();
    all.push(("x-sluice-tenant", "acme"));
    app.send(Method::GET, path, &all, "").await
}

async fn delete(app: &App, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
    let mut all = headers.to_vec();
    all.push(("x-sluice-tenant", "acme"));
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    app.send(Method::DELETE, path, &all, body).await
}

fn ids(reply: &Reply) -> Vec<String> {
    let mut ids: Vec<String> = (reply.body["documents"].as_array())
        .unwrap_or_else(|| panic!("no documents: {}", reply.raw))
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// Every id listed, page by page at `limit`, following the cursors.
async fn all_pages(app: &App, limit: usize, headers: &[(&str, &str)]) -> Vec<String> {
    let mut seen = Vec::new();
    let mut path = format!("/v1/documents?limit={limit}");
    loop {
        let reply = get(app, &path, headers).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert!(reply.body["documents"].as_array().unwrap().len() <= limit);
        seen.extend(ids(&reply));
        match reply.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/documents?limit={limit}&cursor={cursor}"),
            None => break,
        }
    }
    seen.sort();
    seen
}

fn sorted(mut v: Vec<&str>) -> Vec<String> {
    v.sort();
    v.into_iter().map(String::from).collect()
}

#[tokio::test]
async fn a_listing_pages_through_every_document_once_and_filters_by_metadata() {
    let app = app_with_policies(Kit::new(&[]), &[]).await;
    let every = sorted(vec![
        "atm",
        "cards/fees",
        "cards/lost",
        "mortgage",
        "savings",
        "travel",
    ]);
    for limit in [1, 4, 6, 100] {
        assert_eq!(all_pages(&app, limit, &[]).await, every, "limit {limit}");
    }
    // What a listed document shows: what was sent, and how many chunks it made.
    let reply = get(&app, "/v1/documents", &[]).await;
    let lost = (reply.body["documents"].as_array().unwrap().iter())
        .find(|d| d["id"] == "cards/lost")
        .unwrap();
    assert_eq!(lost["title"], "Policy cards/lost");
    assert_eq!(lost["source"], "policies/cards/lost.md");
    assert_eq!(
        lost["metadata"],
        json!({"year": 2024, "groups": ["support"]})
    );
    assert_eq!(lost["chunks"], 1);
    assert!(
        lost.get("text").is_none(),
        "a listing carries no text: {lost}"
    );
    // The answers' filter language, as a query parameter.
    let filter = |f: Value| {
        let encoded: String = sluice_contract::escape(&f.to_string());
        format!("/v1/documents?filter={encoded}")
    };
    let finance_2025 = get(
        &app,
        &filter(json!({"groups": "finance", "year": {"$gte": 2025}})),
        &[],
    )
    .await;
    assert_eq!(ids(&finance_2025), sorted(vec!["cards/fees", "mortgage"]));
    let no_groups = get(&app, &filter(json!({"groups": {"$exists": false}})), &[]).await;
    assert_eq!(ids(&no_groups), sorted(vec!["travel"]));
    // Another tenant sees none of them.
    let other = app
        .send(
            Method::GET,
            "/v1/documents",
            &[("x-sluice-tenant", "globex")],
            "",
        )
        .await;
    assert_eq!(other.body, json!({"documents": [], "next_cursor": null}));
}

#[tokio::test]
async fn bad_listing_parameters_are_refused_with_what_is_wrong() {
    let app = app_with_policies(Kit::new(&[]), &[]).await;
    for (query, code, says) in [
        ("limit=0", "invalid_page", "limit"),
        ("limit=1001", "invalid_page", "1000"),
        ("limit=ten", "invalid_page", "\"ten\""),
        ("colour=red", "invalid_page", "colour"),
        ("filter=%7Bnot", "invalid_filter", "not JSON"),
        (
            "filter=%7B%22year%22%3A%7B%22%24near%22%3A1%7D%7D",
            "invalid_filter",
            "$near",
        ),
    ] {
        let reply = get(&app, &format!("/v1/documents?{query}"), &[]).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.raw);
        assert_eq!(reply.code(), code, "{query}");
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(says),
            "{query}: {}",
            reply.raw
        );
    }
}

#[tokio::test]
async fn one_document_is_read_by_its_id_slashes_and_all() {
    let app = app_with_policies(Kit::new(&[]), &[]).await;
    let reply = get(&app, "/v1/documents/cards/fees", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["id"], "cards/fees");
    assert_eq!(reply.body["metadata"]["year"], 2025);
    // Percent-encoded ids are decoded.
    let encoded = get(&app, "/v1/documents/cards%2Ffees", &[]).await;
    assert_eq!(encoded.body["id"], "cards/fees");
    let missing = get(&app, "/v1/documents/cards", &[]).await;
    assert_eq!((missing.status, missing.code()), (404, "unknown_document"));
}

#[tokio::test]
async fn a_deleted_document_is_gone_and_no_cached_answer_built_on_it_is_served() {
    let app = app_with_policies(Kit::new(UNCHECKED), &[]).await;
    let ask = json!({"query": "how long until a lost card is replaced", "k": 2});
    let first = app.answer_as("acme", &ask).await;
    assert!(
        first.sources().contains(&"cards/lost".to_string()),
        "{:?}",
        first.sources()
    );
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");

    let reply = delete(&app, "/v1/documents/cards/lost", &[], Value::Null).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["deleted"], 1);
    assert_eq!(reply.body["more"], false);
    assert_eq!(
        reply.body["corpus_version"], 2,
        "the ingest made 1, the deletion 2"
    );

    let after = app.answer_as("acme", &ask).await;
    assert_eq!(
        after.meta()["cache"],
        "miss",
        "the cached answer cited a deleted document"
    );
    assert!(
        !after.sources().contains(&"cards/lost".to_string()),
        "{:?}",
        after.sources()
    );
    assert_eq!(get(&app, "/v1/documents/cards/lost", &[]).await.status, 404);
    // Deleting it again: nothing there, nothing bumped.
    let again = delete(&app, "/v1/documents/cards/lost", &[], Value::Null).await;
    assert_eq!((again.status, again.code()), (404, "unknown_document"));
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
}

#[tokio::test]
async fn a_deletion_by_filter_needs_confirmation_and_counts_what_it_removed() {
    let app = app_with_policies(Kit::new(&[]), &[]).await;
    let old = json!({"year": {"$lt": 2025}});
    for (body, code) in [
        (json!({"filter": old}), "confirmation_required"),
        (
            json!({"filter": old, "confirm": false}),
            "confirmation_required",
        ),
        (json!({"confirm": true}), "confirmation_required"),
        (json!({"all": true}), "confirmation_required"),
        (
            json!({"all": true, "filter": old, "confirm": true}),
            "invalid_filter",
        ),
        (
            json!({"filter": {"year": {"$near": 1}}, "confirm": true}),
            "invalid_filter",
        ),
        (
            json!({"filter": old, "confirm": true, "everything": true}),
            "invalid_json",
        ),
    ] {
        let reply = delete(&app, "/v1/documents", &[], body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, code),
            "{body}: {}",
            reply.raw
        );
    }
    assert_eq!(
        all_pages(&app, 100, &[]).await.len(),
        6,
        "refusals deleted nothing"
    );
    let reply = delete(
        &app,
        "/v1/documents",
        &[],
        json!({"filter": old, "confirm": true}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["deleted"], 4);
    assert_eq!(reply.body["more"], false);
    assert_eq!(
        all_pages(&app, 100, &[]).await,
        sorted(vec!["cards/fees", "mortgage"])
    );
    // Nothing left to match: 0, and the corpus version stays.
    let none = delete(
        &app,
        "/v1/documents",
        &[],
        json!({"filter": old, "confirm": true}),
    )
    .await;
    assert_eq!(none.body["deleted"], 0);
    assert_eq!(none.body["corpus_version"], reply.body["corpus_version"]);
}

#[tokio::test]
async fn listing_needs_documents_and_deleting_needs_documents_delete() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add("acme", &Permission::ALL);
    // A key as they were made before `documents:delete` existed.
    let older = keys.add(
        "acme",
        &[
            Permission::Answer,
            Permission::Documents,
            Permission::Components,
            Permission::Cache,
        ],
    );
    let asker = keys.add("acme", &[Permission::Answer]);
    let bearer = |k: &str| format!("Bearer {k}");
    let (admin, older, asker) = (bearer(&admin), bearer(&older), bearer(&asker));
    let admin_h = [("authorization", admin.as_str())];
    let older_h = [("authorization", older.as_str())];
    let asker_h = [("authorization", asker.as_str())];
    let app = app_with_policies(Kit::new(&[]).keys(keys), &admin_h).await;

    assert_eq!(get(&app, "/v1/documents", &older_h).await.status, 200);
    assert_eq!(get(&app, "/v1/documents/atm", &older_h).await.status, 200);
    for (path, body) in [
        ("/v1/documents/atm", Value::Null),
        ("/v1/documents", json!({"all": true, "confirm": true})),
    ] {
        let reply = delete(&app, path, &older_h, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "permission_denied"),
            "{path}"
        );
        assert!(reply.raw.contains("documents:delete"), "{}", reply.raw);
    }
    let reply = get(&app, "/v1/documents", &asker_h).await;
    assert_eq!((reply.status, reply.code()), (403, "permission_denied"));
    assert_eq!(all_pages(&app, 100, &admin_h).await.len(), 6);
    let reply = delete(&app, "/v1/documents/atm", &admin_h, Value::Null).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
}

#[tokio::test]
async fn a_keys_filter_bounds_what_it_lists_reads_and_deletes() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add("acme", &Permission::ALL);
    let bound = Filter::parse(&json!({"groups": {"$in": ["finance"]}})).unwrap();
    let finance = keys.add_filtered("acme", &Permission::ALL, Some(bound));
    let (admin, finance) = (format!("Bearer {admin}"), format!("Bearer {finance}"));
    let app = app_with_policies(Kit::new(&[]).keys(keys), &[("authorization", &admin)]).await;
    let fin = [("authorization", finance.as_str())];
    let finance_docs = sorted(vec!["cards/fees", "mortgage", "savings"]);
    assert_eq!(all_pages(&app, 2, &fin).await, finance_docs);
    // A listing filter narrows, never widens.
    let widen = sluice_contract::escape(&json!({"groups": {"$exists": false}}).to_string());
    let reply = get(&app, &format!("/v1/documents?filter={widen}"), &fin).await;
    assert_eq!(ids(&reply), Vec::<String>::new());
    // Outside the filter a document does not exist for this key: not read, not deleted.
    assert_eq!(get(&app, "/v1/documents/atm", &fin).await.status, 404);
    let reply = delete(&app, "/v1/documents/atm", &fin, Value::Null).await;
    assert_eq!(reply.code(), "unknown_document");
    // "Everything" is everything the key may see.
    let reply = delete(
        &app,
        "/v1/documents",
        &fin,
        json!({"all": true, "confirm": true}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["deleted"], 3);
    let admin_h = [("authorization", admin.as_str())];
    assert_eq!(
        all_pages(&app, 100, &admin_h).await,
        sorted(vec!["atm", "cards/lost", "travel"])
    );
}

/// The test embedder, recording the size of every batch it is given and failing a batch
/// that holds a text with `POISON` in it.
struct Batches {
    inner: sluice_testkit::HashEmbedder,
    /// Each call's number of texts.
    seen: std::sync::Mutex<Vec<usize>>,
    /// Every text embedded.
    read: std::sync::Mutex<Vec<String>>,
}

impl Batches {
    /// An ingest with the settings `overrides` over a kit's store, embedding through a
    /// recording embedder: the embedder, the store and the ingest.
    fn ingest(
        overrides: &[(&str, &str)],
    ) -> (
        Arc<Self>,
        Arc<dyn sluice_contract::stages::Store>,
        sluice_core::ingest::Ingest,
    ) {
        let kit = Kit::new(overrides);
        let embedder = Arc::new(Batches {
            inner: sluice_testkit::HashEmbedder::new(),
            seen: Default::default(),
            read: Default::default(),
        });
        let store = kit.store();
        let ingest = sluice_core::ingest::Ingest::new(
            kit.parts.config.ingest.clone(),
            embedder.clone(),
            store.clone(),
        );
        (embedder, store, ingest)
    }
}

impl sluice_contract::stages::Embedder for Batches {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, sluice_contract::error::EmbedError> {
        self.seen.lock().unwrap().push(texts.len());
        (self.read.lock().unwrap()).extend(texts.iter().map(|t| t.to_string()));
        if texts.iter().any(|t| t.contains("POISON")) {
            return Err(sluice_contract::error::EmbedError::Inference(
                "poisoned".into(),
            ));
        }
        self.inner.embed(texts)
    }
    fn count_tokens(&self, text: &str) -> usize {
        self.inner.count_tokens(text)
    }
}

#[tokio::test]
async fn an_ingest_embeds_its_chunks_in_batches_and_stores_nothing_if_embedding_fails() {
    use sluice_contract::document::Document;
    let (embedder, store, ingest) = Batches::ingest(&[
        ("SLUICE_CHUNK_TOKENS", "16"),
        ("SLUICE_CHUNK_OVERLAP_TOKENS", "0"),
    ]);
    let tenant = sluice_testkit::tenant("acme");
    let mut documents: Vec<Document> =
        serde_json::from_value(policies()["documents"].clone()).unwrap();
    // One long document (several chunks) among the short ones.
    documents[0].text = "Report a lost card in the app at once. ".repeat(12);
    let report = ingest.ingest(&tenant, documents).await.unwrap();
    assert!(report.chunks > report.documents, "{report:?}");
    // Six documents, one call: the embedder may spread the batch over its threads.
    assert_eq!(*embedder.seen.lock().unwrap(), vec![report.chunks]);
    assert_eq!(store.count(&tenant).await.unwrap(), report.chunks);
    let version = store.corpus_version(&tenant).await.unwrap();

    // A batch that fails leaves the store as it was: not the documents before the bad one,
    // not a new corpus version.
    let more: Vec<Document> = serde_json::from_value(json!([
        {"id": "fresh", "text": "A fresh document, embedded first."},
        {"id": "bad", "text": "This one is POISON to the embedder."},
        {"id": "atm", "text": "A new ATM text that must not replace the old one."},
    ]))
    .unwrap();
    assert!(ingest.ingest(&tenant, more).await.is_err());
    assert_eq!(store.count(&tenant).await.unwrap(), report.chunks);
    assert_eq!(store.corpus_version(&tenant).await.unwrap(), version);
}

#[tokio::test]
async fn a_document_sent_again_unchanged_is_neither_embedded_nor_written() {
    use sluice_contract::document::Document;
    use sluice_contract::stages::{Page, Selection};
    let (embedder, store, ingest) = Batches::ingest(&[]);
    let tenant = sluice_testkit::tenant("acme");
    let documents: Vec<Document> = serde_json::from_value(policies()["documents"].clone()).unwrap();
    let count = documents.len();
    let listing = || async {
        let page = Page {
            limit: 100,
            cursor: None,
        };
        (store.documents(&tenant, &Selection::default(), page).await).unwrap()
    };
    let first = ingest.ingest(&tenant, documents.clone()).await.unwrap();
    assert_eq!((first.documents, first.unchanged), (count, 0));
    let listed = listing().await;
    assert!(
        (listed.documents.iter()).all(|d| d.document.digest.is_some()),
        "{listed:?}"
    );
    let embedded = embedder.read.lock().unwrap().len();

    // Sent again as it was: nothing embedded or written, the corpus version where it was.
    let again = ingest.ingest(&tenant, documents.clone()).await.unwrap();
    assert_eq!(
        (again.documents, again.unchanged, again.chunks),
        (count, count, 0)
    );
    assert_eq!(again.corpus_version, first.corpus_version);
    assert_eq!(embedder.read.lock().unwrap().len(), embedded);
    assert_eq!(listing().await, listed);

    // Each part of a document that is stored counts: a change to any one is written again.
    let mut changed = documents.clone();
    changed[0]
        .text
        .push_str(" Branches also open on Saturdays.");
    changed[1].title = Some("Another title".into());
    changed[2].source = Some("https://example.com/elsewhere".into());
    changed[3].metadata.insert("year".into(), json!(2031));
    let written = ingest.ingest(&tenant, changed.clone()).await.unwrap();
    assert_eq!(written.unchanged, count - 4);
    assert_eq!(written.corpus_version, first.corpus_version + 1);
    let read = embedder.read.lock().unwrap()[embedded..].to_vec();
    assert_eq!(read.len(), written.chunks);
    assert!(
        (read.iter()).any(|t| t.contains("Saturdays"))
            && (read.iter()).any(|t| t.contains("Another title")),
        "{read:?}"
    );

    // The same documents to be cut otherwise are another ingest: all written again.
    let mut config = ingest.config.clone();
    config.chunk_tokens += 16;
    let recut = sluice_core::ingest::Ingest::new(config, embedder.clone(), store.clone());
    let report = recut.ingest(&tenant, changed).await.unwrap();
    assert_eq!(report.unchanged, 0);
    assert_eq!(report.corpus_version, first.corpus_version + 2);
}

#[tokio::test]
async fn an_ingest_whose_store_cannot_list_what_it_holds_writes_every_document() {
    use sluice_contract::document::Document;
    let kit = Kit::new(&[]);
    let mut store = sluice_testkit::Troubled::around(kit.store());
    store.fail = true;
    let ingest = sluice_core::ingest::Ingest::new(
        kit.parts.config.ingest.clone(),
        kit.parts.embedder.clone().expect("an embedder"),
        Arc::new(store),
    );
    let tenant = sluice_testkit::tenant("acme");
    let documents: Vec<Document> = serde_json::from_value(policies()["documents"].clone()).unwrap();
    let first = ingest.ingest(&tenant, documents.clone()).await.unwrap();
    let again = ingest.ingest(&tenant, documents).await.unwrap();
    assert_eq!((again.unchanged, again.chunks), (0, first.chunks));
    assert_eq!(again.corpus_version, first.corpus_version + 1);
}

#[tokio::test]
async fn a_chunk_is_embedded_under_its_title_and_section_and_quoted_without_them() {
    use sluice_contract::{stages::Embedder, stages::Search};
    use sluice_convert::ConvertLimits;
    use sluice_convert::parse_file;
    let file = b"---\ntitle: Card policy\n---\n# Lost cards\nCall us at once.\n";
    for (setting, embedded) in [
        (
            "true",
            "Card policy \u{203a} Lost cards\n\nCall us at once.",
        ),
        ("false", "Call us at once."),
    ] {
        let (embedder, store, ingest) = Batches::ingest(&[("SLUICE_CONTEXT_HEADER", setting)]);
        let tenant = sluice_testkit::tenant("acme");
        let documents = parse_file("policies/cards.md", file, &ConvertLimits::default()).unwrap();
        ingest.ingest(&tenant, documents).await.unwrap();
        assert_eq!(*embedder.read.lock().unwrap(), [embedded], "{setting}");
        // What an answer quotes is the chunk's text, with its section beside it.
        let vector = embedder.inner.embed(&["lost card"]).unwrap().remove(0);
        let hits = store
            .search(&tenant, &Search::new("lost card", &vector, 3))
            .await
            .unwrap();
        assert_eq!(hits[0].text, "Call us at once.", "{setting}");
        assert_eq!(hits[0].place.section, "Lost cards", "{setting}");
    }
}

/// An embedder that counts its calls, says on `entered` when one starts, and holds each until
/// the sender of `gate` is dropped (then every wait ends at once).
fn gated(
    calls: Arc<std::sync::atomic::AtomicUsize>,
    entered: std::sync::mpsc::Sender<()>,
    gate: std::sync::mpsc::Receiver<()>,
) -> sluice_testkit::Hooked {
    let (entered, gate) = (std::sync::Mutex::new(entered), std::sync::Mutex::new(gate));
    sluice_testkit::Hooked::new().on_embed(move |_| {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = entered.lock().unwrap().send(());
        let _ = gate.lock().unwrap().recv();
        Ok(())
    })
}

/// A client that leaves while its documents are embedded takes the work with it: the
/// embedding stops at the next batch and nothing is stored. Not timed: the first batch is
/// held until the request has been dropped, and dropping the runtime waits for the blocking
/// work to end, so the calls made are counted once nothing can make another.
#[test]
fn an_ingest_whose_client_leaves_stops_embedding_and_stores_nothing() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let (entered, started) = std::sync::mpsc::channel();
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut kit = Kit::new(&[]);
    kit.parts.embedder = Some(Arc::new(gated(calls.clone(), entered, gate)));
    let store = kit.store();
    let app = kit.app();
    // 200 one-chunk documents: several batches of texts to embed.
    let documents: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("d{i}"), "text": format!("Document {i} is about cards.")}))
        .collect();
    let body = json!({ "documents": documents }).to_string();
    let server = runtime();
    let request = server.spawn(async move {
        app.send(
            Method::POST,
            "/v1/documents",
            &[("x-sluice-tenant", "acme")],
            body,
        )
        .await
    });
    started
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the first batch is being embedded");
    request.abort();
    let ended = server.block_on(request);
    assert!(
        ended.unwrap_err().is_cancelled(),
        "the client's request was dropped"
    );
    drop(release);
    drop(server);
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no batch is embedded after the client left"
    );
    let version = runtime().block_on(store.corpus_version(&sluice_testkit::tenant("acme")));
    assert_eq!(version.unwrap(), 0, "nothing was written");
}

/// An ingest that takes longer than `SLUICE_INGEST_TIMEOUT_MS` is refused, naming the limit,
/// with nothing stored.
#[tokio::test]
async fn an_ingest_past_its_time_limit_is_refused_and_stores_nothing() {
    let (entered, _started) = std::sync::mpsc::channel();
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut kit = Kit::new(&[("SLUICE_INGEST_TIMEOUT_MS", "300")]);
    kit.parts.embedder = Some(Arc::new(gated(calls.clone(), entered, gate)));
    let store = kit.store();
    let app = kit.app();
    let documents: Vec<Value> = (0..100)
        .map(|i| json!({"id": format!("d{i}"), "text": format!("Document {i} is about cards.")}))
        .collect();
    // Each batch is held until the time limit has passed, so the next check refuses.
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(600));
        drop(release);
    });
    let reply = app
        .post_as("acme", "/v1/documents", &json!({ "documents": documents }))
        .await;
    letting_go.join().unwrap();
    assert_eq!(reply.status, 413, "{}", reply.raw);
    assert_eq!(reply.code(), "ingest_too_large");
    assert!(
        reply.raw.contains("SLUICE_INGEST_TIMEOUT_MS"),
        "{}",
        reply.raw
    );
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) <= 1);
    let version = store.corpus_version(&sluice_testkit::tenant("acme")).await;
    assert_eq!(version.unwrap(), 0, "nothing was written");
}

/// One deletion removes at most `MAX_DELETE` documents and says `"more": true` when more
/// matched; the next call takes the rest.
#[tokio::test]
async fn a_deletion_takes_at_most_its_page_and_says_when_more_match() {
    use sluice_contract::document::MAX_DELETE;
    let app = Kit::new(&[("SLUICE_MAX_DOCUMENTS", "2000")]).app();
    let documents: Vec<Value> = (0..=MAX_DELETE)
        .map(|i| json!({"id": format!("d{i}"), "text": "old", "metadata": {"year": 2020}}))
        .collect();
    let reply = app
        .post_as("acme", "/v1/documents", &json!({ "documents": documents }))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let delete_old = || {
        delete(
            &app,
            "/v1/documents",
            &[],
            json!({"filter": {"year": 2020}, "confirm": true}),
        )
    };
    let first = delete_old().await;
    assert_eq!(first.status, 200, "{}", first.raw);
    assert_eq!(first.body["deleted"], MAX_DELETE);
    assert_eq!(first.body["more"], true);
    let second = delete_old().await;
    assert_eq!(second.body["deleted"], 1);
    assert_eq!(second.body["more"], false);
    assert!(all_pages(&app, 100, &[]).await.is_empty());
}

/// A file whose conversion runs past `SLUICE_CONVERT_TIMEOUT_MS` is 422
/// `unreadable_document`, naming the file and the setting, with nothing stored.
#[tokio::test]
async fn a_conversion_past_its_time_limit_is_unreadable() {
    let app = Kit::new(&[("SLUICE_CONVERT_TIMEOUT_MS", "100")]).app();
    let page: &[(f32, &str)] = &[(10.0, "Cards are replaced within five days. ")];
    let file = sluice_testkit::files::pdf(
        &vec![page; 2000],
        sluice_testkit::files::PdfOptions::default(),
    );
    let reply = app
        .send(
            Method::POST,
            "/v1/documents?filename=long.pdf",
            &[("x-sluice-tenant", "acme")],
            file,
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (422, "unreadable_document"),
        "{}",
        reply.raw
    );
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("long.pdf") && message.contains("SLUICE_CONVERT_TIMEOUT_MS"),
        "{message}"
    );
    assert!(all_pages(&app, 100, &[]).await.is_empty());
}
