//! Retrieval evaluations (`sluice eval retrieval`, `sluice eval tune`; [`pages`] for
//! `sluice eval pages`): how well each way of retrieving finds the documents a question needs, and which fusion of dense and BM25 finds them best for a
//! tenant. The default dataset is τ²-bench's banking_knowledge domain (698 documents, 97
//! tasks with `required_documents`), as shipped in the PyPI package `inspect-evals` (MIT;
//! `scripts/setup.sh eval` unpacks it); a tenant's own labelled questions work the same
//! ([`load`]).
//!
//! The documents (Markdown) are ingested as `sluice ingest` would (same conversion, chunking
//! and model) into a fresh Qdrant Edge store. Each task becomes one query ([`query_of`]). The
//! tasks are split in two by a seeded shuffle ([`split`]): the fusion settings of [`grid`] are scored on the
//! tuning half, and every figure reported is on the other half, which tuning never saw.
//! Methods: dense vectors alone (the question read whole, and its first window only), BM25
//! alone, the store's hybrid search under plain RRF, the best weighted RRF, the best convex
//! combination and the best of all, and plain RRF reordered by each rerank component asked
//! for. Chunks are turned into a ranking of documents (a document ranks where its first chunk
//! does), scored against the task's required documents: recall@5/10/20 (recall@10 with a
//! bootstrap 95 % interval), nDCG@10 (binary relevance) and MRR.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_contract::Tenant;
use sluice_contract::cancel::Cancel;
use sluice_contract::document::Document;
use sluice_contract::evals::{EvalQuestion, EvalSet};
use sluice_contract::random::SplitMix;
use sluice_contract::{
    components::ComponentError, components::Components, stages::Embedder, stages::Hit,
    stages::Reranker, stages::Search,
};
use sluice_contract::{fusion::Fusion, fusion::Ranking};
use sluice_convert::parse_as;
use sluice_convert::{ConvertLimits, Format};
use sluice_core::quality;
use sluice_http::answer::MAX_QUERY_CHARS;
use sluice_retrieve::{EdgeStore, Retrieval};

/// The metrics and the bootstrap are the engine's, the same that score a tenant's evaluation
/// runs (`sluice_core::quality`).
pub use sluice_core::quality::{
    BOOTSTRAP, bootstrap_ci, first_seen, mean, ndcg_at, recall_at, reciprocal_rank,
};

/// The tenant the evaluation's documents are ingested for.
pub mod cache;
pub mod grounding;
pub mod pages;

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file of the dataset (or a scratch folder) could not be read or made.
    #[error("{what}: {source}")]
    Io {
        /// The file, and what to do about it.
        what: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The dataset is not what it should be; the message names the place.
    #[error("{0}")]
    Data(String),
    /// A part of the pipeline the evaluation runs failed: the model, the ingest, a search, a
    /// rerank component.
    #[error("{0}")]
    Pipeline(String),
}

/// What an evaluation returns.
pub type Result<T> = std::result::Result<T, EvalError>;

impl EvalError {
    /// A scratch folder or file that could not be made.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| EvalError::Io { what, source }
    }
}

/// The pipeline's own errors, as an evaluation's.
macro_rules! pipeline_errors {
    ($($error:ty),*) => {$(
        impl From<$error> for EvalError {
            fn from(e: $error) -> Self {
                EvalError::Pipeline(e.to_string())
            }
        }
    )*};
}
pipeline_errors!(
    sluice_contract::error::EmbedError,
    sluice_contract::error::IngestError,
    sluice_contract::error::StoreError,
    sluice_contract::tenant::InvalidTenant,
    sluice_app::AppError
);

const TENANT: &str = "eval";
/// Chunks retrieved per query: enough for 20 distinct documents.
const CANDIDATES: usize = 100;
/// The first this many are what a rerank component reorders (the request path's most, `k`
/// ≤ 50); the rest keep their hybrid order behind them.
const RERANKED: usize = 50;

/// One task: its query and the documents it needs.
#[derive(Debug, Clone)]
pub struct Task {
    /// What is searched for ([`query_of`] the user's instructions).
    pub query: String,
    /// Ids of the documents the task requires.
    pub required: Vec<String>,
}

#[derive(Deserialize)]
struct RawDocument {
    id: String,
    title: String,
    content: String,
}

#[derive(Deserialize)]
struct RawTask {
    user_scenario: RawScenario,
    #[serde(default)]
    required_documents: Vec<String>,
}

#[derive(Deserialize)]
struct RawScenario {
    instructions: String,
}

/// Sentences of a task's instructions that are about playing the simulated customer (the
/// same in every task) rather than what the customer wants; [`query_of`] drops them.
const ROLE_PLAY: [&str; 12] = [
    "playing the role",
    "customer service representative",
    "customer support agent",
    "never respond as",
    "don't dump",
    "only provide additional details",
    "only mention this",
    "no need to respond",
    "end the conversation",
    "take your business elsewhere",
    "all information you should provide",
    "ask for instructions",
];

/// A task's query: its user instructions without the role-play sentences ([`ROLE_PLAY`]),
/// which are boilerplate shared by every task and would make all queries alike. What is left
/// is the customer's situation and need, often several hundred words: BM25 uses all of it,
/// the embedding model reads it in windows (`SLUICE_EMBED_WINDOWS`).
pub fn query_of(instructions: &str) -> String {
    instructions
        .split_inclusive(['.', '!', '?', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter(|s| {
            let lower = s.to_lowercase();
            !ROLE_PLAY.iter().any(|p| lower.contains(p))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A labelled question of a tenant's own (`questions.jsonl`).
#[derive(Deserialize)]
struct RawQuestion {
    question: String,
    relevant: Vec<String>,
}

/// A part of a dataset that does not read as it should.
fn data(place: &str, e: impl std::fmt::Display) -> EvalError {
    EvalError::Data(format!("{place}: {e}"))
}

/// Reads a dataset folder: `documents.json` (a list of `{id, title, content}`) and either
/// `tasks.json` (τ²-bench's tasks: the query is [`query_of`] the user's instructions) or
/// `questions.jsonl` (a tenant's own: one `{"question": …, "relevant": [document ids]}` a
/// line). Tasks without required documents are left out.
pub fn load(dir: &Path) -> Result<(Vec<Document>, Vec<Task>)> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(EvalError::io(format!(
            "reading {} (run `scripts/setup.sh eval`, which unpacks τ²-bench from inspect-evals)",
            path.display()
        )))
    };
    let documents: Vec<RawDocument> =
        serde_json::from_str(&read("documents.json")?).map_err(|e| data("documents.json", e))?;
    // The contents are Markdown: read as `sluice ingest` reads a `.md` file (its headings
    // become the sections chunks keep to and cite), under the dataset's own title.
    let limits = ConvertLimits::default();
    let documents = documents
        .into_iter()
        .map(|d| {
            let parsed = parse_as(Format::Markdown, &d.id, d.content.as_bytes(), &limits)
                .map_err(|e| data(&format!("documents.json: document {}", d.id), e))?;
            let document = parsed.into_iter().next().map(|doc| Document {
                title: Some(d.title),
                ..doc
            });
            document.ok_or_else(|| {
                EvalError::Data(format!("documents.json: document {} read as nothing", d.id))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let tasks: Vec<Task> = if dir.join("questions.jsonl").is_file() {
        let text = read("questions.jsonl")?;
        let lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let mut tasks = Vec::new();
        for (n, line) in lines {
            let q: RawQuestion = serde_json::from_str(line)
                .map_err(|e| data(&format!("questions.jsonl line {}", n + 1), e))?;
            tasks.push(Task {
                query: q.question,
                required: q.relevant,
            });
        }
        tasks
    } else {
        let tasks: Vec<RawTask> =
            serde_json::from_str(&read("tasks.json")?).map_err(|e| data("tasks.json", e))?;
        (tasks.into_iter())
            .map(|t| Task {
                query: query_of(&t.user_scenario.instructions),
                required: t.required_documents,
            })
            .collect()
    };
    Ok((
        documents,
        tasks
            .into_iter()
            .filter(|t| !t.required.is_empty())
            .collect(),
    ))
}

/// The documents and tasks [`run`] evaluates: the dataset's, cut as `options` say (its first
/// `limit` tasks; `documents` of them: every one those tasks require, then others in file
/// order).
pub fn slice(data: &Path, options: &Options) -> Result<(Vec<Document>, Vec<Task>)> {
    let (mut documents, mut tasks) = load(data)?;
    if let Some(limit) = options.limit {
        tasks.truncate(limit);
    }
    if let Some(n) = options.documents {
        let required: HashSet<&str> = tasks
            .iter()
            .flat_map(|t| t.required.iter().map(String::as_str))
            .collect();
        let (mut kept, others): (Vec<Document>, Vec<Document>) = documents
            .into_iter()
            .partition(|d| required.contains(d.id.as_str()));
        let room = n.saturating_sub(kept.len());
        kept.extend(others.into_iter().take(room));
        documents = kept;
    }
    Ok((documents, tasks))
}

/// Documents in the order their first chunk appears.
pub fn documents_of(hits: &[Hit]) -> Vec<String> {
    first_seen(hits.iter().map(|h| h.document.id.clone()))
}

/// The dataset and the split of an evaluation, as `sluice eval retrieval` and `tune` take
/// them.
#[derive(clap::Args)]
pub struct EvalData {
    /// Folder with documents.json and tasks.json (τ²-bench) or questions.jsonl (one
    /// {"question", "relevant": [document ids]} a line) [default: $SLUICE_HOME/eval/tau2-banking]
    #[arg(long)]
    pub data: Option<std::path::PathBuf>,
    /// Evaluate only the first N questions.
    #[arg(long)]
    limit: Option<usize>,
    /// Ingest only N documents: those the evaluated questions require, then others in file
    /// order (a smaller haystack for a quick run; random recall is reported for it).
    #[arg(long)]
    documents: Option<usize>,
    /// Seed of the tuning/held-out split and of the bootstrap.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What tuning maximises on the tuning half (ties: nDCG@10).
    #[arg(long, value_enum, default_value = "recall@10")]
    metric: Metric,
}

impl EvalData {
    /// The evaluation's options, with the rerank `components` to try (`''`: none).
    pub fn options(&self, components: &[String]) -> Options {
        Options {
            limit: self.limit,
            documents: self.documents,
            seed: self.seed,
            metric: self.metric,
            // `--components ''` tries none.
            components: components
                .iter()
                .filter(|c| !c.is_empty())
                .cloned()
                .collect(),
        }
    }
}

/// The evaluation's knobs (the command line's).
#[derive(Debug, Clone)]
pub struct Options {
    /// Evaluate only the first N tasks.
    pub limit: Option<usize>,
    /// Ingest only N documents: every one the evaluated tasks require, then others in file
    /// order (a smaller haystack, for a quick run).
    pub documents: Option<usize>,
    /// Seed of the tuning/held-out split and of the bootstrap.
    pub seed: u64,
    /// What tuning maximises.
    pub metric: Metric,
    /// Names of built rerank components tried on top of the hybrid search.
    pub components: Vec<String>,
}

/// What tuning maximises on the tuning half (ties: nDCG@10, then the order settings are
/// tried in, simplest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Mean recall@10.
    #[value(name = "recall@10")]
    Recall10,
    /// Mean nDCG@10.
    #[value(name = "ndcg@10")]
    Ndcg10,
    /// Mean reciprocal rank.
    #[value(name = "mrr")]
    Mrr,
}

impl Metric {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Recall10 => "recall@10",
            Metric::Ndcg10 => "ndcg@10",
            Metric::Mrr => "mrr",
        }
    }
}

/// One task's figures for one ranking of documents.
#[derive(Debug, Clone, Copy, Default)]
struct TaskScores {
    recall_at_5: f64,
    recall_at_10: f64,
    recall_at_20: f64,
    ndcg_at_10: f64,
    rr: f64,
}

impl TaskScores {
    fn of(ranked: &[String], required: &[String]) -> Self {
        Self {
            recall_at_5: recall_at(ranked, required, 5),
            recall_at_10: recall_at(ranked, required, 10),
            recall_at_20: recall_at(ranked, required, 20),
            ndcg_at_10: ndcg_at(ranked, required, 10),
            rr: reciprocal_rank(ranked, required),
        }
    }

    /// What `metric` reads, then nDCG@10 (the tie-break).
    fn objective(&self, metric: Metric) -> (f64, f64) {
        let primary = match metric {
            Metric::Recall10 => self.recall_at_10,
            Metric::Ndcg10 => self.ndcg_at_10,
            Metric::Mrr => self.rr,
        };
        (primary, self.ndcg_at_10)
    }
}

/// Mean scores of one way of retrieving over the held-out tasks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scores {
    /// `dense`, `bm25`, `hybrid rrf`, `hybrid tuned`, `hybrid + <component>`, …
    pub method: String,
    /// The fusion setting of a hybrid row (`SLUICE_FUSION`'s spelling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fusion: Option<String>,
    /// Mean recall@5.
    pub recall_at_5: f64,
    /// Mean recall@10.
    pub recall_at_10: f64,
    /// Bootstrap 95 % confidence interval of the mean recall@10 (2.5th and 97.5th
    /// percentiles of [`BOOTSTRAP`] resamples of the tasks).
    pub recall_at_10_ci: [f64; 2],
    /// Mean recall@20.
    pub recall_at_20: f64,
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Median time of one retrieval (and rerank), milliseconds.
    pub median_ms: f64,
}

impl Scores {
    fn of(
        method: &str,
        fusion: Option<Fusion>,
        tasks: &[TaskScores],
        times: &mut [f64],
        seed: u64,
    ) -> Self {
        let recalls: Vec<f64> = tasks.iter().map(|t| t.recall_at_10).collect();
        times.sort_by(f64::total_cmp);
        Self {
            method: method.to_string(),
            fusion: fusion.map(|f| f.to_string()),
            recall_at_5: mean(tasks.iter().map(|t| t.recall_at_5)),
            recall_at_10: mean(recalls.iter().copied()),
            recall_at_10_ci: bootstrap_ci(&recalls, seed),
            recall_at_20: mean(tasks.iter().map(|t| t.recall_at_20)),
            ndcg_at_10: mean(tasks.iter().map(|t| t.ndcg_at_10)),
            mrr: mean(tasks.iter().map(|t| t.rr)),
            median_ms: times.get(times.len() / 2).copied().unwrap_or(0.0),
        }
    }
}

/// The tasks split in two by a seeded shuffle: (tuning, held-out), the tuning half the
/// smaller when the count is odd. The same seed always gives the same split.
pub fn split(n: usize, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix(seed);
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let held_out = order.split_off(n / 2);
    (order, held_out)
}

/// The fusion settings tuning tries, simplest first: weighted RRF over k and both weights
/// (under Qdrant's formula a weight stretches ranks, so the pair matters, not only its ratio;
/// a BM25 weight of 0 is the dense ranking; k = 200, 500 and 1000 were tried on τ²-bench and
/// never won), then convex combinations from BM25 alone to dense alone in steps of 0.05.
pub fn grid() -> Vec<Fusion> {
    let mut settings = vec![Fusion::default()];
    for k in [1, 2, 5, 10, 20, 40, 60, 100] {
        for dense in [0.5, 1.0, 2.0] {
            for bm25 in [0.0, 0.1, 0.25, 0.5, 1.0, 2.0] {
                let f = Fusion::Rrf { k, dense, bm25 };
                if !settings.contains(&f) {
                    settings.push(f);
                }
            }
        }
    }
    settings.extend((0..=20).map(|i| Fusion::Convex {
        dense: i as f32 / 20.0,
    }));
    settings
}

/// What tuning chose, on the tuning half.
#[derive(Debug, Clone, Serialize)]
pub struct Tuned {
    /// The setting chosen: the best of all when tuning, cross-validated on the tuning half,
    /// beats the default by more than the noise (see `tune`), else the default.
    pub fusion: String,
    /// The best setting of all on the tuning half.
    pub best: String,
    /// Why `fusion` was chosen: the cross-validated mean difference from the default on the
    /// tuning tasks, with its bootstrap 95 % interval.
    pub why: String,
    /// The best weighted RRF setting, and the best convex one.
    pub best_rrf: String,
    /// See `best_rrf`.
    pub best_convex: String,
    /// What was maximised (`recall@10`, `ndcg@10`, `mrr`).
    pub metric: String,
    /// The best setting's mean of `metric` on the tuning half.
    pub tuning_score: f64,
    /// Settings tried.
    pub settings: usize,
    /// Every setting's mean of `metric` on the tuning half, in the order tried.
    pub tried: Vec<(String, f64)>,
}

/// What `sluice eval retrieval` and `sluice eval tune` write to `report.json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The dataset folder.
    pub data: String,
    /// Documents ingested.
    pub documents: usize,
    /// Chunks they made.
    pub chunks: usize,
    /// Seconds the ingest took (chunking, embedding every chunk, storing).
    pub ingest_seconds: f64,
    /// Threads the chunks were embedded on (`SLUICE_EMBED_THREADS`).
    pub embed_threads: usize,
    /// Tasks in all (tuning + held-out).
    pub tasks: usize,
    /// Tasks the fusion was tuned on.
    pub tuning_tasks: usize,
    /// Tasks every row is scored on (none of them seen by tuning).
    pub held_out_tasks: usize,
    /// The split's and the bootstrap's seed.
    pub seed: u64,
    /// Mean required documents per held-out task.
    pub mean_required: f64,
    /// Expected recall@10 of a random ranking of the documents.
    pub random_recall_at_10: f64,
    /// What tuning chose.
    pub tuned: Tuned,
    /// One row per method, on the held-out tasks.
    pub results: Vec<Scores>,
    /// The held-out tasks scored as a run of them as an evaluation set scores them.
    pub as_run: AsRun,
}

/// Chunks per question of [`AsRun`] (a run's `k`).
pub const RUN_K: usize = 20;

/// The held-out tasks scored as a retrieval-only run of them as an evaluation set
/// (`POST /v1/evals/runs` with `k` [`RUN_K`]) scores them, on a server holding the same
/// documents under the default fusion: the figures that run reports. A question longer than a
/// request takes is asked as its [`askable`] part.
#[derive(Debug, Serialize)]
pub struct AsRun {
    /// Chunks asked for per question.
    pub k: usize,
    /// The run's figures (recall and MRR of the required documents among the sources).
    pub figures: quality::Figures,
    /// The set (`sluice eval` writes it to `set.json`).
    #[serde(skip)]
    pub set: EvalSet,
    /// The documents it is over (`sluice eval` writes them to `documents.json`).
    #[serde(skip)]
    pub documents: Vec<Document>,
}

/// One task's rankings of chunks — dense (the question read whole), dense (its first
/// window), BM25 — each [`sluice_retrieve::prefetch_limit`] long (what a hybrid search for
/// [`CANDIDATES`] fuses), as (chunk key, score, document id), and the time each took: every
/// fusion setting is scored from them without asking the store again.
struct Rankings {
    lists: [Ranking<String>; 3],
    times: [f64; 3],
}

/// [`Rankings`]' lists.
const DENSE: usize = 0;
const DENSE_FIRST_WINDOW: usize = 1;
const BM25: usize = 2;

fn ranking(hits: Vec<Hit>) -> Ranking<String> {
    (hits.into_iter())
        .map(|h| {
            (
                format!("{}#{}", h.document.id, h.chunk),
                h.score,
                h.document.id,
            )
        })
        .collect()
}

/// Whether `challenger`'s per-task scores beat `incumbent`'s on the same tasks by more than
/// the noise of so few tasks: the 95 % bootstrap interval of the mean paired difference lies
/// above zero. The difference and its interval either way.
fn beats(challenger: &[f64], incumbent: &[f64], seed: u64) -> (bool, f64, [f64; 2]) {
    let differences: Vec<f64> = (challenger.iter().zip(incumbent))
        .map(|(a, b)| a - b)
        .collect();
    let interval = bootstrap_ci(&differences, seed);
    (
        interval[0] > 0.0,
        mean(differences.iter().copied()),
        interval,
    )
}

/// Folds of the tuning half in [`tune`]'s cross-validation.
const FOLDS: usize = 4;

/// Scores every setting of [`grid`] on the `tuning` tasks from their rankings, and keeps the
/// default unless tuning itself is shown to help on tasks it did not see. The best of 165
/// settings on a few dozen tasks is partly the luckiest (on τ²-bench it did worse than plain
/// RRF on the held-out half), so comparing it with the default on the tasks it was picked on
/// flatters it. Instead the tuning half is cut into [`FOLDS`] folds; for each, the best setting
/// on the other folds is scored on it, beside the default. Only when those out-of-fold scores
/// beat the default's by more than the noise ([`beats`]) is the best setting of the whole
/// tuning half chosen.
fn tune(
    rankings: &[Rankings],
    tasks: &[Task],
    tuning: &[usize],
    metric: Metric,
    seed: u64,
) -> Tuned {
    // Every setting's (metric, tie-breaker) on each tuning task, in the tuning tasks' order.
    let tried: Vec<(Fusion, Vec<(f64, f64)>)> = (grid().into_iter())
        .map(|f| {
            let scores = (tuning.iter())
                .map(|&i| {
                    let r = &rankings[i];
                    let fused = f.fuse(r.lists[DENSE].clone(), r.lists[BM25].clone(), CANDIDATES);
                    let ranked = first_seen(fused.into_iter().map(|(_, doc)| doc));
                    TaskScores::of(&ranked, &tasks[i].required).objective(metric)
                })
                .collect();
            (f, scores)
        })
        .collect();
    choose(&tried, metric, seed)
}

/// [`tune`]'s choice from every setting's (metric, tie-breaker) on each tuning task.
fn choose(tried: &[(Fusion, Vec<(f64, f64)>)], metric: Metric, seed: u64) -> Tuned {
    let tasks = tried.first().map_or(0, |(_, scores)| scores.len());
    // A setting's mean (metric, tie-breaker) over the tuning tasks `keep` admits (by position).
    let objective = |scores: &[(f64, f64)], keep: &dyn Fn(usize) -> bool| {
        let kept = || (scores.iter().enumerate()).filter(|(j, _)| keep(*j));
        (
            mean(kept().map(|(_, s)| s.0)),
            mean(kept().map(|(_, s)| s.1)),
        )
    };
    // The first of the best among the settings `admit` lets in, on the tasks `keep` admits (a
    // later setting must be strictly better to win).
    let best = |admit: &dyn Fn(&Fusion) -> bool, keep: &dyn Fn(usize) -> bool| {
        (tried.iter().filter(|(f, _)| admit(f)))
            .map(|(f, scores)| (f, objective(scores, keep)))
            .fold(None::<(&Fusion, (f64, f64))>, |best, x| match best {
                Some(b) if b.1 >= x.1 => Some(b),
                _ => Some(x),
            })
            .map(|(f, s)| (*f, s.0))
            .unwrap_or((Fusion::default(), 0.0))
    };
    let all = |_: usize| true;
    let (top, top_score) = best(&|_| true, &all);
    let default = Fusion::default();
    // The metric, its tie-breaker counting a thousandth: what the paired comparison reads.
    let compared = |f: &Fusion, j: usize| {
        let s = (tried.iter().find(|(g, _)| g == f))
            .map(|(_, scores)| scores[j])
            .unwrap_or_default();
        s.0 + s.1 / 1000.0
    };
    let folds = FOLDS.min(tasks);
    let (mut tuned_out_of_fold, mut default_out_of_fold) = (Vec::new(), Vec::new());
    if folds >= 2 {
        for fold in 0..folds {
            let (picked, _) = best(&|_| true, &|j| j % folds != fold);
            for j in (0..tasks).filter(|j| j % folds == fold) {
                tuned_out_of_fold.push(compared(&picked, j));
                default_out_of_fold.push(compared(&default, j));
            }
        }
    }
    // With fewer than two folds nothing is scored out of fold, and an empty difference never
    // beats the default.
    let (wins, difference, interval) = beats(&tuned_out_of_fold, &default_out_of_fold, seed);
    let (fusion, tuning_score) = match wins || top == default {
        true => (top, top_score),
        false => (default, best(&|f| *f == default, &all).1),
    };
    let why = format!(
        "the best setting is {top}; tuned on {} of {folds} folds of the tuning half and scored on the other, in turn, it differs from the default {default} by {difference:+.3} (95 % interval {:+.3} to {:+.3}); {}",
        folds.saturating_sub(1),
        interval[0],
        interval[1],
        match (top == default, wins) {
            (true, _) => "the default is the best",
            (false, true) => "beyond the noise, so the best setting is chosen",
            (false, false) => "within the noise, so the default is kept",
        }
    );
    Tuned {
        fusion: fusion.to_string(),
        best: top.to_string(),
        why,
        best_rrf: best(&|f| matches!(f, Fusion::Rrf { .. }), &all)
            .0
            .to_string(),
        best_convex: best(&|f| matches!(f, Fusion::Convex { .. }), &all)
            .0
            .to_string(),
        metric: metric.name().into(),
        tuning_score,
        settings: tried.len(),
        tried: (tried.iter())
            .map(|(f, scores)| (f.to_string(), objective(scores, &all).0))
            .collect(),
    }
}

/// A dataset's documents ingested as `sluice ingest` would (same conversion, chunking and
/// model) into a fresh Qdrant Edge store, for one tenant.
pub struct Corpus {
    /// The model the chunks were embedded with (questions are embedded with it too).
    pub embedder: Arc<dyn Embedder>,
    /// The store.
    pub edge: EdgeStore,
    /// The ingest that filled it (documents sent to it again are compared with what it wrote).
    pub ingest: sluice_core::Ingest,
    /// The tenant that holds the documents.
    pub tenant: Tenant,
    /// How long the ingest took.
    pub ingest_seconds: f64,
    /// The chunks it wrote.
    pub chunks: usize,
    /// The store's folder, removed when this is dropped: the last field, so that the store
    /// is closed (and flushed) first.
    pub scratch: tempfile::TempDir,
}

impl Corpus {
    /// `documents` ingested under `settings` (its model and chunking), the limits of one
    /// request raised to hold them all.
    pub async fn ingested(
        settings: &sluice_app::Settings,
        documents: Vec<Document>,
        progress: &impl Fn(&str),
    ) -> Result<Self> {
        let scratch = tempfile::tempdir().map_err(EvalError::io("a scratch folder"))?;
        let mut config = settings.config.ingest.clone();
        config.max_documents = config.max_documents.max(documents.len());
        // An evaluation's corpus is one request, whatever its size.
        config.max_chunks = config.max_chunks.max(1_000_000);
        let embedder: Arc<dyn Embedder> = Arc::new(sluice_app::model(&settings.embed)?);
        let edge = EdgeStore::open(scratch.path(), sluice_embed::DIM)?;
        let tenant = Tenant::new(TENANT)?;
        let ingest =
            sluice_core::Ingest::new(config, Arc::clone(&embedder), Arc::new(edge.clone()));
        progress(&format!("ingesting {} documents", documents.len()));
        let started = Instant::now();
        let ingested = ingest.ingest(&tenant, documents).await?;
        let ingest_seconds = started.elapsed().as_secs_f64();
        progress(&format!(
            "ingested {} documents as {} chunks in {ingest_seconds:.1} s ({:.0} chunks/s on {} threads)",
            ingested.documents,
            ingested.chunks,
            ingested.chunks as f64 / ingest_seconds,
            settings.embed.threads,
        ));
        Ok(Self {
            scratch,
            embedder,
            edge,
            ingest,
            tenant,
            ingest_seconds,
            chunks: ingested.chunks,
        })
    }
}

/// Runs the evaluation: ingests the documents into a scratch Qdrant Edge store, ranks every
/// task's question by dense (whole and first window) and BM25, tunes the fusion on a seeded
/// half of the tasks, and scores every method on the other half: the rankings alone, the
/// store's hybrid search under plain RRF, the best weighted RRF, the best convex
/// combination and the best of all, and plain RRF reordered by each rerank component.
pub async fn run(
    settings: &sluice_app::Settings,
    data: &Path,
    options: &Options,
    progress: impl Fn(&str),
) -> Result<Report> {
    let (documents, tasks) = slice(data, options)?;
    if tasks.len() < 2 {
        return Err(EvalError::Data(format!(
            "{}: {} tasks with required documents; tuning and a held-out half need at least 2",
            data.display(),
            tasks.len()
        )));
    }
    let count = documents.len();
    let evaluated = documents.clone();
    let Corpus {
        scratch,
        embedder,
        edge,
        tenant,
        ingest_seconds,
        chunks,
        ..
    } = Corpus::ingested(settings, documents, &progress).await?;
    let mut rerank = settings.rerank.clone();
    // Quality, not latency, is measured here: no component is cut off by the request-time
    // deadline or fuel budget (100 candidates are more than a request usually reranks).
    rerank.deadline = Duration::from_secs(2);
    rerank.fuel = rerank.fuel.max(2_000_000_000);
    rerank.max_candidates = rerank.max_candidates.max(CANDIDATES);
    // The same model reading only a question's first window, as it did before windows (and
    // as sentence-transformers truncates): the comparison the "first window" methods make.
    let first_window: Arc<dyn Embedder> =
        Arc::new(sluice_app::model(&settings.embed)?.with_max_windows(1));

    // Each task's question, embedded both ways, and its rankings.
    let n = sluice_retrieve::prefetch_limit(CANDIDATES);
    let mut vectors = Vec::with_capacity(tasks.len());
    let mut rankings = Vec::with_capacity(tasks.len());
    for task in &tasks {
        let embed = |e: &Arc<dyn Embedder>| -> Result<Vec<f32>> {
            e.embed(&[task.query.as_str()])?
                .pop()
                .ok_or_else(|| EvalError::Pipeline("no query vector".into()))
        };
        let (whole, first) = (embed(&embedder)?, embed(&first_window)?);
        let mut times = [0.0; 3];
        let mut lists: [Ranking<String>; 3] = Default::default();
        for (slot, vector, retrieval) in [
            (DENSE, &whole, Retrieval::Dense),
            (DENSE_FIRST_WINDOW, &first, Retrieval::Dense),
            (BM25, &whole, Retrieval::Bm25),
        ] {
            let started = Instant::now();
            let search = Search::new(&task.query, vector, n);
            lists[slot] = ranking(edge.search_by(&tenant, &search, retrieval).await?);
            times[slot] = started.elapsed().as_secs_f64() * 1000.0;
        }
        rankings.push(Rankings { lists, times });
        vectors.push((whole, first));
    }

    let (tuning, held_out) = split(tasks.len(), options.seed);
    let tuned = tune(&rankings, &tasks, &tuning, options.metric, options.seed);
    progress(&format!(
        "tuned on {} tasks ({} settings, {}): chose {} ({:.3}); best rrf {}, best convex {}; {}",
        tuning.len(),
        tuned.settings,
        tuned.metric,
        tuned.fusion,
        tuned.tuning_score,
        tuned.best_rrf,
        tuned.best_convex,
        tuned.why
    ));

    let mut results = Vec::new();
    let mut push = |scores: Scores| {
        progress(&format!(
            "{}: recall@10 {:.3} [{:.3}, {:.3}], nDCG@10 {:.3}, MRR {:.3}",
            scores.method,
            scores.recall_at_10,
            scores.recall_at_10_ci[0],
            scores.recall_at_10_ci[1],
            scores.ndcg_at_10,
            scores.mrr
        ));
        results.push(scores);
    };
    // The rankings alone, cut to the candidates a search returns.
    for (method, which) in [
        ("dense, first window", DENSE_FIRST_WINDOW),
        ("dense", DENSE),
        ("bm25", BM25),
    ] {
        let mut times = Vec::new();
        let scores: Vec<TaskScores> = (held_out.iter())
            .map(|&i| {
                let (list, time) = (&rankings[i].lists[which], rankings[i].times[which]);
                times.push(time);
                let ranked = first_seen(list.iter().take(CANDIDATES).map(|(_, _, d)| d.clone()));
                TaskScores::of(&ranked, &tasks[i].required)
            })
            .collect();
        push(Scores::of(method, None, &scores, &mut times, options.seed));
    }

    // The store's own hybrid search, as the pipeline runs it, under each setting.
    let parse = |spec: &str| {
        spec.parse::<Fusion>()
            .map_err(|e| EvalError::Pipeline(e.to_string()))
    };
    // (method, fusion, from the question's first window only, the component's version)
    let mut hybrid: Vec<(String, Fusion, bool, Option<String>)> = vec![
        ("hybrid, first window".into(), Fusion::default(), true, None),
        ("hybrid rrf".into(), Fusion::default(), false, None),
        (
            "hybrid weighted rrf".into(),
            parse(&tuned.best_rrf)?,
            false,
            None,
        ),
        (
            "hybrid convex".into(),
            parse(&tuned.best_convex)?,
            false,
            None,
        ),
        ("hybrid tuned".into(), parse(&tuned.fusion)?, false, None),
    ];

    let refused = |e: ComponentError| EvalError::Pipeline(format!("rerank components: {e:?}"));
    let disk = sluice_rerank::Disk::open(&scratch.path().join("components")).map_err(refused)?;
    let registry = sluice_app::registry(&rerank, Arc::clone(&embedder), Arc::new(disk))?;
    for name in &options.components {
        let bytes = sluice_rerank::built_component(name).map_err(EvalError::Pipeline)?;
        let version = registry
            .upload(&tenant, &bytes, None, &Cancel::new())
            .map_err(refused)?;
        let method = format!("hybrid + {name}");
        hybrid.push((method, Fusion::default(), false, Some(version.version)));
    }

    for (method, fusion, first, component) in &hybrid {
        match component {
            Some(v) => {
                registry.activate(&tenant, v).map_err(refused)?;
            }
            None => registry.deactivate(&tenant).map_err(refused)?,
        }
        // Activated in this process just now: known, so answered from memory.
        let by = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let active = registry
            .active(&tenant, by)
            .await
            .map_err(EvalError::Pipeline)?;
        if active.is_some() != component.is_some() {
            return Err(EvalError::Pipeline(
                "the registry does not run the component just activated".into(),
            ));
        }
        let mut times = Vec::with_capacity(held_out.len());
        let mut scores = Vec::with_capacity(held_out.len());
        for &i in &held_out {
            let task = &tasks[i];
            let vector = if *first { &vectors[i].1 } else { &vectors[i].0 };
            let started = Instant::now();
            let search = Search::new(&task.query, vector, CANDIDATES).fusion(*fusion);
            let mut hits = edge.search_by(&tenant, &search, Retrieval::Hybrid).await?;
            if let Some(active) = &active {
                let head = &hits[..hits.len().min(RERANKED)];
                let input = sluice_contract::stages::RerankInput {
                    query: &task.query,
                    query_vector: vector,
                    hits: head,
                    context: &Default::default(),
                    request_id: "",
                };
                let order = (active.rerank(&input).order)
                    .map_err(|e| EvalError::Pipeline(format!("{e:?}")))?;
                let mut reordered: Vec<Hit> =
                    order.into_iter().map(|(i, _)| head[i].clone()).collect();
                reordered.extend_from_slice(&hits[head.len()..]);
                hits = reordered;
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            scores.push(TaskScores::of(&documents_of(&hits), &task.required));
        }
        let fusion = component.is_none().then_some(*fusion);
        push(Scores::of(
            method,
            fusion,
            &scores,
            &mut times,
            options.seed,
        ));
    }
    // The held-out tasks as an evaluation set, asked as a retrieval-only run of it asks them
    // through the API (`k` chunks under the default fusion, in the pipeline's order) and
    // scored by the same code.
    let set = held_out_set(&tasks, &held_out);
    let mut asked = Vec::with_capacity(held_out.len());
    for (question, &i) in set.questions.iter().zip(&held_out) {
        let cut;
        let vector = match question.question == tasks[i].query {
            true => &vectors[i].0,
            false => {
                cut = (embedder.embed(&[question.question.as_str()])?.pop())
                    .ok_or_else(|| EvalError::Pipeline("no query vector".into()))?;
                &cut
            }
        };
        let search = Search::new(&question.question, vector, RUN_K);
        let mut hits = edge.search_by(&tenant, &search, Retrieval::Hybrid).await?;
        hits.sort_by(Hit::rank_order);
        let sources = hits.into_iter().map(|h| h.document.id).collect();
        let outcome = quality::Outcome {
            sources,
            ..quality::Outcome::default()
        };
        asked.push(quality::score(question, outcome));
    }
    let as_run = AsRun {
        k: RUN_K,
        figures: quality::figures(&asked, quality::SEED),
        set,
        documents: evaluated,
    };
    let mean_required = mean(held_out.iter().map(|&i| tasks[i].required.len() as f64));
    Ok(Report {
        data: data.display().to_string(),
        documents: count,
        chunks,
        ingest_seconds,
        embed_threads: settings.embed.threads,
        tasks: tasks.len(),
        tuning_tasks: tuning.len(),
        held_out_tasks: held_out.len(),
        seed: options.seed,
        mean_required,
        random_recall_at_10: 10.0 / count as f64,
        tuned,
        results,
        as_run,
    })
}

/// A task's query as a request carries it: whole when it fits [`MAX_QUERY_CHARS`], else its
/// whole sentences that fit (τ²-bench's longest run to 7,000 characters).
pub fn askable(query: &str) -> String {
    if query.chars().count() <= MAX_QUERY_CHARS {
        return query.to_string();
    }
    let mut cut = String::new();
    for sentence in query.split_inclusive(['.', '!', '?']) {
        if cut.chars().count() + sentence.chars().count() > MAX_QUERY_CHARS {
            break;
        }
        cut.push_str(sentence);
    }
    match cut.trim().is_empty() {
        true => query.chars().take(MAX_QUERY_CHARS).collect(),
        false => cut.trim().to_string(),
    }
}

/// The `held_out` tasks as an evaluation set (`PUT /v1/evals/sets/{name}`): each task's
/// question ([`askable`]) expecting its required documents, its id `t<position in the
/// dataset>`.
pub fn held_out_set(tasks: &[Task], held_out: &[usize]) -> EvalSet {
    EvalSet {
        description: Some("the held-out tasks of `sluice eval retrieval`".into()),
        questions: (held_out.iter())
            .map(|&i| EvalQuestion {
                id: format!("t{}", i + 1),
                question: askable(&tasks[i].query),
                documents: tasks[i].required.clone(),
                first: None,
                facts: Vec::new(),
                rerank_context: None,
                filter: None,
                principals: None,
            })
            .collect(),
    }
}

/// Writes an evaluation's `report.json` (the report) and `report.md` (its `table`) into the
/// folder `out` (made if missing); returns the two paths.
pub fn write_reports(
    out: &Path,
    report: &impl Serialize,
    table: &str,
) -> Result<[std::path::PathBuf; 2]> {
    let made = |path: &Path| EvalError::io(format!("writing {}", path.display()));
    std::fs::create_dir_all(out).map_err(made(out))?;
    let (json, md) = (out.join("report.json"), out.join("report.md"));
    let bytes = serde_json::to_vec_pretty(report)
        .map_err(|e| EvalError::Data(format!("the report is not JSON: {e}")))?;
    std::fs::write(&json, bytes).map_err(made(&json))?;
    std::fs::write(&md, table).map_err(made(&md))?;
    Ok([json, md])
}

/// Writes what a server needs to run the held-out tasks of `report` as an evaluation set,
/// into `out`: `documents.json`, the documents evaluated (what `sluice ingest FILE` sends),
/// and `set.json`, the set (what `sluice eval sets put NAME FILE` stores); returns the
/// folder.
pub fn write_set<'a>(out: &'a Path, report: &Report) -> Result<&'a Path> {
    let documents = serde_json::json!({ "documents": report.as_run.documents });
    for (name, value) in [
        ("documents.json", documents),
        ("set.json", serde_json::json!(report.as_run.set)),
    ] {
        let path = out.join(name);
        std::fs::write(&path, value.to_string())
            .map_err(EvalError::io(format!("writing {}", path.display())))?;
    }
    Ok(out)
}

/// The report as a Markdown table.
pub fn table(report: &Report) -> String {
    let mut out = format!(
        "{} tasks, {} documents ({} chunks, ingested in {:.1} s: {:.0} chunks/s, embedded on {} threads). Fusion tuned on {} tasks by {} ({} settings; chose {}, {:.3} on them: {}); every row below is scored on the other {} (seed {}), {:.1} required documents each on average; a random ranking's recall@10 is {:.3}. The interval is a bootstrap 95 % interval of the mean recall@10 ({} resamples).\n\n",
        report.tasks,
        report.documents,
        report.chunks,
        report.ingest_seconds,
        report.chunks as f64 / report.ingest_seconds.max(1e-9),
        report.embed_threads,
        report.tuning_tasks,
        report.tuned.metric,
        report.tuned.settings,
        report.tuned.fusion,
        report.tuned.tuning_score,
        report.tuned.why,
        report.held_out_tasks,
        report.seed,
        report.mean_required,
        report.random_recall_at_10,
        BOOTSTRAP,
    );
    out.push_str("| method | fusion | recall@5 | recall@10 | recall@10 95 % CI | recall@20 | nDCG@10 | MRR | median ms |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for s in &report.results {
        out.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.3}–{:.3} | {:.3} | {:.3} | {:.3} | {:.1} |\n",
            s.method,
            s.fusion
                .as_deref()
                .map_or(String::new(), |f| format!("`{f}`")),
            s.recall_at_5,
            s.recall_at_10,
            s.recall_at_10_ci[0],
            s.recall_at_10_ci[1],
            s.recall_at_20,
            s.ndcg_at_10,
            s.mrr,
            s.median_ms
        ));
    }
    let figure = |f: Option<quality::Figure>| {
        f.map_or("-".into(), |f| {
            format!("{:.3} ({:.3}–{:.3})", f.value, f.ci[0], f.ci[1])
        })
    };
    out.push_str(&format!(
        "\nAs a retrieval-only run of `set.json` (the held-out tasks) with `k` {} reports them on a server holding these documents: recall {}, MRR {}.\n",
        report.as_run.k,
        figure(report.as_run.figures.recall),
        figure(report.as_run.figures.mrr),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        let ranked = ids(&["a", "x", "b", "y", "z"]);
        let required = ids(&["a", "b", "c"]);
        assert_eq!(recall_at(&ranked, &required, 1), 1.0 / 3.0);
        assert_eq!(recall_at(&ranked, &required, 5), 2.0 / 3.0);
        assert_eq!(reciprocal_rank(&ranked, &required), 1.0);
        assert_eq!(
            reciprocal_rank(&ids(&["x", "y", "b"]), &required),
            1.0 / 3.0
        );
        assert_eq!(reciprocal_rank(&ids(&["x"]), &required), 0.0);
        // DCG: 1/log2(2) + 1/log2(4) = 1.5; ideal: 1 + 1/log2(3) + 1/log2(4).
        let ideal = 1.0 + 1.0 / 3f64.log2() + 0.5;
        assert!((ndcg_at(&ranked, &required, 10) - 1.5 / ideal).abs() < 1e-12);
        assert_eq!(ndcg_at(&ids(&["a", "b", "c"]), &required, 10), 1.0);
        assert_eq!(ndcg_at(&ids(&["x"]), &required, 10), 0.0);
    }

    #[test]
    fn the_split_is_seeded_disjoint_and_whole() {
        let (tuning, held_out) = split(97, 1);
        assert_eq!((tuning.len(), held_out.len()), (48, 49));
        let mut all: Vec<usize> = tuning.iter().chain(&held_out).copied().collect();
        all.sort();
        assert_eq!(all, (0..97).collect::<Vec<_>>(), "every task once");
        assert_eq!(
            split(97, 1),
            (tuning.clone(), held_out),
            "same seed, same split"
        );
        assert_ne!(split(97, 2).0, tuning, "another seed, another split");
        assert_ne!(
            tuning,
            (0..48).collect::<Vec<_>>(),
            "shuffled, not the file's order"
        );
        assert_eq!(split(2, 7).0.len(), 1);
    }

    #[test]
    fn the_bootstrap_interval_holds_the_mean_and_narrows_with_agreement() {
        let mixed: Vec<f64> = (0..50)
            .map(|i| if i % 2 == 0 { 1.0 } else { 0.0 })
            .collect();
        let [lo, hi] = bootstrap_ci(&mixed, 1);
        assert!(lo < 0.5 && 0.5 < hi, "[{lo}, {hi}]");
        // The standard error of a mean of 50 fair coins is 0.07: the 95 % interval is ±0.14.
        assert!((hi - lo - 0.28).abs() < 0.06, "[{lo}, {hi}]");
        let [lo, hi] = bootstrap_ci(&[0.3; 20], 1);
        assert!(
            (lo - 0.3).abs() < 1e-12 && (hi - 0.3).abs() < 1e-12,
            "no spread, no width"
        );
        assert_eq!(bootstrap_ci(&mixed, 1), bootstrap_ci(&mixed, 1), "seeded");
    }

    #[test]
    fn the_grid_holds_the_default_both_rules_and_no_setting_twice() {
        let grid = grid();
        assert_eq!(grid[0], Fusion::default(), "plain RRF first: it wins ties");
        assert!(grid.contains(&Fusion::Convex { dense: 1.0 }));
        assert!(grid.contains(&Fusion::Convex { dense: 0.0 }));
        assert!(grid.contains(&Fusion::Rrf {
            k: 2,
            dense: 1.0,
            bm25: 0.25
        }));
        for (i, f) in grid.iter().enumerate() {
            assert!(!grid[..i].contains(f), "{f} twice");
            assert_eq!(f.to_string().parse::<Fusion>().unwrap(), *f);
        }
    }

    /// A setting beats the default only when the interval of the paired difference is above
    /// zero: a lead that a few tasks' luck could make is not enough.
    #[test]
    fn a_setting_beats_the_default_only_beyond_the_noise() {
        let default = [0.5; 24];
        let clear: Vec<f64> = (0..24).map(|i| 0.6 + (i % 3) as f64 * 0.01).collect();
        let (wins, difference, [low, _]) = beats(&clear, &default, 3);
        assert!(wins && low > 0.0 && difference > 0.1, "{difference} {low}");
        // Ahead on average (+0.04) by two lucky tasks of 24: within the noise.
        let mut lucky = default;
        lucky[0] = 1.0;
        lucky[1] = 0.96;
        let (wins, difference, [low, high]) = beats(&lucky, &default, 3);
        assert!(difference > 0.0, "{difference}");
        assert!(!wins && low <= 0.0 && high > 0.0, "{low} {high}");
    }

    /// Settings that each help on some tasks and hurt on as many others: the best of them on
    /// the tasks it was picked on is ahead of the default beyond the noise, but picked on
    /// three folds it does no better on the fourth, so the default stays. A setting better on
    /// every task is chosen.
    #[test]
    fn tuning_keeps_the_default_against_a_lucky_setting_and_takes_a_real_gain() {
        let tasks = 24;
        let default = Fusion::default();
        let mut rng = SplitMix(11);
        let mut tried = vec![(default, vec![(0.5, 0.5); tasks])];
        for f in grid().into_iter().filter(|f| *f != default) {
            let scores = (0..tasks)
                .map(|_| match rng.below(2) {
                    0 => (0.6, 0.5),
                    _ => (0.4, 0.5),
                })
                .collect();
            tried.push((f, scores));
        }
        let tuned = choose(&tried, Metric::Recall10, 3);
        let scores_of = |name: &str| -> Vec<f64> {
            let (_, scores) = tried.iter().find(|(f, _)| f.to_string() == name).unwrap();
            scores.iter().map(|s| s.0 + s.1 / 1000.0).collect()
        };
        let (in_sample, lead, _) = beats(&scores_of(&tuned.best), &scores_of(&tuned.fusion), 3);
        assert!(
            in_sample && lead > 0.03,
            "the premise: a lucky lead of {lead}"
        );
        assert_eq!(tuned.fusion, default.to_string(), "{}", tuned.why);
        assert!(tuned.why.contains("within the noise"), "{}", tuned.why);

        let real = tried[7].0;
        tried[7].1 = (0..tasks)
            .map(|i| (0.7 + (i % 3) as f64 * 0.05, 0.5))
            .collect();
        let tuned = choose(&tried, Metric::Recall10, 3);
        assert_eq!(tuned.fusion, real.to_string(), "{}", tuned.why);
        assert!(
            tuned.why.contains("so the best setting is chosen"),
            "{}",
            tuned.why
        );
    }

    #[test]
    fn tuning_picks_the_fusion_the_labels_favour_on_its_half_only() {
        // BM25 finds the required document first; dense puts it 31st, behind noise.
        let doc = |d: &str, score: f32| (format!("{d}#0"), score, d.to_string());
        let mut dense: Ranking<String> = (0..30)
            .map(|i| doc(&format!("noise{i}"), 1.0 - i as f32 / 100.0))
            .collect();
        dense.push(doc("wanted", 0.5));
        let bm25: Ranking<String> = vec![doc("wanted", 2.0), doc("noise0", 1.0)];
        let rankings: Vec<Rankings> = (0..4)
            .map(|_| Rankings {
                lists: [dense.clone(), dense.clone(), bm25.clone()],
                times: [0.0; 3],
            })
            .collect();
        // Tasks 2 and 3 want a document no ranking has: were they read, no score could be 1.
        let wants = |d: &str| Task {
            query: "q".into(),
            required: vec![d.into()],
        };
        let tasks = vec![
            wants("wanted"),
            wants("wanted"),
            wants("absent"),
            wants("absent"),
        ];
        for metric in [Metric::Recall10, Metric::Ndcg10, Metric::Mrr] {
            let tuned = tune(&rankings, &tasks, &[0, 1], metric, 7);
            assert_eq!(tuned.tuning_score, 1.0, "{metric:?}: {tuned:?}");
            assert_eq!(tuned.settings, grid().len());
            assert_eq!(tuned.tried.len(), grid().len());
            // Plain RRF has it 2nd (noise0 is 1st in dense and 2nd in BM25): the tie on
            // recall@10 is broken by nDCG@10, for a setting that puts it first.
            let best: Fusion = tuned.fusion.parse().unwrap();
            assert_ne!(best, Fusion::default(), "{metric:?}");
            let fused = best.fuse(dense.clone(), bm25.clone(), 10);
            assert_eq!(fused[0].1, "wanted", "{metric:?}: {best}");
        }
        let plain = Fusion::default().fuse(dense.clone(), bm25.clone(), 10);
        assert_eq!(plain[1].1, "wanted", "the premise: plain RRF has it 2nd");
    }

    #[test]
    fn a_tenants_own_questions_load_from_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("documents.json"),
            r#"[{"id": "a", "title": "A", "content": "alpha"}, {"id": "b", "title": "B", "content": "beta"}]"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("questions.jsonl"),
            "{\"question\": \"what is alpha?\", \"relevant\": [\"a\"]}\n\n{\"question\": \"none\", \"relevant\": []}\n",
        )
        .unwrap();
        let (documents, tasks) = load(dir.path()).unwrap();
        assert_eq!(documents.len(), 2);
        assert_eq!(
            tasks.len(),
            1,
            "a question without relevant documents is left out"
        );
        assert_eq!(
            (tasks[0].query.as_str(), tasks[0].required.as_slice()),
            ("what is alpha?", &["a".to_string()][..])
        );
        std::fs::write(dir.path().join("questions.jsonl"), "{\"question\": 1}\n").unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("questions.jsonl line 1"), "{e:#}");
    }

    #[test]
    fn a_query_keeps_the_need_and_drops_the_role_play() {
        let q = query_of(
            "You are playing the role of a customer contacting a customer service representative agent. \
             Your character is Sarah, who earns $100,000 annually.\n\nYou want the card with the highest cash back. \
             Never respond as a customer service representative/assistant.",
        );
        assert_eq!(
            q,
            "Your character is Sarah, who earns $100,000 annually. You want the card with the highest cash back."
        );
    }

    #[test]
    fn a_query_longer_than_a_request_is_asked_as_the_whole_sentences_that_fit() {
        let short = "What does a transfer cost? Today.";
        assert_eq!(askable(short), short);
        let sentence = "I want to know what my card costs each year. ";
        let long = sentence.repeat(MAX_QUERY_CHARS / sentence.len() + 5);
        let cut = askable(&long);
        assert!(cut.chars().count() <= MAX_QUERY_CHARS, "{}", cut.len());
        assert!(cut.chars().count() > MAX_QUERY_CHARS - sentence.len());
        assert!(cut.ends_with("year."), "whole sentences: {cut:?}");
        // One sentence longer than the limit is cut where the limit falls.
        let run_on = "é".repeat(MAX_QUERY_CHARS + 10);
        assert_eq!(askable(&run_on).chars().count(), MAX_QUERY_CHARS);
    }
}
