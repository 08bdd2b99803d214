//! The answer cache end to end over HTTP: real model, store and LLM; the in-memory backend
//! unless a test says otherwise (the DynamoDB backend runs on the emulator `make test` starts).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sluice_core::cache::{CacheEntry, CacheStore};
use sluice_core::error::CacheError;
use sluice_tests::{Answer, TestServer, http, start, start_with_cache};

const QUESTION: &str = "How long does a replacement card take to arrive?";

/// Asks until the answer comes from the cache (the write lands just after `done`).
async fn until_cached(server: &TestServer, tenant: &str, body: &Value) -> Answer {
    for _ in 0..100 {
        let answer = server.answer_as(Some(tenant), body).await;
        if answer.first("meta").data["cache"] == "hit" {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{body} was never answered from the cache");
}

fn cache_state(answer: &Answer) -> String {
    answer.first("meta").data["cache"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

#[tokio::test]
async fn a_repeated_question_replays_the_cached_answer_through_the_same_events() {
    let server = start(&[]).await;
    server.ingest_samples_as("acme").await;
    let first = server
        .answer_as(Some("acme"), &json!({ "query": QUESTION }))
        .await;
    first.assert_well_formed();
    assert_eq!(cache_state(&first), "miss");
    assert_eq!(first.first("done").data["cached"], false);

    // Case and punctuation do not matter to the exact key.
    let again = until_cached(
        &server,
        "acme",
        &json!({ "query": QUESTION.to_uppercase().replace('?', "") }),
    )
    .await;
    again.assert_well_formed();
    assert_eq!(again.text(), first.text());
    let (meta, first_meta) = (&again.first("meta").data, &first.first("meta").data);
    assert_eq!(meta["documents"], first_meta["documents"]);
    assert_eq!(meta["degraded"], json!([]));
    assert_ne!(meta["request_id"], first_meta["request_id"]);
    let done = &again.first("done").data;
    assert_eq!(done["cached"], true);
    assert_eq!(done["token_count"], first.first("done").data["token_count"]);
    assert_eq!(
        done["finish_reason"],
        first.first("done").data["finish_reason"]
    );
    let timings = &done["timings"];
    assert!(timings["cache_ms"].is_number(), "{timings}");
    assert!(timings["ttft_ms"].is_number(), "{timings}");
    assert!(
        timings.get("llm_ttft_ms").is_none(),
        "the LLM was not called: {timings}"
    );
    assert!(
        timings.get("retrieve_ms").is_none(),
        "retrieval was skipped: {timings}"
    );
}

#[tokio::test]
async fn tenants_never_share_an_entry_even_for_the_identical_question() {
    let server = start(&[]).await;
    server.ingest_samples_as("acme").await;
    server.ingest_samples_as("globex").await;
    let body = json!({ "query": QUESTION });
    server.answer_as(Some("acme"), &body).await;
    until_cached(&server, "acme", &body).await;
    let other = server.answer_as(Some("globex"), &body).await;
    assert_eq!(cache_state(&other), "miss");
    assert_eq!(other.first("done").data["cached"], false);
}

#[tokio::test]
async fn an_ingest_makes_older_entries_stale() {
    let server = start(&[]).await;
    server.ingest_samples_as("acme").await;
    let body = json!({ "query": QUESTION });
    server.answer_as(Some("acme"), &body).await;
    until_cached(&server, "acme", &body).await;
    let doc = json!({"documents": [{"id": "new-policy", "text": "Replacement cards now arrive in three days."}]});
    let (status, report) = server
        .send_as(
            "acme",
            Method::POST,
            "/v1/documents",
            doc.to_string().into_bytes(),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    let after = server.answer_as(Some("acme"), &body).await;
    assert_eq!(cache_state(&after), "miss");
}

#[tokio::test]
async fn a_request_can_bypass_the_cache_by_body_or_header() {
    let server = start(&[]).await;
    server.ingest_samples_as("acme").await;
    let body = json!({ "query": QUESTION });
    server.answer_as(Some("acme"), &body).await;
    until_cached(&server, "acme", &body).await;

    let bypass = server
        .answer_as(
            Some("acme"),
            &json!({ "query": QUESTION, "cache": "bypass" }),
        )
        .await;
    assert_eq!(cache_state(&bypass), "bypass");
    assert_eq!(bypass.first("done").data["cached"], false);

    for directive in ["no-cache", "max-age=0, no-store"] {
        let response = http()
            .post(format!("{}/v1/answer", server.url))
            .header("x-sluice-tenant", "acme")
            .header("cache-control", directive)
            .json(&body)
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        assert!(text.contains(r#""cache":"bypass""#), "{directive}: {text}");
        assert!(text.contains(r#""cached":false"#), "{directive}: {text}");
    }

    let (status, error) = server
        .post(
            "/v1/answer",
            &json!({ "query": QUESTION, "cache": "sometimes" }),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "invalid_cache", "{error}");
}

#[tokio::test]
async fn degraded_answers_are_not_cached() {
    let server = start(&[]).await;
    server.ingest_samples_as("acme").await;
    // The tenant's component (none) known, so that the deadline is the only thing degraded.
    let by = tokio::time::Instant::now() + Duration::from_secs(10);
    let reranker = server.pipeline.reranker.clone().unwrap();
    reranker.active("acme", by).await.unwrap();
    let degraded = server
        .answer_as(
            Some("acme"),
            &json!({ "query": QUESTION, "retrieval_deadline_ms": 0 }),
        )
        .await;
    degraded.assert_well_formed();
    assert_eq!(
        degraded.first("meta").data["degraded"],
        json!(["retrieval_timeout"])
    );
    assert_eq!(
        degraded.names().last(),
        Some(&"done"),
        "a complete answer, that would have been cached were it not degraded"
    );
    assert_eq!(cache_state(&degraded), "miss");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = server
        .answer_as(Some("acme"), &json!({ "query": QUESTION }))
        .await;
    assert_eq!(cache_state(&next), "miss", "the degraded answer was cached");
}

#[tokio::test]
async fn delete_forgets_one_tenants_answers() {
    let server = start(&[]).await;
    server.ingest_samples_as("acme").await;
    server.ingest_samples_as("globex").await;
    let body = json!({ "query": QUESTION });
    for tenant in ["acme", "globex"] {
        server.answer_as(Some(tenant), &body).await;
        until_cached(&server, tenant, &body).await;
    }
    let (status, report) = server
        .send_as("acme", Method::DELETE, "/v1/cache", vec![])
        .await;
    assert_eq!((status, report), (200, json!({"deleted": 1})));
    assert_eq!(
        cache_state(&server.answer_as(Some("acme"), &body).await),
        "miss"
    );
    assert_eq!(
        cache_state(&server.answer_as(Some("globex"), &body).await),
        "hit"
    );
}

#[tokio::test]
async fn expired_entries_are_not_served() {
    let server = start(&[("SLUICE_CACHE_TTL_SECS", "1")]).await;
    server.ingest_samples_as("acme").await;
    let body = json!({ "query": QUESTION });
    server.answer_as(Some("acme"), &body).await;
    until_cached(&server, "acme", &body).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        cache_state(&server.answer_as(Some("acme"), &body).await),
        "miss"
    );
}

#[tokio::test]
async fn with_the_cache_off_every_request_bypasses_it() {
    let server = start(&[("SLUICE_CACHE", "off")]).await;
    server.ingest_samples_as("acme").await;
    let body = json!({ "query": QUESTION });
    for _ in 0..2 {
        let answer = server.answer_as(Some("acme"), &body).await;
        assert_eq!(cache_state(&answer), "bypass");
    }
    let (status, error) = server
        .send_as("acme", Method::DELETE, "/v1/cache", vec![])
        .await;
    assert_eq!(status, 404);
    assert_eq!(error["error"]["code"], "cache_disabled");
}

#[tokio::test]
async fn the_dynamodb_backend_serves_hits_across_server_instances() {
    let table = format!("sluice-e2e-{}", std::process::id());
    let overrides = [
        ("SLUICE_CACHE", "dynamodb"),
        ("SLUICE_CACHE_TABLE", table.as_str()),
        ("SLUICE_CACHE_CREATE_TABLE", "true"),
        ("SLUICE_CACHE_BUDGET_MS", "2000"),
    ];
    let one = start(&overrides).await;
    one.ingest_samples_as("acme").await;
    let body = json!({ "query": QUESTION });
    let first = one.answer_as(Some("acme"), &body).await;
    assert_eq!(cache_state(&first), "miss");
    until_cached(&one, "acme", &body).await;

    // A second server (another Lambda instance, say) with the same corpus version reads the
    // entry the first one wrote.
    let two = start(&overrides).await;
    two.ingest_samples_as("acme").await;
    let hit = until_cached(&two, "acme", &body).await;
    assert_eq!(hit.text(), first.text());
    assert_eq!(hit.first("done").data["cached"], true);
}

/// The memory backend with writes that take `delay`, counting the finished ones.
struct SlowWrites {
    inner: sluice_core::cache::memory::MemoryCache,
    delay: Duration,
    written: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl CacheStore for SlowWrites {
    fn backend(&self) -> &'static str {
        "slow-writes"
    }
    fn in_process(&self) -> bool {
        true
    }
    async fn get(&self, tenant: &str, key: &str) -> Result<Option<CacheEntry>, CacheError> {
        self.inner.get(tenant, key).await
    }
    async fn candidates(
        &self,
        tenant: &str,
        buckets: &[u32],
    ) -> Result<Vec<CacheEntry>, CacheError> {
        self.inner.candidates(tenant, buckets).await
    }
    async fn put(&self, entry: &CacheEntry) -> Result<(), CacheError> {
        tokio::time::sleep(self.delay).await;
        self.inner.put(entry).await?;
        self.written.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn clear(&self, tenant: &str) -> Result<usize, CacheError> {
        self.inner.clear(tenant).await
    }
}

/// A server over the samples whose cache writes take 400 ms, and the cache.
async fn with_slow_writes() -> (Arc<SlowWrites>, TestServer) {
    let cache = Arc::new(SlowWrites {
        inner: sluice_core::cache::memory::MemoryCache::new(100),
        delay: Duration::from_millis(400),
        written: 0.into(),
    });
    let server = start_with_cache(&[], cache.clone()).await;
    server.ingest_samples().await;
    (cache, server)
}

#[tokio::test]
async fn the_stream_ends_only_after_the_cache_write_without_delaying_done() {
    // On Lambda the invocation ends with the response stream; a write still in flight then
    // would be frozen with the execution environment and lost.
    let (cache, server) = with_slow_writes().await;
    let first = server.answer(&json!({ "query": QUESTION })).await;
    first.assert_well_formed();
    assert_eq!(cache_state(&first), "miss");
    assert_eq!(
        cache.written.load(Ordering::SeqCst),
        1,
        "the write finished before the stream ended"
    );
    let done_at = first.first("done").at;
    assert!(
        first.ended >= done_at + Duration::from_millis(300),
        "`done` ({done_at:?}) left before the write finished (stream ended {:?})",
        first.ended
    );
    // No waiting: the very next request is answered from the cache.
    let again = server.answer(&json!({ "query": QUESTION })).await;
    assert_eq!(cache_state(&again), "hit");
}

#[tokio::test]
async fn a_whole_chat_completion_is_sent_only_after_its_cache_write() {
    // The non-streamed OpenAI answer comes in one response: it must not leave while the
    // answer's cache write is still in flight (on Lambda that write would be frozen).
    let (cache, server) = with_slow_writes().await;
    let body = json!({"model": "sluice", "messages": [{"role": "user", "content": QUESTION}]});
    let (status, first) = server.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["sluice"]["cache"], "miss");
    assert_eq!(
        cache.written.load(Ordering::SeqCst),
        1,
        "the response left before the cache write finished"
    );
    let (_, again) = server.post("/v1/chat/completions", &body).await;
    assert_eq!(again["sluice"]["cache"], "hit", "{again}");
    assert_eq!(
        again["choices"][0]["message"]["content"],
        first["choices"][0]["message"]["content"]
    );
}
