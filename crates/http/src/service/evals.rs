//! A tenant's evaluation sets and runs: sets kept in the records store, checked as answers
//! are; a run asks each question of a set through the tenant's own pipeline — its settings,
//! components and limits, as the key that runs it, or as the end user a question names — and
//! scores it (`sluice_core::quality`), one question after another. A run is bounded: the
//! tenant's runs at once (`SLUICE_EVAL_RUNS_PER_TENANT`), its wall time
//! (`SLUICE_EVAL_RUN_TIMEOUT_MS`, and the entry point's deadline), the set's questions. It
//! stops when its client leaves; a cancel stops it after the question in hand, and what was
//! answered is scored and kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::access::access_filter;
use sluice_contract::cancel::Cancel;
use sluice_contract::codes::Code;
use sluice_contract::evals::{
    EvalQuestion, EvalSet, MAX_RUNS, MAX_SETS, Record, Shelf, check_name,
};
use sluice_contract::sse::Event;
use sluice_contract::usage::Counts;
use sluice_core::pipeline::{AnswerRequest, Pinned};
use sluice_core::quality::{self, Mode, Outcome, RunReport, RunStatus};

use super::answer::AnswerBody;
use super::records::{keep_at_most, unavailable};
use super::{Call, Caller};
use crate::Server;
use crate::error::ApiError;

/// A run as asked (`POST /v1/evals/runs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunAsked {
    /// The set to run.
    pub(crate) set: String,
    /// Retrieval only (default), or whole answers.
    #[serde(default)]
    pub(crate) mode: Mode,
    /// Sources per question (default: the tenant's `k`).
    pub(crate) k: Option<Value>,
    /// `bypass` (default: every question answered now) or `auto` (the answer cache as
    /// answers use it).
    pub(crate) cache: Option<String>,
    /// The run to compare with (default: the last finished run of the same set and mode).
    pub(crate) compare_to: Option<String>,
    /// A change to try beside the live configuration, question by question.
    pub(crate) candidate: Option<super::gate::CandidateAsked>,
}

/// One event of a run's stream.
pub(crate) struct RunEvent {
    /// `run`, `question`, `report` or `error`.
    pub(crate) name: &'static str,
    /// Its JSON.
    pub(crate) data: Value,
}

/// The runs this process has going, per tenant.
#[derive(Default)]
pub(crate) struct Runs {
    live: Mutex<HashMap<Tenant, Vec<Live>>>,
}

/// A run going now.
#[derive(Clone)]
struct Live {
    id: String,
    set: String,
    mode: Mode,
    started_at: String,
    total: usize,
    done: Arc<AtomicUsize>,
    cancel: Cancel,
}

impl Live {
    fn shown(&self) -> Value {
        json!({
            "id": self.id, "set": self.set, "mode": self.mode, "status": RunStatus::Running,
            "started_at": self.started_at, "total": self.total,
            "done": self.done.load(Ordering::SeqCst),
        })
    }
}

/// A tenant's slot for one run, given back when the run's stream ends or is dropped.
struct Slot {
    runs: Arc<Runs>,
    tenant: Tenant,
    id: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut live = self.runs.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(runs) = live.get_mut(&self.tenant) {
            runs.retain(|r| r.id != self.id);
            if runs.is_empty() {
                live.remove(&self.tenant);
            }
        }
    }
}

impl Runs {
    fn claim(self: &Arc<Self>, tenant: &Tenant, run: Live, most: usize) -> Result<Slot, ApiError> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let runs = live.entry(tenant.clone()).or_default();
        if runs.len() >= most {
            let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
            return Err(ApiError::new(
                Code::EvalRunActive,
                format!(
                    "the tenant has {} run(s) going ({}); the limit is {most} at once \
                     (SLUICE_EVAL_RUNS_PER_TENANT): wait for it, or cancel it",
                    runs.len(),
                    ids.join(", ")
                ),
            ));
        }
        let id = run.id.clone();
        runs.push(run);
        Ok(Slot {
            runs: Arc::clone(self),
            tenant: tenant.clone(),
            id,
        })
    }

    fn find(&self, tenant: &Tenant, id: &str) -> Option<Live> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        (live.get(tenant)?.iter()).find(|r| r.id == id).cloned()
    }

    fn of(&self, tenant: &Tenant) -> Vec<Live> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.get(tenant).cloned().unwrap_or_default()
    }
}

/// The 400 of a set or run that is not valid.
fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::new(Code::InvalidEvalSet, format!("{field}: {message}"))
}

fn unknown(what: &str, name: &str) -> ApiError {
    ApiError::new(
        Code::UnknownEvalSet,
        format!("the tenant has no evaluation {what} {name:?}"),
    )
}

/// A set as shown: its record, and how many questions it has.
fn shown(record: &Record, whole: bool) -> Value {
    let questions = record.body["questions"].as_array().map_or(0, Vec::len);
    let mut shown = json!({
        "name": record.name,
        "version": record.version,
        "updated_at": record.updated_at,
        "description": record.body.get("description"),
        "questions": questions,
    });
    if whole {
        shown["set"] = record.body.clone();
    }
    shown
}

/// A new run's id: the time in ms (runs' ids sort as they started) and this process's count
/// of runs, so that two runs started in one millisecond are two.
fn run_id() -> String {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    format!("run-{}-{:04x}", super::now_ms(), n & 0xffff)
}

impl Server {
    /// Stores `body` as the tenant's set `name`, checked whole: its shape and caps, and each
    /// question as an answer to it would be checked (its text, filter, request context) with
    /// the tenant's settings. At most [`MAX_SETS`] sets.
    pub(crate) async fn put_eval_set(
        &self,
        caller: &Caller,
        name: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let records = self.records()?;
        check_name(name).map_err(|why| invalid("name", why))?;
        let set = EvalSet::parse(body).map_err(|e| invalid(&e.field, e.message))?;
        for (i, q) in set.questions.iter().enumerate() {
            self.question_request(caller, &Call::new(Default::default()), q, None, None)
                .map_err(|e| invalid(&format!("questions[{i}]"), e.message))?;
        }
        let tenant = &caller.tenant;
        let kept = records
            .list(tenant, Shelf::EvalSets)
            .await
            .map_err(unavailable)?;
        if kept.len() >= MAX_SETS && !kept.iter().any(|r| r.name == name) {
            return Err(invalid(
                "name",
                format!("the tenant keeps {MAX_SETS} sets, the most it may: delete one first"),
            ));
        }
        let body = serde_json::to_value(&set).map_err(|e| invalid("set", e))?;
        let record =
            (records.put(tenant, Shelf::EvalSets, name, body).await).map_err(unavailable)?;
        tracing::info!(%tenant, set = name, version = record.version, "evaluation set stored");
        Ok(shown(&record, true))
    }

    /// Adds to the tenant's set `name` (made if it has none) each down-vote that names the
    /// source its answer should have been built from, as a question expecting that source
    /// first (id `fb-` and the answer's request id; one already in the set is left as it is);
    /// the set, checked as a `PUT` would be, and how many were added.
    pub(crate) async fn eval_set_from_feedback(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<Value, ApiError> {
        let records = self.records()?;
        let tenant = &caller.tenant;
        let mut set =
            match (records.get(tenant, Shelf::EvalSets, name).await).map_err(unavailable)? {
                Some(record) => record.body,
                None => json!({"questions": []}),
            };
        let votes = (records.list(tenant, Shelf::Feedback).await).map_err(unavailable)?;
        let questions = set["questions"]
            .as_array_mut()
            .ok_or_else(|| invalid("set", "no questions"))?;
        let before = questions.len();
        for vote in votes.iter().map(|r| &r.body) {
            let (Some(source), Some(question), Some(id)) = (
                vote["expected_source"].as_str(),
                vote["answer"]["question"].as_str(),
                vote["request_id"].as_str(),
            ) else {
                continue;
            };
            let id: String = format!("fb-{id}")
                .chars()
                .take(sluice_contract::evals::MAX_ID_CHARS)
                .collect();
            if vote["rating"] == "down" && !questions.iter().any(|q| q["id"] == id.as_str()) {
                questions.push(
                    json!({"id": id, "question": question, "documents": [source], "first": source}),
                );
            }
        }
        let added = questions.len() - before;
        let mut stored = self.put_eval_set(caller, name, &set).await?;
        stored["added"] = added.into();
        Ok(stored)
    }

    /// The tenant's set `name`, whole.
    pub(crate) async fn eval_set(&self, caller: &Caller, name: &str) -> Result<Value, ApiError> {
        let record = (self
            .records()?
            .get(&caller.tenant, Shelf::EvalSets, name)
            .await)
            .map_err(unavailable)?
            .ok_or_else(|| unknown("set", name))?;
        Ok(shown(&record, true))
    }

    /// The tenant's sets, by name, without their questions.
    pub(crate) async fn eval_sets(&self, caller: &Caller) -> Result<Value, ApiError> {
        let records =
            (self.records()?.list(&caller.tenant, Shelf::EvalSets).await).map_err(unavailable)?;
        Ok(json!({"sets": records.iter().map(|r| shown(r, false)).collect::<Vec<_>>()}))
    }

    /// Deletes the tenant's set `name` (its runs stay).
    pub(crate) async fn delete_eval_set(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<Value, ApiError> {
        let deleted = (self
            .records()?
            .delete(&caller.tenant, Shelf::EvalSets, name)
            .await)
            .map_err(unavailable)?;
        match deleted {
            true => Ok(json!({"deleted": name})),
            false => Err(unknown("set", name)),
        }
    }

    /// The tenant's runs: those going in this process, then those kept, newest first, without
    /// their questions (`set`: only that set's).
    pub(crate) async fn eval_runs(
        &self,
        caller: &Caller,
        set: Option<&str>,
    ) -> Result<Value, ApiError> {
        let records = self.records()?;
        let of_set = |s: &str| set.is_none_or(|want| want == s);
        let mut runs: Vec<Value> = (self.runs.of(&caller.tenant).iter())
            .filter(|r| of_set(&r.set))
            .map(Live::shown)
            .collect();
        let mut kept =
            (records.list(&caller.tenant, Shelf::EvalRuns).await).map_err(unavailable)?;
        kept.sort_by(|a, b| b.name.cmp(&a.name));
        for record in kept {
            if of_set(record.body["set"].as_str().unwrap_or_default()) {
                let mut body = record.body;
                if let Some(o) = body.as_object_mut() {
                    o.remove("questions");
                }
                runs.push(body);
            }
        }
        Ok(json!({ "runs": runs }))
    }

    /// One run: where a run going in this process stands, or the report of one kept.
    pub(crate) async fn eval_run(&self, caller: &Caller, id: &str) -> Result<Value, ApiError> {
        if let Some(live) = self.runs.find(&caller.tenant, id) {
            return Ok(live.shown());
        }
        let record = (self
            .records()?
            .get(&caller.tenant, Shelf::EvalRuns, id)
            .await)
            .map_err(unavailable)?
            .ok_or_else(|| unknown("run", id))?;
        Ok(record.body)
    }

    /// Cancels a run going in this process: it stops after the question in hand, and its
    /// report says `canceled`.
    pub(crate) fn cancel_eval_run(&self, caller: &Caller, id: &str) -> Result<Value, ApiError> {
        let live = (self.runs.find(&caller.tenant, id)).ok_or_else(|| {
            ApiError::new(
                Code::UnknownEvalSet,
                format!(
                    "no run {id:?} of the tenant is going in this process (a run ends with its \
                     stream: one whose client left has stopped)"
                ),
            )
        })?;
        live.cancel.cancel();
        Ok(json!({"id": id, "canceling": true}))
    }

    /// `question` as the pipeline request an answer to it would be: the tenant's settings,
    /// the caller's key filter, the question's filter and request context, and — when it names
    /// principals — the access of an end user holding them.
    fn question_request(
        &self,
        caller: &Caller,
        call: &Call,
        question: &EvalQuestion,
        k: Option<&Value>,
        cache: Option<&str>,
    ) -> Result<AnswerRequest, ApiError> {
        let body = AnswerBody {
            query: Some(question.question.clone()),
            k: k.cloned(),
            filter: question.filter.clone(),
            rerank_context: question.rerank_context.clone(),
            cache: Some(cache.unwrap_or("bypass").to_string()),
            ..AnswerBody::default()
        };
        let request = caller.asks(self.request(caller, call, body)?);
        Ok(AnswerRequest {
            access: (question.principals.as_deref())
                .map(|p| access_filter(Some(p)))
                .or(request.access.clone()),
            ..request
        })
    }

    /// Runs a set as `asked`: a stream of events — `run` (its id, the set, how many
    /// questions), a `question` per question scored, then `report` (the figures, the
    /// comparison with the baseline, every question), which is kept — or 4xx before it starts.
    /// With a candidate, each question is asked of the live configuration and of the
    /// candidate, one after the other; the report's questions and figures are the
    /// candidate's, compared with the live configuration's (`live`, `versus`).
    pub(crate) async fn start_eval_run(
        self: &Arc<Self>,
        caller: Caller,
        call: &Call,
        asked: RunAsked,
    ) -> Result<BoxStream<'static, RunEvent>, ApiError> {
        let records = Arc::clone(self.records()?);
        self.pipeline()?;
        if let Some(cache) = asked.cache.as_deref()
            && !matches!(cache, "auto" | "bypass")
        {
            return Err(invalid(
                "cache",
                format!("{cache:?}; use \"auto\" or \"bypass\""),
            ));
        }
        let tenant = caller.tenant.clone();
        let record = (records.get(&tenant, Shelf::EvalSets, &asked.set).await)
            .map_err(unavailable)?
            .ok_or_else(|| unknown("set", &asked.set))?;
        let set = EvalSet::parse(&record.body).map_err(|e| invalid(&e.field, e.message))?;
        let candidate = match &asked.candidate {
            Some(c) => Some(self.candidate(&caller, c).await?),
            None => None,
        };
        let mut arms = vec![(caller, Pinned::default())];
        if let Some(c) = &candidate {
            arms.push((c.caller.clone(), c.pinned.clone()));
        }
        // Checked before the first question: a set the tenant's settings now refuse (a `k`)
        // is refused whole rather than failing question by question.
        for (who, _) in &arms {
            for (i, q) in set.questions.iter().enumerate() {
                self.question_request(who, call, q, asked.k.as_ref(), asked.cache.as_deref())
                    .map_err(|e| invalid(&format!("questions[{i}]"), e.message))?;
            }
        }
        let baseline = match (&asked.compare_to, &candidate) {
            (_, Some(_)) => None,
            (Some(id), None) => Some(
                (records.get(&tenant, Shelf::EvalRuns, id).await)
                    .map_err(unavailable)?
                    .ok_or_else(|| unknown("run", id))?,
            ),
            (None, None) => {
                let mut kept =
                    (records.list(&tenant, Shelf::EvalRuns).await).map_err(unavailable)?;
                kept.sort_by(|a, b| b.name.cmp(&a.name));
                kept.into_iter().find(|r| {
                    r.body["set"] == asked.set.as_str()
                        && r.body["mode"] == json!(asked.mode)
                        && r.body["status"] == json!(RunStatus::Finished)
                        && r.body.get("candidate").is_none()
                })
            }
        };
        let baseline: Option<RunReport> =
            baseline.and_then(|r| serde_json::from_value(r.body).ok());
        let live = Live {
            id: run_id(),
            set: asked.set.clone(),
            mode: asked.mode,
            started_at: sluice_contract::tenant_settings::now(),
            total: set.questions.len(),
            done: Arc::new(AtomicUsize::new(0)),
            cancel: Cancel::new(),
        };
        let slot = self
            .runs
            .claim(&tenant, live.clone(), self.limits.eval_runs_per_tenant)?;
        let ends_by = {
            let limit = tokio::time::Instant::now() + self.limits.eval_run_timeout;
            call.ends_by.map_or(limit, |by| by.min(limit))
        };
        tracing::info!(%tenant, run = %live.id, set = %asked.set, questions = live.total, "evaluation run started");
        let settings_version = (arms[0].0.settings.as_ref()).map(|s| s.version);
        let server = Arc::clone(self);
        let credentials = call.credentials.clone();
        Ok(async_stream::stream! {
            let _slot = slot;
            yield RunEvent { name: "run", data: live.shown() };
            let mut report = RunReport {
                id: live.id.clone(),
                set: asked.set.clone(),
                set_version: record.version,
                mode: asked.mode,
                status: RunStatus::Finished,
                started_at: live.started_at.clone(),
                finished_at: None,
                total: live.total,
                done: 0,
                tokens: 0,
                figures: Default::default(),
                baseline: baseline.as_ref().map(|b| b.id.clone()),
                versus: Default::default(),
                candidate: candidate.as_ref().map(|c| json!(c.named)),
                live: None,
                settings_version,
                questions: Vec::with_capacity(live.total),
            };
            // Each arm's questions scored: the live configuration's, then the candidate's.
            let mut scored: Vec<Vec<quality::QuestionResult>> = vec![Vec::new(); arms.len()];
            'questions: for question in &set.questions {
                if live.cancel.is_cancelled() {
                    report.status = RunStatus::Canceled;
                    break;
                }
                for (arm, (who, pinned)) in arms.iter().enumerate() {
                    let call = Call::new(credentials.clone());
                    let asking = server.question_request(
                        who, &call, question, asked.k.as_ref(), asked.cache.as_deref(),
                    );
                    let outcome = match asking {
                        Err(e) => Outcome { error: Some(e.code.to_string()), ..Outcome::default() },
                        Ok(request) => {
                            let request = AnswerRequest { pinned: pinned.clone(), ..request };
                            let answered = server.ask(who, &call, request, asked.mode);
                            match tokio::time::timeout_at(ends_by, answered).await {
                                Ok(outcome) => outcome,
                                Err(_) => {
                                    report.status = RunStatus::TimedOut;
                                    break 'questions;
                                }
                            }
                        }
                    };
                    report.tokens += outcome.tokens;
                    scored[arm].push(quality::score(question, outcome));
                }
                report.done += 1;
                live.done.store(report.done, Ordering::SeqCst);
                let latest = scored.last().and_then(|s| s.last());
                let data = json!({"done": report.done, "total": report.total, "question": latest});
                yield RunEvent { name: "question", data };
            }
            // A question the time limit cut short in the candidate's arm is left out of both.
            let answered = report.done;
            let mut arms_scored = scored.into_iter().map(|mut s| { s.truncate(answered); s });
            let live_scored = arms_scored.next().unwrap_or_default();
            report.questions = match arms_scored.next() {
                Some(mut candidate) => {
                    report.live = Some(quality::figures(&live_scored, quality::SEED));
                    report.versus = quality::compare(&live_scored, &mut candidate, quality::SEED);
                    candidate
                }
                None => live_scored,
            };
            report.figures = quality::figures(&report.questions, quality::SEED);
            if let Some(before) = &baseline {
                report.versus = quality::compare(&before.questions, &mut report.questions, quality::SEED);
            }
            report.finished_at = Some(sluice_contract::tenant_settings::now());
            if asked.mode == Mode::Retrieval && let Some(meter) = &server.usage {
                let _ = meter.flush().await;
            }
            match server.keep_run(&tenant, &report).await {
                Ok(()) => yield RunEvent { name: "report", data: json!(report) },
                Err(e) => yield RunEvent {
                    name: "error",
                    data: json!({"code": e.code, "message": e.message, "retryable": e.code.retryable()}),
                },
            }
            tracing::info!(%tenant, run = %report.id, status = ?report.status, done = report.done, "evaluation run ended");
        }
        .boxed())
    }

    /// Keeps a run's report, and forgets the tenant's oldest past [`MAX_RUNS`].
    async fn keep_run(&self, tenant: &Tenant, report: &RunReport) -> Result<(), ApiError> {
        let records = self.records()?;
        let body = serde_json::to_value(report).map_err(|e| invalid("run", e))?;
        (records.put(tenant, Shelf::EvalRuns, &report.id, body).await).map_err(unavailable)?;
        let oldest_first = |r: &Record| r.name.clone();
        (keep_at_most(
            records.as_ref(),
            tenant,
            Shelf::EvalRuns,
            MAX_RUNS,
            oldest_first,
        )
        .await)
            .map_err(unavailable)
    }

    /// One question asked as `mode` says: the tenant's search (counted as a search), or its
    /// whole answer (its tokens budgeted and billed as an answer's).
    async fn ask(
        &self,
        caller: &Caller,
        call: &Call,
        request: AnswerRequest,
        mode: Mode,
    ) -> Outcome {
        let Ok(pipeline) = self.pipeline() else {
            return Outcome::default();
        };
        if mode == Mode::Retrieval {
            let found = pipeline.search(&request).await;
            let searched = Counts {
                searches: 1,
                ..Counts::default()
            };
            self.count(caller, searched);
            return Outcome {
                sources: found.documents.into_iter().map(|d| d.id).collect(),
                degraded: found.degraded,
                timings: found.timings,
                ..Outcome::default()
            };
        }
        let mut events = match self.open_answer(caller, call, request) {
            Ok(events) => events,
            Err(e) => {
                return Outcome {
                    error: Some(e.code.to_string()),
                    ..Outcome::default()
                };
            }
        };
        let (mut outcome, mut answer) = (Outcome::default(), String::new());
        while let Some(event) = events.next().await {
            match event {
                Event::Meta(meta) => {
                    outcome.sources = meta.documents.into_iter().map(|d| d.id).collect();
                    outcome.degraded = meta.degraded;
                    outcome.cached = matches!(meta.cache, sluice_contract::sse::CacheState::Hit);
                }
                Event::Token(token) => answer.push_str(&token.text),
                Event::Done(done) => {
                    outcome.tokens = done.prompt_tokens + done.token_count;
                    outcome.grounding = done.grounding;
                    outcome.timings = done.timings;
                    outcome.degraded.extend(done.degraded);
                }
                Event::Error(e) => outcome.error = Some(e.code.to_string()),
            }
        }
        outcome.answer = Some(answer);
        outcome
    }
}
