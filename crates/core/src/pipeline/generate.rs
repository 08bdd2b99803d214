//! Generate: the LLM call opened as soon as the prompt is ready, tokens streamed from it, then
//! `done` with the counts and timings; a complete answer is recorded in the cache behind
//! `done` (see [`Pipeline::record`]).

use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use tokio::task::JoinHandle;
use tracing::{Instrument, info, warn};

use super::cache::CacheWrite;
use super::flow::ms;
use super::{AnswerRequest, Pipeline, Progress};
use crate::prompt::Prompt;
use sluice_contract::cache::{CachedAnswer, Cited};
use sluice_contract::codes::{Code, Degraded};
use sluice_contract::error::LlmError;
use sluice_contract::grounding::GroundingMode;
use sluice_contract::sse::{Done, ErrorEvent, Event, Token};
use sluice_contract::stages::{LlmEvent, LlmStream, SourceDoc};

/// The LLM call under way. It is opened before the sources' evidence is computed and `meta`
/// sent, so that work overlaps the upstream's prefill instead of adding to the time to the
/// first token; it runs in its own task, aborted when the answer is dropped before reading it
/// (a client that left, a drain, the answer's end of time).
pub(super) struct Opened {
    started: Instant,
    call: JoinHandle<Result<LlmStream, LlmError>>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.call.abort();
    }
}

impl Pipeline {
    /// Opens the LLM call for `prompt` — or, for a tenant that does not answer without
    /// sources and has none, its refusal, and the LLM is not asked.
    pub(super) fn open(&self, request: &AnswerRequest, prompt: &Prompt) -> Opened {
        let own = request.prompt_settings();
        let refusal = (prompt.sources.is_empty() && !own.answer_without_sources).then(|| {
            own.no_answer
                .clone()
                .unwrap_or_else(|| crate::prompt::NO_ANSWER.into())
        });
        let llm = Arc::clone(&self.llm);
        let messages = prompt.messages.clone();
        let max_tokens = request.max_tokens_under(self.config.max_tokens);
        let traceparent = request.trace.header();
        let call = async move {
            match refusal {
                Some(text) => Ok(refuse(text)),
                None => llm.stream(messages, max_tokens, &traceparent).await,
            }
        };
        Opened {
            started: Instant::now(),
            call: tokio::spawn(call.in_current_span()),
        }
    }

    /// The answer's tokens and its ending, from the `opened` call for `prompt`; `write` (with
    /// the query vector) is where the cache round said a complete answer goes.
    pub(super) fn generate(
        self: Arc<Self>,
        request: AnswerRequest,
        prompt: Prompt,
        mut opened: Opened,
        mut progress: Progress,
        documents: Vec<SourceDoc>,
        write: Option<(CacheWrite, Vec<f32>)>,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let this = self;
        async_stream::stream! {
            let llm_start = opened.started;
            let estimated_prompt_tokens = prompt.estimated_tokens as u64;
            let upstream = (&mut opened.call).await.unwrap_or_else(|ended| {
                Err(LlmError::Stream(format!("the LLM request's task ended: {ended}")))
            });
            let mut upstream = match upstream {
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
            // The answer checked against its sources, before `done`.
            let mode = request.grounding(this.config.grounding);
            let grounding = this.verdict(mode, tokens.concat(), &prompt.sources, &mut progress.timings).await;
            let ungrounded = grounding.as_ref().is_some_and(|g| !g.grounded());
            let late = match (ungrounded, mode) {
                (true, GroundingMode::Strict) => vec![Degraded::Ungrounded],
                _ => Vec::new(),
            };
            progress.timings.total_ms = Some(ms(request.received.elapsed()));
            info!(
                tokens = token_count, ttft_ms = progress.timings.ttft_ms,
                total_ms = progress.timings.total_ms, degraded = ?progress.degraded,
                grounding = %mode, unsupported = grounding.as_ref().map(|g| g.unsupported),
                "answered"
            );
            let answer = CachedAnswer {
                tokens,
                sources: documents,
                finish_reason: finish_reason.clone(),
                token_count,
                token_count_source: source.into(),
                extract: progress.extract.clone(),
                grounding: grounding.clone(),
                // What the answer was built from, for the cache to check later: only for an
                // answer that may be written there.
                cited: match write {
                    Some(_) => prompt.sources.iter().map(Cited::of).collect(),
                    None => Vec::new(),
                },
            };
            let recording = match write {
                Some((write, vector)) => this.record(&request, &progress, write, vector, answer),
                None => Vec::new(),
            };
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
                grounding,
                degraded: late,
            }));
            for work in recording {
                // A failed write was logged by its task; a panicked one needs no more.
                let _ = work.await;
            }
        }
    }
}

/// The `error` event for an LLM failure; `mid_stream` when tokens were already sent.
fn llm_error(e: &LlmError, mid_stream: bool) -> ErrorEvent {
    let code = match mid_stream {
        true => Code::LlmStreamFailed,
        false => sluice_contract::codes::ErrorCode::code(e),
    };
    tracing::warn!(error = %e, "the LLM failed");
    ErrorEvent::new(code, e.public())
}

/// The answer of a tenant that does not answer without sources: its refusal as one token,
/// then the finish (`no_sources`), as an upstream would stream it.
fn refuse(text: String) -> sluice_contract::stages::LlmStream {
    let events = [
        Ok(LlmEvent::Token(text)),
        Ok(LlmEvent::Finish {
            finish_reason: "no_sources".into(),
            completion_tokens: None,
            prompt_tokens: Some(0),
        }),
    ];
    futures::stream::iter(events).boxed()
}
