//! `test`: a component run on questions over a corpus as the answer path runs it (a prompt
//! component: `assemble`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice_contract::Tenant;
use sluice_contract::components::{CallCosts, Components};
use sluice_contract::stages::{
    ActiveComponent, Embedder, Hit, RerankInput, Reranker, Search, Store,
};
use sluice_core::Ingest;

use crate::{LoopError, Question, Result, pipeline, questions, report};

/// The component refused at upload, as the loop's error.
fn refused(file: &Path, reason: impl std::fmt::Display) -> LoopError {
    LoopError::Refused {
        file: file.display().to_string(),
        reason: reason.to_string(),
    }
}

/// A rerank component as the answer path runs it: uploaded to a registry of its own in a
/// scratch folder (validated, compiled, smoke-run under the configured limits) and active.
pub(crate) struct Local {
    pub(crate) active: Arc<dyn ActiveComponent>,
    _scratch: tempfile::TempDir,
}

impl Local {
    /// The component `bytes` (read from `file`), with `embedder` behind its host calls.
    pub(crate) async fn start(
        settings: &sluice_app::Settings,
        embedder: &Arc<dyn Embedder>,
        bytes: &[u8],
        file: &Path,
    ) -> Result<Self> {
        let scratch = tempfile::tempdir().map_err(LoopError::io("making a scratch folder"))?;
        let disk =
            sluice_rerank::Disk::open(&scratch.path().join("components")).map_err(pipeline)?;
        let registry = sluice_app::registry(&settings.rerank, Arc::clone(embedder), Arc::new(disk))
            .map_err(pipeline)?;
        let tenant = Tenant::new("local").map_err(pipeline)?;
        let cancel = sluice_contract::cancel::Cancel::new();
        let version =
            (registry.upload(&tenant, bytes, None, &cancel)).map_err(|e| refused(file, e))?;
        registry
            .activate(&tenant, &version.version)
            .map_err(pipeline)?;
        let by = tokio::time::Instant::now() + Duration::from_secs(60);
        let active = (registry.active(&tenant, by).await)
            .map_err(LoopError::Pipeline)?
            .ok_or_else(|| {
                LoopError::Pipeline("the registry does not run the component just activated".into())
            })?;
        Ok(Self {
            active,
            _scratch: scratch,
        })
    }
}

/// What happened to one question.
struct Outcome {
    fused: Vec<String>,
    reranked: std::result::Result<Vec<String>, String>,
    dropped: Vec<String>,
    /// What the order breaks of the question's expectation.
    broken: Vec<String>,
    fuel: u64,
    wall: Duration,
}

/// A candidate as the reports name it: its document's id and chunk.
pub(crate) fn label(hit: &Hit) -> String {
    format!("{}#{}", hit.document.id, hit.chunk)
}

/// Each question's query vector and candidates, retrieved as the answer path retrieves them
/// (the tenant's fusion, `k` candidates): from `corpus` ingested into a scratch store, or from
/// the configured store (what `sluice serve` has ingested). What was searched goes to
/// standard error.
pub(crate) async fn retrieve(
    settings: &sluice_app::Settings,
    questions: &[Question],
    corpus: Option<&Path>,
    tenant: &Tenant,
    embedder: &Arc<dyn Embedder>,
) -> Result<Vec<(Vec<f32>, Vec<Hit>)>> {
    let config = &settings.config;
    let embedder = Arc::clone(embedder);
    let scratch = tempfile::tempdir().map_err(LoopError::io("making a scratch folder"))?;
    let store: Arc<dyn Store> = match corpus {
        Some(dir) => {
            let (documents, _) =
                sluice_convert::read_files(&[dir.to_path_buf()], &settings.convert, &|_| {})
                    .map_err(pipeline)?;
            let store: Arc<dyn Store> = Arc::new(
                sluice_retrieve::EdgeStore::open(&scratch.path().join("store"), sluice_embed::DIM)
                    .map_err(pipeline)?,
            );
            let mut ingest_config = config.ingest.clone();
            ingest_config.max_documents = ingest_config.max_documents.max(documents.len());
            let ingest = Ingest::new(ingest_config, Arc::clone(&embedder), Arc::clone(&store));
            let report = ingest.ingest(tenant, documents).await.map_err(pipeline)?;
            eprintln!(
                "corpus: {} documents, {} chunks from {}",
                report.documents,
                report.chunks,
                dir.display()
            );
            store
        }
        None => {
            // A local store that is not there is not made here (an empty one has nothing to
            // test on): the message says where it was looked for.
            if let sluice_retrieve::StoreBackend::Edge { dir } = &settings.store.backend
                && !dir.exists()
            {
                return Err(LoopError::Invalid(format!(
                    "no local store at {} (SLUICE_DATA_DIR): pass --corpus DIR with your \
                     documents, or run from where `sluice serve` keeps its data",
                    dir.display()
                )));
            }
            let store = sluice_app::store(&settings.store).map_err(|e| {
                LoopError::Pipeline(format!(
                    "opening the configured store (the local corpus): {e}; stop `sluice serve` \
                     or pass --corpus"
                ))
            })?;
            let chunks = store.count(tenant).await.map_err(pipeline)?;
            if chunks == 0 {
                return Err(LoopError::Invalid(format!(
                    "tenant {tenant} has no documents in the configured store; ingest some or \
                     pass --corpus DIR"
                )));
            }
            eprintln!("corpus: tenant {tenant}'s {chunks} chunks in the configured store");
            store
        }
    };

    let fusion = config.answer.fusion.for_tenant(tenant);
    let mut retrieved = Vec::with_capacity(questions.len());
    for q in questions {
        let vector = (embedder.embed(&[q.query.as_str()]).map_err(pipeline)?.pop())
            .ok_or_else(|| LoopError::Pipeline("the model returned no query vector".into()))?;
        let k = q.k.unwrap_or(config.answer.top_k);
        let search = Search::new(&q.query, &vector, k).fusion(fusion);
        let hits = store.search(tenant, &search).await.map_err(pipeline)?;
        retrieved.push((vector, hits));
    }
    Ok(retrieved)
}

/// The component in `file` on the questions in `queries`: every question retrieved as the
/// answer path retrieves it (the tenant's fusion, `k` candidates), then reranked by the
/// component under the configured limits. Writes the two orders side by side, what was
/// dropped and the cost per call to `out`; fails when any call failed.
pub async fn test(
    settings: &sluice_app::Settings,
    file: &Path,
    queries: &Path,
    corpus: Option<&Path>,
    tenant: &Tenant,
    snapshot: Option<&Path>,
    out: &mut dyn Write,
) -> Result<()> {
    let bytes =
        std::fs::read(file).map_err(LoopError::io(format!("reading {}", file.display())))?;
    let questions = questions(queries)?;
    let embedder: Arc<dyn Embedder> =
        Arc::new(sluice_app::model(&settings.embed).map_err(pipeline)?);
    let retrieved = retrieve(settings, &questions, corpus, tenant, &embedder).await?;

    // The component as the answer path runs it: uploaded to a registry (validated, compiled,
    // smoke-run under the limits), then called with the same candidates and context.
    let prepared = (crate::sandbox(settings)?.compile(&bytes)).map_err(|e| refused(file, e))?;
    if prepared.is_prompt() {
        return crate::assemble::test_prompt(
            settings, &bytes, &questions, retrieved, tenant, &embedder, out,
        )
        .await;
    }
    let world = prepared.world();
    let local = Local::start(settings, &embedder, &bytes, file).await?;
    let active = Arc::clone(&local.active);
    eprintln!(
        "component: {} ({} bytes, {}), limits: fuel {}, deadline {:?}, memory {} MiB",
        file.display(),
        bytes.len(),
        world,
        settings.rerank.fuel,
        settings.rerank.deadline,
        settings.rerank.memory_mb
    );

    let mut outcomes = Vec::with_capacity(questions.len());
    for (q, (vector, hits)) in questions.iter().zip(retrieved) {
        let active = Arc::clone(&active);
        let (query, context, candidates) = (q.query.clone(), q.context.clone(), hits.clone());
        let call = tokio::task::spawn_blocking(move || {
            active.rerank(&RerankInput {
                query: &query,
                query_vector: &vector,
                hits: &candidates,
                context: &context,
                request_id: "",
            })
        })
        .await
        .map_err(pipeline)?;
        let kept: Option<Vec<usize>> =
            (call.order.as_ref().ok()).map(|order| order.iter().map(|&(i, _)| i).collect());
        let dropped = match kept {
            Some(order) => (0..hits.len())
                .filter(|i| !order.contains(i))
                .map(|i| label(&hits[i]))
                .collect(),
            None => Vec::new(),
        };
        let broken = match &call.order {
            Ok(order) => {
                let ids: Vec<&str> = (order.iter())
                    .map(|&(i, _)| hits[i].document.id.as_str())
                    .collect();
                q.expect.broken(&ids)
            }
            Err(_) => Vec::new(),
        };
        // Each list with its own scores: the fused one's, and the component's.
        let scored = |label: String, score: f32| format!("{label} {score:.3}");
        outcomes.push(Outcome {
            fused: (hits.iter()).map(|h| scored(label(h), h.score)).collect(),
            reranked: (call.order)
                .map(|order| {
                    (order.iter())
                        .map(|&(i, score)| scored(label(&hits[i]), score))
                        .collect()
                })
                .map_err(|failure| failure.to_string()),
            dropped,
            broken,
            fuel: call.fuel,
            wall: call.wall,
        });
    }

    let mut failed = 0;
    for (q, o) in questions.iter().zip(&outcomes) {
        let context: Vec<String> = q.context.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let context = match context.is_empty() {
            true => String::new(),
            false => format!("  [{}]", context.join(", ")),
        };
        writeln!(out, "\n{}{context}", q.query).map_err(report)?;
        match &o.reranked {
            Ok(order) => {
                let width = o.fused.iter().map(String::len).max().unwrap_or(5).max(5);
                let (n, fused) = ("#", "fused (score)");
                writeln!(out, "  {n:>3}  {fused:<width$}  component (its score)")
                    .map_err(report)?;
                for (i, fused) in o.fused.iter().enumerate() {
                    let component = order.get(i).map_or("", String::as_str);
                    writeln!(out, "  {:>3}  {fused:<width$}  {component}", i + 1)
                        .map_err(report)?;
                }
                if !o.dropped.is_empty() {
                    writeln!(out, "  dropped: {}", o.dropped.join(", ")).map_err(report)?;
                }
                for line in &o.broken {
                    writeln!(out, "  EXPECTATION FAILED: {line}").map_err(report)?;
                }
            }
            Err(e) => {
                failed += 1;
                writeln!(
                    out,
                    "  FAILED (the answer keeps the fused order, rerank_failed): {e}"
                )
                .map_err(report)?;
            }
        }
        let us = o.wall.as_secs_f64() * 1e6;
        writeln!(out, "  fuel {}, {us:.0} µs", o.fuel).map_err(report)?;
    }
    let costs = outcomes.iter().map(|o| (o.fuel, o.wall.as_micros() as u64));
    summary(costs, failed, out)?;
    let broken = outcomes.iter().filter(|o| !o.broken.is_empty()).count();
    if broken > 0 {
        return Err(LoopError::Failed(format!(
            "{broken} of {} questions' expectations failed",
            outcomes.len()
        )));
    }
    match snapshot {
        Some(path) => compare_snapshot(path, &questions, &outcomes, out),
        None => Ok(()),
    }
}

/// Each question's order as a snapshot line: the question, its context, the component's
/// order (document#chunk, best first) or how it failed.
fn snapshot_lines(questions: &[Question], outcomes: &[Outcome]) -> Vec<String> {
    (questions.iter().zip(outcomes))
        .map(|(q, o)| {
            let context = serde_json::to_string(&q.context).unwrap_or_default();
            let order = match &o.reranked {
                Ok(order) => (order.iter())
                    .filter_map(|scored| scored.split_whitespace().next())
                    .collect::<Vec<_>>()
                    .join(" "),
                Err(e) => format!("FAILED {e}"),
            };
            format!("{} {context} → {order}", q.query)
        })
        .collect()
}

/// Writes the orders to `path` when it does not exist; else compares them with it and fails
/// on any change, naming each (delete the file to accept the new orders).
fn compare_snapshot(
    path: &Path,
    questions: &[Question],
    outcomes: &[Outcome],
    out: &mut dyn Write,
) -> Result<()> {
    let now = snapshot_lines(questions, outcomes);
    let was = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = now.join("\n") + "\n";
            std::fs::write(path, text)
                .map_err(LoopError::io(format!("writing {}", path.display())))?;
            writeln!(out, "snapshot written to {}", path.display()).map_err(report)?;
            return Ok(());
        }
        Err(e) => return Err(LoopError::io(format!("reading {}", path.display()))(e)),
    };
    let was: Vec<&str> = was.lines().collect();
    let mut changed = 0;
    for i in 0..was.len().max(now.len()) {
        let (before, after) = (was.get(i).copied(), now.get(i).map(String::as_str));
        if before != after {
            changed += 1;
            writeln!(
                out,
                "SNAPSHOT CHANGED:\n  was: {}\n  now: {}",
                before.unwrap_or("(none)"),
                after.unwrap_or("(none)")
            )
            .map_err(report)?;
        }
    }
    match changed {
        0 => Ok(()),
        n => Err(LoopError::Failed(format!(
            "{n} orders differ from the snapshot {} (delete it to accept them)",
            path.display()
        ))),
    }
}

/// The last lines of a `test`: the calls' cost percentiles, and a failure when any of them
/// (`failed`) failed.
pub(crate) fn summary(
    costs: impl Iterator<Item = (u64, u64)>,
    failed: usize,
    out: &mut dyn Write,
) -> Result<()> {
    let costs = CallCosts::of(costs)
        .ok_or_else(|| LoopError::Invalid("no questions, so no calls".into()))?;
    writeln!(
        out,
        "\n{} calls, {failed} failed; fuel p50 {} p99 {}; time p50 {} µs p99 {} µs",
        costs.calls, costs.fuel_p50, costs.fuel_p99, costs.wall_us_p50, costs.wall_us_p99
    )
    .map_err(report)?;
    if failed > 0 {
        return Err(LoopError::Failed(format!(
            "{failed} of {} calls failed",
            costs.calls
        )));
    }
    Ok(())
}
