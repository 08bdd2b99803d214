//! `sluice bench run` and `sluice bench cost`: argument checks and output; the work is in
//! `sluice-bench`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use sluice_bench::load::Load;

use crate::LoadKind;

/// Questions about the sample documents (`samples/`), used when no --queries file is given.
const DEFAULT_QUERIES: &[&str] = &[
    "How do I reset my password?",
    "What should I do if I lose my card?",
    "What is the daily limit on card payments?",
    "How long does an international transfer take?",
    "Can I overpay my mortgage without a fee?",
    "What interest does the easy access savings account pay?",
    "How do I contact support outside office hours?",
    "Can I raise my contactless limit?",
    "What fees apply to sending money abroad?",
    "How do I freeze a card that I think is stolen?",
    "Is there a penalty for paying off my mortgage early?",
    "How are savings rates changed?",
];

/// The levels of a load kind.
pub fn loads(kind: LoadKind, levels: &[f64]) -> Result<Vec<Load>> {
    if levels.is_empty() && !matches!(kind, LoadKind::Synchronous) {
        bail!("--levels is empty");
    }
    let count = |v: f64| -> Result<usize> {
        if v >= 1.0 && v.fract() == 0.0 && v <= 100_000.0 {
            Ok(v as usize)
        } else {
            bail!("a concurrency must be a whole number from 1 to 100000, not {v}")
        }
    };
    let rate = |v: f64| -> Result<f64> {
        if v > 0.0 && v.is_finite() {
            Ok(v)
        } else {
            bail!("a rate must be a positive number of requests per second, not {v}")
        }
    };
    Ok(match kind {
        LoadKind::Synchronous => vec![Load::Synchronous],
        LoadKind::Concurrent => levels
            .iter()
            .map(|v| count(*v).map(Load::Concurrent))
            .collect::<Result<_>>()?,
        LoadKind::Constant => levels
            .iter()
            .map(|v| rate(*v).map(Load::Constant))
            .collect::<Result<_>>()?,
        LoadKind::Poisson => levels
            .iter()
            .map(|v| rate(*v).map(Load::Poisson))
            .collect::<Result<_>>()?,
        LoadKind::Sweep => std::iter::once(Ok(Load::Synchronous))
            .chain(levels.iter().map(|v| count(*v).map(Load::Concurrent)))
            .collect::<Result<_>>()?,
    })
}

/// The questions to send: the file's non-empty lines, or the built-in ones.
pub fn queries(path: Option<&Path>) -> Result<Vec<String>> {
    let Some(path) = path else {
        return Ok(DEFAULT_QUERIES.iter().map(|q| q.to_string()).collect());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let queries: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if queries.is_empty() {
        bail!("{} has no questions (one per line)", path.display());
    }
    Ok(queries)
}

/// Runs the plan, printing a line per level, then writes the reports.
pub async fn run(plan: &sluice_bench::Plan, out: &Path) -> Result<()> {
    eprintln!(
        "benchmarking {} : {} level(s), {} recorded requests each after {:.1} s of warm-up",
        plan.url,
        plan.loads.len(),
        plan.requests,
        plan.warmup.as_secs_f64()
    );
    let report = sluice_bench::run(plan, |l| {
        let m = &l.sluice;
        let added = l
            .added_ttft_ms
            .as_ref()
            .map_or(String::new(), |a| {
                format!(" | added ttft p50 {:.1} p99 {:.1} ms", a.p50, a.p99)
            });
        let rss = match (l.server_rss_mb, l.server_peak_rss_mb, l.server_open_fds) {
            (Some(now), Some(peak), Some(fds)) => {
                format!(" | server rss {now:.0} MB (peak {peak:.0}), {fds:.0} fds")
            }
            _ => String::new(),
        };
        eprintln!(
            "{:<18} {} ok {} errors | ttft p50 {:.1} p99 {:.1} ms | e2e p50 {:.0} ms | {:.1} req/s {:.0} tok/s | pipeline p99 {:.1} ms{added}{rss}",
            l.label,
            m.ok,
            m.errors,
            m.ttft_ms.p50,
            m.ttft_ms.p99,
            m.e2e_ms.p50,
            m.requests_per_s,
            m.output_tokens_per_s,
            l.stages.pipeline_ms.p99,
        );
    })
    .await?;
    for path in sluice_bench::report::write(&report, out)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Prices a report and writes the Markdown page.
pub fn cost(
    report: &Path,
    level: Option<&str>,
    prices: &sluice_bench::cost::Prices,
    out: &Path,
) -> Result<()> {
    let text =
        std::fs::read_to_string(report).with_context(|| format!("reading {}", report.display()))?;
    let report: sluice_bench::report::Report = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a `sluice bench run` report", report.display()))?;
    let estimate = sluice_bench::cost::estimate(&report, level, prices)?;
    let page = sluice_bench::cost::markdown(&report, &estimate, prices);
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &page).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{}: ${:.4} per 1,000 answers on classic Lambda, ${:.4} on managed instances ({} instances); wrote {}",
        estimate.level,
        estimate.total_per_1000,
        estimate.managed_total_per_1000,
        estimate.fleet.instances,
        out.display()
    );
    Ok(())
}
