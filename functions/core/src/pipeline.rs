//! The answer path, stage by stage:
//!
//! 1. cache: an in-process cache is read by exact key first (a hit skips the embedding),
//!    then by similar question once the query is embedded; a remote cache (DynamoDB) is read
//!    once, after the embedding, by exact key and similar question in one parallel round. A
//!    hit replays the cached answer at once (`meta.cache = "hit"`, `done.cached = true`);
//! 2. embed the query (in-process model, on the blocking pool);
//! 3. retrieve: hybrid dense + BM25 search fused by RRF in the store;
//! 4. rerank with the tenant's WASM component, if it has one (else the fused order stays);
//!    steps 2–4 run under the retrieval deadline (cache lookups have their own budget):
//!    late or failed retrieval → answer without context; a failed rerank → the fused order,
//!    with `rerank_failed` in `meta.degraded`;
//! 5. assemble the prompt under the token budget;
//! 6. stream tokens from the LLM; after `done`, a complete answer that was not degraded is
//!    written to the cache in the background.
//!
//! The result is a stream of [`Event`]s that always ends with exactly one `done` or `error`.
//! It is lazy: dropping it (a client that went away) drops the upstream LLM request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use tracing::{info, warn};

use crate::auth::KeyStore;
use crate::cache::{CachedAnswer, Lookup, Probe, Scope, SemanticCache};
use crate::config::Config;
use crate::error::{LlmError, StoreError};
use crate::metrics::{Metrics, Outcome};
use crate::prompt;
use crate::quota::Quotas;
use crate::sse::{Done, ErrorEvent, Event, Meta, PromptEcho, SourceDoc, Timings, Token};
use crate::stages::{Components, Embedder, Hit, Llm, LlmEvent, Reranker, Store};
use crate::trace::TraceContext;

/// Characters of a chunk shown as its snippet in `meta`.
const SNIPPET_CHARS: usize = 240;

/// Reasons reported in `meta.degraded`.
pub mod degraded {
    /// Embedding + retrieval did not finish within the retrieval deadline.
    pub const RETRIEVAL_TIMEOUT: &str = "retrieval_timeout";
    /// Embedding or retrieval failed.
    pub const RETRIEVAL_FAILED: &str = "retrieval_failed";
    /// Some sources were dropped to fit the prompt budget.
    pub const CONTEXT_TRUNCATED: &str = "context_truncated";
    /// The tenant's rerank component failed (trap, limit, bad output): fused order kept.
    pub const RERANK_FAILED: &str = "rerank_failed";
    /// The store's circuit breaker is open: retrieval was skipped without waiting.
    pub const RETRIEVAL_CIRCUIT_OPEN: &str = "retrieval_circuit_open";
}

/// A validated answer request.
#[derive(Debug, Clone)]
pub struct AnswerRequest {
    /// Tenant whose documents are searched.
    pub tenant: String,
    /// The question.
    pub query: String,
    /// Number of sources to retrieve.
    pub k: usize,
    /// The client's session, if it sent one.
    pub session_id: Option<String>,
    /// Embedding + retrieval budget for this request.
    pub retrieval_deadline: Duration,
    /// When the request arrived: all timings count from here.
    pub received: Instant,
    /// Neither read nor write the cache (`"cache": "bypass"`, `Cache-Control: no-cache`).
    pub bypass_cache: bool,
    /// The W3C trace context (from the request's `traceparent`, or a new trace).
    pub trace: TraceContext,
    /// Put the LLM request in `meta.prompt` (`"include_prompt": true`).
    pub include_prompt: bool,
}

/// The pipeline: the stages, built once at start and shared by every request.
pub struct Pipeline {
    /// Settings read at start.
    pub config: Config,
    /// Query and document embeddings.
    pub embedder: Arc<dyn Embedder>,
    /// Chunks of every tenant.
    pub store: Arc<dyn Store>,
    /// The generating model.
    pub llm: Arc<dyn Llm>,
    /// Runs tenant rerank components, when the deployment has them.
    pub reranker: Option<Arc<dyn Reranker>>,
    /// The registry behind `/v1/components/rerank`, when the deployment has one.
    pub components: Option<Arc<dyn Components>>,
    /// The answer cache, unless it is off.
    pub cache: Option<Arc<SemanticCache>>,
    /// Counters and histograms of every answer (`/metrics`; EMF lines on Lambda).
    pub metrics: Metrics,
    /// API keys; `None` while auth is off (the tenant is then the `x-sluice-tenant` header).
    pub keys: Option<Arc<dyn KeyStore>>,
    /// Per-tenant request rate and open streams.
    pub quotas: Arc<Quotas>,
    /// Set when open streams must end (see [`Pipeline::drain`]).
    drained: tokio::sync::watch::Sender<bool>,
    replica_id: String,
}

impl Pipeline {
    /// Assembles a pipeline from its stages.
    pub fn new(
        config: Config,
        embedder: Arc<dyn Embedder>,
        store: Arc<dyn Store>,
        llm: Arc<dyn Llm>,
    ) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "local".into());
        let quotas = Arc::new(Quotas::new(
            config.tenant_rate,
            config.tenant_burst,
            config.tenant_max_streams,
        ));
        Self {
            config,
            embedder,
            store,
            llm,
            reranker: None,
            components: None,
            cache: None,
            metrics: Metrics::default(),
            keys: None,
            quotas,
            drained: tokio::sync::watch::Sender::new(false),
            replica_id: format!("{host}-{}", std::process::id()),
        }
    }

    /// Adds the rerank stage and its registry (usually one object implementing both).
    pub fn with_components(
        mut self,
        reranker: Arc<dyn Reranker>,
        components: Arc<dyn Components>,
    ) -> Self {
        self.reranker = Some(reranker);
        self.components = Some(components);
        self
    }

    /// Ends every answer still streaming with a retryable `shutting_down` error (and every
    /// one started later at once): what a server that is shutting down does when its drain
    /// time is up, so that no client is cut off without an ending.
    pub fn drain(&self) {
        self.drained.send_replace(true);
    }

    /// Becomes `true` when [`Pipeline::drain`] is called.
    pub fn draining(&self) -> tokio::sync::watch::Receiver<bool> {
        self.drained.subscribe()
    }

    /// Turns auth on: every `/v1` request needs a key from `keys`.
    pub fn with_keys(mut self, keys: Arc<dyn KeyStore>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Adds the answer cache.
    pub fn with_cache(mut self, cache: Arc<SemanticCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Answers `request` as a stream of SSE events. Every log line it writes carries the
    /// request id, tenant and trace id (the `answer` span); the metrics see how it ended.
    pub fn answer(
        self: &Arc<Self>,
        request: AnswerRequest,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let this = Arc::clone(self);
        let request_id = uuid::Uuid::new_v4().to_string();
        let span = tracing::info_span!(
            "answer",
            request_id = %request_id,
            tenant = %request.tenant,
            trace_id = %request.trace.trace_id,
        );
        let mut open = self.metrics.stream_opened();
        let events = async_stream::stream! {
            let session_id = request.session_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let mut timings = Timings::default();
            let mut degraded: Vec<String> = Vec::new();
            let ids = (request_id.clone(), session_id.clone());

            // Stage 1: the cache, unless there is none or the request bypasses it.
            let lookup = this.cache_lookup(&request).await;
            let cache_state = if lookup.is_some() { "miss" } else { "bypass" };

            // An in-process cache is read before the embedding, so that an exact hit skips it.
            if let Some((cache, probe, scope)) = lookup.as_ref().filter(|(c, _, _)| c.in_process()) {
                let started = Instant::now();
                let found = cache.exact(&request.tenant, probe, scope).await;
                add_ms(&mut timings.cache_ms, started.elapsed());
                if let Some(events) = this.replay(&request, ids.clone(), found, &mut timings) {
                    open.finish(&outcome(&request, &request_id, &timings, "hit", &[], events.len() as u64 - 2, None));
                    for event in events { yield event; }
                    return;
                }
            }

            // Stage 2: the query embedding.
            let vector = this.embed_query(&request, &mut timings).await;

            // Stage 1, continued: the similar-question lookup needs the embedding; a remote
            // cache reads the exact key in the same parallel round.
            if let Some((cache, probe, scope)) = &lookup {
                let started = Instant::now();
                let found = match (&vector, cache.in_process()) {
                    (Ok((v, _)), true) => cache.similar(&request.tenant, probe, v, scope).await,
                    (Ok((v, _)), false) => cache.lookup(&request.tenant, probe, v, scope).await,
                    (Err(_), true) => Lookup::Miss,
                    (Err(_), false) => cache.exact(&request.tenant, probe, scope).await,
                };
                add_ms(&mut timings.cache_ms, started.elapsed());
                if let Some(events) = this.replay(&request, ids.clone(), found, &mut timings) {
                    open.finish(&outcome(&request, &request_id, &timings, "hit", &[], events.len() as u64 - 2, None));
                    for event in events { yield event; }
                    return;
                }
            }

            // Stages 3-4: retrieval and rerank, in what is left of the retrieval deadline.
            let hits = match &vector {
                Ok((vector, embed_time)) => {
                    let left = request.retrieval_deadline.saturating_sub(*embed_time);
                    this.retrieve(&request, vector, left, &mut timings, &mut degraded).await
                }
                Err(reason) => Err(*reason),
            };
            let hits = hits.unwrap_or_else(|reason| {
                degraded.push(reason.to_string());
                Vec::new()
            });

            // Stage 5: the prompt.
            let started = Instant::now();
            let counter = |text: &str| this.embedder.count_tokens(text);
            let budget = prompt::input_budget(this.config.llm_context_tokens, this.config.max_tokens as usize);
            let prompt = prompt::assemble(&request.query, hits, budget, &counter);
            if prompt.dropped > 0 {
                degraded.push(degraded::CONTEXT_TRUNCATED.to_string());
            }
            timings.prompt_ms = Some(ms(started.elapsed()));

            let documents: Vec<SourceDoc> = prompt.sources.iter().map(source_doc).collect();
            let max_tokens = this.config.max_tokens;
            let echo = request.include_prompt.then(|| PromptEcho {
                messages: prompt.messages.clone(),
                max_tokens,
            });
            yield Event::Meta(Box::new(Meta {
                request_id: request_id.clone(),
                session_id: session_id.clone(),
                tenant: request.tenant.clone(),
                model_id: this.llm.model_id().to_string(),
                k: request.k,
                documents: documents.clone(),
                cache: cache_state.into(),
                degraded: degraded.clone(),
                timings: timings.clone(),
                trace_id: request.trace.trace_id.clone(),
                prompt: echo,
            }));

            // Stage 6: generation.
            let llm_start = Instant::now();
            let traceparent = request.trace.header();
            let mut upstream = match this.llm.stream(prompt.messages, max_tokens, &traceparent).await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "LLM request failed");
                    let event = error_event(&e, false);
                    open.finish(&outcome(&request, &request_id, &timings, cache_state, &degraded, 0, Some(&event.code)));
                    yield Event::Error(event);
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
                            timings.llm_ttft_ms = Some(ms(llm_start.elapsed()));
                            timings.ttft_ms = Some(ms(request.received.elapsed()));
                        }
                        let index = tokens.len() as u64;
                        tokens.push(text.clone());
                        yield Event::Token(Token { text, index });
                    }
                    Ok(LlmEvent::Finish { finish_reason, completion_tokens }) => {
                        finish = Some((finish_reason, completion_tokens));
                        break;
                    }
                    Err(e) => {
                        warn!(error = %e, tokens = tokens.len(), "LLM stream failed");
                        let event = error_event(&e, !tokens.is_empty());
                        open.finish(&outcome(&request, &request_id, &timings, cache_state, &degraded, tokens.len() as u64, Some(&event.code)));
                        yield Event::Error(event);
                        return;
                    }
                }
            }
            let Some((finish_reason, usage_tokens)) = finish else {
                let e = LlmError::Stream("the upstream closed the stream before it finished".into());
                warn!(tokens = tokens.len(), "LLM stream ended without a finish reason");
                let event = error_event(&e, !tokens.is_empty());
                open.finish(&outcome(&request, &request_id, &timings, cache_state, &degraded, tokens.len() as u64, Some(&event.code)));
                yield Event::Error(event);
                return;
            };

            let (token_count, source) = match usage_tokens {
                Some(n) => (n, "usage"),
                None => (tokens.len() as u64, "events"),
            };
            let generating = first_token_at.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
            timings.total_ms = Some(ms(request.received.elapsed()));
            info!(
                tokens = token_count, ttft_ms = timings.ttft_ms, total_ms = timings.total_ms,
                degraded = ?degraded, "answered"
            );
            open.finish(&outcome(&request, &request_id, &timings, cache_state, &degraded, tokens.len() as u64, None));
            // Write-behind: only complete answers (the model stopped, or reached the
            // configured max_tokens, as it would again) that were not degraded. The write
            // starts now and never delays `done`, but the stream ends only once it has
            // finished: on Lambda the invocation ends with the response stream, and a write
            // still in flight would be frozen with the execution environment (and lost).
            let mut write_behind = None;
            if let (Some((cache, probe, scope)), Ok((vector, _))) = (lookup, vector)
                && degraded.is_empty()
                && matches!(finish_reason.as_str(), "stop" | "length")
            {
                let answer = CachedAnswer {
                    tokens,
                    sources: documents,
                    finish_reason: finish_reason.clone(),
                    token_count,
                    token_count_source: source.into(),
                };
                let entry = cache.entry(&request.tenant, &probe, vector, scope, answer);
                write_behind = Some(tokio::spawn(async move {
                    if let Err(e) = cache.put(&entry).await {
                        warn!(tenant = %entry.tenant, error = %e, "answer not cached");
                    }
                }));
            }
            yield Event::Done(Box::new(Done {
                request_id,
                session_id,
                replica_id: this.replica_id.clone(),
                model_id: this.llm.model_id().to_string(),
                k: request.k,
                token_count,
                token_count_source: source.into(),
                tokens_per_sec: if generating > 0.0 { token_count as f64 / generating } else { 0.0 },
                finish_reason,
                cached: false,
                timings,
            }));
            if let Some(write) = write_behind {
                // A failed write was logged by the task; a panicked one needs no more.
                let _ = write.await;
            }
        };
        in_span(span, events)
    }

    /// What stage 1 needs: the cache, the question's probe and the scope an entry must have
    /// been made under; `None` when the request bypasses the cache or there is none.
    async fn cache_lookup(
        &self,
        request: &AnswerRequest,
    ) -> Option<(Arc<SemanticCache>, Probe, Scope)> {
        let cache = self.cache.clone().filter(|_| !request.bypass_cache)?;
        let corpus_version = match self.store.corpus_version(&request.tenant).await {
            Ok(v) => v,
            Err(e) => {
                // Without the corpus version no entry can be proven fresh: a miss.
                warn!(tenant = %request.tenant, error = %e, "corpus version unknown; cache skipped");
                return None;
            }
        };
        let rerank = match self.reranker.clone() {
            None => None,
            // Off the async workers: finding the active version may read the component
            // storage (a file, or DynamoDB) once the registry's knowledge of it is stale.
            Some(r) => match tokio::task::spawn_blocking({
                let tenant = request.tenant.clone();
                move || r.active_component(&tenant)
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
            {
                Ok(version) => version,
                Err(e) => {
                    warn!(tenant = %request.tenant, error = %e, "active rerank component unknown; cache skipped");
                    return None;
                }
            },
        };
        let scope = Scope {
            rerank,
            corpus_version,
            llm_model: self.llm.model_id().to_string(),
            embed_model: self.embedder.model_id().to_string(),
            prompt_version: prompt::PROMPT_VERSION,
            k: request.k,
        };
        Some((cache, Probe::new(&request.query), scope))
    }

    /// The events of a cache hit (`meta`, the cached tokens, `done`), or `None` on a miss.
    fn replay(
        &self,
        request: &AnswerRequest,
        (request_id, session_id): (String, String),
        found: Lookup,
        timings: &mut Timings,
    ) -> Option<Vec<Event>> {
        let (entry, similarity) = match found {
            Lookup::Hit { entry, similarity } => (entry, similarity),
            Lookup::Miss => return None,
            Lookup::Failed(e) => {
                warn!(tenant = %request.tenant, error = %e, "cache lookup failed; treated as a miss");
                return None;
            }
        };
        info!(similarity, "answered from the cache");
        let answer = entry.answer;
        timings.ttft_ms = Some(ms(request.received.elapsed()));
        let mut events = Vec::with_capacity(answer.tokens.len() + 2);
        events.push(Event::Meta(Box::new(Meta {
            request_id: request_id.clone(),
            session_id: session_id.clone(),
            tenant: request.tenant.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            documents: answer.sources,
            cache: "hit".into(),
            degraded: Vec::new(),
            timings: timings.clone(),
            trace_id: request.trace.trace_id.clone(),
            prompt: None,
        })));
        events.extend(answer.tokens.into_iter().enumerate().map(|(i, text)| {
            Event::Token(Token {
                text,
                index: i as u64,
            })
        }));
        timings.total_ms = Some(ms(request.received.elapsed()));
        events.push(Event::Done(Box::new(Done {
            request_id,
            session_id,
            replica_id: self.replica_id.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            token_count: answer.token_count,
            token_count_source: answer.token_count_source,
            tokens_per_sec: 0.0,
            finish_reason: answer.finish_reason,
            cached: true,
            timings: timings.clone(),
        })));
        Some(events)
    }

    /// The query vector and the time it took, within the retrieval deadline; else the
    /// `meta.degraded` reason.
    async fn embed_query(
        &self,
        request: &AnswerRequest,
        timings: &mut Timings,
    ) -> Result<(Vec<f32>, Duration), &'static str> {
        if request.retrieval_deadline.is_zero() {
            return Err(degraded::RETRIEVAL_TIMEOUT);
        }
        let started = Instant::now();
        let embedder = Arc::clone(&self.embedder);
        let query = request.query.clone();
        let task = tokio::task::spawn_blocking(move || {
            let vectors = embedder
                .embed(&[query.as_str()])
                .map_err(|e| e.to_string())?;
            vectors
                .into_iter()
                .next()
                .ok_or_else(|| "the embedder returned no vector".to_string())
        });
        match tokio::time::timeout(request.retrieval_deadline, task).await {
            Ok(Ok(Ok(vector))) => {
                let took = started.elapsed();
                timings.embed_ms = Some(ms(took));
                Ok((vector, took))
            }
            Ok(Ok(Err(e))) => {
                warn!(tenant = %request.tenant, error = %e, "embedding failed; answering without context");
                Err(degraded::RETRIEVAL_FAILED)
            }
            Ok(Err(e)) => {
                warn!(tenant = %request.tenant, error = %e, "embedding task failed; answering without context");
                Err(degraded::RETRIEVAL_FAILED)
            }
            Err(_) => {
                warn!(tenant = %request.tenant, deadline = ?request.retrieval_deadline, "retrieval deadline passed while embedding; answering without context");
                Err(degraded::RETRIEVAL_TIMEOUT)
            }
        }
    }

    /// Searches the store and reranks within `left` (what the embedding left of the
    /// retrieval deadline). On failure returns the `meta.degraded` reason.
    async fn retrieve(
        &self,
        request: &AnswerRequest,
        vector: &[f32],
        left: Duration,
        timings: &mut Timings,
        degraded: &mut Vec<String>,
    ) -> Result<Vec<Hit>, &'static str> {
        let work = async {
            let started = Instant::now();
            let hits = match self
                .store
                .search(&request.tenant, &request.query, vector, request.k)
                .await
            {
                Ok(hits) => hits,
                Err(StoreError::CircuitOpen) => return Ok(Err(degraded::RETRIEVAL_CIRCUIT_OPEN)),
                Err(e) => return Err(e.to_string()),
            };
            timings.retrieve_ms = Some(ms(started.elapsed()));

            let Some(reranker) = self.reranker.clone() else {
                return Ok::<_, String>(Ok(hits));
            };
            let started = Instant::now();
            let (tenant, query, vector) = (
                request.tenant.clone(),
                request.query.clone(),
                vector.to_vec(),
            );
            let (hits, outcome) = tokio::task::spawn_blocking(move || {
                let outcome = reranker.rerank(&tenant, &query, &vector, &hits);
                (hits, outcome)
            })
            .await
            .map_err(|e| e.to_string())?;
            let hits = match outcome {
                Ok(Some(order)) => {
                    timings.rerank_ms = Some(ms(started.elapsed()));
                    let mut slots: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
                    order
                        .into_iter()
                        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
                        .collect()
                }
                Ok(None) => hits,
                Err(e) => {
                    timings.rerank_ms = Some(ms(started.elapsed()));
                    warn!(tenant = %request.tenant, error = %e, "rerank component failed; keeping the fused order");
                    degraded.push(degraded::RERANK_FAILED.to_string());
                    hits
                }
            };
            Ok::<_, String>(Ok(hits))
        };
        match tokio::time::timeout(left, work).await {
            Ok(Ok(Ok(hits))) => Ok(hits),
            Ok(Ok(Err(skipped))) => Err(skipped),
            Ok(Err(e)) => {
                warn!(tenant = %request.tenant, error = %e, "retrieval failed; answering without context");
                Err(degraded::RETRIEVAL_FAILED)
            }
            Err(_) => {
                warn!(tenant = %request.tenant, deadline = ?request.retrieval_deadline, "retrieval deadline passed; answering without context");
                Err(degraded::RETRIEVAL_TIMEOUT)
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

/// What the metrics record of an answer that ended.
fn outcome<'a>(
    request: &'a AnswerRequest,
    request_id: &'a str,
    timings: &'a Timings,
    cache: &'a str,
    degraded: &'a [String],
    tokens: u64,
    error: Option<&'a str>,
) -> Outcome<'a> {
    Outcome {
        tenant: &request.tenant,
        request_id,
        timings,
        cache,
        degraded,
        tokens,
        error,
    }
}

/// Adds `d` to a timing that may not have started yet.
fn add_ms(slot: &mut Option<f64>, d: Duration) {
    *slot = Some(slot.unwrap_or(0.0) + ms(d));
}

fn source_doc(hit: &Hit) -> SourceDoc {
    SourceDoc {
        id: hit.document.id.clone(),
        chunk: hit.chunk,
        score: hit.score,
        source: hit.document.source.clone(),
        title: hit.document.title.clone(),
        snippet: hit.text.chars().take(SNIPPET_CHARS).collect(),
    }
}

/// The `error` event for an LLM failure; `mid_stream` when tokens were already sent.
fn error_event(e: &LlmError, mid_stream: bool) -> ErrorEvent {
    let code = match e {
        _ if mid_stream => "llm_stream_failed",
        LlmError::Unavailable(_) => "llm_unavailable",
        LlmError::Status { status, .. } if *status == 429 || *status >= 500 => "llm_unavailable",
        LlmError::Status { .. } => "llm_rejected",
        LlmError::Timeout(_) => "llm_timeout",
        LlmError::Stream(_) => "llm_stream_failed",
    };
    ErrorEvent {
        code: code.into(),
        message: e.to_string(),
        retryable: e.retryable(),
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
