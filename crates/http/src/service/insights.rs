//! What the corpus cannot answer: per tenant, the questions whose retrieval found no source,
//! whose answer no source supported, or that a user voted down — noted as they happen, one
//! record per question (by its normalised text) with a count per reason, and listed grouped by
//! similar question (the embedding model Sluice already runs), so that a tenant knows which
//! documents to write. Bounded: [`MAX_GAPS`] questions per tenant, the least recently seen
//! forgotten first; a question's text is kept only as long as the tenant's
//! `question_retention_days` allows (0: counts only).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::codes::Code;
use sluice_contract::evals::{Record, Records, Shelf};
use sluice_contract::tenant_settings::DEFAULT_QUESTION_DAYS;

use super::Caller;
use super::records::{keep_at_most, unavailable};
use crate::Server;
use crate::error::ApiError;

/// The most questions a tenant's gaps keep.
pub const MAX_GAPS: usize = 1_000;
/// The cosine at which two questions are one gap.
pub const SIMILAR: f32 = 0.8;
/// The questions a gap shows.
const EXAMPLES: usize = 5;
const DAY_MS: u64 = 24 * 3600 * 1000;

/// Why a question is a gap.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Why {
    /// Retrieval found no source.
    NoSources,
    /// The answer has a sentence no source supports.
    Ungrounded,
    /// A user voted the answer down.
    DownVoted,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::NoSources => "no_sources",
            Why::Ungrounded => "ungrounded",
            Why::DownVoted => "down_voted",
        }
    }
}

/// How many days `settings` keep a question's text.
pub(crate) fn retention_days(caller: &Caller) -> u32 {
    (caller.settings.as_ref())
        .and_then(|s| s.settings.question_retention_days)
        .unwrap_or(DEFAULT_QUESTION_DAYS)
}

/// Where the tenant's gaps are written, one note at a time in this process (a note reads
/// the question's record and writes it back).
#[derive(Default)]
pub(crate) struct GapWriter(tokio::sync::Mutex<()>);

impl GapWriter {
    /// Notes `question` for `why` on the tenant's shelf of `records`, its text kept when
    /// `keep_text`; a store that fails loses the note (logged), never the answer.
    pub(crate) async fn note(
        &self,
        records: &Arc<dyn Records>,
        tenant: &Tenant,
        question: &str,
        why: Why,
        keep_text: bool,
    ) {
        let _one_at_a_time = self.0.lock().await;
        let normalised = sluice_core::language::normalise(question);
        let name = sluice_contract::sha256_hex(normalised.as_bytes())[..32].to_string();
        let noted = async {
            let before = records.get(tenant, Shelf::Gaps, &name).await?;
            let mut body = before.map_or_else(|| json!({"count": 0, "reasons": {}}), |r| r.body);
            let now = super::now_ms();
            body["count"] = (body["count"].as_u64().unwrap_or(0) + 1).into();
            let reason = &mut body["reasons"][why.as_str()];
            *reason = (reason.as_u64().unwrap_or(0) + 1).into();
            body["last_ms"] = now.into();
            match keep_text {
                true => {
                    body["question"] = question.into();
                    body["question_ms"] = now.into();
                }
                false => {
                    if let Some(o) = body.as_object_mut() {
                        o.remove("question");
                    }
                }
            }
            if records.put(tenant, Shelf::Gaps, &name, body).await?.version == 1 {
                let least_recent = |r: &Record| r.body["last_ms"].as_u64().unwrap_or(0);
                keep_at_most(
                    records.as_ref(),
                    tenant,
                    Shelf::Gaps,
                    MAX_GAPS,
                    least_recent,
                )
                .await?;
            }
            Ok::<_, sluice_contract::evals::RecordsError>(())
        };
        if let Err(e) = noted.await {
            tracing::warn!(%tenant, error = %e, "a question the corpus did not answer was not noted");
        }
    }
}

/// Where gaps are noted from: the records store and its writer, cheap to clone into a
/// stream's closure.
#[derive(Clone)]
pub(crate) struct Noter {
    records: Option<Arc<dyn Records>>,
    writer: Arc<GapWriter>,
}

impl Noter {
    /// Notes, in the background, `question` as one the tenant's corpus did not answer (its
    /// text kept when `keep_days` is not 0).
    pub(crate) fn note(&self, tenant: &Tenant, question: &str, why: Why, keep_days: u32) {
        let Some(records) = self.records.clone() else {
            return;
        };
        let (writer, tenant, question) = (
            Arc::clone(&self.writer),
            tenant.clone(),
            question.to_string(),
        );
        tokio::spawn(async move {
            writer
                .note(&records, &tenant, &question, why, keep_days > 0)
                .await;
        });
    }
}

impl Server {
    /// What notes this server's gaps.
    pub(crate) fn noter(&self) -> Noter {
        Noter {
            records: self.records.clone(),
            writer: Arc::clone(&self.gaps),
        }
    }

    /// The tenant's gaps: the questions kept (within its retention) grouped by similar
    /// question, most asked first — each group's questions (at most five), how many times and
    /// why — and the counts of those whose text is not kept.
    pub(crate) async fn gaps(&self, caller: &Caller) -> Result<Value, ApiError> {
        let records = self.records()?;
        let pipeline = self.pipeline()?;
        let days = retention_days(caller);
        let kept = (records.list(&caller.tenant, Shelf::Gaps).await).map_err(unavailable)?;
        let now = super::now_ms();
        let fresh = |r: &Value| {
            let at = r["question_ms"].as_u64().unwrap_or(0);
            days > 0 && now.saturating_sub(at) <= u64::from(days) * DAY_MS
        };
        let (mut texts, mut unkept) = (Vec::new(), Gap::default());
        for record in &kept {
            match (record.body["question"].as_str(), fresh(&record.body)) {
                (Some(q), true) => texts.push((q.to_string(), Gap::of(&record.body))),
                _ => unkept.add(&Gap::of(&record.body)),
            }
        }
        texts.sort_by_key(|t| std::cmp::Reverse(t.1.count));
        let embedder = Arc::clone(&pipeline.embedder);
        let questions: Vec<String> = texts.iter().map(|(q, _)| q.clone()).collect();
        let vectors = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = questions.iter().map(String::as_str).collect();
            embedder.embed(&refs)
        })
        .await
        .map_err(|e| ApiError::new(Code::Internal, e.to_string()))?
        .map_err(|e| ApiError::new(Code::Internal, format!("embedding the questions: {e}")))?;
        // Greedy grouping, most asked first: a question joins the first group whose first
        // question is as close as SIMILAR, else starts its own.
        let mut groups: Vec<(usize, Gap, Vec<String>)> = Vec::new();
        for (i, (question, gap)) in texts.iter().enumerate() {
            let joined = (groups.iter_mut()).find(|(seed, _, _)| {
                sluice_core::cache::cosine(&vectors[*seed], &vectors[i]) >= SIMILAR
            });
            match joined {
                Some((_, group, examples)) => {
                    group.add(gap);
                    if examples.len() < EXAMPLES {
                        examples.push(question.clone());
                    }
                }
                None => groups.push((i, gap.clone(), vec![question.clone()])),
            }
        }
        groups.sort_by_key(|g| std::cmp::Reverse(g.1.count));
        let shown: Vec<Value> = (groups.into_iter())
            .map(|(_, gap, questions)| json!({"questions": questions, "count": gap.count, "reasons": gap.reasons}))
            .collect();
        Ok(json!({
            "retention_days": days,
            "gaps": shown,
            "unkept": {"count": unkept.count, "reasons": unkept.reasons},
        }))
    }
}

/// How many times a question (or a group of them) was a gap, and why.
#[derive(Debug, Clone, Default)]
struct Gap {
    count: u64,
    reasons: BTreeMap<String, u64>,
}

impl Gap {
    fn of(body: &Value) -> Self {
        let reasons = (body["reasons"].as_object().into_iter().flatten())
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
            .collect();
        Gap {
            count: body["count"].as_u64().unwrap_or(0),
            reasons,
        }
    }

    fn add(&mut self, other: &Gap) {
        self.count += other.count;
        for (why, n) in &other.reasons {
            *self.reasons.entry(why.clone()).or_default() += n;
        }
    }
}
