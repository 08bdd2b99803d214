//! An LLM that streams what it is told, and remembers what it was asked.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use sluice_contract::error::LlmError;
use sluice_contract::stages::{ChatMessage, Llm, LlmEvent, LlmStream};

/// What every call of a [`ScriptedLlm`] gets.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Streams these tokens, then finishes (`stop`, with usage: the number of tokens).
    Tokens(Vec<String>),
    /// Refuses the request before any token: the error `stream` returns.
    Refuse(LlmError),
    /// Streams these tokens, then fails with the error.
    BreakAfter(Vec<String>, LlmError),
    /// Streams these tokens, then nothing, ever (neither a finish nor an error).
    StallAfter(Vec<String>),
}

impl Reply {
    /// `text` as tokens, one per word (each with its following space).
    pub fn text(text: &str) -> Self {
        Reply::Tokens(words(text))
    }
}

fn words(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_string).collect()
}

/// One call the LLM received.
#[derive(Debug, Clone)]
pub struct LlmCall {
    /// The chat messages (system prompt with the sources, then the question).
    pub messages: Vec<ChatMessage>,
    /// The `max_tokens` sent.
    pub max_tokens: u32,
    /// The W3C trace context sent.
    pub traceparent: String,
}

/// An OpenAI-compatible model that streams its [`Reply`] to every call — after
/// `first_token_after`, with `gap` between tokens — and records each call.
pub struct ScriptedLlm {
    model: String,
    reply: Mutex<Reply>,
    first_token_after: Duration,
    gap: Duration,
    calls: Mutex<Vec<LlmCall>>,
    /// Streams dropped so far: read to the end, or let go of by the pipeline.
    ended: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a stream as ended when it is dropped.
struct EndsWith(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for EndsWith {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ScriptedLlm {
    /// Answers every call with `reply`, at once.
    pub fn new(reply: Reply) -> Self {
        Self {
            model: "scripted-llm".into(),
            reply: Mutex::new(reply),
            first_token_after: Duration::ZERO,
            gap: Duration::ZERO,
            calls: Mutex::new(Vec::new()),
            ended: Default::default(),
        }
    }

    /// Answers every call with `text`, a token per word.
    pub fn answering(text: &str) -> Self {
        Self::new(Reply::text(text))
    }

    /// Waits this long before the first event of each stream.
    pub fn first_token_after(mut self, delay: Duration) -> Self {
        self.first_token_after = delay;
        self
    }

    /// Waits this long between tokens.
    pub fn gap(mut self, gap: Duration) -> Self {
        self.gap = gap;
        self
    }

    /// From now on, every call gets `reply`.
    pub fn reply_with(&self, reply: Reply) {
        *self.reply.lock().unwrap_or_else(|p| p.into_inner()) = reply;
    }

    /// The calls so far, oldest first.
    pub fn calls(&self) -> Vec<LlmCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many of the streams it gave (one per call it did not refuse) are over: read to
    /// their end, or dropped by the pipeline (a client that left).
    pub fn streams_ended(&self) -> usize {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl Llm for ScriptedLlm {
    fn model_id(&self) -> &str {
        &self.model
    }

    async fn stream(
        &self,
        messages: Vec<ChatMessage>,
        max_tokens: u32,
        traceparent: &str,
    ) -> Result<LlmStream, LlmError> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LlmCall {
                messages,
                max_tokens,
                traceparent: traceparent.to_string(),
            });
        let reply = self.reply.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (tokens, end): (Vec<String>, Option<Result<LlmEvent, LlmError>>) = match reply {
            Reply::Refuse(e) => return Err(e),
            Reply::Tokens(tokens) => {
                let finish = LlmEvent::Finish {
                    finish_reason: "stop".into(),
                    completion_tokens: Some(tokens.len() as u64),
                    // Not reported: the pipeline then counts the prompt itself.
                    prompt_tokens: None,
                };
                (tokens, Some(Ok(finish)))
            }
            Reply::BreakAfter(tokens, e) => (tokens, Some(Err(e))),
            Reply::StallAfter(tokens) => (tokens, None),
        };
        let (first, gap) = (self.first_token_after, self.gap);
        let ends = EndsWith(std::sync::Arc::clone(&self.ended));
        let stalls = end.is_none();
        let events = futures::stream::iter(
            tokens
                .into_iter()
                .map(|t| Ok(LlmEvent::Token(t)))
                .chain(end),
        )
        .enumerate()
        .then(move |(i, event)| async move {
            let wait = if i == 0 { first } else { gap };
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            event
        })
        .map(move |event| {
            let _counted_when_dropped = &ends;
            event
        });
        Ok(match stalls {
            true => events.chain(futures::stream::pending()).boxed(),
            false => events.boxed(),
        })
    }

    /// Not ready while it refuses every request.
    async fn ready(&self) -> Result<(), LlmError> {
        match &*self.reply.lock().unwrap_or_else(|p| p.into_inner()) {
            Reply::Refuse(e) => Err(e.clone()),
            _ => Ok(()),
        }
    }
}
