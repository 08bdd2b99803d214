//! Prompt: the messages under the token budget, counted off the async workers and under the
//! deadline; then the `meta` event, which quotes the sources the prompt kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::flow::ms;
use super::{AnswerRequest, Pipeline, Progress};
use crate::prompt::{self, Conversation, Prompt};
use sluice_contract::codes::Degraded;
use sluice_contract::sse::{CacheState, Event, Meta, PromptEcho};
use sluice_contract::stages::Hit;
use sluice_contract::stages::SourceDoc;

/// The least time prompt assembly gets, even when retrieval used the whole deadline.
const PROMPT_FLOOR: Duration = Duration::from_millis(25);

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
            cache,
            degraded: progress.degraded.clone(),
            timings: progress.timings.clone(),
            trace_id: request.trace.trace_id.clone(),
            rerank_dropped: progress.rerank_dropped,
            rerank_error: progress.rerank_failure.clone(),
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
    }
}
