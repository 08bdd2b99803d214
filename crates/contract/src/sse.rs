//! The SSE protocol: `meta`, `token`…, then exactly one `done` or `error` (DESIGN.md §4).
//!
//! Each event is one `event:` line and one `data:` line holding a JSON object.

use crate::Tenant;
use serde::{Deserialize, Serialize};

use crate::codes::{Code, Degraded};

/// Stage timings in milliseconds; a stage that did not run is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Waiting on cache lookups (the exact-key read, then the similar-question round).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_ms: Option<f64>,
    /// Query embedding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embed_ms: Option<f64>,
    /// Hybrid retrieval (dense + BM25 + fusion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrieve_ms: Option<f64>,
    /// The tenant's rerank component (absent when the tenant has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_ms: Option<f64>,
    /// Fuel the tenant's rerank component burnt in this call (about one per WebAssembly
    /// instruction; absent when no call finished).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_fuel: Option<u64>,
    /// Prompt assembly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<f64>,
    /// Finding the sources' evidence sentences (highlights and the extract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_ms: Option<f64>,
    /// From sending the LLM request to its first token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_ttft_ms: Option<f64>,
    /// From receiving the request to sending the first token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Checking the answer against its sources, after the last token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding_ms: Option<f64>,
    /// From receiving the request to the end of the stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<f64>,
}

use crate::stages::SourceDoc;

/// Where an answer stands with the cache (`meta.cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    /// Answered from the cache.
    Hit,
    /// Looked up, not found (a failed or late lookup too): generated, and cached if complete.
    Miss,
    /// Not looked up: the request asked to skip it, the cache is off, or the tenant's corpus
    /// version or component was not known in time.
    Bypass,
}

impl CacheState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::Hit => "hit",
            CacheState::Miss => "miss",
            CacheState::Bypass => "bypass",
        }
    }
}

/// Why a cached answer was found to answer this question (`meta.cache_match`, on a hit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMatch {
    /// The same question (once normalised), under the corpus version it was answered under.
    Exact,
    /// A question whose embedding reaches the tenant's threshold and that the guard lets
    /// through, under the same corpus version.
    Similar,
    /// Retrieval for this question, run now, returned exactly the sources the answer was
    /// built from: the corpus changed elsewhere, or the question is close but under the
    /// threshold.
    Sources,
}

impl CacheMatch {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMatch::Exact => "exact",
            CacheMatch::Similar => "similar",
            CacheMatch::Sources => "sources",
        }
    }
}

/// First event of every stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Unique per request.
    pub request_id: String,
    /// The client's session (generated when it sent none).
    pub session_id: String,
    /// Tenant whose documents were searched.
    pub tenant: Tenant,
    /// LLM model that answers.
    pub model_id: String,
    /// Number of sources asked for.
    pub k: usize,
    /// Sources in the prompt, best first, each with its evidence sentences (`highlights`).
    pub documents: Vec<SourceDoc>,
    /// The best evidence sentence of all the sources, when one answers enough of the question
    /// (and the request, the tenant and the deployment did not turn it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<crate::grounding::Extract>,
    /// Whether the answer came from the cache.
    pub cache: CacheState,
    /// On a hit, why the cached answer answers this question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_match: Option<CacheMatch>,
    /// Why the answer is degraded (`retrieval_timeout`, `retrieval_failed`, …); empty when not.
    pub degraded: Vec<Degraded>,
    /// Stage timings so far.
    pub timings: Timings,
    /// The W3C trace id of this answer (sent to the LLM in `traceparent`; in every log line).
    #[serde(default)]
    pub trace_id: String,
    /// The LLM request as sent, when the request asked for it (`"include_prompt": true`):
    /// `sluice bench --compare-llm` replays it straight to the LLM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptEcho>,
    /// How many candidates the tenant's rerank component dropped (present when a component
    /// ran and its output was valid; a 0.1 component never drops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_dropped: Option<usize>,
    /// Why the tenant's component failed (`degraded` has `rerank_failed`): its kind and
    /// message, with the call's context and candidates, for a caller that manages the
    /// tenant's components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_error: Option<crate::components::CallFailure>,
    /// Why the tenant's prompt component failed (`degraded` has `prompt_component_failed`),
    /// to the same callers as `rerank_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_error: Option<crate::stages::RerankFailure>,
    /// Sluice's count of the prompt's tokens, as sent to the LLM (absent on a cache hit):
    /// an answer the client leaves after its first token is charged this for the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
}

/// The chat request Sluice sends upstream for an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptEcho {
    /// The messages, system prompt and sources included.
    pub messages: Vec<crate::stages::ChatMessage>,
    /// The `max_tokens` sent.
    pub max_tokens: u32,
}

/// One piece of the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    /// Text as generated.
    pub text: String,
    /// Position of this event among the token events, from 0.
    pub index: u64,
}

/// Last event of a successful stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Done {
    /// Same as in `meta`.
    pub request_id: String,
    /// Same as in `meta`.
    pub session_id: String,
    /// The Sluice process that served the request.
    pub replica_id: String,
    /// LLM model that answered.
    pub model_id: String,
    /// Number of sources asked for.
    pub k: usize,
    /// Generated tokens: the upstream's own count when it reports usage, else the number of
    /// token events.
    pub token_count: u64,
    /// `usage` when `token_count` came from the upstream, `events` when counted here.
    pub token_count_source: String,
    /// `token_count` over the generation time after the first token.
    pub tokens_per_sec: f64,
    /// Tokens of the prompt sent to the LLM: the upstream's count when it reports `usage`,
    /// else Sluice's estimate; 0 for a cached answer (no prompt was sent).
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Why generation stopped (`stop`, `length`, …).
    pub finish_reason: String,
    /// Whether the answer came from the cache.
    pub cached: bool,
    /// All stage timings.
    pub timings: Timings,
    /// The verdict on every sentence of the answer (absent when the tenant's grounding check
    /// is `off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding: Option<crate::grounding::Grounding>,
    /// What was found wrong after `meta` was sent: `ungrounded` under `strict` grounding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Degraded>,
}

/// Last event of a failed stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Stable machine-readable code, e.g. `llm_unavailable`.
    pub code: Code,
    /// What went wrong, for people.
    pub message: String,
    /// Whether sending the same request again may succeed.
    pub retryable: bool,
}

impl ErrorEvent {
    /// An `error` event with `code` and its retryability.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: code.retryable(),
        }
    }
}

/// One SSE event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `event: meta`.
    Meta(Box<Meta>),
    /// `event: token`.
    Token(Token),
    /// `event: done`.
    Done(Box<Done>),
    /// `event: error`.
    Error(ErrorEvent),
}

impl Event {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Meta(_) => "meta",
            Event::Token(_) => "token",
            Event::Done(_) => "done",
            Event::Error(_) => "error",
        }
    }

    /// The event named `name` carrying `data`; `None` for a name that is not an event of the
    /// contract (a reader skips it).
    pub fn decode(name: &str, data: &str) -> Result<Option<Event>, serde_json::Error> {
        Ok(Some(match name {
            "meta" => Event::Meta(Box::new(serde_json::from_str(data)?)),
            "token" => Event::Token(serde_json::from_str(data)?),
            "done" => Event::Done(Box::new(serde_json::from_str(data)?)),
            "error" => Event::Error(serde_json::from_str(data)?),
            _ => return Ok(None),
        }))
    }

    /// One block of an SSE stream (the lines between blank lines: `event: NAME`, `data: …`)
    /// as [`Event::decode`] reads it; `None` for a block without an event of the contract (a
    /// comment, a keep-alive, a newer server's event).
    pub fn parse(block: &str) -> Result<Option<Event>, serde_json::Error> {
        let (mut name, mut data) = ("", String::new());
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim_start();
            } else if let Some(d) = line.strip_prefix("data:") {
                // Several `data:` lines are one text joined by newlines (the SSE standard).
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        match name {
            "" => Ok(None),
            name => Self::decode(name, &data),
        }
    }

    /// The JSON object carried on the `data:` line.
    pub fn data(&self) -> String {
        let value = match self {
            Event::Meta(m) => serde_json::to_string(m),
            Event::Token(t) => serde_json::to_string(t),
            Event::Done(d) => serde_json::to_string(d),
            Event::Error(e) => serde_json::to_string(e),
        };
        // These types hold only strings, numbers and lists: serialisation cannot fail.
        value.unwrap_or_else(|e| format!("{{\"code\":\"internal\",\"message\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_is_one_json_object_whatever_the_text() {
        let e = Event::Token(Token {
            text: "hi\nthere".into(),
            index: 3,
        });
        let data = e.data();
        assert!(!data.contains('\n'), "{data:?}");
        let back: Token = serde_json::from_str(&data).unwrap();
        assert_eq!(back.text, "hi\nthere");
        let error = Event::Error(ErrorEvent::new(Code::LlmTimeout, "slow"));
        assert_eq!(
            error.data(),
            r#"{"code":"llm_timeout","message":"slow","retryable":true}"#
        );
    }

    #[test]
    fn a_block_is_read_back_as_the_event_it_was_written_from() {
        let e = Event::Token(Token {
            text: "a\nb".into(),
            index: 7,
        });
        let block = format!("event: {}\ndata: {}\n", e.name(), e.data());
        match Event::parse(&block) {
            Ok(Some(Event::Token(t))) => assert_eq!((t.text.as_str(), t.index), ("a\nb", 7)),
            other => panic!("{other:?}"),
        }
        // Split `data:` lines are one text; comments and unknown events are skipped.
        let split = "event:token\ndata: {\"text\":\"x\",\ndata: \"index\":1}";
        assert!(matches!(Event::parse(split), Ok(Some(Event::Token(_)))));
        assert!(matches!(Event::parse(": keep-alive"), Ok(None)));
        assert!(matches!(Event::parse("event: later\ndata: {}"), Ok(None)));
        assert!(Event::parse("event: token\ndata: nope").is_err());
    }

    #[test]
    fn absent_timings_are_omitted() {
        let t = Timings {
            embed_ms: Some(1.5),
            ..Default::default()
        };
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"embed_ms":1.5}"#);
    }
}
