//! The answer path, stage by stage ([`Pipeline::answer`]): a file per stage, and
//! [`Pipeline::events`] below reads as the request path —
//!
//! 0. **scope** ([`scope`]): the tenant's corpus version (for the cache) and active rerank
//!    component, read beside the embedding, each bounded;
//! 1. **cache** ([`cache`]): an in-process cache by exact key first (a hit skips the
//!    embedding), then by similar question once the query is embedded; a remote cache in one
//!    parallel round after the embedding. A hit replays the cached answer at once; an answer
//!    made before the tenant's corpus changed waits for the prompt's sources (step 5) and
//!    answers if they are the ones it was built from;
//! 2. **embed** ([`embed`]) the query (in-process model, on the blocking pool);
//! 3. **retrieve** ([`retrieve`]): hybrid dense + BM25, fused by the tenant's rule;
//! 4. **rerank** ([`rerank`]) with the tenant's WASM component, if it has one;
//! 5. **prompt** ([`prompt`]): assembled under the token budget; the LLM call opened
//!    ([`generate`]); the sources' evidence sentences found while it is under way
//!    ([`grounding`]), then `meta`;
//! 6. **generate** ([`generate`]): tokens streamed from the LLM, the answer checked against
//!    its sources ([`grounding`]), then `done`;
//! 7. **record** ([`cache`]): a complete, undegraded, grounded answer cached behind `done`.
//!
//! A search ([`Pipeline::search`], in [`search`]) runs steps 0 and 2–4 and the evidence, and
//! returns the sources.
//!
//! **The deadline.** Everything before the LLM call ends by the request's retrieval deadline,
//! counted from its arrival: late or failed work is abandoned, never waited for, and
//! `meta.degraded` says what was skipped ([`flow`]). Each scope read is awaited by the first
//! stage that needs it, within that stage's time (with the cache in use, the cache's budget
//! past the embedding; without it, beside the search until the deadline).
//!
//! The result is a lazy stream of [`Event`]s ending with exactly one `done` or `error` (also
//! at a drain or [`AnswerRequest::ends_by`]); dropping it drops the upstream LLM request.

mod cache;
mod embed;
mod flow;
mod generate;
mod grounding;
mod parts;
mod prompt;
mod request;
mod rerank;
mod retrieve;
mod scope;
mod search;

use std::sync::Arc;

use futures::{Stream, StreamExt};

pub use parts::Pipeline;
use request::Progress;
pub use request::{AnswerRequest, FOLLOW_UP_TURNS, MAX_FOLLOW_UP_BYTES, Pinned};

use cache::Round;
use flow::{beside, in_span, until};
use sluice_contract::sse::{CacheState, Event};
use sluice_contract::stages::SourceDoc;

impl Pipeline {
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
        let stop = flow::stop(&self.drained, request.ends_by);
        let events = Arc::clone(self).events(request, request_id);
        in_span(span, until(events, stop))
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
            // A candidate's answers (pinned components) are never read from or written to the
            // cache: its scope would name versions nobody else runs.
            let cache = (this.cache.clone())
                .filter(|_| !request.bypass_cache && request.pinned.is_empty());

            // 0. Admit: the scope reads start now and run beside the embedding.
            let mut reads = this.read_scope(&request, cache.is_some(), progress.deadline);

            // 1. Cache, before the embedding: an in-process cache by exact key.
            let mut found = this.exact_in_memory(&request, cache.as_ref(), &mut reads, &mut progress).await;
            if let Some(events) = found.replay.take() {
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
                match this.cache_round(&request, cache, &vector, found, &mut reads, &mut progress).await {
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
            let hits = this.candidates(&request, &vector, reads.component, &mut progress).await;

            // 5. The prompt — whose sources may be those of a cached answer made before the
            // corpus changed, which then answers —; the LLM call opened; the sources'
            // evidence, and `meta`.
            let prompt = this.prompt(&request, hits, &mut progress).await;
            let verified = (write.as_mut()).zip(vector.as_ref().ok()).and_then(|(w, (v, _))| {
                this.verified(&request, w, &prompt.sources, v, &mut progress)
            });
            if let Some((events, refresh)) = verified {
                for event in events { yield event; }
                // A failed write was logged by its task.
                let _ = refresh.await;
                return;
            }
            let opened = this.open(&request, &prompt);
            let mut documents: Vec<SourceDoc> = (prompt.sources.iter())
                .map(|hit| prompt::source_doc(hit, &progress.rerank_scores))
                .collect();
            this.evidence(&request, &prompt.sources, &mut documents, &mut progress).await;
            yield this.meta(&request, &progress, documents.clone(), cache_state, &prompt);

            // 6-7. Generate, then record the answer in the cache behind `done`.
            let write = write.zip(vector.ok().map(|(vector, _)| vector));
            let generated = Arc::clone(&this).generate(request, prompt, opened, progress, documents, write);
            let mut generated = std::pin::pin!(generated);
            while let Some(event) = generated.next().await {
                yield event;
            }
        }
    }
}
