//! The answer path, stage by stage ([`Pipeline::answer`]); each stage is a file of this
//! folder, and [`Pipeline::events`] below reads as the request path:
//!
//! 0. **admit** ([`scope`]): the tenant's corpus version (for the cache) and active rerank
//!    component are read side by side with the embedding, each bounded (see below);
//! 1. **cache** ([`cache`]): an in-process cache is read by exact key first (a hit skips the
//!    embedding; only when the scope was known at once), then by similar question once the
//!    query is embedded; a remote cache (DynamoDB) is read once, after the embedding, by exact
//!    key and similar question in one parallel round. A hit replays the cached answer at once
//!    (`meta.cache = "hit"`, `done.cached = true`);
//! 2. **embed** ([`embed`]) the query (in-process model, on the blocking pool);
//! 3. **retrieve** ([`retrieve`]): hybrid dense + BM25 search, fused by the tenant's rule
//!    (weighted RRF or a convex combination of scores, [`crate::fusion`]), in the store where
//!    it can;
//! 4. **rerank** ([`rerank`]) with the tenant's WASM component, if it has one (else the fused
//!    order stays), given the caller's `rerank_context`; it may drop candidates
//!    (`meta.rerank_dropped`);
//! 5. **prompt** ([`prompt`]): assembled under the token budget, then `meta`;
//! 6. **generate** ([`generate`]): tokens streamed from the LLM, then `done`;
//! 7. **record** ([`cache`]): a complete answer that was not degraded is written to the cache
//!    behind `done`.
//!
//! **The deadline.** Everything before the LLM call — the scope reads, the cache rounds,
//! the embedding, retrieval and rerank — ends by the request's retrieval deadline, counted
//! from its arrival: late or failed work is abandoned (never waited for) and `meta.degraded`
//! says what was skipped ([`flow`]). Each scope read is awaited by the first stage that needs
//! it, within that stage's time, and not used by a later one if it missed it: with the cache
//! in use that is the cache, which gives them one cache budget (`SLUICE_CACHE_BUDGET_MS`)
//! past the embedding; without it, the component is awaited beside the search, until the
//! deadline. Cache rounds have their budget each, within the deadline.
//!
//! The result is a stream of [`Event`]s that always ends with exactly one `done` or `error`
//! (one also comes when the server drains or the entry point's time is up: see
//! [`AnswerRequest::ends_by`]). It is lazy: dropping it (a client that went away) drops the
//! upstream LLM request.

mod cache;
mod embed;
mod flow;
mod generate;
mod prompt;
mod request;
mod rerank;
mod retrieve;
mod scope;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use tokio::time::Instant as Deadline;

pub use request::{AnswerRequest, FOLLOW_UP_TURNS};

use crate::cache::SemanticCache;
use crate::config::AnswerConfig;
use cache::Round;
use flow::{beside, in_span, until};
use sluice_contract::Tenant;
use sluice_contract::fusion::Fusion;
use sluice_contract::sse::{CacheState, ErrorEvent, Event, Timings};
use sluice_contract::stages::SourceDoc;
use sluice_contract::{codes::Code, codes::Degraded};
use sluice_contract::{
    stages::Embedder, stages::Llm, stages::RerankFailure, stages::Reranker, stages::Store,
};

/// The answer path's stages, built once at start and shared by every request.
pub struct Pipeline {
    /// Settings read at start.
    pub config: AnswerConfig,
    /// Query embeddings.
    pub embedder: Arc<dyn Embedder>,
    /// Chunks of every tenant.
    pub store: Arc<dyn Store>,
    /// The generating model.
    pub llm: Arc<dyn Llm>,
    /// Runs tenant rerank components, when the deployment has them.
    pub reranker: Option<Arc<dyn Reranker>>,
    /// The answer cache, unless it is off.
    pub cache: Option<Arc<SemanticCache>>,
    /// Set when open streams must end (see [`Pipeline::drain`]).
    drained: tokio::sync::watch::Sender<bool>,
    replica_id: String,
    /// Each tenant's corpus version, and when this process first met it ([`Self::settled`]).
    versions_seen: std::sync::Mutex<HashMap<Tenant, (u64, Instant)>>,
}

/// What one answer has gathered on its way: its ids, the deadline, timings and degraded
/// reasons so far. Each stage adds to it; `meta` and `done` are made from it.
struct Progress {
    request_id: String,
    session_id: String,
    deadline: Deadline,
    timings: Timings,
    degraded: Vec<Degraded>,
    /// How the tenant's hybrid search fuses its rankings.
    fusion: Fusion,
    /// [`AnswerRequest::variant`], computed once.
    variant: Option<String>,
    /// Candidates the tenant's component dropped, once it ran and its output was valid.
    rerank_dropped: Option<usize>,
    /// The score the tenant's component gave each source it kept, by document id and chunk.
    rerank_scores: HashMap<(String, usize), f32>,
    /// Why the tenant's component failed, for `meta` (when the caller may be told).
    rerank_failure: Option<RerankFailure>,
}

impl Progress {
    fn new(config: &AnswerConfig, request: &AnswerRequest, request_id: String) -> Self {
        let fusion = config.fusion.for_tenant(&request.tenant);
        Self {
            variant: request.variant(&fusion),
            fusion,
            rerank_dropped: None,
            rerank_scores: HashMap::new(),
            rerank_failure: None,
            request_id,
            session_id: (request.session_id.clone())
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            deadline: Deadline::from_std(request.received + request.retrieval_deadline),
            timings: Timings::default(),
            degraded: Vec::new(),
        }
    }
}

impl Pipeline {
    /// Assembles a pipeline from its stages.
    pub fn new(
        config: AnswerConfig,
        embedder: Arc<dyn Embedder>,
        store: Arc<dyn Store>,
        llm: Arc<dyn Llm>,
    ) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "local".into());
        Self {
            config,
            embedder,
            store,
            llm,
            reranker: None,
            cache: None,
            drained: tokio::sync::watch::Sender::new(false),
            replica_id: format!("{host}-{}", std::process::id()),
            versions_seen: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Adds the rerank stage.
    pub fn with_reranker(mut self, reranker: Arc<dyn Reranker>) -> Self {
        self.reranker = Some(reranker);
        self
    }

    /// Adds the answer cache.
    pub fn with_cache(mut self, cache: Arc<SemanticCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Ends every answer still streaming with a retryable `shutting_down` error (and every
    /// one started later at once): what a server that is shutting down does when its drain
    /// time is up, so that no client is cut off without an ending.
    pub fn drain(&self) {
        self.drained.send_replace(true);
    }

    /// Answers `request` as a stream of SSE events. Every log line it writes carries the
    /// request id, tenant and trace id (the `answer` span).
    pub fn answer(
        self: &Arc<Self>,
        request: AnswerRequest,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let request_id = uuid::Uuid::new_v4().to_string();
        let span = tracing::info_span!(
            "answer",
            request_id = %request_id,
            tenant = %request.tenant,
            trace_id = %request.trace.trace_id,
        );
        let stop = self.stop(request.ends_by);
        let events = Arc::clone(self).events(request, request_id);
        in_span(span, until(events, stop))
    }

    /// Resolves when an open answer must end now: with its closing `error` (the server's
    /// drain time is up, or the entry point's time).
    fn stop(&self, ends_by: Option<Deadline>) -> impl Future<Output = ErrorEvent> + Send + 'static {
        let mut draining = self.drained.subscribe();
        async move {
            let drained = async move {
                let _ = draining.wait_for(|over| *over).await;
                ErrorEvent::new(Code::ShuttingDown, "the server is shutting down; ask again")
            };
            let Some(at) = ends_by else {
                return drained.await;
            };
            tokio::select! {
                e = drained => e,
                () = tokio::time::sleep_until(at) => ErrorEvent::new(
                    Code::DeadlineExceeded,
                    "the function's time limit was reached before the answer ended",
                ),
            }
        }
    }

    /// The answer's events: the request path, stage by stage (see the module docs).
    fn events(
        self: Arc<Self>,
        request: AnswerRequest,
        request_id: String,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let this = self;
        async_stream::stream! {
            let mut progress = Progress::new(&this.config, &request, request_id);
            let cache = this.cache.clone().filter(|_| !request.bypass_cache);

            // 0. Admit: the scope reads start now and run beside the embedding.
            let mut reads = this.read_scope(&request, cache.is_some(), progress.deadline);

            // 1. Cache, before the embedding: an in-process cache by exact key.
            let found = this.exact_in_memory(&request, cache.as_ref(), &mut reads, &mut progress).await;
            if let Some(events) = found.replay {
                for event in events { yield event; }
                return;
            }

            // 2. Embed, the scope reads going on beside it.
            let embedding = this.embed_query(&request, progress.deadline, &mut progress.timings);
            let vector = beside(embedding, reads.both()).await;

            // 1, continued: the cache by similar question (and a remote cache's exact key).
            let mut write = None;
            let mut cache_state = CacheState::Bypass;
            if let Some(cache) = &cache {
                match this.cache_round(&request, cache, &vector, found.exact_read, &mut reads, &mut progress).await {
                    Round::Hit(events) => {
                        for event in events { yield event; }
                        return;
                    }
                    Round::Miss(w) => {
                        cache_state = CacheState::Miss;
                        write = Some(*w);
                    }
                    Round::Skipped => {}
                }
            }

            // 3-4. Retrieve, then rerank, by the deadline.
            let hits = match &vector {
                Ok((vector, _)) => match this.retrieve(&request, vector, &mut reads.component, &mut progress).await {
                    Ok(hits) => Ok(this.rerank(&request, vector, reads.component, hits, &mut progress).await),
                    Err(reason) => Err(reason),
                },
                Err(reason) => Err(*reason),
            };
            let hits = hits.unwrap_or_else(|reason| {
                progress.degraded.push(reason);
                Vec::new()
            });

            // 5. The prompt, and `meta`.
            let prompt = this.prompt(&request, hits, &mut progress).await;
            let documents: Vec<SourceDoc> = (prompt.sources.iter())
                .map(|hit| prompt::source_doc(hit, &progress.rerank_scores))
                .collect();
            yield this.meta(&request, &progress, documents.clone(), cache_state, &prompt);

            // 6-7. Generate, then record the answer in the cache behind `done`.
            let write = write.zip(vector.ok().map(|(vector, _)| vector));
            let generated = Arc::clone(&this).generate(request, prompt, progress, documents, write);
            let mut generated = std::pin::pin!(generated);
            while let Some(event) = generated.next().await {
                yield event;
            }
        }
    }
}
