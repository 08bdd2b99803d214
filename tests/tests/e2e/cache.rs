//! The answer cache end to end over HTTP: real model, store and LLM; the in-memory backend
//! unless a test says otherwise (the DynamoDB backend runs on the emulator `make test` starts).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_contract::error::CacheError;
use sluice_contract::{cache::CacheEntry, cache::CacheStore};
use sluice_tests::{Answer, TestServer, start, start_with_cache};

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
async fn the_dynamodb_backend_serves_hits_across_server_instances() {
    sluice_testkit::needs!(Llm, Aws, Model);
    let table = format!("sluice-e2e-{}", std::process::id());
    let overrides = [
        ("SLUICE_CACHE", "dynamodb"),
        ("SLUICE_CACHE_TABLE", table.as_str()),
        ("SLUICE_CACHE_CREATE_TABLE", "true"),
        ("SLUICE_CACHE_BUDGET_MS", "2000"),
        // The lookup is bounded by the retrieval deadline too: on a loaded machine the
        // emulator's read can outlast the default, and a late read is a miss — the deadline is
        // not what is tested here.
        ("SLUICE_RETRIEVAL_DEADLINE_MS", "30000"),
        // The demo model's answers are often unsupported by the samples, and the grounding
        // check would keep them out of the cache: it is off here.
        ("SLUICE_GROUNDING", "off"),
    ];
    let one = start(&overrides).await;
    one.ingest_samples_as("acme").await;
    let body = json!({ "query": QUESTION });
    let first = one.answer_as(Some("acme"), &body).await;
    assert_eq!(cache_state(&first), "miss");
    until_cached(&one, "acme", &body).await;

    // A second server (another Lambda instance, say) with the same corpus version reads the
    // entry the first one wrote: its very first answer is a hit (it has written nothing).
    let two = start(&overrides).await;
    two.ingest_samples_as("acme").await;
    let hit = two.answer_as(Some("acme"), &body).await;
    assert_eq!(cache_state(&hit), "hit", "the first server's entry");
    assert_eq!(hit.text(), first.text());
    assert_eq!(hit.first("done").data["cached"], true);

    // A document about something else: the corpus version moves on, and the entry answers
    // once retrieval for the question returns the sources it recorded (read back from the
    // table), then is brought up to the new version there.
    let branches = json!({"documents": [{"id": "branches",
        "text": "Our branch in Leeds closes at 5pm on Saturdays."}]});
    let (status, report) = two
        .send_as(
            "acme",
            reqwest::Method::POST,
            "/v1/documents",
            branches.to_string().into(),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    let checked = two.answer_as(Some("acme"), &body).await;
    let meta = &checked.first("meta").data;
    assert_eq!(
        (&meta["cache"], &meta["cache_match"]),
        (&json!("hit"), &json!("sources"))
    );
    assert_eq!(checked.text(), first.text());
    let next = two.answer_as(Some("acme"), &body).await;
    assert_eq!(next.first("meta").data["cache_match"], "exact");
}

/// The memory backend with writes that take `delay`, counting the finished ones.
struct SlowWrites {
    inner: sluice_local::MemoryCache,
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
    async fn get(
        &self,
        tenant: &sluice_contract::Tenant,
        key: &str,
    ) -> Result<Option<CacheEntry>, CacheError> {
        self.inner.get(tenant, key).await
    }
    async fn candidates(
        &self,
        tenant: &sluice_contract::Tenant,
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
    async fn clear(
        &self,
        tenant: &sluice_contract::Tenant,
        binding: Option<&str>,
    ) -> Result<usize, CacheError> {
        self.inner.clear(tenant, binding).await
    }
    async fn forget(
        &self,
        tenant: &sluice_contract::Tenant,
        answer: &str,
    ) -> Result<usize, CacheError> {
        self.inner.forget(tenant, answer).await
    }
}

/// A server over the samples whose cache writes take 400 ms, and the cache.
async fn with_slow_writes() -> (Arc<SlowWrites>, TestServer) {
    let cache = Arc::new(SlowWrites {
        inner: sluice_local::MemoryCache::new(100),
        delay: Duration::from_millis(400),
        written: 0.into(),
    });
    // The demo model's answers are often unsupported by the samples, and the grounding check
    // would keep them out of the cache: it is off here (what is tested is the write).
    let server = start_with_cache(&[("SLUICE_GROUNDING", "off")], cache.clone()).await;
    server.ingest_samples().await;
    (cache, server)
}

#[tokio::test]
async fn the_stream_ends_only_after_the_cache_write_without_delaying_done() {
    sluice_testkit::needs!(Llm, Model);
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
    sluice_testkit::needs!(Llm, Model);
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
