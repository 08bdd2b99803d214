//! The answer path, stage by stage ([`Pipeline::answer`]):
//!
//! 0. **scope**: the tenant's corpus version (for the cache) and active rerank component are
//!    read side by side with the embedding, each bounded (see below);
//! 1. **cache**: an in-process cache is read by exact key first (a hit skips the embedding;
//!    only when the scope was known at once), then by similar question once the query is
//!    embedded; a remote cache (DynamoDB) is read once, after the embedding, by exact key and
//!    similar question in one parallel round. A hit replays the cached answer at once
//!    (`meta.cache = "hit"`, `done.cached = true`);
//! 2. **embed** the query (in-process model, on the blocking pool);
//! 3. **retrieve**: hybrid dense + BM25 search, fused by the tenant's rule (weighted RRF or a
//!    convex combination of scores, [`crate::fusion`]), in the store where it can;
//! 4. **rerank** with the tenant's WASM component, if it has one (else the fused order stays),
//!    given the caller's `rerank_context`; it may drop candidates (`meta.rerank_dropped`);
//! 5. **prompt**: assembled under the token budget;
//! 6. **generate**: tokens streamed from the LLM; after `done`, a complete answer that was not
//!    degraded is written to the cache in the background.
//!
//! **The deadline.** Everything before the LLM call — the scope reads, the cache rounds,
//! the embedding, retrieval and rerank — ends by the request's retrieval deadline, counted
//! from its arrival: late or failed work is abandoned (never waited for) and `meta.degraded`
//! says what was skipped. Each scope read is awaited by the first stage that needs it, within
//! that stage's time, and not used by a later one if it missed it: with the cache in use
//! that is the cache, which gives them one cache budget (`SLUICE_CACHE_BUDGET_MS`) past the
//! embedding; without it, the component is awaited beside the search, until the deadline.
//! Cache rounds have their budget each, within the deadline.
//!
//! The result is a stream of [`Event`]s that always ends with exactly one `done` or `error`
//! (one also comes when the server drains or the entry point's time is up: see
//! [`AnswerRequest::ends_by`]). It is lazy: dropping it (a client that went away) drops the
//! upstream LLM request.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, MaybeDone, maybe_done};
use futures::{Stream, StreamExt};
use tokio::time::Instant as Deadline;
use tracing::{info, warn};

use crate::Tenant;
use crate::cache::{CachedAnswer, Lookup, Probe, Scope, SemanticCache};
use crate::codes::{Code, Degraded};
use crate::config::AnswerConfig;
use crate::error::{LlmError, StoreError};
use crate::filter::Filter;
use crate::fusion::Fusion;
use crate::prompt::{self, Conversation, Prompt};
use crate::sse::{
    CacheState, Done, ErrorEvent, Event, Meta, PromptEcho, SourceDoc, Timings, Token,
};
use crate::stages::{
    ActiveComponent, Embedder, FailureKind, Hit, Llm, LlmEvent, RerankContext, RerankFailure,
    RerankInput, Reranker, Search, Store,
};
use crate::trace::TraceContext;

/// The least time prompt assembly gets, even when retrieval used the whole deadline.
const PROMPT_FLOOR: Duration = Duration::from_millis(25);

/// Characters of a chunk shown as its snippet in `meta`.
const SNIPPET_CHARS: usize = 240;

/// A validated answer request.
#[derive(Debug, Clone)]
pub struct AnswerRequest {
    /// Tenant whose documents are searched.
    pub tenant: Tenant,
    /// The question.
    pub query: String,
    /// Number of sources to retrieve.
    pub k: usize,
    /// Which documents the answer may use: the key's mandatory filter ANDed with the one the
    /// request sent ([`Filter::and`]); `None` for all of the tenant's.
    pub filter: Option<Filter>,
    /// The conversation before the question (chat route): its earlier user and assistant
    /// turns, oldest first, and the client's own system message. Empty for `/v1/answer`.
    pub conversation: Conversation,
    /// The most tokens to generate, when the client asked for fewer than
    /// `SLUICE_MAX_TOKENS` (which caps every answer).
    pub max_tokens: Option<u32>,
    /// What the caller sent for the tenant's rerank component (`rerank_context`).
    pub rerank_context: RerankContext,
    /// [`Filter::digest`] of the filter the caller's key is bound to (`None`: a key bound to
    /// none, or auth off). Answers cached for a bound key carry it, so that the key's
    /// `DELETE /v1/cache` forgets those and nothing else of the tenant's.
    pub binding: Option<String>,
    /// The client's session, if it sent one.
    pub session_id: Option<String>,
    /// Budget of everything before the LLM call, from `received`.
    pub retrieval_deadline: Duration,
    /// When the request arrived: all timings count from here.
    pub received: Instant,
    /// Neither read nor write the cache (`"cache": "bypass"`, `Cache-Control: no-cache`).
    pub bypass_cache: bool,
    /// The W3C trace context (from the request's `traceparent`, or a new trace).
    pub trace: TraceContext,
    /// Put the LLM request in `meta.prompt` (`"include_prompt": true`).
    pub include_prompt: bool,
    /// When the stream must have ended, for an entry point that is stopped at a fixed time
    /// (on Lambda: the invocation's deadline less a margin); `None` for none. A stream still
    /// running then ends with a retryable `deadline_exceeded` error instead of being cut off
    /// with no ending, and the upstream LLM request is dropped.
    pub ends_by: Option<Deadline>,
    /// Whether `meta.rerank_error` may say why the tenant's component failed: the caller
    /// manages the tenant's components (whose authors see no server log).
    pub show_rerank_failure: bool,
}

/// How many earlier user turns a follow-up's retrieval reads besides the question (newest
/// first, after it): enough for "and for premium accounts?" to find what it refers to,
/// few enough that a change of subject is still retrieved mostly by its own words.
pub const FOLLOW_UP_TURNS: usize = 1;

impl AnswerRequest {
    /// What retrieval (embedding, BM25, rerank) reads: the question, then the last
    /// [`FOLLOW_UP_TURNS`] earlier user turns, newest first — so that a follow-up is found by
    /// what it refers to, and a question too long for the embedding window loses the oldest
    /// context, not itself.
    pub fn retrieval_text(&self) -> std::borrow::Cow<'_, str> {
        let earlier: Vec<&str> = (self.conversation.history.iter().rev())
            .filter(|m| m.role == "user")
            .take(FOLLOW_UP_TURNS)
            .map(|m| m.content.as_str())
            .collect();
        if earlier.is_empty() {
            return std::borrow::Cow::Borrowed(&self.query);
        }
        let mut text = self.query.clone();
        for turn in earlier {
            text.push('\n');
            text.push_str(turn);
        }
        std::borrow::Cow::Owned(text)
    }

    /// Digest of what else shapes this answer besides the question and the scope's fields —
    /// the effective filter, the conversation, a `max_tokens` below the server's, a fusion
    /// other than the built-in one (`fusion`, the tenant's), the rerank context — or `None`
    /// when nothing does. Cached answers are keyed and scoped by it: one made under one
    /// filter, conversation, length, fusion or context never answers another.
    pub fn variant(&self, fusion: &Fusion) -> Option<String> {
        let fusion = (*fusion != Fusion::default()).then(|| fusion.to_string());
        let plain = self.filter.is_none()
            && self.conversation == Conversation::default()
            && self.max_tokens.is_none()
            && fusion.is_none()
            && self.rerank_context.is_empty();
        (!plain).then(|| {
            let what = serde_json::json!({
                "filter": self.filter.as_ref().map(Filter::digest),
                "conversation": self.conversation,
                "max_tokens": self.max_tokens,
                "fusion": fusion,
                "rerank_context": self.rerank_context,
            });
            crate::sha256_hex(what.to_string().as_bytes())
        })
    }
}

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

/// Where the cache stands for an answer after its lookup: what a complete answer is written
/// under, if anything.
struct CacheWrite {
    cache: Arc<SemanticCache>,
    probe: Probe,
    scope: Scope,
    /// A candidate whose answer the LLM's is compared with, for the tenant's threshold.
    compare: Option<(Box<crate::cache::CacheEntry>, f32)>,
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

    /// Whether an answer made under the tenant's corpus `version` may be cached: always with
    /// a store that reads its own writes; with one whose reads lag its writes
    /// ([`Store::lag`]), only once this process has known the version for that long — until
    /// then retrieval may still have returned a document the change deleted, and such an
    /// answer must not outlive the request. A version is met no earlier than it was made, so
    /// holding from the first meeting covers every process. (A tenant forgotten to keep the
    /// table bounded is met again: its writes are held again, never let through early.)
    fn settled(&self, tenant: &Tenant, version: u64) -> bool {
        let lag = self.store.lag();
        if lag.is_zero() {
            return true;
        }
        let mut seen = self.versions_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= crate::REMEMBERED_TENANTS && !seen.contains_key(tenant) {
            seen.clear();
        }
        match seen.get(tenant) {
            Some((v, since)) if *v == version => since.elapsed() >= lag,
            _ => {
                seen.insert(tenant.clone(), (version, Instant::now()));
                false
            }
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

    /// The answer's events, stage by stage (see the module docs).
    fn events(
        self: Arc<Self>,
        request: AnswerRequest,
        request_id: String,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let this = self;
        async_stream::stream! {
            let fusion = this.config.fusion.for_tenant(&request.tenant);
            let mut progress = Progress {
                variant: request.variant(&fusion),
                fusion,
                rerank_dropped: None,
                rerank_scores: HashMap::new(),
                rerank_failure: None,
                request_id,
                session_id: request.session_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                deadline: Deadline::from_std(request.received + request.retrieval_deadline),
                timings: Timings::default(),
                degraded: Vec::new(),
            };
            let cache = this.cache.clone().filter(|_| !request.bypass_cache);

            // 0. The scope reads start now and run beside the embedding.
            let (mut version, mut component) = this.read_scope(&request, cache.is_some(), progress.deadline);

            // 1. An in-process cache by exact key, when the scope was known at once.
            let found = this.exact_in_memory(&request, cache.as_ref(), &mut version, &mut component, &mut progress).await;
            if let Some(events) = found.replay {
                for event in events { yield event; }
                return;
            }

            // 2. The query embedding, with the scope reads going on beside it.
            let embedding = this.embed_query(&request, progress.deadline, &mut progress.timings);
            let vector = beside(embedding, futures::future::join(&mut version, &mut component)).await;

            // 1, continued: the cache by similar question (and a remote cache's exact key).
            let mut write = None;
            let mut cache_state = CacheState::Bypass;
            if let Some(cache) = &cache {
                match this.cache_round(&request, cache, &vector, found.exact_read, &mut version, &mut component, &mut progress).await {
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

            // 3-4. Retrieval and rerank, by the deadline.
            let hits = match &vector {
                Ok((vector, _)) => this.retrieve(&request, vector, component, &mut progress).await,
                Err(reason) => Err(*reason),
            };
            let hits = hits.unwrap_or_else(|reason| {
                progress.degraded.push(reason);
                Vec::new()
            });

            // 5. The prompt, and `meta`.
            let prompt = this.prompt(&request, hits, &mut progress).await;
            let documents: Vec<SourceDoc> = (prompt.sources.iter())
                .map(|hit| source_doc(hit, &progress.rerank_scores))
                .collect();
            yield this.meta(&request, &progress, documents.clone(), cache_state, &prompt);

            // 6. Generation.
            let llm_start = Instant::now();
            let traceparent = request.trace.header();
            let max_tokens = request.max_tokens.map_or(this.config.max_tokens, |n| n.min(this.config.max_tokens));
            let estimated_prompt_tokens = prompt.estimated_tokens as u64;
            let mut upstream = match this.llm.stream(prompt.messages, max_tokens, &traceparent).await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "LLM request failed");
                    yield Event::Error(llm_error(&e, false));
                    return;
                }
            };
            let mut tokens: Vec<String> = Vec::new();
            let mut first_token_at = None;
            let mut finish = None;
            while let Some(item) = upstream.next().await {
                match item {
                    Ok(LlmEvent::Token(text)) => {
                        if first_token_at.is_none() {
                            first_token_at = Some(Instant::now());
                            progress.timings.llm_ttft_ms = Some(ms(llm_start.elapsed()));
                            progress.timings.ttft_ms = Some(ms(request.received.elapsed()));
                        }
                        let index = tokens.len() as u64;
                        tokens.push(text.clone());
                        yield Event::Token(Token { text, index });
                    }
                    Ok(LlmEvent::Finish { finish_reason, completion_tokens, prompt_tokens }) => {
                        finish = Some((finish_reason, completion_tokens, prompt_tokens));
                        break;
                    }
                    Err(e) => {
                        warn!(error = %e, tokens = tokens.len(), "LLM stream failed");
                        yield Event::Error(llm_error(&e, !tokens.is_empty()));
                        return;
                    }
                }
            }
            let Some((finish_reason, usage_tokens, prompt_tokens)) = finish else {
                let e = LlmError::Stream("the upstream closed the stream before it finished".into());
                warn!(tokens = tokens.len(), "LLM stream ended without a finish reason");
                yield Event::Error(llm_error(&e, !tokens.is_empty()));
                return;
            };

            let (token_count, source) = match usage_tokens {
                Some(n) => (n, "usage"),
                None => (tokens.len() as u64, "events"),
            };
            let generating = first_token_at.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
            progress.timings.total_ms = Some(ms(request.received.elapsed()));
            info!(
                tokens = token_count, ttft_ms = progress.timings.ttft_ms,
                total_ms = progress.timings.total_ms, degraded = ?progress.degraded, "answered"
            );
            // Write-behind: only complete answers (the model stopped, or reached the
            // configured max_tokens, as it would again) that were not degraded. The write
            // starts now and never delays `done`, but the stream ends only once it has
            // finished: on Lambda the invocation ends with the response stream, and a write
            // still in flight would be frozen with the execution environment (and lost).
            let mut write_behind = None;
            let mut comparison = None;
            if let (Some(write), Ok((vector, _))) = (write, vector)
                && progress.degraded.is_empty()
                && matches!(finish_reason.as_str(), "stop" | "length")
                && this.settled(&request.tenant, write.scope.corpus_version)
            {
                let answer = CachedAnswer {
                    tokens,
                    sources: documents,
                    finish_reason: finish_reason.clone(),
                    token_count,
                    token_count_source: source.into(),
                };
                if let Some((candidate, similarity)) = write.compare {
                    comparison = Some(this.compare(&request.tenant, &write.cache, &candidate, similarity, &answer));
                }
                let entry = write.cache.entry(&request.tenant, &write.probe, vector, write.scope, answer);
                write_behind = Some(tokio::spawn(async move {
                    if let Err(e) = write.cache.put(&entry).await {
                        warn!(tenant = %entry.tenant, error = %e, "answer not cached");
                    }
                }));
            }
            yield Event::Done(Box::new(Done {
                request_id: progress.request_id,
                session_id: progress.session_id,
                replica_id: this.replica_id.clone(),
                model_id: this.llm.model_id().to_string(),
                k: request.k,
                token_count,
                token_count_source: source.into(),
                tokens_per_sec: if generating > 0.0 { token_count as f64 / generating } else { 0.0 },
                prompt_tokens: prompt_tokens.unwrap_or(estimated_prompt_tokens),
                finish_reason,
                cached: false,
                timings: progress.timings,
            }));
            if let Some(write) = write_behind {
                // A failed write was logged by the task; a panicked one needs no more.
                let _ = write.await;
            }
            if let Some(comparison) = comparison {
                let _ = comparison.await;
            }
        }
    }

    /// Starts the reads the cache and the rerank stage depend on, each bounded by the
    /// deadline: the tenant's corpus version (only when the cache is in use) and its active
    /// component. A component known to the registry but due for a check is waited for one
    /// cache budget at most; then the version known so far serves.
    fn read_scope(
        &self,
        request: &AnswerRequest,
        cached: bool,
        deadline: Deadline,
    ) -> (ScopeRead<Option<u64>>, ScopeRead<Component>) {
        let check_by = deadline.min(Deadline::from_std(
            request.received + self.config.scope_budget,
        ));
        let version = match cached {
            false => async { Read::Got(None) }.boxed(),
            true => {
                let store = Arc::clone(&self.store);
                let tenant = request.tenant.clone();
                async move {
                    match bounded(deadline, store.corpus_version(&tenant)).await {
                        Some(Ok(v)) => Read::Got(Some(v)),
                        Some(Err(e)) => Read::Failed(e.to_string()),
                        None => Read::Late,
                    }
                }
                .boxed()
            }
        };
        let component = match self.reranker.clone() {
            None => async { Read::Got(None) }.boxed(),
            Some(reranker) => {
                let tenant = request.tenant.clone();
                async move {
                    match bounded(deadline, reranker.active(&tenant, check_by)).await {
                        Some(Ok(c)) => Read::Got(c),
                        Some(Err(e)) => Read::Failed(e),
                        None => Read::Late,
                    }
                }
                .boxed()
            }
        };
        (maybe_done(version), maybe_done(component))
    }

    /// Stage 1 before the embedding: an in-process cache read by exact key, when the scope
    /// reads answered at once (an exact hit then costs microseconds and no embedding).
    async fn exact_in_memory(
        &self,
        request: &AnswerRequest,
        cache: Option<&Arc<SemanticCache>>,
        version: &mut ScopeRead<Option<u64>>,
        component: &mut ScopeRead<Component>,
        progress: &mut Progress,
    ) -> ExactRead {
        let Some(cache) = cache.filter(|c| c.in_process()) else {
            return ExactRead::default();
        };
        let _ = futures::poll!(&mut *version);
        let _ = futures::poll!(&mut *component);
        let (Some(Read::Got(Some(v))), Some(Read::Got(c))) = (output(version), output(component))
        else {
            return ExactRead::default();
        };
        let scope = self.scope(request, *v, c.as_ref(), progress);
        let probe = Probe::scoped(&request.query, progress.variant.as_deref());
        let started = Instant::now();
        let found = bounded(
            progress.deadline,
            cache.exact(&request.tenant, &probe, &scope),
        )
        .await
        .unwrap_or(Lookup::Miss);
        add_ms(&mut progress.timings.cache_ms, started.elapsed());
        ExactRead {
            exact_read: true,
            replay: self.replay(request, progress, found),
        }
    }

    /// Stage 1 after the embedding: what the cache needs is awaited (one cache budget more,
    /// never past the deadline), then the similar-question lookup; a remote cache reads the
    /// exact key in the same round. The component is resolved here for the rerank stage: a
    /// late or failed look-up keeps the fused order.
    #[allow(clippy::too_many_arguments)]
    async fn cache_round(
        &self,
        request: &AnswerRequest,
        cache: &Arc<SemanticCache>,
        vector: &Result<(Vec<f32>, Duration), Degraded>,
        exact_read: bool,
        version: &mut ScopeRead<Option<u64>>,
        component: &mut ScopeRead<Component>,
        progress: &mut Progress,
    ) -> Round {
        let cache_by = progress
            .deadline
            .min(Deadline::now() + self.config.scope_budget);
        let _ = bounded(
            cache_by,
            futures::future::join(&mut *version, &mut *component),
        )
        .await;
        let version = take(version, VERSION_READ, &mut progress.degraded).flatten();
        let active = take(component, COMPONENT_READ, &mut progress.degraded);
        *component = resolved(active.clone().flatten());
        let (Some(version), Some(active)) = (version, active) else {
            return Round::Skipped;
        };
        let scope = self.scope(request, version, active.as_ref(), progress);
        let probe = Probe::scoped(&request.query, progress.variant.as_deref());
        let started = Instant::now();
        let found = match (vector, cache.in_process()) {
            (Ok((v, _)), true) if exact_read => {
                cache.similar(&request.tenant, &probe, v, &scope).boxed()
            }
            (Ok((v, _)), _) => cache.lookup(&request.tenant, &probe, v, &scope).boxed(),
            (Err(_), false) => cache.exact(&request.tenant, &probe, &scope).boxed(),
            (Err(_), true) => async { Lookup::Miss }.boxed(),
        };
        let found = bounded(progress.deadline, found)
            .await
            .unwrap_or(Lookup::Miss);
        add_ms(&mut progress.timings.cache_ms, started.elapsed());
        let (found, compare) = match found {
            Lookup::Compare { entry, similarity } => (Lookup::Miss, Some((entry, similarity))),
            found => (found, None),
        };
        match self.replay(request, progress, found) {
            Some(events) => Round::Hit(events),
            None => Round::Miss(Box::new(CacheWrite {
                cache: Arc::clone(cache),
                probe,
                scope,
                compare,
            })),
        }
    }

    /// Judges, on a blocking thread, whether `fresh` is the answer `candidate` gave — the
    /// same documents among the sources, the same facts as far as words tell, and the two
    /// texts' embeddings at cosine [`SAME_ANSWER`](crate::cache::learn::SAME_ANSWER) or more —
    /// and records the judgement for the tenant's learned threshold. An embedding that fails
    /// records nothing.
    fn compare(
        &self,
        tenant: &Tenant,
        cache: &Arc<SemanticCache>,
        candidate: &crate::cache::CacheEntry,
        similarity: f32,
        fresh: &CachedAnswer,
    ) -> tokio::task::JoinHandle<()> {
        let documents = |a: &CachedAnswer| {
            let mut ids: Vec<String> = a.sources.iter().map(|s| s.id.clone()).collect();
            ids.sort();
            ids.dedup();
            ids
        };
        let texts = [candidate.answer.tokens.concat(), fresh.tokens.concat()];
        let same_so_far = documents(&candidate.answer) == documents(fresh)
            && cache.same_facts(&texts[0], &texts[1]);
        let (embedder, cache, tenant) = (
            Arc::clone(&self.embedder),
            Arc::clone(cache),
            tenant.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let Ok(vectors) = embedder.embed(&[&texts[0], &texts[1]]) else {
                return;
            };
            let close = match vectors.as_slice() {
                [a, b] => crate::cache::cosine(a, b) >= crate::cache::learn::SAME_ANSWER,
                _ => return,
            };
            cache.observe(&tenant, similarity, same_so_far && close);
        })
    }

    /// The scope an entry must have been made under to answer this request.
    fn scope(
        &self,
        request: &AnswerRequest,
        corpus_version: u64,
        component: Option<&Arc<dyn ActiveComponent>>,
        progress: &Progress,
    ) -> Scope {
        Scope {
            rerank: component.map(|c| c.version().to_string()),
            corpus_version,
            llm_model: self.llm.model_id().to_string(),
            embed_model: self.embedder.model_id().to_string(),
            prompt_version: prompt::PROMPT_VERSION,
            k: request.k,
            variant: progress.variant.clone(),
            binding: request.binding.clone(),
        }
    }

    /// The events of a cache hit (`meta`, the cached tokens, `done`), or `None` on a miss.
    fn replay(
        &self,
        request: &AnswerRequest,
        progress: &mut Progress,
        found: Lookup,
    ) -> Option<Vec<Event>> {
        let (entry, similarity) = match found {
            Lookup::Hit { entry, similarity } => (entry, similarity),
            // A candidate to compare was taken aside by the cache round.
            Lookup::Miss | Lookup::Compare { .. } => return None,
            Lookup::Failed(e) => {
                warn!(error = %e, "cache lookup failed; treated as a miss");
                return None;
            }
        };
        info!(similarity, "answered from the cache");
        let answer = entry.answer;
        let timings = &mut progress.timings;
        timings.ttft_ms = Some(ms(request.received.elapsed()));
        let mut events = Vec::with_capacity(answer.tokens.len() + 2);
        events.push(Event::Meta(Box::new(Meta {
            request_id: progress.request_id.clone(),
            session_id: progress.session_id.clone(),
            tenant: request.tenant.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            documents: answer.sources,
            cache: CacheState::Hit,
            degraded: Vec::new(),
            timings: timings.clone(),
            trace_id: request.trace.trace_id.clone(),
            prompt: None,
            rerank_dropped: None,
            rerank_error: None,
            prompt_tokens: None,
        })));
        events.extend(answer.tokens.into_iter().enumerate().map(|(i, text)| {
            Event::Token(Token {
                text,
                index: i as u64,
            })
        }));
        timings.total_ms = Some(ms(request.received.elapsed()));
        events.push(Event::Done(Box::new(Done {
            request_id: progress.request_id.clone(),
            session_id: progress.session_id.clone(),
            replica_id: self.replica_id.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            token_count: answer.token_count,
            token_count_source: answer.token_count_source,
            tokens_per_sec: 0.0,
            // No prompt was sent: a cached answer costs the LLM nothing.
            prompt_tokens: 0,
            finish_reason: answer.finish_reason,
            cached: true,
            timings: timings.clone(),
        })));
        Some(events)
    }

    /// Stage 2: the query vector and the time it took, by the deadline; else the reason.
    async fn embed_query(
        &self,
        request: &AnswerRequest,
        deadline: Deadline,
        timings: &mut Timings,
    ) -> Result<(Vec<f32>, Duration), Degraded> {
        if request.retrieval_deadline.is_zero() || Deadline::now() >= deadline {
            return Err(Degraded::RetrievalTimeout);
        }
        let started = Instant::now();
        let embedder = Arc::clone(&self.embedder);
        let query = request.retrieval_text().into_owned();
        let task = tokio::task::spawn_blocking(move || {
            let vectors = embedder
                .embed(&[query.as_str()])
                .map_err(|e| e.to_string())?;
            vectors
                .into_iter()
                .next()
                .ok_or_else(|| "the embedder returned no vector".to_string())
        });
        match bounded(deadline, task).await {
            Some(Ok(Ok(vector))) => {
                let took = started.elapsed();
                timings.embed_ms = Some(ms(took));
                Ok((vector, took))
            }
            Some(Ok(Err(e))) => {
                warn!(error = %e, "embedding failed; answering without context");
                Err(Degraded::RetrievalFailed)
            }
            Some(Err(e)) => {
                warn!(error = %e, "embedding task failed; answering without context");
                Err(Degraded::RetrievalFailed)
            }
            None => {
                warn!(deadline = ?request.retrieval_deadline, "retrieval deadline passed while embedding; answering without context");
                Err(Degraded::RetrievalTimeout)
            }
        }
    }

    /// Stages 3-4: searches the store, then reranks with the tenant's component once
    /// `component` (read beside the search when the cache did not need it first) has
    /// resolved, all by the deadline. When the search fails returns the reason; a failed or
    /// late rerank keeps the fused order (`rerank_failed`).
    async fn retrieve(
        &self,
        request: &AnswerRequest,
        vector: &[f32],
        mut component: ScopeRead<Component>,
        progress: &mut Progress,
    ) -> Result<Vec<Hit>, Degraded> {
        let deadline = progress.deadline;
        let started = Instant::now();
        let text = request.retrieval_text();
        let search = Search::new(&text, vector, request.k)
            .filter(request.filter.as_ref())
            .fusion(progress.fusion);
        let search = self.store.search(&request.tenant, &search);
        let mut hits = match bounded(deadline, beside(search, &mut component)).await {
            Some(Ok(hits)) => hits,
            Some(Err(StoreError::CircuitOpen)) => return Err(Degraded::RetrievalCircuitOpen),
            Some(Err(e)) => {
                warn!(error = %e, "retrieval failed; answering without context");
                return Err(Degraded::RetrievalFailed);
            }
            None => {
                warn!(deadline = ?request.retrieval_deadline, "retrieval deadline passed; answering without context");
                return Err(Degraded::RetrievalTimeout);
            }
        };
        progress.timings.retrieve_ms = Some(ms(started.elapsed()));
        // Every backend's list in one order, equal scores included (a rerank's ties then keep
        // it: its sort is stable).
        hits.sort_by(Hit::rank_order);

        (&mut component).await;
        let Some(Some(active)) = take(&mut component, COMPONENT_READ, &mut progress.degraded)
        else {
            return Ok(hits);
        };
        if Deadline::now() >= deadline {
            warn!(
                "the retrieval deadline passed before the rerank could start; keeping the fused order"
            );
            progress.degraded.push(Degraded::RerankFailed);
            progress.rerank_failure = request.show_rerank_failure.then(|| {
                RerankFailure::new(
                    FailureKind::Deadline,
                    "the retrieval deadline passed before the component could run",
                )
            });
            return Ok(hits);
        }
        let started = Instant::now();
        let (query, vector, candidates) = (text.into_owned(), vector.to_vec(), hits.clone());
        let context = request.rerank_context.clone();
        let span = tracing::Span::current();
        let task = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            active.rerank(&RerankInput {
                query: &query,
                query_vector: &vector,
                hits: &candidates,
                context: &context,
            })
        });
        let outcome = match bounded(deadline, task).await {
            Some(Ok(call)) => {
                progress.timings.rerank_fuel = Some(call.fuel);
                call.order
            }
            Some(Err(e)) => Err(RerankFailure::new(
                FailureKind::Trap,
                format!("the rerank task failed: {e}"),
            )),
            None => Err(RerankFailure::new(
                FailureKind::Deadline,
                "the retrieval deadline passed while it ran",
            )),
        };
        progress.timings.rerank_ms = Some(ms(started.elapsed()));
        match outcome {
            Ok(order) => {
                progress.rerank_dropped = Some(hits.len().saturating_sub(order.len()));
                let mut slots: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
                let mut kept = Vec::with_capacity(order.len());
                for (i, score) in order {
                    if let Some(hit) = slots.get_mut(i).and_then(Option::take) {
                        let key = (hit.document.id.clone(), hit.chunk);
                        progress.rerank_scores.insert(key, score);
                        kept.push(hit);
                    }
                }
                Ok(kept)
            }
            Err(e) => {
                warn!(error = %e, "rerank component failed; keeping the fused order");
                progress.degraded.push(Degraded::RerankFailed);
                progress.rerank_failure = request.show_rerank_failure.then_some(e);
                Ok(hits)
            }
        }
    }

    /// Stage 5: the prompt under the token budget (the lowest-ranked sources go first).
    async fn prompt(
        &self,
        request: &AnswerRequest,
        hits: Vec<Hit>,
        progress: &mut Progress,
    ) -> Prompt {
        let started = Instant::now();
        let budget =
            prompt::input_budget(self.config.context_tokens, self.config.max_tokens as usize);
        // Counting tokens is CPU work, and a conversation can be long: off the async workers,
        // and under the retrieval deadline like the reads before it (with a floor, so that a
        // request whose retrieval used the whole deadline still gets its conversation).
        let embedder = Arc::clone(&self.embedder);
        let (query, conversation) = (request.query.clone(), request.conversation.clone());
        let counting = tokio::task::spawn_blocking(move || {
            let counter = |text: &str| embedder.count_tokens(text);
            prompt::assemble(&query, &conversation, hits, budget, &counter)
        });
        let left = (request.received + request.retrieval_deadline)
            .saturating_duration_since(Instant::now())
            .max(PROMPT_FLOOR);
        let prompt = match tokio::time::timeout(left, counting).await {
            Ok(Ok(prompt)) => prompt,
            late_or_died => {
                if let Ok(Err(e)) = late_or_died {
                    warn!(error = %e, "prompt assembly died");
                }
                // The question alone (at most MAX_QUERY_CHARS to count), still in order.
                progress.degraded.push(Degraded::PromptTimeout);
                let counter = |text: &str| self.embedder.count_tokens(text);
                let alone = Conversation::default();
                prompt::assemble(&request.query, &alone, Vec::new(), budget, &counter)
            }
        };
        if prompt.dropped > 0 {
            progress.degraded.push(Degraded::ContextTruncated);
        }
        if prompt.turns_dropped > 0 {
            progress.degraded.push(Degraded::HistoryTruncated);
        }
        progress.timings.prompt_ms = Some(ms(started.elapsed()));
        prompt
    }

    /// The `meta` event: the sources, the cache state and what was degraded, before
    /// generation.
    fn meta(
        &self,
        request: &AnswerRequest,
        progress: &Progress,
        documents: Vec<SourceDoc>,
        cache: CacheState,
        prompt: &Prompt,
    ) -> Event {
        Event::Meta(Box::new(Meta {
            request_id: progress.request_id.clone(),
            session_id: progress.session_id.clone(),
            tenant: request.tenant.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            documents,
            cache,
            degraded: progress.degraded.clone(),
            timings: progress.timings.clone(),
            trace_id: request.trace.trace_id.clone(),
            rerank_dropped: progress.rerank_dropped,
            rerank_error: progress.rerank_failure.clone(),
            prompt_tokens: Some(prompt.estimated_tokens as u64),
            prompt: request.include_prompt.then(|| PromptEcho {
                messages: prompt.messages.clone(),
                max_tokens: self.config.max_tokens,
            }),
        }))
    }
}

/// What the exact read before the embedding gave: whether it ran, and a hit's events.
#[derive(Default)]
struct ExactRead {
    exact_read: bool,
    replay: Option<Vec<Event>>,
}

/// How the cache round after the embedding ended.
enum Round {
    /// The cached answer's events.
    Hit(Vec<Event>),
    /// Nothing fit: a complete answer is written under this.
    Miss(Box<CacheWrite>),
    /// The scope was not known in time: the cache is neither read nor written.
    Skipped,
}

/// How a bounded read ended.
enum Read<T> {
    /// It answered in time.
    Got(T),
    /// Its time was up first; it is abandoned.
    Late,
    /// It failed; the message says why.
    Failed(String),
}

/// A scope read in flight (or done): polled beside other stages, awaited where it is needed.
type ScopeRead<T> = MaybeDone<BoxFuture<'static, Read<T>>>;

/// The tenant's active component, `None` for the built-in default.
type Component = Option<Arc<dyn ActiveComponent>>;

/// The `meta.degraded` reasons of a scope read that was late or failed, and what it is (for
/// the log line).
type Reasons = (Degraded, Degraded, &'static str);
const VERSION_READ: Reasons = (
    Degraded::CorpusVersionTimeout,
    Degraded::CorpusVersionFailed,
    "corpus version",
);
const COMPONENT_READ: Reasons = (
    Degraded::ComponentTimeout,
    Degraded::ComponentFailed,
    "active rerank component",
);

/// What a finished read gave, when it answered in time (`None` until it finished).
fn output<T>(read: &mut ScopeRead<T>) -> Option<&Read<T>> {
    Pin::new(read).output_mut().map(|r| &*r)
}

/// Takes what a read gave; one that was late, is still running (its stage's time is up) or
/// failed adds its reason to `degraded`.
fn take<T>(
    read: &mut ScopeRead<T>,
    (late, failed, what): Reasons,
    degraded: &mut Vec<Degraded>,
) -> Option<T> {
    match Pin::new(read).take_output() {
        Some(Read::Got(value)) => Some(value),
        Some(Read::Late) | None => {
            warn!("the {what} was not read in time; going on without it");
            degraded.push(late);
            None
        }
        Some(Read::Failed(e)) => {
            warn!(error = %e, "reading the {what} failed; going on without it");
            degraded.push(failed);
            None
        }
    }
}

/// A scope read that has already answered `value`.
fn resolved<T: Send + 'static>(value: T) -> ScopeRead<T> {
    let mut read = maybe_done(futures::future::ready(Read::Got(value)).boxed());
    // Ready on its first poll: done now, so that taking it needs no await.
    let _ = Pin::new(&mut read).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    read
}

/// `work` unless `deadline` passes first (`None`; the work is dropped). A future that is
/// ready at once answers even past the deadline: what is in memory is never refused.
async fn bounded<T>(deadline: Deadline, work: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(deadline, work).await.ok()
}

/// Awaits `main` while driving `side` too: reads that run beside a stage and are awaited
/// later. `side` is not polled again once it is done.
async fn beside<T>(main: impl Future<Output = T>, side: impl Future) -> T {
    let mut main = std::pin::pin!(main);
    let mut side = std::pin::pin!(maybe_done(side));
    std::future::poll_fn(|cx| {
        let _ = side.as_mut().poll(cx);
        main.as_mut().poll(cx)
    })
    .await
}

/// `events` until `stop` resolves; a stream that has not ended by then gets `stop`'s closing
/// `error` instead of being cut off with no ending, and the rest of it (the upstream LLM
/// request) is dropped.
fn until(
    events: impl Stream<Item = Event> + Send + 'static,
    stop: impl Future<Output = ErrorEvent> + Send + 'static,
) -> impl Stream<Item = Event> + Send + 'static {
    async_stream::stream! {
        let mut events = std::pin::pin!(events);
        let mut stop = std::pin::pin!(stop);
        // After its closing event a stream may still finish work (the cache write): it is
        // polled to its end, and nothing more is sent.
        let mut ended = false;
        loop {
            let next = tokio::select! {
                biased;
                closing = &mut stop, if !ended => Err(closing),
                event = events.next() => Ok(event),
            };
            match next {
                Ok(Some(event)) => {
                    ended |= matches!(event, Event::Done(_) | Event::Error(_));
                    yield event;
                }
                Ok(None) => break,
                Err(closing) => {
                    yield Event::Error(closing);
                    break;
                }
            }
        }
    }
}

/// `events`, polled inside `span`, so that every log line of the answer carries its fields.
fn in_span<S: Stream<Item = Event> + Send + 'static>(
    span: tracing::Span,
    events: S,
) -> impl Stream<Item = Event> + Send + 'static {
    let mut events = Box::pin(events);
    futures::stream::poll_fn(move |cx| span.in_scope(|| events.as_mut().poll_next(cx)))
}

/// Adds `d` to a timing that may not have started yet.
fn add_ms(slot: &mut Option<f64>, d: Duration) {
    *slot = Some(slot.unwrap_or(0.0) + ms(d));
}

/// A source as `meta` shows it, with the score the tenant's component gave it (`scores`,
/// empty when none ran).
fn source_doc(hit: &Hit, scores: &HashMap<(String, usize), f32>) -> SourceDoc {
    let (section, page, pages) = hit.place.citation();
    SourceDoc {
        rerank_score: scores.get(&(hit.document.id.clone(), hit.chunk)).copied(),
        section,
        page,
        pages,
        id: hit.document.id.clone(),
        chunk: hit.chunk,
        score: hit.score,
        source: hit.document.source.clone(),
        title: hit.document.title.clone(),
        snippet: hit.text.chars().take(SNIPPET_CHARS).collect(),
        metadata: hit.document.metadata.clone(),
    }
}

/// The `error` event for an LLM failure; `mid_stream` when tokens were already sent.
fn llm_error(e: &LlmError, mid_stream: bool) -> ErrorEvent {
    let code = match e {
        _ if mid_stream => Code::LlmStreamFailed,
        LlmError::Unavailable(_) => Code::LlmUnavailable,
        LlmError::Status { status, .. } if *status == 429 || *status >= 500 => Code::LlmUnavailable,
        LlmError::Status { .. } => Code::LlmRejected,
        LlmError::Timeout(_) => Code::LlmTimeout,
        LlmError::Stream(_) => Code::LlmStreamFailed,
    };
    ErrorEvent::new(code, e.to_string())
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(index: u64) -> Event {
        Event::Token(Token {
            text: "t".into(),
            index,
        })
    }

    fn names(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(Event::name).collect()
    }

    #[tokio::test]
    async fn a_stream_still_running_when_it_must_stop_ends_with_the_stops_error() {
        // Two tokens, then an upstream that never answers again; the stop comes once both
        // tokens are out (ordered by the event, not by time).
        let (fire, fired) = tokio::sync::oneshot::channel();
        let silence = futures::stream::once(async move {
            let _ = fire.send(());
            futures::future::pending::<Event>().await
        });
        let events = futures::stream::iter([token(0), token(1)]).chain(silence);
        let stop = async move {
            let _ = fired.await;
            ErrorEvent::new(Code::DeadlineExceeded, "time is up")
        };
        let out: Vec<Event> = until(events, stop).collect().await;
        assert_eq!(names(&out), ["token", "token", "error"]);
        match &out[2] {
            Event::Error(e) => {
                assert_eq!(e.code, Code::DeadlineExceeded);
                assert!(e.retryable);
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stream_that_ended_gets_nothing_added_and_is_polled_to_its_end() {
        let closing_event = Event::Error(ErrorEvent::new(Code::LlmUnavailable, "x"));
        // After its closing event the stream still has work to finish (as the cache write),
        // during which the stop comes: the work finishes and no second ending is sent.
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let (fire, fired) = tokio::sync::oneshot::channel();
        let events = futures::stream::iter([token(0), closing_event]).chain(
            futures::stream::once(async move {
                // The stop is ready from here on; the work goes on past it.
                let _ = fire.send(());
                tokio::task::yield_now().await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                None
            })
            .filter_map(futures::future::ready),
        );
        let stop = async move {
            let _ = fired.await;
            ErrorEvent::new(Code::ShuttingDown, "bye")
        };
        let out: Vec<Event> = until(events, stop).collect().await;
        assert_eq!(names(&out), ["token", "error"]);
        if let Event::Error(e) = &out[1] {
            assert_eq!(e.code, Code::LlmUnavailable, "the stream's own ending kept");
        }
        assert!(finished.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// Time is what is tested here: a read that is not ready by its deadline is given up.
    #[tokio::test]
    async fn a_late_read_is_abandoned_and_a_ready_one_answers_even_past_the_deadline() {
        let past = Deadline::now() - Duration::from_millis(1);
        assert_eq!(bounded(past, async { 7 }).await, Some(7));
        let soon = Deadline::now() + Duration::from_millis(20);
        let started = Instant::now();
        let late = bounded(soon, tokio::time::sleep(Duration::from_secs(5))).await;
        assert_eq!(late, None);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn beside_drives_the_side_read_while_the_main_one_runs() {
        // The main read can end only once the side read has run: driven beside it.
        let (ran, side_ran) = tokio::sync::oneshot::channel();
        let mut side = maybe_done(
            async move {
                let _ = ran.send(());
                Read::Got(3)
            }
            .boxed(),
        );
        let main = async move {
            let _ = side_ran.await;
            1
        };
        assert_eq!(beside(main, &mut side).await, 1);
        let mut reasons = Vec::new();
        assert!(matches!(output(&mut side), Some(Read::Got(3))));
        assert_eq!(take(&mut side, VERSION_READ, &mut reasons), Some(3));
        assert!(reasons.is_empty());
        let mut late: ScopeRead<u64> = maybe_done(async { Read::Late }.boxed());
        (&mut late).await;
        assert_eq!(take(&mut late, COMPONENT_READ, &mut reasons), None);
        assert_eq!(reasons, [Degraded::ComponentTimeout]);
    }
}
