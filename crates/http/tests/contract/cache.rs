//! The answer cache as clients see it: a repeated question is replayed through the same
//! events without retrieval or the LLM; entries belong to one tenant and one corpus version,
//! expire, and are never made from a degraded answer; a request can skip the cache.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use serde_json::json;
use sluice_core::cache::{CacheSettings, SemanticCache};
use sluice_local::MemoryCache;
use sluice_testkit::{HashEmbedder, Troubled};

use crate::kit::Kit;

const QUESTION: &str = "How long does a replacement card take?";

#[tokio::test]
async fn a_repeated_question_replays_the_cached_answer_through_the_same_events() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    let first = app.answer_as("acme", &json!({"query": QUESTION})).await;
    assert_eq!(first.meta()["cache"], "miss");
    assert_eq!(first.first("done")["cached"], false);
    // The same question, written differently (case, punctuation).
    let again = app
        .answer_as(
            "acme",
            &json!({"query": QUESTION.to_uppercase().replace('?', "")}),
        )
        .await;
    again.assert_well_formed();
    assert_eq!(again.meta()["cache"], "hit");
    assert_eq!(again.text(), first.text());
    assert_eq!(again.meta()["documents"], first.meta()["documents"]);
    assert_ne!(again.meta()["request_id"], first.meta()["request_id"]);
    let done = again.first("done");
    assert_eq!(done["cached"], true);
    assert_eq!(done["token_count"], first.first("done")["token_count"]);
    assert_eq!(done["finish_reason"], first.first("done")["finish_reason"]);
    let t = &done["timings"];
    assert!(t["cache_ms"].is_number() && t["ttft_ms"].is_number(), "{t}");
    assert!(
        t.get("llm_ttft_ms").is_none() && t.get("retrieve_ms").is_none(),
        "{t}"
    );
    assert_eq!(app.llm.calls().len(), 1, "the LLM was called once");
}

#[tokio::test]
async fn a_new_document_that_enters_the_sources_misses() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    let ask = json!({"query": QUESTION});
    app.answer_as("acme", &ask).await;
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
    let doc = json!({"documents": [{"id": "new-policy", "text": "Replacement cards now arrive in three days."}]});
    assert_eq!(app.post_as("acme", "/v1/documents", &doc).await.status, 200);
    let after = app.answer_as("acme", &ask).await;
    assert_eq!(after.meta()["cache"], "miss");
    let sources = after.meta()["documents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        sources.iter().any(|d| d["id"] == "new-policy"),
        "the new document is among the sources: {sources:?}"
    );
}

/// Asks `ask` as `acme` and says how the cache answered: `miss`, or the hit's `cache_match`.
async fn answered(app: &crate::kit::App, ask: &serde_json::Value) -> String {
    let answer = app.answer_as("acme", ask).await;
    answer.assert_well_formed();
    let meta = answer.meta();
    match meta["cache"].as_str() {
        Some("hit") => meta["cache_match"].as_str().unwrap_or("?").to_string(),
        other => other.unwrap_or("?").to_string(),
    }
}

#[tokio::test]
async fn an_ingest_elsewhere_keeps_an_answer_whose_sources_retrieval_still_returns() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    // Two sources of the three documents: a new one may stay out of them.
    let ask = json!({"query": QUESTION, "k": 2});
    let first = app.answer_as("acme", &ask).await;
    assert_eq!(answered(&app, &ask).await, "exact");
    let branches = json!({"documents": [{"id": "branches",
        "text": "Our branch in Leeds closes at 5pm on Saturdays."}]});
    let sent = app.post_as("acme", "/v1/documents", &branches).await;
    assert_eq!(sent.status, 200, "{}", sent.raw);

    // The corpus moved on; retrieval for the question, run now, returns the same sources.
    let after = app.answer_as("acme", &ask).await;
    after.assert_well_formed();
    assert_eq!(
        (&after.meta()["cache"], &after.meta()["cache_match"]),
        (&json!("hit"), &json!("sources"))
    );
    assert_eq!(after.text(), first.text());
    assert_eq!(after.meta()["documents"], first.meta()["documents"]);
    assert!(after.first("done")["timings"]["retrieve_ms"].is_number());
    assert_eq!(app.llm.calls().len(), 1, "the LLM was called once");
    // The entry was brought up to the new version: the next hit needs no retrieval.
    let next = app.answer_as("acme", &ask).await;
    assert_eq!(next.meta()["cache_match"], "exact");
    assert!(next.first("done")["timings"].get("retrieve_ms").is_none());
}

/// An answer checked against a similar question's retrieval is proven for that question only:
/// after a change that moved the sources of the question it was made for (and not the similar
/// one's), the similar question is answered from it and keeps a copy under its own key, while
/// the original question's entry stays under the old version — never replayed at once by its
/// exact key.
#[tokio::test]
async fn a_check_by_a_similar_question_never_vouches_for_the_original() {
    let mut kit = Kit::new(&[("SLUICE_CACHE_THRESHOLD", "0.8")]);
    let store = Arc::new(Troubled::around(kit.store()));
    kit.parts.store = Some(store.clone());
    let app = kit.ingested("acme").await.app();
    let original = "How long does a replacement card take?";
    let similar = "How long will a replacement card take?";
    let ask = |q: &str| json!({"query": q, "k": 2});
    let first = app.answer_as("acme", &ask(original)).await;
    assert_eq!(first.meta()["cache"], "miss");
    // A change: the corpus version moves, and with it the original question's sources (one
    // of them drops out of its retrieval), not the similar question's.
    let cited = first.meta()["documents"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    *store.hidden.lock().unwrap() = Some((original.into(), cited));
    let branches = json!({"documents": [{"id": "branches",
        "text": "Our branch in Leeds closes at 5pm on Saturdays."}]});
    assert_eq!(
        app.post_as("acme", "/v1/documents", &branches).await.status,
        200
    );

    assert_eq!(answered(&app, &ask(similar)).await, "sources");
    assert_eq!(answered(&app, &ask(similar)).await, "exact", "its own copy");
    // The original question's own entry was not brought up to date by the similar one's
    // check: it is not replayed by its exact key. (The similar question's copy, made under the
    // version in use, may answer it as any answer made now answers a question within the
    // threshold.)
    assert_ne!(
        answered(&app, &ask(original)).await,
        "exact",
        "the original question's sources moved"
    );
}

#[tokio::test]
async fn an_edit_of_a_cited_chunk_or_its_deletion_misses() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    let ask = json!({"query": QUESTION, "k": 2});
    let first = app.answer_as("acme", &ask).await;
    assert_eq!(answered(&app, &ask).await, "exact");
    let cited = first.meta()["documents"][0]["id"].clone();
    let mut edited = (crate::kit::documents()["documents"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .find(|d| d["id"] == cited)
        .expect("the cited document is one of the kit's");
    let text = edited["text"].as_str().unwrap_or_default().to_string();
    edited["text"] = json!(format!(
        "{text} Cards ordered before noon leave the same day."
    ));
    let sent = app
        .post_as("acme", "/v1/documents", &json!({"documents": [edited]}))
        .await;
    assert_eq!(sent.status, 200, "{}", sent.raw);
    assert_eq!(answered(&app, &ask).await, "miss", "an edited source");
    assert_eq!(
        answered(&app, &ask).await,
        "exact",
        "the new answer is cached"
    );

    let path = format!("/v1/documents/{}", cited.as_str().unwrap_or_default());
    let deleted = app
        .send(Method::DELETE, &path, &[("x-sluice-tenant", "acme")], "")
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.raw);
    assert_eq!(answered(&app, &ask).await, "miss", "a deleted source");
    assert_eq!(app.llm.calls().len(), 3);
}

#[tokio::test]
async fn documents_sent_again_unchanged_keep_the_cached_answers() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    let ask = json!({"query": QUESTION});
    app.answer_as("acme", &ask).await;
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
    let sent = crate::kit::documents();
    let count = sent["documents"].as_array().map_or(0, Vec::len);
    let again = app.post_as("acme", "/v1/documents", &sent).await;
    assert_eq!(again.status, 200, "{}", again.raw);
    assert_eq!(
        (&again.body["unchanged"], &again.body["chunks"]),
        (&json!(count), &json!(0)),
        "{}",
        again.raw
    );
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
    assert_eq!(app.llm.calls().len(), 1, "the LLM was called once");
}

#[tokio::test]
async fn a_request_can_bypass_the_cache_by_body_or_header() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    let ask = json!({"query": QUESTION});
    app.answer_as("acme", &ask).await;
    let bypass = app
        .answer_as("acme", &json!({"query": QUESTION, "cache": "bypass"}))
        .await;
    assert_eq!(bypass.meta()["cache"], "bypass");
    assert_eq!(bypass.first("done")["cached"], false);
    for directive in ["no-cache", "max-age=0, no-store"] {
        let headers = [("x-sluice-tenant", "acme"), ("cache-control", directive)];
        let answer = app.answer_with(&headers, &ask).await;
        assert_eq!(answer.meta()["cache"], "bypass", "{directive}");
    }
    assert_eq!(app.llm.calls().len(), 4, "every bypass asked the LLM");
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
}

#[tokio::test]
async fn degraded_answers_are_not_cached() {
    let mut kit = Kit::new(&[]).ingested("default").await;
    let mut slow = Troubled::around(kit.store());
    slow.delay = Duration::from_millis(300);
    kit.parts.store = Some(Arc::new(slow));
    let app = kit.app();
    let late = json!({"query": QUESTION, "retrieval_deadline_ms": 50});
    let degraded = app.answer(&late).await;
    assert_eq!(degraded.degraded(), ["retrieval_timeout"]);
    assert_eq!(
        degraded.names().last(),
        Some(&"done"),
        "complete, yet not cached"
    );
    // The same question with time enough for the slow store.
    let patient = json!({"query": QUESTION, "retrieval_deadline_ms": 5000});
    let next = app.answer(&patient).await;
    assert_eq!(
        next.meta()["cache"],
        "miss",
        "the degraded answer was cached"
    );
    assert_eq!(next.degraded(), Vec::<String>::new());
    assert_eq!(app.answer(&patient).await.meta()["cache"], "hit");
}

#[tokio::test]
async fn delete_forgets_one_tenants_answers() {
    let app = Kit::new(&[])
        .ingested("acme")
        .await
        .ingested("globex")
        .await
        .app();
    let ask = json!({"query": QUESTION});
    for tenant in ["acme", "globex"] {
        app.answer_as(tenant, &ask).await;
    }
    let reply = app
        .send(
            Method::DELETE,
            "/v1/cache",
            &[("x-sluice-tenant", "acme")],
            "",
        )
        .await;
    assert_eq!((reply.status, reply.body), (200, json!({"deleted": 1})));
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "miss");
    assert_eq!(app.answer_as("globex", &ask).await.meta()["cache"], "hit");
}

#[tokio::test]
async fn expired_entries_are_not_served() {
    let mut kit = Kit::new(&[("SLUICE_CACHE_TTL_SECS", "60")])
        .ingested("default")
        .await;
    // The cache's own clock, moved by the test (seconds since the epoch).
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(1_900_000_000));
    let read = Arc::clone(&clock);
    let cache = SemanticCache::new(
        Arc::new(MemoryCache::new(100)),
        CacheSettings::from_config(&kit.parts.config.cache),
        HashEmbedder::DIM,
    )
    .with_clock(move || read.load(std::sync::atomic::Ordering::SeqCst));
    kit.parts.cache = Some(Arc::new(cache));
    let app = kit.app();
    let ask = json!({"query": QUESTION});
    app.answer(&ask).await;
    clock.fetch_add(59, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(app.answer(&ask).await.meta()["cache"], "hit");
    clock.fetch_add(2, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(app.answer(&ask).await.meta()["cache"], "miss");
}

#[tokio::test]
async fn with_the_cache_off_every_request_bypasses_it() {
    let app = Kit::new(&[("SLUICE_CACHE", "off")]).app();
    let ask = json!({"query": QUESTION});
    for _ in 0..2 {
        assert_eq!(app.answer(&ask).await.meta()["cache"], "bypass");
    }
    assert_eq!(app.llm.calls().len(), 2);
}

#[tokio::test]
async fn with_a_store_whose_reads_lag_nothing_is_cached_until_a_change_has_settled() {
    // A store that says its writes take 300 ms to show in reads (as Pinecone's serverless
    // indexes take seconds): after a change of the corpus, an answer may have been built from
    // a document already deleted, so none is cached until the lag has passed.
    let lag = Duration::from_millis(300);
    // The scripted answer quotes the document the test deletes: no longer grounded after, so
    // the check is off here (what is tested is the lag).
    let mut kit = Kit::new(&[("SLUICE_GROUNDING", "off")])
        .ingested("acme")
        .await;
    let mut store = Troubled::around(kit.store());
    store.lag = lag;
    kit.parts.store = Some(Arc::new(store));
    let app = kit.app();
    let ask = json!({"query": QUESTION});
    let cache = |app: &crate::kit::App| {
        let app = app.clone();
        let ask = ask.clone();
        async move { app.answer_as("acme", &ask).await.meta()["cache"].clone() }
    };
    // The version is new to this process: held.
    assert_eq!(cache(&app).await, "miss");
    assert_eq!(cache(&app).await, "miss", "not written within the lag");
    tokio::time::sleep(lag).await;
    assert_eq!(cache(&app).await, "miss");
    assert_eq!(
        cache(&app).await,
        "hit",
        "written once the version had settled"
    );
    // A deletion changes the version: held again, for the whole lag.
    let reply = app
        .send(
            Method::DELETE,
            "/v1/documents/lost-card",
            &[("x-sluice-tenant", "acme")],
            "",
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(cache(&app).await, "miss");
    assert_eq!(cache(&app).await, "miss", "not written within the lag");
    tokio::time::sleep(lag).await;
    assert_eq!(cache(&app).await, "miss");
    assert_eq!(cache(&app).await, "hit");
}

#[tokio::test]
async fn with_a_store_whose_reads_lag_an_older_answer_is_checked_only_once_a_change_has_settled() {
    // Retrieval right after a change may still return what it removed: an answer made before
    // it is not checked against such a retrieval, only once the lag has passed.
    let lag = Duration::from_millis(300);
    let mut kit = Kit::new(&[]).ingested("acme").await;
    let mut store = Troubled::around(kit.store());
    store.lag = lag;
    kit.parts.store = Some(Arc::new(store));
    let app = kit.app();
    let ask = json!({"query": QUESTION, "k": 2});
    assert_eq!(answered(&app, &ask).await, "miss");
    tokio::time::sleep(lag).await;
    assert_eq!(answered(&app, &ask).await, "miss");
    assert_eq!(answered(&app, &ask).await, "exact");
    let branches = json!({"documents": [{"id": "branches",
        "text": "Our branch in Leeds closes at 5pm on Saturdays."}]});
    assert_eq!(
        app.post_as("acme", "/v1/documents", &branches).await.status,
        200
    );
    assert_eq!(answered(&app, &ask).await, "miss", "within the lag");
    tokio::time::sleep(lag).await;
    assert_eq!(answered(&app, &ask).await, "sources");
}

#[tokio::test]
async fn a_deletion_answers_only_once_other_processes_have_let_go_of_the_old_version() {
    // Other processes remember a tenant's corpus version for a while (a remote store's memo)
    // and serve cached answers under it; a deletion that answered at once would leave them
    // serving answers built from the deleted document after the client was told it is gone.
    let app = |memo| async move {
        let mut kit = Kit::new(&[]).ingested("acme").await;
        let mut store = Troubled::around(kit.store());
        store.memo = memo;
        kit.parts.store = Some(Arc::new(store));
        kit.app()
    };
    let timed = |app: crate::kit::App, method: Method, path: &'static str, body: String| async move {
        let started = std::time::Instant::now();
        let reply = app
            .send(method, path, &[("x-sluice-tenant", "acme")], body)
            .await;
        (reply, started.elapsed())
    };
    let memo = Duration::from_millis(400);
    let short = app(memo).await;
    let (reply, took) = timed(
        short,
        Method::DELETE,
        "/v1/documents/lost-card",
        String::new(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert!(took >= memo, "answered after {took:?}, within the memo");
    // Nothing removed, nothing to wait for (a memo of a minute would show).
    let long = Duration::from_secs(60);
    let patient = app(long).await;
    let (reply, took) = timed(
        patient.clone(),
        Method::DELETE,
        "/v1/documents/nothing-here",
        String::new(),
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.raw);
    assert!(took < long, "a deletion of nothing waited {took:?}");
    // An ingest that removes nothing answers at once too.
    let note = json!({"documents": [{"id": "new", "text": "A new note."}]}).to_string();
    let (reply, took) = timed(patient, Method::POST, "/v1/documents", note).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert!(took < long, "an ingest waited the memo ({took:?})");
}

#[tokio::test]
async fn a_learning_tenant_compares_a_candidate_with_the_llms_answer_and_reports_it() {
    let app = Kit::new(&[("SLUICE_CACHE_EXPLORE", "acme=1")])
        .ingested("acme")
        .await
        .ingested("globex")
        .await
        .app();
    let state = |tenant: &'static str| {
        let app = &app;
        async move {
            let reply = app
                .send(Method::GET, "/v1/cache", &[("x-sluice-tenant", tenant)], "")
                .await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            reply.body
        }
    };
    // Nothing compared yet: the configured threshold.
    let before = state("acme").await;
    assert_eq!(before["threshold"], 0.9);
    assert_eq!(before["learning"]["observations"], 0);
    assert_eq!(before["learning"]["learned"], false);
    // A reworded question the guard passes ("a" / "the"), under the threshold with the hash
    // embedder (6 of 7 words shared: cosine 0.86): compared at rate 1, answered by the LLM.
    let reworded = "How long does the replacement card take?";
    for tenant in ["acme", "globex"] {
        app.answer_as(tenant, &json!({"query": QUESTION})).await;
        let second = app.answer_as(tenant, &json!({"query": reworded})).await;
        second.assert_well_formed();
        assert_eq!(second.meta()["cache"], "miss");
    }
    // The comparison finished before the stream ended: one observation, the same answer.
    let after = state("acme").await;
    assert_eq!(after["learning"]["observations"], 1, "{after}");
    assert_eq!(after["learning"]["different"], 0, "{after}");
    // A tenant that does not learn keeps none.
    let other = state("globex").await;
    assert_eq!(other["learning"], serde_json::Value::Null);
    assert_eq!(other["threshold"], 0.9);
}

/// Only a whole answer is cached: one that ended in an `error` is not, and neither is one
/// whose client left before its end (its stream was let go of mid-answer). Waited on by the
/// LLM's streams ending, not by time.
#[tokio::test]
async fn answers_that_end_in_an_error_or_whose_client_left_are_not_cached() {
    use http_body_util::BodyExt;
    use sluice_contract::error::LlmError;
    use sluice_testkit::{Reply, ScriptedLlm};
    let words = |s: &str| {
        s.split_inclusive(' ')
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let broken = Reply::BreakAfter(words("Cards arrive "), LlmError::Stream("cut".into()));
    let llm = ScriptedLlm::new(broken).gap(Duration::from_millis(20));
    let app = Kit::with_llm(&[], llm).ingested("acme").await.app();
    let ask = json!({"query": QUESTION});
    let failed = app.answer_as("acme", &ask).await;
    assert_eq!(failed.names().last(), Some(&"error"));
    // The next answer is whole, but its client leaves after the first token.
    app.llm.reply_with(Reply::Tokens(words(
        &"Cards arrive in five days. ".repeat(20),
    )));
    let request = crate::kit::request(
        Method::POST,
        "/v1/answer",
        &[("x-sluice-tenant", "acme")],
        ask.to_string(),
    );
    let mut body = app.open(request).await.into_body();
    let mut seen = String::new();
    while !seen.contains("event: token") {
        let frame = body.frame().await.expect("a frame").expect("a body");
        if let Some(data) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(data));
        }
    }
    drop(body);
    let waited = std::time::Instant::now();
    while app.llm.streams_ended() < 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the stream was never let go of"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    app.llm
        .reply_with(Reply::text("Cards arrive in five days."));
    let next = app.answer_as("acme", &ask).await;
    assert_eq!(
        next.meta()["cache"],
        "miss",
        "a broken or left answer was cached"
    );
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
}
