//! Answers and searches: the request checked against its limits (defaults from the tenant's
//! settings, then the deployment's), the budgets and the stream slot it takes, and the
//! pipeline's events counted in the metrics and billed as they pass.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Deserialize;
use sluice_contract::Tenant;
use sluice_contract::codes::Code;
use sluice_contract::filter::Filter;
use sluice_contract::search::Found;
use sluice_contract::sse::Event;
use sluice_contract::stages::{MAX_K, RerankContext};
use sluice_contract::tenant_settings::{MAX_DEADLINE_MS, StoredSettings};
use sluice_contract::usage::{Counts, day_string};
use sluice_core::Pipeline;
use sluice_core::config::AnswerConfig;
use sluice_core::pipeline::AnswerRequest;
use sluice_core::prompt::Conversation;
use sluice_core::trace::TraceContext;
use sluice_core::usage::OverBudget;

use super::{Call, Caller, billing, limited};
use crate::Server;
use crate::error::ApiError;

/// Longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 4096;

/// Longest accepted `session_id`.
const MAX_SESSION_ID_CHARS: usize = 128;

/// An answer as asked (the body of `POST /v1/answer`, a chat completion's question with its
/// `sluice` options, MCP's `answer` and `search` arguments).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    pub(crate) query: Option<String>,
    pub(crate) k: Option<serde_json::Value>,
    pub(crate) session_id: Option<String>,
    pub(crate) retrieval_deadline_ms: Option<u64>,
    pub(crate) cache: Option<String>,
    #[serde(default)]
    pub(crate) include_prompt: bool,
    /// A metadata filter ([`Filter`]), checked here.
    pub(crate) filter: Option<serde_json::Value>,
    /// What the tenant's rerank component reads ([`RerankContext`]), checked here.
    pub(crate) rerank_context: Option<serde_json::Value>,
    /// Whether `meta` carries the extract (default: the tenant's setting, else
    /// `SLUICE_EXTRACT`).
    pub(crate) extract: Option<bool>,
}

/// Checks an answer as asked into a pipeline request for `tenant`. The effective filter is
/// the key's (`key_filter`) AND the body's: a request can narrow what its key sees, never
/// widen it. What the body leaves out comes from the tenant's `settings`, else from `config`.
/// Request bodies are untrusted input: this is fuzzed (`fuzz/`).
pub(crate) fn checked_request(
    config: &AnswerConfig,
    tenant: Tenant,
    key_filter: Option<&Filter>,
    call: &Call,
    body: AnswerBody,
    settings: Option<Arc<StoredSettings>>,
) -> Result<AnswerRequest, ApiError> {
    let own = settings.as_ref().map(|s| &s.settings);
    let query = body
        .query
        .ok_or_else(|| ApiError::new(Code::MissingQuery, "\"query\" is required"))?;
    let query = query.trim().to_string();
    if query.is_empty() {
        return Err(ApiError::new(Code::EmptyQuery, "\"query\" is empty"));
    }
    let chars = query.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(ApiError::new(
            Code::QueryTooLong,
            format!("\"query\" has {chars} characters; the limit is {MAX_QUERY_CHARS}"),
        ));
    }
    let k = match body.k {
        None => own.and_then(|s| s.k).unwrap_or(config.top_k),
        Some(k) => match k.as_u64() {
            Some(n) if (1..=MAX_K as u64).contains(&n) => n as usize,
            _ => {
                return Err(ApiError::new(
                    Code::InvalidK,
                    format!("\"k\" is {k}; it must be a whole number from 1 to {MAX_K}"),
                ));
            }
        },
    };
    if let Some(s) = &body.session_id
        && (s.is_empty() || s.chars().count() > MAX_SESSION_ID_CHARS)
    {
        return Err(ApiError::new(
            Code::InvalidSessionId,
            format!("\"session_id\" must have 1 to {MAX_SESSION_ID_CHARS} characters"),
        ));
    }
    let retrieval_deadline = match body.retrieval_deadline_ms {
        None => (own.and_then(|s| s.retrieval_deadline_ms))
            .map_or(config.retrieval_deadline, Duration::from_millis),
        Some(ms) if ms <= MAX_DEADLINE_MS => Duration::from_millis(ms),
        Some(ms) => {
            return Err(ApiError::new(
                Code::InvalidDeadline,
                format!("\"retrieval_deadline_ms\" is {ms}; the limit is {MAX_DEADLINE_MS}"),
            ));
        }
    };
    let bypass_cache = match body.cache.as_deref() {
        None | Some("auto") => call.no_cache,
        Some("bypass") => true,
        Some(other) => {
            return Err(ApiError::new(
                Code::InvalidCache,
                format!("\"cache\" is {other:?}; it must be \"auto\" or \"bypass\""),
            ));
        }
    };
    let sent = match &body.filter {
        None => None,
        Some(value) => Some(
            Filter::parse(value)
                .map_err(|e| ApiError::new(Code::InvalidFilter, format!("\"filter\": {e}")))?,
        ),
    };
    let rerank_context = match &body.rerank_context {
        None => RerankContext::default(),
        Some(value) => RerankContext::parse(value).map_err(|e| {
            ApiError::new(
                Code::InvalidRerankContext,
                format!("\"rerank_context\": {e}"),
            )
        })?,
    };
    Ok(AnswerRequest {
        tenant,
        query,
        k,
        filter: Filter::and(key_filter, sent.as_ref()),
        binding: key_filter.map(Filter::digest),
        access: None,
        conversation: Conversation::default(),
        max_tokens: None,
        rerank_context,
        session_id: body.session_id,
        retrieval_deadline,
        received: call.received,
        bypass_cache,
        trace: TraceContext::from_header(call.traceparent.as_deref()),
        include_prompt: body.include_prompt,
        ends_by: None,
        show_rerank_failure: false,
        settings,
        extract: body.extract,
        pinned: Default::default(),
    })
}

impl Server {
    /// The answer path, or the 404 of a process that serves no answers (another function
    /// does).
    pub(crate) fn pipeline(&self) -> Result<&Arc<Pipeline>, ApiError> {
        (self.answers.as_ref()).ok_or_else(|| {
            ApiError::new(
                Code::NotFound,
                "this process does not serve answers (the answer function does)",
            )
        })
    }

    /// `body` checked into the pipeline request `caller` asks with `call` (see
    /// [`checked_request`]), before a door adds what only it knows (a conversation).
    pub(crate) fn request(
        &self,
        caller: &Caller,
        call: &Call,
        body: AnswerBody,
    ) -> Result<AnswerRequest, ApiError> {
        let pipeline = self.pipeline()?;
        checked_request(
            &pipeline.config,
            caller.tenant.clone(),
            caller.filter.as_ref(),
            call,
            body,
            caller.settings.clone(),
        )
    }

    /// The answer to `body`, as `caller` asks it with `call`: see [`Self::open_answer`].
    pub(crate) fn answer(
        &self,
        caller: &Caller,
        call: &Call,
        body: AnswerBody,
    ) -> Result<BoxStream<'static, Event>, ApiError> {
        let request = self.request(caller, call, body)?;
        self.open_answer(caller, call, request)
    }

    /// Starts answering `request` for `caller` (its key's and its tenant's token budgets and
    /// the tenant's stream quota permitting, all checked from memory): the pipeline's events —
    /// which end early, with a closing retryable `error`, when the server's drain time is up
    /// or the call's deadline ([`Call::ends_by`]) comes — counted in the metrics and billed
    /// as they pass. The stream holds the tenant's stream permit until it ends or is dropped.
    pub(crate) fn open_answer(
        &self,
        caller: &Caller,
        call: &Call,
        request: AnswerRequest,
    ) -> Result<BoxStream<'static, Event>, ApiError> {
        let pipeline = self.pipeline()?;
        if request.include_prompt && !caller.may_see_prompt {
            return Err(ApiError::new(
                Code::PermissionDenied,
                "\"include_prompt\" needs an API key with the \"prompt\" permission",
            ));
        }
        // The most one answer can spend: its prompt and completion share the model's window.
        let most = pipeline.config.context_tokens as u64;
        let hold = match &self.usage {
            Some(meter) => meter
                .reserve(
                    &caller.tenant,
                    caller.key.as_deref(),
                    caller.token_budget,
                    most,
                )
                .map_err(|over| over_budget(&caller.tenant, over))?,
            None => None,
        };
        let permit =
            (self.quotas.stream(&caller.tenant)).map_err(|l| limited(&caller.tenant, l))?;
        let request = AnswerRequest {
            ends_by: call.ends_by,
            ..caller.asks(request)
        };
        let asked = super::feedback::asked(caller, &request.query, "answer");
        let (tenant, key) = (caller.tenant.clone(), caller.key.clone());
        let observed = crate::metrics::observed(
            &self.metrics,
            tenant.clone(),
            key.clone(),
            pipeline.answer(request),
        );
        let billed = billing::billed(self.usage.clone(), tenant, key, hold, observed);
        Ok(self
            .keeping(caller, asked, billed.boxed())
            .map(move |e| {
                let _held = &permit;
                e
            })
            .boxed())
    }

    /// The sources an answer to `body` (with `conversation` before it) would be built from,
    /// as `caller` asks it with `call`: no LLM, no token budget; counted in the usage as one
    /// search and kept for rating, both written before it is returned (a buffered response
    /// ends a Lambda invocation, and work after it would be frozen).
    pub(crate) async fn search(
        &self,
        caller: &Caller,
        call: &Call,
        body: AnswerBody,
        conversation: Conversation,
    ) -> Result<Found, ApiError> {
        let pipeline = self.pipeline()?;
        let mut request = self.request(caller, call, body)?;
        request.conversation = conversation;
        let asked = super::feedback::asked(caller, &request.query, "search");
        let found = pipeline.search(&caller.asks(request)).await;
        let sources = found.documents.iter().map(|d| d.id.clone()).collect();
        let searched = Counts {
            searches: 1,
            ..Counts::default()
        };
        let kept = self.keep_search(caller, &found.request_id, asked, sources);
        futures::join!(kept, self.count_now(caller, searched));
        Ok(found)
    }
}

/// The 429 of a spent budget, with `Retry-After` at the start of the next month.
pub(crate) fn over_budget(tenant: &Tenant, over: OverBudget) -> ApiError {
    tracing::warn!(%tenant, whose = over.whose, used = over.used, budget = over.budget, "token budget spent");
    let whose = match over.whose {
        "key" => "this API key's".to_string(),
        _ => format!("tenant {tenant:?}'s"),
    };
    ApiError {
        retry_after: Some(over.retry_after()),
        ..ApiError::new(
            Code::BudgetExceeded,
            format!(
                "{whose} monthly token budget is spent: {} of {} tokens used; it starts again on {} (UTC)",
                over.used,
                over.budget,
                day_string(over.resets_on)
            ),
        )
    }
}
