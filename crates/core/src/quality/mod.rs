//! How well a tenant's answers are built from the right documents: the retrieval metrics
//! (`sluice eval` reports them too), a question of an evaluation set scored from what the
//! pipeline gave for it ([`score`]), a run's figures with their bootstrap intervals
//! ([`figures`]) and two runs compared question by question ([`compare`]). The service runs
//! the questions; this module only scores them.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use sluice_contract::codes::Degraded;
pub use sluice_contract::evals::Mode;
use sluice_contract::evals::{EvalQuestion, QualityGate, matches};
use sluice_contract::grounding::Grounding;
use sluice_contract::random::SplitMix;
use sluice_contract::sse::Timings;

use crate::language::words_in;

/// Resamples of a bootstrap interval.
pub const BOOTSTRAP: usize = 2000;

/// The seed of a run's intervals: the same questions scored the same give the same figures,
/// wherever they were run (`sluice eval retrieval` reports the figures a run would).
pub const SEED: u64 = 0x5e7;

/// The mean of `xs` (0 for none).
pub fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// The 95 % percentile bootstrap interval of the mean of `xs`: the same seed, the same
/// interval.
pub fn bootstrap_ci(xs: &[f64], seed: u64) -> [f64; 2] {
    if xs.is_empty() {
        return [0.0, 0.0];
    }
    let mut rng = SplitMix(seed ^ 0xb007);
    let mut means: Vec<f64> = (0..BOOTSTRAP)
        .map(|_| mean((0..xs.len()).map(|_| xs[rng.below(xs.len())])))
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((BOOTSTRAP as f64 * q) as usize).min(BOOTSTRAP - 1)];
    [at(0.025), at(0.975)]
}

/// Each id once, where it first appears: a ranking of chunks as a ranking of documents (a
/// document ranks where its first chunk does).
pub fn first_seen(ids: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = HashSet::new();
    ids.filter(|id| seen.insert(id.clone())).collect()
}

/// Share of `required` in the first `k` of `ranked`.
pub fn recall_at(ranked: &[String], required: &[String], k: usize) -> f64 {
    let top: HashSet<&str> = ranked.iter().take(k).map(String::as_str).collect();
    let found = required.iter().filter(|r| top.contains(r.as_str())).count();
    found as f64 / required.len().max(1) as f64
}

/// nDCG@k with binary relevance: DCG of `ranked` over the DCG of a ranking with every
/// required document first.
pub fn ndcg_at(ranked: &[String], required: &[String], k: usize) -> f64 {
    let relevant: HashSet<&str> = required.iter().map(String::as_str).collect();
    let gain = |rank: usize| 1.0 / ((rank + 2) as f64).log2();
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .filter(|(_, d)| relevant.contains(d.as_str()))
        .map(|(i, _)| gain(i))
        .sum();
    let ideal: f64 = (0..relevant.len().min(k)).map(gain).sum();
    if ideal == 0.0 { 0.0 } else { dcg / ideal }
}

/// 1 / the rank of the first required document (0 when none is ranked).
pub fn reciprocal_rank(ranked: &[String], required: &[String]) -> f64 {
    ranked
        .iter()
        .position(|d| required.contains(d))
        .map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// What the pipeline gave for one question.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The sources' document ids, best first.
    pub sources: Vec<String>,
    /// The answer's text (an answer run).
    pub answer: Option<String>,
    /// The verdict on it (an answer run, grounding on).
    pub grounding: Option<Grounding>,
    /// Whether it came from the cache.
    pub cached: bool,
    /// What was skipped or failed.
    pub degraded: Vec<Degraded>,
    /// Where the time went.
    pub timings: Timings,
    /// The code of an answer that failed (`llm_timeout`, …).
    pub error: Option<String>,
    /// Tokens spent (prompt and completion).
    pub tokens: u64,
}

/// One question of a run, scored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuestionResult {
    /// The question's id in its set.
    pub id: String,
    /// What was asked.
    pub question: String,
    /// The sources' document ids, best first.
    pub sources: Vec<String>,
    /// Share of the expected documents (each id or glob counts once) among the sources;
    /// absent when the question expects none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
    /// 1 / the rank of the first expected source (0: none among them); absent as `recall`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reciprocal_rank: Option<f64>,
    /// Whether the first source is the expected first one; absent when none is expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_source: Option<bool>,
    /// Whether every sentence of the answer is supported (an answer run, grounding on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounded: Option<bool>,
    /// The facts of the answer no source states, as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
    /// The expected facts the answer states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts_found: Vec<String>,
    /// The expected facts it does not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts_missing: Vec<String>,
    /// Whether the answer rests on no source at all (no sentence has evidence: "I don't
    /// know", or an answer without context); absent without a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<bool>,
    /// Whether the answer came from the cache.
    pub cached: bool,
    /// What was skipped or failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Degraded>,
    /// The code of an answer that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer (an answer run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Where the time went.
    pub timings: Timings,
    /// What differs from the same question in the run compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<Change>,
}

/// What differs for one question between two runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Sources now that were not before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    /// Sources before that are not now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Whether the same sources came in another order.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reordered: bool,
    /// Recall now less recall before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
    /// Reciprocal rank now less before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reciprocal_rank: Option<f64>,
    /// Whether the grounded verdict changed (now's value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounded: Option<bool>,
}

/// The expected documents among `sources`, each id or glob counted once.
fn expected_found(patterns: &[String], sources: &[String]) -> usize {
    (patterns.iter())
        .filter(|p| sources.iter().any(|s| matches(p, s)))
        .count()
}

/// The canonical words of a text, for comparing facts with answers.
fn canonical(text: &str) -> Vec<String> {
    words_in(text).into_iter().map(|w| w.text).collect()
}

/// Whether `fact`'s words appear, in order and together, among the answer's.
fn states(answer: &[String], fact: &str) -> bool {
    let fact = canonical(fact);
    !fact.is_empty() && answer.windows(fact.len()).any(|w| w == fact.as_slice())
}

/// `question` scored from what the pipeline gave for it.
pub fn score(question: &EvalQuestion, outcome: Outcome) -> QuestionResult {
    let sources = first_seen(outcome.sources.into_iter());
    let expected = &question.documents;
    let (recall, reciprocal_rank) = match expected.is_empty() {
        true => (None, None),
        false => {
            let found = expected_found(expected, &sources) as f64 / expected.len() as f64;
            let first = (sources.iter()).position(|s| expected.iter().any(|p| matches(p, s)));
            (
                Some(found),
                Some(first.map_or(0.0, |i| 1.0 / (i + 1) as f64)),
            )
        }
    };
    let first_source =
        (question.first.as_ref()).map(|p| sources.first().is_some_and(|s| matches(p, s)));
    let answer_words = outcome.answer.as_deref().map(canonical);
    let (facts_found, facts_missing) = match &answer_words {
        Some(words) => question
            .facts
            .iter()
            .cloned()
            .partition(|f| states(words, f)),
        None => (Vec::new(), Vec::new()),
    };
    let unsupported = (outcome.grounding.iter())
        .flat_map(|g| &g.sentences)
        .flat_map(|s| &s.unsupported_facts)
        .map(|f| f.text.clone())
        .collect();
    QuestionResult {
        id: question.id.clone(),
        question: question.question.clone(),
        sources,
        recall,
        reciprocal_rank,
        first_source,
        grounded: outcome.grounding.as_ref().map(Grounding::grounded),
        unsupported,
        facts_found,
        facts_missing,
        refused: (outcome.grounding.as_ref())
            .map(|g| g.sentences.iter().all(|s| s.evidence.is_none())),
        cached: outcome.cached,
        degraded: outcome.degraded,
        error: outcome.error,
        answer: outcome.answer,
        timings: outcome.timings,
        changed: None,
    }
}

/// A figure of a run: its mean over the questions it applies to, that mean's 95 % bootstrap
/// interval, and how many questions it is over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The mean.
    pub value: f64,
    /// Its 95 % bootstrap interval.
    pub ci: [f64; 2],
    /// The questions it is over.
    pub n: usize,
}

impl Figure {
    /// The figure of `xs` (`None` when there are none).
    pub fn of(xs: &[f64], seed: u64) -> Option<Figure> {
        (!xs.is_empty()).then(|| Figure {
            value: mean(xs.iter().copied()),
            ci: bootstrap_ci(xs, seed),
            n: xs.len(),
        })
    }
}

/// A run's figures: each over the questions it applies to (absent when none does).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Recall of the expected documents among the `k` sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<Figure>,
    /// Mean reciprocal rank of the first expected source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mrr: Option<Figure>,
    /// Share of the questions with an expected first source that got it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_source: Option<Figure>,
    /// Share of the answers with every sentence supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounded: Option<Figure>,
    /// Share of the expected facts the answers state (per question, then averaged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Figure>,
    /// Unsupported facts in all the answers.
    pub unsupported: usize,
    /// Answers that rest on no source.
    pub refusals: usize,
    /// Answers from the cache.
    pub cache_hits: usize,
    /// Questions that failed (the `error` of each says why).
    pub errors: usize,
    /// Each stage's p50 and p99 in ms over the questions that ran it (`embed_ms`,
    /// `retrieve_ms`, `ttft_ms`, …; nearest rank).
    pub stages: BTreeMap<String, [f64; 2]>,
}

/// The figures a figure name reads from a question, for [`figures`] and [`compare`].
type Reading = fn(&QuestionResult) -> Option<f64>;

/// The figures compared between runs, by name.
pub const COMPARED: [(&str, Reading); 5] = [
    ("recall", |q| q.recall),
    ("mrr", |q| q.reciprocal_rank),
    ("first_source", |q| q.first_source.map(f64::from)),
    ("grounded", |q| q.grounded.map(f64::from)),
    ("facts", |q| {
        let n = q.facts_found.len() + q.facts_missing.len();
        (n > 0).then(|| q.facts_found.len() as f64 / n as f64)
    }),
];

/// The nearest-rank `q` percentile of sorted `xs`.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The figures of a run's `results`, the intervals drawn from `seed`.
pub fn figures(results: &[QuestionResult], seed: u64) -> Figures {
    let of = |read: Reading| -> Option<Figure> {
        let xs: Vec<f64> = results.iter().filter_map(read).collect();
        Figure::of(&xs, seed)
    };
    let [recall, mrr, first_source, grounded, facts] = COMPARED.map(|(_, read)| of(read));
    let mut stages: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in results {
        if let Ok(serde_json::Value::Object(timings)) = serde_json::to_value(&r.timings) {
            for (stage, ms) in timings {
                if let (true, Some(ms)) = (stage.ends_with("_ms"), ms.as_f64()) {
                    stages.entry(stage).or_default().push(ms);
                }
            }
        }
    }
    let stages = (stages.into_iter())
        .map(|(stage, mut ms)| {
            ms.sort_by(f64::total_cmp);
            (stage, [percentile(&ms, 0.5), percentile(&ms, 0.99)])
        })
        .collect();
    Figures {
        recall,
        mrr,
        first_source,
        grounded,
        facts,
        unsupported: results.iter().map(|r| r.unsupported.len()).sum(),
        refusals: results.iter().filter(|r| r.refused == Some(true)).count(),
        cache_hits: results.iter().filter(|r| r.cached).count(),
        errors: results.iter().filter(|r| r.error.is_some()).count(),
        stages,
    }
}

/// Each figure of `now` less the same figure of `before`, over the questions both runs
/// scored it on (matched by id), with the 95 % bootstrap interval of the paired difference;
/// and each question of `now` told what differs (`changed`).
pub fn compare(
    before: &[QuestionResult],
    now: &mut [QuestionResult],
    seed: u64,
) -> BTreeMap<String, Figure> {
    let by_id: BTreeMap<&str, &QuestionResult> =
        before.iter().map(|q| (q.id.as_str(), q)).collect();
    let mut differences = BTreeMap::new();
    for (name, read) in COMPARED {
        let paired: Vec<f64> = (now.iter())
            .filter_map(|q| Some(read(q)? - read(by_id.get(q.id.as_str())?)?))
            .collect();
        if let Some(figure) = Figure::of(&paired, seed) {
            differences.insert(name.to_string(), figure);
        }
    }
    for q in now.iter_mut() {
        let Some(old) = by_id.get(q.id.as_str()) else {
            continue;
        };
        let has = |list: &[String], id: &String| list.contains(id);
        let change = Change {
            added: (q.sources.iter())
                .filter(|s| !has(&old.sources, s))
                .cloned()
                .collect(),
            removed: (old.sources.iter())
                .filter(|s| !has(&q.sources, s))
                .cloned()
                .collect(),
            reordered: q.sources != old.sources
                && q.sources.len() == old.sources.len()
                && q.sources.iter().all(|s| has(&old.sources, s)),
            recall: (q.recall.zip(old.recall))
                .map(|(a, b)| a - b)
                .filter(|d| *d != 0.0),
            reciprocal_rank: (q.reciprocal_rank.zip(old.reciprocal_rank))
                .map(|(a, b)| a - b)
                .filter(|d| *d != 0.0),
            grounded: q.grounded.filter(|g| Some(*g) != old.grounded),
        };
        q.changed = (change != Change::default()).then_some(change);
    }
    differences
}

/// A figure the gate holds that dropped too far: by more than its `max_drop`, and beyond the
/// noise (the 95 % interval of the paired difference lies below zero).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    /// The figure.
    pub figure: String,
    /// The candidate less the live configuration, with its interval.
    pub change: Figure,
    /// The most the gate lets it drop.
    pub max_drop: f64,
}

/// The figures of `versus` (a candidate less the live configuration, see [`compare`]) that
/// `gate` refuses.
pub fn regressions(gate: &QualityGate, versus: &BTreeMap<String, Figure>) -> Vec<Regression> {
    (gate.held().into_iter())
        .filter_map(|(figure, max_drop)| {
            let change = *versus.get(&figure)?;
            let refused = -change.value > max_drop + 1e-12 && change.ci[1] < 0.0;
            refused.then_some(Regression {
                figure,
                change,
                max_drop,
            })
        })
        .collect()
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Answering its questions.
    Running,
    /// Every question answered.
    Finished,
    /// Stopped by a cancel: the questions answered before it are scored.
    Canceled,
    /// Stopped by the run's time limit: the questions answered before it are scored.
    TimedOut,
}

/// A run of an evaluation set: what was asked, its figures, and each question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run's id.
    pub id: String,
    /// The set it ran.
    pub set: String,
    /// The set's version it ran.
    pub set_version: u64,
    /// How it answered.
    pub mode: Mode,
    /// Where it stands.
    pub status: RunStatus,
    /// When it started and ended (RFC 3339, UTC).
    pub started_at: String,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Questions in the set.
    pub total: usize,
    /// Questions answered.
    pub done: usize,
    /// Tokens spent (an answer run).
    pub tokens: u64,
    /// The figures over the questions answered.
    pub figures: Figures,
    /// The run it is compared with: the last finished run of the same set and mode, or the
    /// one asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Each figure less the baseline's (or, for a candidate, less the live configuration's),
    /// over the questions both answered (see [`compare`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versus: BTreeMap<String, Figure>,
    /// The change tried beside the live configuration (a component version, a settings
    /// draft), as asked; the figures and questions are then the candidate's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<serde_json::Value>,
    /// The live configuration's figures on the same questions, in a candidate's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Figures>,
    /// The version of the tenant's settings the live configuration ran under (none: it had
    /// set none): a gate's run made elsewhere stands for an activation only under them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_version: Option<u64>,
    /// Each question, in the set's order (absent from a listing).
    #[serde(default)]
    pub questions: Vec<QuestionResult>,
}

#[cfg(test)]
mod tests;
