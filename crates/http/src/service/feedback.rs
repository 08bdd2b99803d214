//! Feedback on answers. Every answer and search carries a `request_id`; what it was — the
//! question, the sources, the verdict, who asked, the answer's identity — is kept by that id
//! for [`KEPT_FOR`], so that a rating can say what it rates: in this process (at most
//! [`MAX_KEPT`]), and where the tenant's records are shared by every process (DynamoDB on
//! AWS, where the rating may reach another Lambda environment than the answer) on their
//! answers shelf too, written after the answer's `done` and before its stream ends. A rating
//! is stored with it on the tenant's feedback shelf, counted in the usage and the metrics; a
//! down-vote forgets the answer from the cache (every entry that holds it) and keeps the
//! question's answer out of the cache until the tenant's documents change.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::codes::Code;
use sluice_contract::evals::{Record, Records, Shelf};
use sluice_contract::sse::{CacheState, Event};
use sluice_contract::usage::Counts;

use super::Caller;
use super::insights::Why;
use super::records::{keep_at_most, unavailable};
use crate::Server;
use crate::error::ApiError;

/// How long an answer can be rated after it was made.
pub const KEPT_FOR: Duration = sluice_contract::evals::ANSWERS_KEPT_FOR;
/// The most answers this process keeps for rating (the oldest go first).
pub const MAX_KEPT: usize = 100_000;
/// The most ratings a tenant keeps (the oldest go first).
pub const MAX_FEEDBACK: usize = 10_000;
/// Longest comment, in characters.
pub const MAX_COMMENT_CHARS: usize = 2_000;
/// Longest expected source (a document id), in bytes.
const MAX_SOURCE_BYTES: usize = 512;
/// The longest an answer's stream waits, after its `done`, for the shared records to keep it.
const SHARED_WRITE: Duration = Duration::from_secs(2);

/// An answer or a search, as a rating of it reads it (and the shared records keep it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Answered {
    /// `answer` or `search`.
    kind: String,
    question: String,
    sources: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grounded: Option<bool>,
    unsupported: usize,
    cached: bool,
    /// The end user who asked (`user:<sub>`), whose answers only they may rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    /// The answer's digest (`CachedAnswer::digest`), for a down-vote to forget.
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    /// How many days the tenant keeps a question's text (its `question_retention_days`).
    keep_days: u32,
    at: String,
    /// Seconds since the epoch past which it may no longer be rated.
    kept_until: u64,
}

impl Answered {
    /// What a rating shows of it.
    fn shown(&self) -> Value {
        let mut shown = json!(self);
        if let Some(fields) = shown.as_object_mut() {
            for hidden in ["user", "digest", "keep_days", "kept_until"] {
                fields.remove(hidden);
            }
        }
        shown
    }
}

fn epoch_secs() -> u64 {
    (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |d| d.as_secs())
}

/// The answers this process keeps for rating, by request id, with their tenants.
#[derive(Default)]
pub(crate) struct AnswerLog {
    kept: Mutex<Kept>,
}

/// The answers kept, and their ids in the order they were kept (the oldest first out).
#[derive(Default)]
struct Kept {
    by_id: HashMap<String, (Tenant, Answered)>,
    order: VecDeque<(Instant, String)>,
}

impl AnswerLog {
    fn keep(&self, request_id: String, tenant: Tenant, answered: Answered) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let Kept { by_id, order } = &mut *kept;
        while order.len() >= MAX_KEPT
            || order.front().is_some_and(|(at, _)| at.elapsed() > KEPT_FOR)
        {
            let Some((_, old)) = order.pop_front() else {
                break;
            };
            by_id.remove(&old);
        }
        order.push_back((Instant::now(), request_id.clone()));
        by_id.insert(request_id, (tenant, answered));
    }

    fn get(&self, tenant: &Tenant, request_id: &str) -> Option<Answered> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        (kept.by_id.get(request_id))
            .filter(|(of, _)| of == tenant)
            .map(|(_, answered)| answered.clone())
    }
}

/// A question as asked by `caller`, before its answer or search is known.
pub(crate) fn asked(caller: &Caller, question: &str, kind: &str) -> Answered {
    Answered {
        kind: kind.to_string(),
        question: question.to_string(),
        sources: Vec::new(),
        grounded: None,
        unsupported: 0,
        cached: false,
        user: caller.user.clone(),
        digest: None,
        keep_days: super::insights::retention_days(caller),
        at: sluice_contract::tenant_settings::now(),
        kept_until: epoch_secs() + KEPT_FOR.as_secs(),
    }
}

/// Keeps `answered` for rating: in this process, and in the tenant's records when every
/// process reads them (bounded by [`SHARED_WRITE`]; a failure is logged: the answer was
/// given, only its rating from another process is lost).
async fn keep(
    log: &AnswerLog,
    shared: Option<Arc<dyn Records>>,
    tenant: Tenant,
    request_id: String,
    answered: Answered,
) {
    if let Some(records) = shared {
        let put = records.put(&tenant, Shelf::Answers, &request_id, json!(answered));
        match tokio::time::timeout(SHARED_WRITE, put).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(%tenant, error = %e, "an answer was not kept for rating"),
            Err(_) => tracing::warn!(%tenant, "an answer was not kept for rating in time"),
        }
    }
    log.keep(request_id, tenant, answered);
}

impl Server {
    /// The tenant's records when every process reads them: where an answer is kept for
    /// rating beside this process's memory.
    fn shared_records(&self) -> Option<Arc<dyn Records>> {
        self.records.as_ref().filter(|r| r.shared()).cloned()
    }

    /// Keeps a search's sources for rating.
    pub(crate) async fn keep_search(
        &self,
        caller: &Caller,
        request_id: &str,
        mut answered: Answered,
        sources: Vec<String>,
    ) {
        answered.sources = sources;
        let (tenant, id) = (caller.tenant.clone(), request_id.to_string());
        keep(&self.answered, self.shared_records(), tenant, id, answered).await;
    }

    /// `events` as they pass, the answer they make kept for rating once `done` has passed
    /// (the stream ends when it is kept: the client has its `done` first).
    pub(crate) fn keeping(
        &self,
        caller: &Caller,
        answered: Answered,
        mut events: BoxStream<'static, Event>,
    ) -> BoxStream<'static, Event> {
        let log = Arc::clone(&self.answered);
        let shared = self.shared_records();
        let noter = self.noter();
        let tenant = caller.tenant.clone();
        let mut answered = Some(answered);
        async_stream::stream! {
            let (mut request_id, mut text, mut made) = (String::new(), String::new(), None);
            while let Some(event) = events.next().await {
                if let Some(a) = answered.as_mut() {
                    match &event {
                        Event::Meta(meta) => {
                            request_id.clone_from(&meta.request_id);
                            a.sources = meta.documents.iter().map(|d| d.id.clone()).collect();
                            a.cached = meta.cache == CacheState::Hit;
                        }
                        Event::Token(token) => text.push_str(&token.text),
                        Event::Done(done) => {
                            a.grounded = done.grounding.as_ref().map(|g| g.grounded());
                            a.unsupported = done.grounding.as_ref().map_or(0, |g| g.unsupported);
                            a.digest = Some(sluice_contract::sha256_hex(text.as_bytes()));
                        }
                        Event::Error(_) => {}
                    }
                }
                if matches!(event, Event::Done(_))
                    && let Some(a) = answered.take()
                {
                    let why = match (a.sources.is_empty(), a.grounded) {
                        (true, _) => Some(Why::NoSources),
                        (false, Some(false)) => Some(Why::Ungrounded),
                        _ => None,
                    };
                    if let Some(why) = why {
                        noter.note(&tenant, &a.question, why, a.keep_days);
                    }
                    made = Some(a);
                }
                yield event;
            }
            // After the last event: the stream (and a Lambda invocation) ends once it is kept.
            if let Some(a) = made {
                keep(&log, shared, tenant, request_id, a).await;
            }
        }
        .boxed()
    }

    /// The answer `request_id` of `caller`'s tenant, kept for rating: from this process, else
    /// from the shared records (until it expires).
    async fn rated(&self, caller: &Caller, request_id: &str) -> Result<Option<Answered>, ApiError> {
        if let Some(answered) = self.answered.get(&caller.tenant, request_id) {
            return Ok(Some(answered));
        }
        let Some(records) = self.shared_records() else {
            return Ok(None);
        };
        let record = (records
            .get(&caller.tenant, Shelf::Answers, request_id)
            .await)
            .map_err(unavailable)?;
        Ok(record
            .and_then(|r| serde_json::from_value::<Answered>(r.body).ok())
            .filter(|a| a.kept_until > epoch_secs()))
    }
}

/// A rating, as sent (`POST /v1/feedback`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FeedbackAsked {
    /// The answer's (or search's, or chat completion's) `request_id`.
    request_id: String,
    /// `up` or `down`.
    rating: String,
    /// What was wrong, or right.
    comment: Option<String>,
    /// The document the answer should have been built from.
    expected_source: Option<String>,
}

fn invalid(field: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::new(Code::InvalidFeedback, format!("{field}: {why}"))
}

impl Server {
    /// Stores `asked` as `caller`'s rating of the answer it names: its own tenant's answer
    /// (an end user: only one it asked), kept by this process (404 `unknown_request`
    /// otherwise). A down-vote forgets the answer from the cache and keeps the question out of
    /// it until the documents change. One rating per answer: a second replaces the first.
    pub(crate) async fn feedback(
        &self,
        caller: &Caller,
        asked: FeedbackAsked,
    ) -> Result<Value, ApiError> {
        let records = self.records()?;
        let down = match asked.rating.as_str() {
            "up" => false,
            "down" => true,
            other => {
                return Err(invalid(
                    "rating",
                    format!("{other:?}; use \"up\" or \"down\""),
                ));
            }
        };
        if let Some(c) = &asked.comment
            && c.chars().count() > MAX_COMMENT_CHARS
        {
            return Err(invalid(
                "comment",
                format!("longer than {MAX_COMMENT_CHARS} characters"),
            ));
        }
        if let Some(s) = &asked.expected_source
            && (s.is_empty() || s.len() > MAX_SOURCE_BYTES || s.chars().any(char::is_control))
        {
            return Err(invalid(
                "expected_source",
                format!("a document id of 1 to {MAX_SOURCE_BYTES} bytes"),
            ));
        }
        let answered = (self.rated(caller, &asked.request_id).await?)
            .filter(|a| caller.user.is_none() || a.user == caller.user)
            .ok_or_else(|| {
                ApiError::new(
                    Code::UnknownRequest,
                    format!(
                        "no answer {:?} of yours is kept to rate (answers are kept {} hours)",
                        asked.request_id,
                        KEPT_FOR.as_secs() / 3600
                    ),
                )
            })?;
        let tenant = &caller.tenant;
        let (mut evicted, mut blocked) = (0, false);
        if down
            && let Some(pipeline) = &self.answers
            && let Some(cache) = &pipeline.cache
        {
            if let Some(digest) = &answered.digest {
                evicted = cache.forget(tenant, digest).await.unwrap_or_else(|e| {
                    tracing::warn!(%tenant, error = %e, "a down-voted answer was not forgotten");
                    0
                });
            }
            let version = tokio::time::timeout(
                Duration::from_secs(2),
                pipeline.store.corpus_version(tenant),
            );
            if let Ok(Ok(version)) = version.await {
                blocked = cache
                    .block(tenant, &answered.question, version)
                    .await
                    .is_ok();
            }
        }
        if down {
            self.noter().note(
                tenant,
                &answered.question,
                Why::DownVoted,
                answered.keep_days,
            );
        }
        let body = json!({
            "request_id": asked.request_id,
            "rating": asked.rating,
            "comment": asked.comment,
            "expected_source": asked.expected_source,
            "by": caller.user.clone().or(caller.key.clone()),
            "answer": answered.shown(),
        });
        let kept = (records
            .put(tenant, Shelf::Feedback, &asked.request_id, body)
            .await)
            .map_err(unavailable)?;
        if kept.version == 1 {
            let oldest_first = |r: &Record| r.updated_at.clone();
            (keep_at_most(
                records.as_ref(),
                tenant,
                Shelf::Feedback,
                MAX_FEEDBACK,
                oldest_first,
            ))
            .await
            .map_err(unavailable)?;
        }
        let rated = Counts {
            feedback: 1,
            ..Counts::default()
        };
        self.count_now(caller, rated).await;
        self.metrics.feedback(down);
        tracing::info!(%tenant, request_id = %asked.request_id, rating = %asked.rating, evicted, "feedback");
        Ok(
            json!({"request_id": asked.request_id, "rating": asked.rating, "evicted": evicted, "blocked": blocked}),
        )
    }

    /// The tenant's ratings, newest first (`down`: only down-votes; at most `limit`).
    pub(crate) async fn feedback_list(
        &self,
        caller: &Caller,
        down: bool,
        limit: usize,
    ) -> Result<Value, ApiError> {
        let records = self.records()?;
        let mut kept: Vec<Record> =
            (records.list(&caller.tenant, Shelf::Feedback).await).map_err(unavailable)?;
        kept.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.name.cmp(&a.name)));
        let shown: Vec<Value> = (kept.into_iter())
            .filter(|r| !down || r.body["rating"] == "down")
            .take(limit)
            .map(|r| {
                let mut body = r.body;
                body["at"] = r.updated_at.into();
                body
            })
            .collect();
        Ok(json!({ "feedback": shown }))
    }
}
