//! Prompt: the messages under the token budget, counted off the async workers and under the
//! deadline — then, when the tenant has a prompt component, its messages in their place —
//! and the `meta` event, which quotes the sources the prompt kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::flow::ms;
use super::{AnswerRequest, Pipeline, Progress};
use crate::prompt::{self, Conversation, Prompt};
use sluice_contract::codes::Degraded;
use sluice_contract::sse::{CacheState, Event, Meta, PromptEcho};
use sluice_contract::stages::{
    ActivePrompt, FailureKind, Hit, PromptInput, RerankFailure, SourceDoc,
};

/// The least time prompt assembly gets, even when retrieval used the whole deadline.
const PROMPT_FLOOR: Duration = Duration::from_millis(25);

/// What is left of the retrieval deadline for prompt assembly, and at least its floor.
fn time_left(request: &AnswerRequest) -> Duration {
    (request.received + request.retrieval_deadline)
        .saturating_duration_since(Instant::now())
        .max(PROMPT_FLOOR)
}

/// Characters of a chunk shown as its snippet in `meta`.
const SNIPPET_CHARS: usize = 240;

impl Pipeline {
    /// Stage 5: the prompt under the token budget (the lowest-ranked sources go first).
    pub(super) async fn prompt(
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
        let own = request.prompt_settings().clone();
        let counting = tokio::task::spawn_blocking(move || {
            let counter = |text: &str| embedder.count_tokens(text);
            prompt::assemble(&query, &conversation, hits, budget, &own, &counter)
        });
        let prompt = match tokio::time::timeout(time_left(request), counting).await {
            Ok(Ok(mut prompt)) => {
                if let Some(assembler) = progress.assembler.clone() {
                    self.tenant_prompt(request, assembler, &mut prompt, budget, progress)
                        .await;
                }
                prompt
            }
            late_or_died => {
                if let Ok(Err(e)) = late_or_died {
                    warn!(error = %e, "prompt assembly died");
                }
                // The question alone (at most MAX_QUERY_CHARS to count), still in order.
                progress.degraded.push(Degraded::PromptTimeout);
                let counter = |text: &str| self.embedder.count_tokens(text);
                let alone = Conversation::default();
                let own = request.prompt_settings();
                prompt::assemble(&request.query, &alone, Vec::new(), budget, own, &counter)
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

    /// The tenant's prompt component, given the built-in prompt: its messages (checked by the
    /// sandbox, the token budget included) replace the built-in ones, and their tokens as the
    /// check counted them the estimate. On the blocking pool,
    /// by the retrieval deadline (with the prompt's floor); a failed or late call keeps the
    /// built-in messages (`prompt_component_failed`).
    async fn tenant_prompt(
        &self,
        request: &AnswerRequest,
        assembler: Arc<dyn ActivePrompt>,
        prompt: &mut Prompt,
        budget: usize,
        progress: &mut Progress,
    ) {
        let (question, sources, built_in) = (
            request.query.clone(),
            prompt.sources.clone(),
            prompt.messages.clone(),
        );
        let (context, settings) = (
            request.rerank_context.clone(),
            request.prompt_settings().clone(),
        );
        let request_id = progress.request_id.clone();
        let span = tracing::Span::current();
        let task = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            let call = assembler.assemble(&PromptInput {
                question: &question,
                sources: &sources,
                context: &context,
                settings: &settings,
                budget,
                built_in: &built_in,
                request_id: &request_id,
            });
            call.assembled
        });
        let outcome = match tokio::time::timeout(time_left(request), task).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => Err(RerankFailure::new(
                FailureKind::Trap,
                format!("the prompt task failed: {e}"),
            )),
            Err(_) => Err(RerankFailure::new(
                FailureKind::Deadline,
                "the retrieval deadline passed while it ran",
            )),
        };
        match outcome {
            Ok(assembled) => {
                prompt.messages = assembled.messages;
                prompt.estimated_tokens = assembled.tokens;
            }
            Err(e) => {
                warn!(error = %e, "prompt component failed; sending the built-in prompt");
                progress.degraded.push(Degraded::PromptComponentFailed);
                progress.prompt_failure = request.show_rerank_failure.then_some(e);
            }
        }
    }

    /// The `meta` event: the sources, the cache state and what was degraded, before
    /// generation.
    pub(super) fn meta(
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
            extract: (progress.extract.clone())
                .filter(|_| request.wants_extract(self.config.extract)),
            cache,
            cache_match: None,
            degraded: progress.degraded.clone(),
            timings: progress.timings.clone(),
            trace_id: request.trace.trace_id.clone(),
            rerank_dropped: progress.rerank_dropped,
            rerank_error: progress.rerank_failure.clone(),
            prompt_error: progress.prompt_failure.clone(),
            prompt_tokens: Some(prompt.estimated_tokens as u64),
            prompt: request.include_prompt.then(|| PromptEcho {
                messages: prompt.messages.clone(),
                max_tokens: request.max_tokens_under(self.config.max_tokens),
            }),
        }))
    }
}

/// A source as `meta` shows it, with the score the tenant's component gave it (`scores`,
/// empty when none ran).
pub(super) fn source_doc(hit: &Hit, scores: &HashMap<(String, usize), f32>) -> SourceDoc {
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
        highlights: Vec::new(),
    }
}
