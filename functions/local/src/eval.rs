//! `sluice eval retrieval`: how well each way of retrieving finds the documents a task needs,
//! on τ²-bench's banking_knowledge domain (698 documents, 97 tasks with `required_documents`),
//! as shipped in the PyPI package `inspect-evals` (MIT; `scripts/setup.sh eval` unpacks it).
//!
//! The documents are ingested as `sluice ingest` would (same chunking, same model) into a
//! fresh Qdrant Edge store. Each task becomes one query ([`query_of`]); chunks are retrieved
//! by dense vectors alone, BM25 alone, both fused by RRF (what the pipeline does), and the
//! fused candidates reordered by each rerank component asked for. Chunks are turned into a
//! ranking of documents (a document ranks where its first chunk does), which is scored against
//! the task's required documents: recall@5/10/20, nDCG@10 (binary relevance) and MRR.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sluice_core::ingest::Document;
use sluice_core::stages::{ComponentError, Components, Embedder, Hit, Reranker};
use sluice_core::{Config, Tenant};
use sluice_retrieve::{EdgeStore, Retrieval};

/// The tenant the evaluation's documents are ingested for.
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
/// the embedding model its first 256 tokens.
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

/// Reads `documents.json` and `tasks.json` from `dir`; tasks without required documents are
/// left out.
pub fn load(dir: &Path) -> Result<(Vec<Document>, Vec<Task>)> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (run `scripts/setup.sh eval`, which unpacks it from inspect-evals)",
                path.display()
            )
        })
    };
    let documents: Vec<RawDocument> =
        serde_json::from_str(&read("documents.json")?).context("documents.json")?;
    let tasks: Vec<RawTask> = serde_json::from_str(&read("tasks.json")?).context("tasks.json")?;
    let documents = documents
        .into_iter()
        .map(|d| Document {
            source: Some(d.id.clone()),
            id: d.id,
            title: Some(d.title),
            text: d.content,
            metadata: Default::default(),
        })
        .collect();
    let tasks = tasks
        .into_iter()
        .filter(|t| !t.required_documents.is_empty())
        .map(|t| Task {
            query: query_of(&t.user_scenario.instructions),
            required: t.required_documents,
        })
        .collect();
    Ok((documents, tasks))
}

/// Documents in the order their first chunk appears.
pub fn documents_of(hits: &[Hit]) -> Vec<String> {
    let mut seen = HashSet::new();
    hits.iter()
        .filter(|h| seen.insert(h.document.id.as_str()))
        .map(|h| h.document.id.clone())
        .collect()
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

/// Mean scores of one way of retrieving over every task.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scores {
    /// `dense`, `bm25`, `hybrid`, or `hybrid + <component>`.
    pub method: String,
    /// Mean recall@5.
    pub recall_at_5: f64,
    /// Mean recall@10.
    pub recall_at_10: f64,
    /// Mean recall@20.
    pub recall_at_20: f64,
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Median time of one retrieval (and rerank), milliseconds.
    pub median_ms: f64,
}

/// What `sluice eval retrieval` writes to `report.json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The dataset folder.
    pub data: String,
    /// Documents ingested.
    pub documents: usize,
    /// Chunks they made.
    pub chunks: usize,
    /// Tasks evaluated.
    pub tasks: usize,
    /// Mean required documents per task.
    pub mean_required: f64,
    /// Expected recall@10 of a random ranking of the documents.
    pub random_recall_at_10: f64,
    /// One row per method.
    pub results: Vec<Scores>,
}

/// Runs the evaluation: the first `limit` tasks (all without), with each of `components`
/// (names of built components) on top of hybrid. With `documents`, only that many documents
/// are ingested: every one the evaluated tasks require, then the others in file order (a
/// smaller haystack, for a quick run).
pub async fn run(
    config: &Config,
    data: &Path,
    limit: Option<usize>,
    documents_limit: Option<usize>,
    components: &[String],
    progress: impl Fn(&str),
) -> Result<Report> {
    let (mut documents, mut tasks) = load(data)?;
    if let Some(limit) = limit {
        tasks.truncate(limit);
    }
    if let Some(n) = documents_limit {
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
    if tasks.is_empty() {
        bail!("{}: no tasks with required documents", data.display());
    }
    let scratch = tempfile::tempdir()?;
    let mut config = config.clone();
    config.data_dir = scratch.path().to_path_buf();
    config.ingest.max_documents = config.ingest.max_documents.max(documents.len());
    // Quality, not latency, is measured here: no component is cut off by the request-time
    // deadline or fuel budget (100 candidates are more than a request usually reranks).
    config.rerank.deadline = Duration::from_secs(2);
    config.rerank.fuel = config.rerank.fuel.max(2_000_000_000);
    config.rerank.max_candidates = config.rerank.max_candidates.max(CANDIDATES);
    let embedder: Arc<dyn Embedder> = Arc::new(
        sluice_embed::MiniLm::load(&config.model_dir)?.with_max_windows(config.embed_windows),
    );
    // The same model reading only a question's first window, as it did before windows (and
    // as sentence-transformers truncates): the comparison the "first window" methods make.
    let first_window: Arc<dyn Embedder> =
        Arc::new(sluice_embed::MiniLm::load(&config.model_dir)?.with_max_windows(1));
    let edge = EdgeStore::open(scratch.path(), sluice_embed::DIM)?;
    let tenant = Tenant::new(TENANT)?;
    let ingest = sluice_core::Ingest::new(
        config.ingest.clone(),
        Arc::clone(&embedder),
        Arc::new(edge.clone()),
    );
    progress(&format!("ingesting {} documents", documents.len()));
    let started = Instant::now();
    let count = documents.len();
    let ingested = ingest.ingest(&tenant, documents).await?;
    progress(&format!(
        "ingested {} documents as {} chunks in {:.1} s",
        ingested.documents,
        ingested.chunks,
        started.elapsed().as_secs_f64()
    ));

    let refused = |e: ComponentError| anyhow::anyhow!("rerank components: {e:?}");
    let disk = sluice_sandbox::Disk::open(&scratch.path().join("components")).map_err(refused)?;
    let host = Arc::new(sluice_sandbox::ModelHost(Arc::clone(&embedder)));
    let registry = sluice_sandbox::Registry::from_config(&config.rerank, host, Arc::new(disk))
        .map_err(refused)?;
    let mut methods: Vec<(String, Option<String>)> = vec![
        ("dense, first window".into(), None),
        ("dense".into(), None),
        ("bm25".into(), None),
        ("hybrid, first window".into(), None),
        ("hybrid".into(), None),
    ];
    for name in components {
        let bytes = sluice_sandbox::built_component(name).map_err(anyhow::Error::msg)?;
        let version = registry.upload(&tenant, &bytes).map_err(refused)?;
        methods.push((format!("hybrid + {name}"), Some(version.version)));
    }

    let mut results = Vec::new();
    for (method, component) in &methods {
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
            .map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            active.is_some() == component.is_some(),
            "the registry does not run the component just activated"
        );
        let retrieval = match method.as_str() {
            "dense" | "dense, first window" => Retrieval::Dense,
            "bm25" => Retrieval::Bm25,
            _ => Retrieval::Hybrid,
        };
        let query_embedder = if method.ends_with("first window") {
            &first_window
        } else {
            &embedder
        };
        let mut scores = Scores {
            method: method.clone(),
            ..Scores::default()
        };
        let mut times = Vec::with_capacity(tasks.len());
        for task in &tasks {
            let vector = query_embedder
                .embed(&[task.query.as_str()])?
                .pop()
                .context("no query vector")?;
            let started = Instant::now();
            let mut hits = edge
                .search_by(&tenant, &task.query, &vector, CANDIDATES, None, retrieval)
                .await?;
            if let Some(active) = &active {
                let head = &hits[..hits.len().min(RERANKED)];
                let order = active
                    .rerank(&task.query, &vector, head)
                    .map_err(anyhow::Error::msg)?;
                let mut reordered: Vec<Hit> = order.into_iter().map(|i| head[i].clone()).collect();
                reordered.extend_from_slice(&hits[head.len()..]);
                hits = reordered;
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            let ranked = documents_of(&hits);
            scores.recall_at_5 += recall_at(&ranked, &task.required, 5);
            scores.recall_at_10 += recall_at(&ranked, &task.required, 10);
            scores.recall_at_20 += recall_at(&ranked, &task.required, 20);
            scores.ndcg_at_10 += ndcg_at(&ranked, &task.required, 10);
            scores.mrr += reciprocal_rank(&ranked, &task.required);
        }
        let n = tasks.len() as f64;
        for s in [
            &mut scores.recall_at_5,
            &mut scores.recall_at_10,
            &mut scores.recall_at_20,
            &mut scores.ndcg_at_10,
            &mut scores.mrr,
        ] {
            *s /= n;
        }
        times.sort_by(f64::total_cmp);
        scores.median_ms = times[times.len() / 2];
        progress(&format!(
            "{method}: recall@10 {:.3}, nDCG@10 {:.3}, MRR {:.3}",
            scores.recall_at_10, scores.ndcg_at_10, scores.mrr
        ));
        results.push(scores);
    }
    let mean_required =
        tasks.iter().map(|t| t.required.len()).sum::<usize>() as f64 / tasks.len() as f64;
    Ok(Report {
        data: data.display().to_string(),
        documents: count,
        chunks: ingested.chunks,
        tasks: tasks.len(),
        mean_required,
        random_recall_at_10: 10.0 / count as f64,
        results,
    })
}

/// The report as a Markdown table.
pub fn table(report: &Report) -> String {
    let mut out = format!(
        "{} tasks, {} documents ({} chunks), {:.1} required documents per task on average; a random ranking's recall@10 is {:.3}.\n\n",
        report.tasks,
        report.documents,
        report.chunks,
        report.mean_required,
        report.random_recall_at_10
    );
    out.push_str("| method | recall@5 | recall@10 | recall@20 | nDCG@10 | MRR | median ms |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for s in &report.results {
        out.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} |\n",
            s.method,
            s.recall_at_5,
            s.recall_at_10,
            s.recall_at_20,
            s.ndcg_at_10,
            s.mrr,
            s.median_ms
        ));
    }
    out
}

/// The default dataset folder: `$SLUICE_HOME/eval/tau2-banking`.
pub fn default_data(config: &Config) -> PathBuf {
    config.home.join("eval/tau2-banking")
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
}
