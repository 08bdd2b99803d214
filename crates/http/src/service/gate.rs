//! Changes tried before they go live. A candidate — a component version not yet active, a
//! settings draft — is run against an evaluation set beside the live configuration, question
//! by question ([`super::evals`]); a tenant whose settings hold a quality gate has every
//! activation and every settings change run against its gate's set first, and refused (409
//! `quality_regression`) when a figure it holds drops by more than its limit, beyond the
//! noise of the set's questions.

use std::sync::Arc;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sluice_contract::codes::Code;
use sluice_contract::evals::{QualityGate, Shelf};
use sluice_contract::tenant_settings::{StoredSettings, TenantSettings};
use sluice_core::pipeline::Pinned;
use sluice_core::quality::{self, RunReport};

use super::evals::RunAsked;
use super::{Call, Caller};
use crate::Server;
use crate::error::ApiError;

/// The share of the prompt's token budget a tenant's instructions may take: the rest is for
/// the sources, the conversation and the question.
const INSTRUCTIONS_SHARE: usize = 4;

/// The questions a refusal names: those that lost most.
const WORST: usize = 5;

/// A change to try, as asked (a run's `candidate`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CandidateAsked {
    /// A stored rerank component version, in place of the active one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rerank: Option<String>,
    /// A stored prompt component version, in place of the active one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) prompt: Option<String>,
    /// A settings document, in place of the tenant's (checked as `PUT /v1/settings` checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) settings: Option<Value>,
}

/// A candidate made ready: the caller it asks as (with the draft settings), and its pinned
/// component versions.
pub(crate) struct Candidate {
    pub(crate) caller: Caller,
    pub(crate) pinned: Pinned,
    /// As asked, its versions named by their whole hashes (what a run's report keeps).
    pub(crate) named: CandidateAsked,
}

fn unknown_version(kind: &str, why: String) -> ApiError {
    ApiError::new(
        Code::UnknownVersion,
        format!("candidate.{kind}: the tenant has no such version ({why})"),
    )
}

impl Server {
    /// `value` checked as the tenant's settings: the document whole (an unknown field, a value
    /// out of range), a static identity key read now, and instructions within their share of
    /// the prompt. 400 `invalid_settings` naming the field.
    pub(crate) fn checked_settings(&self, value: &Value) -> Result<TenantSettings, ApiError> {
        let pipeline = self.pipeline()?;
        let config = &pipeline.config;
        let invalid = |field: &str, message: String| {
            ApiError::new(Code::InvalidSettings, format!("{field}: {message}"))
        };
        let settings = TenantSettings::parse(value, config.max_tokens)
            .map_err(|e| invalid(&e.field, e.message))?;
        // A static key is read now, not first by an end user's request (which would then fail).
        if let Some(identity) = &settings.identity {
            sluice_identity::check_key(identity)
                .map_err(|why| invalid("identity.public_key", why))?;
        }
        if let Some(text) = &settings.prompt.instructions {
            let budget = sluice_core::prompt::input_budget(
                config.context_tokens,
                config.max_tokens as usize,
            );
            let (tokens, most) = (
                pipeline.embedder.count_tokens(text),
                budget / INSTRUCTIONS_SHARE,
            );
            if tokens > most {
                let why = format!(
                    "{tokens} tokens; the limit is {most}, a quarter of the prompt's budget \
                     (SLUICE_LLM_CONTEXT_TOKENS less SLUICE_MAX_TOKENS and a margin)"
                );
                return Err(invalid("prompt.instructions", why));
            }
        }
        Ok(settings)
    }

    /// The candidate `asked` made ready for `caller`'s tenant: its component versions loaded
    /// (404 `unknown_version` for one the tenant does not have), its settings checked.
    pub(crate) async fn candidate(
        &self,
        caller: &Caller,
        asked: &CandidateAsked,
    ) -> Result<Candidate, ApiError> {
        let pipeline = self.pipeline()?;
        let reranker = pipeline.reranker.as_ref();
        let tenant = &caller.tenant;
        let mut pinned = Pinned::default();
        // Versions named as people name them (a prefix, a label) where the registry lists
        // them.
        let named = |kind: &'static str, version: &str, space: sluice_contract::Tenant| {
            let version = version.to_string();
            async move {
                match self.components.is_some() {
                    true => crate::components::resolved(self, space, &version).await,
                    false => Ok(version),
                }
                .map_err(|e| ApiError {
                    message: format!("candidate.{kind}: {}", e.message),
                    ..e
                })
            }
        };
        let mut resolved = asked.clone();
        if let Some(version) = &asked.rerank {
            let version = &named("rerank", version, tenant.clone()).await?;
            resolved.rerank = Some(version.clone());
            let registry =
                reranker.ok_or_else(|| unknown_version("rerank", "no registry".into()))?;
            let found = registry.version(tenant, version).await;
            pinned.rerank = Some(found.map_err(|why| unknown_version("rerank", why))?);
        }
        if let Some(version) = &asked.prompt {
            let version = &named("prompt", version, tenant.prompt_components()).await?;
            resolved.prompt = Some(version.clone());
            let registry =
                reranker.ok_or_else(|| unknown_version("prompt", "no registry".into()))?;
            let found = registry.prompt_version(tenant, version).await;
            pinned.prompt = Some(found.map_err(|why| unknown_version("prompt", why))?);
        }
        let mut caller = caller.clone();
        if let Some(draft) = &asked.settings {
            let settings = self.checked_settings(draft)?;
            let version = caller.settings.as_ref().map_or(0, |s| s.version);
            caller.settings = Some(Arc::new(StoredSettings {
                settings,
                version,
                updated_at: "candidate".into(),
            }));
        }
        if asked.rerank.is_none() && asked.prompt.is_none() && asked.settings.is_none() {
            return Err(ApiError::new(
                Code::InvalidEvalSet,
                "candidate: name a \"rerank\" or \"prompt\" version, or \"settings\"",
            ));
        }
        Ok(Candidate {
            caller,
            pinned,
            named: resolved,
        })
    }

    /// Checks that the set a new quality gate names exists: a gate on a set the tenant does not
    /// keep would refuse nothing and say nothing.
    pub(crate) async fn check_gate(
        &self,
        caller: &Caller,
        gate: &QualityGate,
    ) -> Result<(), ApiError> {
        let found = (self
            .records()?
            .get(&caller.tenant, Shelf::EvalSets, &gate.set)
            .await)
            .map_err(super::records::unavailable)?;
        match found {
            Some(_) => Ok(()),
            None => Err(ApiError::new(
                Code::InvalidSettings,
                format!(
                    "quality_gate.set: the tenant has no evaluation set {:?}; store it first \
                     (PUT /v1/evals/sets/{})",
                    gate.set, gate.set
                ),
            )),
        }
    }

    /// Tries `candidate` on the tenant's quality gate, when its settings (as `caller` read
    /// them) hold one: the gate's set run beside the live configuration. `None`: no gate. The
    /// comparison, when the candidate passes; 409 `quality_regression` with the figures and
    /// the questions that lost most when it does not.
    pub(crate) async fn gate(
        self: &Arc<Self>,
        caller: &Caller,
        call: &Call,
        candidate: CandidateAsked,
    ) -> Result<Option<Value>, ApiError> {
        let Some(gate) = (caller.settings.as_ref()).and_then(|s| s.settings.quality_gate.clone())
        else {
            return Ok(None);
        };
        let asked = RunAsked {
            set: gate.set.clone(),
            mode: gate.mode,
            k: None,
            cache: None,
            compare_to: None,
            candidate: Some(candidate),
        };
        let mut events = self.start_eval_run(caller.clone(), call, asked).await?;
        let mut report = None;
        while let Some(event) = events.next().await {
            match event.name {
                "report" => report = serde_json::from_value::<RunReport>(event.data).ok(),
                "error" => {
                    let message = event.data["message"].as_str().unwrap_or_default();
                    return Err(ApiError::new(Code::EvalsUnavailable, message.to_string()));
                }
                _ => {}
            }
        }
        let report = report.ok_or_else(|| {
            ApiError::new(Code::Internal, "the quality gate's run gave no report")
        })?;
        judged(&gate, &report).map(Some)
    }

    /// A gate's run made where answers are served, standing for the activation of `version` (a
    /// `kind` component) on a process that cannot run a set (the Lambda registry function):
    /// the tenant's run `id`, of its gate's set and mode, that tried that version alone, under
    /// the settings in force now — judged as [`Self::gate`] judges its own run. 409
    /// `quality_gate_unavailable` saying why a run does not stand for the activation.
    pub(crate) async fn passed_gate(
        &self,
        caller: &Caller,
        kind: &str,
        version: &str,
        id: &str,
    ) -> Result<Value, ApiError> {
        let gate = (caller.settings.as_ref()).and_then(|s| s.settings.quality_gate.clone());
        let settings = caller.settings.as_ref().map(|s| s.version);
        let records = self.records()?;
        let record = (records.get(&caller.tenant, Shelf::EvalRuns, id).await)
            .map_err(super::records::unavailable)?;
        let report = record.and_then(|r| serde_json::from_value::<RunReport>(r.body).ok());
        let tried = json!({ kind: version });
        let refuse = |why: String| Err(ApiError::new(Code::QualityGateUnavailable, why));
        let (Some(gate), Some(report)) = (gate, report) else {
            return refuse(format!("the tenant has no evaluation run {id:?}"));
        };
        if report.set != gate.set || report.mode != gate.mode {
            return refuse(format!(
                "run {id:?} asked set {:?} ({:?}), not the gate's {:?} ({:?})",
                report.set, report.mode, gate.set, gate.mode
            ));
        }
        if report.candidate.as_ref() != Some(&tried) {
            return refuse(format!(
                "run {id:?} did not try {kind} version {version} alone (its candidate: {})",
                report.candidate.unwrap_or_default()
            ));
        }
        if report.settings_version != settings {
            return refuse(format!(
                "run {id:?} was made under settings version {:?}; they are version {:?} now: run \
                 it again",
                report.settings_version, settings
            ));
        }
        judged(&gate, &report)
    }
}

/// What `gate` says of its set's `report`: the comparison, when the candidate passes; 409
/// `quality_regression` with the figures and the questions that lost most when it does not.
fn judged(gate: &QualityGate, report: &RunReport) -> Result<Value, ApiError> {
    let refused = quality::regressions(gate, &report.versus);
    let compared = compared(gate, report, &refused);
    if refused.is_empty() && report.status == quality::RunStatus::Finished {
        return Ok(compared);
    }
    let why = match refused.first() {
        Some(r) => format!(
            "the quality gate refused the change: on set {:?} {} changed by {:.3} (95 % \
             interval {:.3} to {:.3}); it may drop by {} at most",
            gate.set, r.figure, r.change.value, r.change.ci[0], r.change.ci[1], r.max_drop
        ),
        None => format!(
            "the quality gate's run on set {:?} did not finish ({:?}): the change is not \
             tried, so not made",
            gate.set, report.status
        ),
    };
    Err(ApiError {
        details: Some(compared),
        ..ApiError::new(Code::QualityRegression, why)
    })
}

/// What a gate's run says: its id, the figures held and how they changed, what was refused,
/// and the questions that lost most (their recall and reciprocal rank fell furthest, or their
/// answer stopped being grounded).
fn compared(gate: &QualityGate, report: &RunReport, refused: &[quality::Regression]) -> Value {
    let mut lost: Vec<(f64, &quality::QuestionResult)> = (report.questions.iter())
        .filter_map(|q| {
            let change = q.changed.as_ref()?;
            let fell = change.recall.unwrap_or(0.0) + change.reciprocal_rank.unwrap_or(0.0)
                - f64::from(change.grounded == Some(false));
            (fell < 0.0).then_some((fell, q))
        })
        .collect();
    lost.sort_by(|a, b| a.0.total_cmp(&b.0));
    json!({
        "run": report.id,
        "set": gate.set,
        "held": gate.held(),
        "versus": report.versus,
        "candidate": report.figures,
        "live": report.live,
        "refused": refused,
        "worst": lost.iter().take(WORST).map(|(_, q)| json!({
            "id": q.id, "question": q.question, "sources": q.sources, "changed": q.changed,
        })).collect::<Vec<_>>(),
    })
}
