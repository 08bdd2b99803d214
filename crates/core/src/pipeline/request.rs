//! The request as the pipeline takes it, validated by the entry point.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::Instant as Deadline;

use crate::config::AnswerConfig;
use crate::prompt::Conversation;
use crate::trace::TraceContext;
use sluice_contract::Tenant;
use sluice_contract::codes::Degraded;
use sluice_contract::filter::Filter;
use sluice_contract::fusion::Fusion;
use sluice_contract::grounding::{Extract, GroundingMode};
use sluice_contract::sse::Timings;
use sluice_contract::stages::{ActiveComponent, ActivePrompt, RerankContext, RerankFailure};
use sluice_contract::tenant_settings::{PromptSettings, StoredSettings};

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
    /// The end user's access filter ([`sluice_contract::access::access_filter`]), ANDed with
    /// `filter` by retrieval ([`Self::searched`]); `None`: no end user. Kept apart for the
    /// cache ([`sluice_contract::cache::Scope::access`]): users who share groups share
    /// answers whose sources they both see.
    pub access: Option<Filter>,
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
    /// The tenant's own settings (`None`: it has set none): its fusion, cache threshold and
    /// prompt here; its `k`, deadline and `max_tokens` are already in the fields above.
    pub settings: Option<Arc<StoredSettings>>,
    /// Whether `meta` carries the extract (`"extract": false` turns it off); `None`: as the
    /// tenant's settings, else the deployment's `SLUICE_EXTRACT`, say.
    pub extract: Option<bool>,
    /// Components to run in place of the tenant's active ones (an evaluation's candidate):
    /// each one given replaces its kind's.
    pub pinned: Pinned,
}

/// A tenant's component versions pinned for one request, in place of the active ones: a
/// candidate tried before it goes live. An answer with one is never cached.
#[derive(Clone, Default)]
pub struct Pinned {
    /// The rerank component.
    pub rerank: Option<Arc<dyn ActiveComponent>>,
    /// The prompt component.
    pub prompt: Option<Arc<dyn ActivePrompt>>,
}

impl Pinned {
    /// Whether nothing is pinned.
    pub fn is_empty(&self) -> bool {
        self.rerank.is_none() && self.prompt.is_none()
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field(
                "rerank",
                &self.rerank.as_ref().map(|c| c.version().to_string()),
            )
            .field(
                "prompt",
                &self.prompt.as_ref().map(|c| c.version().to_string()),
            )
            .finish()
    }
}

/// How many earlier user turns a follow-up's retrieval reads besides the question (newest
/// first, after it): enough for "and for premium accounts?" to find what it refers to,
/// few enough that a change of subject is still retrieved mostly by its own words.
pub const FOLLOW_UP_TURNS: usize = 1;

/// Most bytes of an earlier turn that retrieval reads (its start): more than the embedding
/// model's window holds, and a bound on what tokenising and BM25 cost before the deadline
/// can matter — a turn may be hundreds of kilobytes.
pub const MAX_FOLLOW_UP_BYTES: usize = 2_048;

impl AnswerRequest {
    /// The most tokens this answer may generate: the deployment's `cap`, lowered by the
    /// tenant's `max_tokens` and the client's.
    pub fn max_tokens_under(&self, cap: u32) -> u32 {
        let own = self.settings.as_ref().and_then(|s| s.settings.max_tokens);
        [Some(cap), own, self.max_tokens]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(cap)
    }

    /// The grounding check of this answer: the tenant's, else the deployment's `default`.
    pub fn grounding(&self, default: GroundingMode) -> GroundingMode {
        (self.settings.as_ref())
            .and_then(|s| s.settings.grounding)
            .unwrap_or(default)
    }

    /// Whether `meta` carries the extract: as the request says, else the tenant's settings,
    /// else the deployment's `default`.
    pub fn wants_extract(&self, default: bool) -> bool {
        let own = self.settings.as_ref().and_then(|s| s.settings.extract);
        self.extract.or(own).unwrap_or(default)
    }

    /// The tenant's prompt settings (the defaults when it has set none).
    pub fn prompt_settings(&self) -> &PromptSettings {
        static DEFAULT: std::sync::LazyLock<PromptSettings> =
            std::sync::LazyLock::new(PromptSettings::default);
        (self.settings.as_ref()).map_or(&DEFAULT, |s| &s.settings.prompt)
    }

    /// What retrieval (embedding, BM25, rerank) reads: the question, then the last
    /// [`FOLLOW_UP_TURNS`] earlier user turns, newest first, each cut to its first
    /// [`MAX_FOLLOW_UP_BYTES`] — so that a follow-up is found by what it refers to, and a
    /// question too long for the embedding window loses the oldest context, not itself.
    pub fn retrieval_text(&self) -> std::borrow::Cow<'_, str> {
        let earlier: Vec<&str> = (self.conversation.history.iter().rev())
            .filter(|m| m.role == "user")
            .take(FOLLOW_UP_TURNS)
            .map(|m| {
                let mut end = m.content.len().min(MAX_FOLLOW_UP_BYTES);
                while !m.content.is_char_boundary(end) {
                    end -= 1;
                }
                &m.content[..end]
            })
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

    /// What retrieval searches: `filter` AND the end user's `access`.
    pub fn searched(&self) -> Option<Filter> {
        Filter::and(self.filter.as_ref(), self.access.as_ref())
    }

    /// Digest of what else shapes this answer besides the question and the scope's fields —
    /// the filter (the end user's access apart), the conversation, a `max_tokens` below the server's, a fusion
    /// other than the built-in one (`fusion`, the tenant's), the rerank context, the version
    /// of the tenant's settings — or `None` when nothing does. Cached answers are keyed and
    /// scoped by it: one made under one filter, conversation, length, fusion, context or
    /// settings version never answers another (a changed prompt never replays an old answer).
    pub fn variant(&self, fusion: &Fusion) -> Option<String> {
        let fusion = (*fusion != Fusion::default()).then(|| fusion.to_string());
        let settings = self.settings.as_ref().map(|s| s.version);
        let plain = self.filter.is_none()
            && self.conversation == Conversation::default()
            && self.max_tokens.is_none()
            && fusion.is_none()
            && self.rerank_context.is_empty()
            && settings.is_none();
        (!plain).then(|| {
            let what = serde_json::json!({
                "filter": self.filter.as_ref().map(Filter::digest),
                "conversation": self.conversation,
                "max_tokens": self.max_tokens,
                "fusion": fusion,
                "rerank_context": self.rerank_context,
                "settings": settings,
            });
            sluice_contract::sha256_hex(what.to_string().as_bytes())
        })
    }
}

/// What one answer has gathered on its way: its ids, the deadline, timings and degraded
/// reasons so far. Each stage adds to it; `meta` and `done` are made from it.
pub(super) struct Progress {
    pub(super) request_id: String,
    pub(super) session_id: String,
    pub(super) deadline: Deadline,
    pub(super) timings: Timings,
    pub(super) degraded: Vec<Degraded>,
    /// How the tenant's hybrid search fuses its rankings.
    pub(super) fusion: Fusion,
    /// [`AnswerRequest::variant`], computed once.
    pub(super) variant: Option<String>,
    /// Digest of the end user's access filter ([`AnswerRequest::access`]), computed once: a
    /// user of many groups has a large one, and the cache's scope is made more than once.
    pub(super) access: Option<String>,
    /// Candidates the tenant's component dropped, once it ran and its output was valid.
    pub(super) rerank_dropped: Option<usize>,
    /// The score the tenant's component gave each source it kept, by document id and chunk.
    pub(super) rerank_scores: HashMap<(String, usize), f32>,
    /// Why the tenant's component failed, for `meta` (when the caller may be told).
    pub(super) rerank_failure: Option<sluice_contract::components::CallFailure>,
    /// The tenant's prompt component, once the component read has answered (the rerank stage
    /// takes it; none when retrieval did not run).
    pub(super) assembler: Option<Arc<dyn ActivePrompt>>,
    /// Why the tenant's prompt component failed, for `meta` (to the same callers).
    pub(super) prompt_failure: Option<RerankFailure>,
    /// The best evidence sentence of the sources, once found (kept for the cache even when
    /// this request does not show it).
    pub(super) extract: Option<Extract>,
}

impl Progress {
    pub(super) fn new(config: &AnswerConfig, request: &AnswerRequest, request_id: String) -> Self {
        let own = request.settings.as_ref().and_then(|s| s.settings.fusion);
        let fusion = own.unwrap_or_else(|| config.fusion.for_tenant(&request.tenant));
        Self {
            variant: request.variant(&fusion),
            access: request.access.as_ref().map(Filter::digest),
            fusion,
            rerank_dropped: None,
            rerank_scores: HashMap::new(),
            rerank_failure: None,
            assembler: None,
            prompt_failure: None,
            extract: None,
            request_id,
            session_id: (request.session_id.clone())
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            deadline: Deadline::from_std(request.received + request.retrieval_deadline),
            timings: Timings::default(),
            degraded: Vec::new(),
        }
    }
}
