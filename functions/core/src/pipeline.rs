//! The answer path, stage by stage:
//!
//! 1. cache — not configured yet, so every request reports `cache: "bypass"`;
//! 2. embed the query (in-process model, on the blocking pool);
//! 3. retrieve: hybrid dense + BM25 search fused by RRF in the store;
//! 4. rerank with the tenant's WASM component, if it has one (else the fused order stays);
//!    steps 2–4 run under the retrieval deadline: late or failed retrieval → answer without
//!    context; a failed rerank → the fused order, with `rerank_failed` in `meta.degraded`;
//! 5. assemble the prompt under the token budget;
//! 6. stream tokens from the LLM.
//!
//! The result is a stream of [`Event`]s that always ends with exactly one `done` or `error`.
//! It is lazy: dropping it (a client that went away) drops the upstream LLM request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use tracing::{info, warn};

use crate::config::Config;
use crate::error::LlmError;
use crate::prompt;
use crate::sse::{Done, ErrorEvent, Event, Meta, SourceDoc, Timings, Token};
use crate::stages::{Components, Embedder, Hit, Llm, LlmEvent, Reranker, Store};

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
        Self {
            config,
            embedder,
            store,
            llm,
            reranker: None,
            components: None,
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

    /// Answers `request` as a stream of SSE events.
    pub fn answer(
        self: &Arc<Self>,
        request: AnswerRequest,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let this = Arc::clone(self);
        async_stream::stream! {
            let request_id = uuid::Uuid::new_v4().to_string();
            let session_id = request.session_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let mut timings = Timings::default();
            let mut degraded: Vec<String> = Vec::new();

            // Stages 2-4: embedding, retrieval and rerank, under the retrieval deadline.
            let hits = match this.retrieve(&request, &mut timings, &mut degraded).await {
                Ok(hits) => hits,
                Err(reason) => {
                    degraded.push(reason.to_string());
                    Vec::new()
                }
            };

            // Stage 4: the prompt.
            let started = Instant::now();
            let counter = |text: &str| this.embedder.count_tokens(text);
            let budget = prompt::input_budget(this.config.llm_context_tokens, this.config.max_tokens as usize);
            let prompt = prompt::assemble(&request.query, hits, budget, &counter);
            if prompt.dropped > 0 {
                degraded.push(degraded::CONTEXT_TRUNCATED.to_string());
            }
            timings.prompt_ms = Some(ms(started.elapsed()));

            let documents = prompt.sources.iter().map(source_doc).collect();
            yield Event::Meta(Box::new(Meta {
                request_id: request_id.clone(),
                session_id: session_id.clone(),
                tenant: request.tenant.clone(),
                model_id: this.llm.model_id().to_string(),
                k: request.k,
                documents,
                cache: "bypass".into(),
                degraded: degraded.clone(),
                timings: timings.clone(),
            }));

            // Stage 5: generation.
            let llm_start = Instant::now();
            let mut upstream = match this.llm.stream(prompt.messages, this.config.max_tokens).await {
                Ok(s) => s,
                Err(e) => {
                    warn!(%request_id, tenant = %request.tenant, error = %e, "LLM request failed");
                    yield Event::Error(error_event(&e, false));
                    return;
                }
            };
            let mut index = 0u64;
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
                        yield Event::Token(Token { text, index });
                        index += 1;
                    }
                    Ok(LlmEvent::Finish { finish_reason, completion_tokens }) => {
                        finish = Some((finish_reason, completion_tokens));
                        break;
                    }
                    Err(e) => {
                        warn!(%request_id, tenant = %request.tenant, error = %e, tokens = index, "LLM stream failed");
                        yield Event::Error(error_event(&e, index > 0));
                        return;
                    }
                }
            }
            let Some((finish_reason, usage_tokens)) = finish else {
                let e = LlmError::Stream("the upstream closed the stream before it finished".into());
                warn!(%request_id, tokens = index, "LLM stream ended without a finish reason");
                yield Event::Error(error_event(&e, index > 0));
                return;
            };

            let (token_count, source) = match usage_tokens {
                Some(n) => (n, "usage"),
                None => (index, "events"),
            };
            let generating = first_token_at.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
            timings.total_ms = Some(ms(request.received.elapsed()));
            info!(
                %request_id, tenant = %request.tenant, tokens = token_count,
                ttft_ms = timings.ttft_ms, total_ms = timings.total_ms, degraded = ?degraded,
                "answered"
            );
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
        }
    }

    /// Embeds the query and searches the store within the request's retrieval deadline.
    /// On failure returns the `meta.degraded` reason.
    async fn retrieve(
        &self,
        request: &AnswerRequest,
        timings: &mut Timings,
        degraded: &mut Vec<String>,
    ) -> Result<Vec<Hit>, &'static str> {
        if request.retrieval_deadline.is_zero() {
            return Err(degraded::RETRIEVAL_TIMEOUT);
        }
        let work = async {
            let started = Instant::now();
            let embedder = Arc::clone(&self.embedder);
            let query = request.query.clone();
            let vectors = tokio::task::spawn_blocking(move || embedder.embed(&[query.as_str()]))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            let vector = vectors
                .into_iter()
                .next()
                .ok_or("the embedder returned no vector")?;
            timings.embed_ms = Some(ms(started.elapsed()));

            let started = Instant::now();
            let hits = self
                .store
                .search(&request.tenant, &request.query, &vector, request.k)
                .await
                .map_err(|e| e.to_string())?;
            timings.retrieve_ms = Some(ms(started.elapsed()));

            let Some(reranker) = self.reranker.clone() else {
                return Ok::<_, String>(hits);
            };
            let started = Instant::now();
            let (tenant, query) = (request.tenant.clone(), request.query.clone());
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
            Ok::<_, String>(hits)
        };
        match tokio::time::timeout(request.retrieval_deadline, work).await {
            Ok(Ok(hits)) => Ok(hits),
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
