//! `bench`: a component's instantiate and call cost under the configured limits.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_contract::Tenant;
use sluice_contract::stages::{Embedder, RerankContext};
use sluice_rerank::Call;
use sluice_rerank::Candidate;
use sluice_rerank::measure::{measure, sample_candidates, sample_prompt};

use crate::{LoopError, Result, questions, report};

/// The synthetic set [`bench`] runs on without questions, as its output and the docs
/// describe it.
pub const SYNTHETIC: &str = "query \"what is the card limit\"; candidates doc-0, doc-1, … \
(title \"Document i\", a 144-word text about card limits and international transfers, fused \
score 1/(60+i), chunk i mod 7) with metadata audience = [\"enterprise\"] for every 4th, else \
[\"free\", \"pro\", \"enterprise\"]; draft = true for every 9th; topic = \"cards\"; \
updated_at one day older each from 2025-03-01; year 2025, 2024, 2023 in turn";

/// The synthetic input a prompt component is measured on, as the output describes it.
pub const SYNTHETIC_PROMPT: &str = "question \"what is the card limit\"; the sources of the \
synthetic set as the built-in prompt numbers them ([n] title, then text), with their built-in \
system and user messages, default settings and a budget of 7,117 tokens";

/// A prompt component's cost on the synthetic input at 0, 5 and 20 sources.
fn bench_prompt(
    sandbox: &sluice_rerank::Sandbox,
    prepared: &sluice_rerank::Prepared,
    file: &Path,
    runs: usize,
    out: &mut dyn Write,
) -> Result<()> {
    writeln!(
        out,
        "{} ({}): {runs} calls each, fresh store and instance per call\nsynthetic input: \
         {SYNTHETIC_PROMPT}",
        file.display(),
        prepared.world()
    )
    .map_err(report)?;
    let mut failed = false;
    for n in [0, 5, 20] {
        let m = sluice_rerank::measure::measure_prompt(sandbox, prepared, &sample_prompt(n), runs);
        failed |= row(out, &format!("{n} sources"), &m)?;
    }
    if failed {
        return Err(too_many_failed());
    }
    Ok(())
}

/// The share of a row's calls that may fail before `bench` fails: a component whose calls
/// fail for what they are given fails them all (a panic, fuel, a wrong result), so a rare
/// failure is the host's (a call stopped at ten deadlines of wall time on a loaded machine).
pub const MAX_FAILED_RATE: f64 = 0.01;

/// One row of a benchmark: what was called, its wall-time, CPU-time and fuel percentiles, and
/// its failures (how many, and the first); whether more than [`MAX_FAILED_RATE`] failed.
fn row(out: &mut dyn Write, what: &str, m: &sluice_rerank::measure::Measured) -> Result<bool> {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let failed = match &m.failure {
        None => String::new(),
        Some(e) => format!(
            "  failed {} of {} ({:.1} %), the first: {e}",
            m.failed,
            m.calls,
            100.0 * m.failed_rate()
        ),
    };
    writeln!(
        out,
        "  {what:<26} p50 {:>8.1} µs  p99 {:>8.1} µs  cpu p50 {:>8.1} µs p99 {:>8.1} µs  \
         fuel p50 {:>10} p99 {:>10}{failed}",
        us(m.wall.0),
        us(m.wall.1),
        us(m.cpu.0),
        us(m.cpu.1),
        m.fuel.0,
        m.fuel.1,
    )
    .map_err(report)?;
    Ok(m.failed_rate() > MAX_FAILED_RATE)
}

/// Why a benchmark failed.
fn too_many_failed() -> LoopError {
    LoopError::Failed(format!(
        "more than {} % of a row's calls failed under the limits",
        MAX_FAILED_RATE * 100.0
    ))
}

/// A context as `key=value, …` (`none` when empty).
fn show(context: &RerankContext) -> String {
    let pairs: Vec<String> = context.iter().map(|(k, v)| format!("{k}={v}")).collect();
    match pairs.is_empty() {
        true => "none".into(),
        false => pairs.join(", "),
    }
}

/// The component in `file`, `runs` calls per row, under the configured limits (embeddings
/// made up, as at upload: no model runs) — on the synthetic set ([`SYNTHETIC`]) at 10, 50 and
/// 200 candidates, or on the tenant's own questions and their candidates (`data`: the
/// questions file, the corpus or the configured store, the tenant), each with its context;
/// `context` (a JSON object of strings) replaces every call's. A row per line on `out`;
/// fails when a call failed.
pub async fn bench(
    settings: &sluice_app::Settings,
    file: &Path,
    runs: usize,
    context: Option<&str>,
    data: Option<(&Path, Option<&Path>, &Tenant)>,
    out: &mut dyn Write,
) -> Result<()> {
    let bytes =
        std::fs::read(file).map_err(LoopError::io(format!("reading {}", file.display())))?;
    let context = match context {
        Some(text) => {
            let value: Value = serde_json::from_str(text).map_err(|_| {
                LoopError::Invalid(
                    "--context is not JSON; write an object, such as '{\"plan\": \"premium\"}'"
                        .into(),
                )
            })?;
            let parsed = RerankContext::parse(&value)
                .map_err(|e| LoopError::Invalid(format!("--context: {e}")))?;
            Some(parsed)
        }
        None => None,
    };
    let sandbox = crate::sandbox(settings)?;
    let prepared = sandbox.compile(&bytes).map_err(|e| LoopError::Refused {
        file: file.display().to_string(),
        reason: e.to_string(),
    })?;
    if prepared.is_prompt() {
        if data.is_some() {
            return Err(LoopError::Invalid(format!(
                "{} is a prompt-assembly component ({}): it is measured on the synthetic set \
                 (`sluice component test` prints its cost on your questions)",
                file.display(),
                prepared.world()
            )));
        }
        return bench_prompt(&sandbox, &prepared, file, runs, out);
    }
    writeln!(
        out,
        "{} ({} bytes, {}): {runs} calls each, fresh store and instance per call",
        file.display(),
        bytes.len(),
        prepared.world()
    )
    .map_err(report)?;
    // (what, query, context, candidates) per row.
    let mut rows: Vec<(String, String, RerankContext, Vec<Candidate>)> = Vec::new();
    match data {
        None => {
            let context = context.unwrap_or_else(|| {
                let pro = serde_json::json!({"plan": "pro"});
                RerankContext::parse(&pro).unwrap_or_default()
            });
            writeln!(
                out,
                "synthetic set: {SYNTHETIC}; context {}",
                show(&context)
            )
            .map_err(report)?;
            for n in [0, 10, 50, 200] {
                let what = match n {
                    0 => "instantiate + empty call".to_string(),
                    n => format!("{n} candidates"),
                };
                let query = "what is the card limit".to_string();
                rows.push((what, query, context.clone(), sample_candidates(n)));
            }
        }
        Some((queries, corpus, tenant)) => {
            let questions = questions(queries)?;
            let model = sluice_app::model(&settings.embed).map_err(crate::pipeline)?;
            let embedder: Arc<dyn Embedder> = Arc::new(model);
            let retrieved =
                crate::test::retrieve(settings, &questions, corpus, tenant, &embedder).await?;
            let max = settings.rerank.max_text_bytes;
            for (i, (q, (_, hits))) in questions.iter().zip(retrieved).enumerate() {
                let context = context.clone().unwrap_or_else(|| q.context.clone());
                let (n, shown) = (hits.len(), show(&context));
                writeln!(
                    out,
                    "q{}: {} — {n} candidates, context {shown}",
                    i + 1,
                    q.query
                )
                .map_err(report)?;
                let what = format!("q{} ({n} candidates)", i + 1);
                let candidates = sluice_rerank::candidates(&hits, max);
                rows.push((what, q.query.clone(), context, candidates));
            }
        }
    }
    let mut failed = false;
    for (what, query, context, candidates) in &rows {
        let entries = sluice_rerank::context_entries(context);
        let call = Call {
            query,
            context: &entries,
            candidates,
        };
        let m = measure(&sandbox, &prepared, &call, runs);
        failed |= row(out, what, &m)?;
    }
    if failed {
        return Err(too_many_failed());
    }
    Ok(())
}
