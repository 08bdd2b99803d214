//! Dollars per 1,000 answers, from a benchmark report and unit prices.
//!
//! Per answer:
//! - **Lambda**: a response-streaming function is billed for the whole stream, so duration is
//!   the measured end-to-end time × the function's memory × the GB-second price, plus the
//!   request price; API Gateway (REST) adds its per-request price.
//! - **DynamoDB** (on demand): every answer reads the cache (one exact-key read and one query
//!   per LSH band, [`LOOKUP_READ_UNITS`] when nothing matches); every miss writes one entry to
//!   the table and to each band index (all projected), `ceil(entry KB)` write units each.
//! - **GPU**: the generated tokens of a miss over the fleet's aggregate decode throughput per
//!   GPU, at the GPU's hourly price. A hit costs no GPU time.
//!
//! The GPU throughput is an input, not something the benchmark can measure with the
//! synthetic upstream; the written table says which numbers were assumed.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::report::Report;

/// Read units of one cache lookup that finds nothing: an eventually consistent `GetItem`
/// (0.5) and one `Query` per band (0.5 each, 10 bands).
pub const LOOKUP_READ_UNITS: f64 = 0.5 + 10.0 * 0.5;
/// Item writes per cached answer: the table and its 10 band indexes.
pub const WRITES_PER_ENTRY: f64 = 11.0;

/// Unit prices and deployment settings, also the flags of `sluice bench cost`. Defaults: AWS
/// list prices in us-east-1 (arm64 Lambda, DynamoDB on demand, API Gateway REST) as
/// published in 2025; the GPU's price and throughput have none (they depend on the fleet).
#[derive(Debug, Clone, Serialize, Deserialize, clap::Args)]
pub struct Prices {
    /// Lambda $ per GB-second (arm64).
    #[arg(long, default_value_t = 0.0000133334)]
    pub lambda_gb_s: f64,
    /// Lambda $ per million requests.
    #[arg(long, default_value_t = 0.20)]
    pub lambda_per_million: f64,
    /// The answer function's memory, MB (the SAM template's default).
    #[arg(long, default_value_t = 2048.0)]
    pub memory_mb: f64,
    /// API Gateway $ per million requests (REST; 0 for a function URL).
    #[arg(long, default_value_t = 3.50)]
    pub api_per_million: f64,
    /// DynamoDB on-demand $ per million read request units.
    #[arg(long, default_value_t = 0.125)]
    pub dynamodb_read_per_million: f64,
    /// DynamoDB on-demand $ per million write request units.
    #[arg(long, default_value_t = 0.625)]
    pub dynamodb_write_per_million: f64,
    /// Size of a cached answer, KB (rounded up per write).
    #[arg(long, default_value_t = 3.0)]
    pub cache_entry_kb: f64,
    /// Share of answers served from the cache, 0 to 1 [default: as measured in the report].
    #[arg(long)]
    pub cache_hit_ratio: Option<f64>,
    /// GPU $ per hour (required: depends on your instance and contract).
    #[arg(long)]
    pub gpu_per_hour: f64,
    /// Generated tokens per second one GPU sustains over all its streams (required: measure
    /// your vLLM fleet; the synthetic upstream cannot).
    #[arg(long)]
    pub gpu_tokens_per_s: f64,
}

/// One line of the estimate.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// What it is.
    pub item: &'static str,
    /// $ per 1,000 answers.
    pub per_1000: f64,
}

/// The estimate for one level of a report.
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    /// The level used.
    pub level: String,
    /// Mean end-to-end seconds per answer.
    pub e2e_s: f64,
    /// Mean tokens per answer.
    pub tokens: f64,
    /// The cache hit ratio used.
    pub hit_ratio: f64,
    /// Per item.
    pub lines: Vec<Line>,
    /// Sum of the lines.
    pub total_per_1000: f64,
}

/// The estimate for `level` of `report` (its label; the last level when `None`).
pub fn estimate(
    report: &Report,
    level: Option<&str>,
    prices: &Prices,
) -> Result<Estimate, BenchError> {
    let chosen = match level {
        None => report.levels.last(),
        Some(label) => report.levels.iter().find(|l| l.label == label),
    }
    .ok_or_else(|| {
        let labels: Vec<&str> = report.levels.iter().map(|l| l.label.as_str()).collect();
        BenchError::Setup(format!(
            "no level {level:?} in the report; it has {labels:?}"
        ))
    })?;
    for (name, v) in [
        ("memory", prices.memory_mb),
        ("GPU tokens per second", prices.gpu_tokens_per_s),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(BenchError::Setup(format!("{name} must be positive")));
        }
    }
    let m = &chosen.sluice;
    if m.ok == 0 {
        return Err(BenchError::Setup(format!(
            "level {} has no successful answers to price",
            chosen.label
        )));
    }
    let hit_ratio = prices
        .cache_hit_ratio
        .unwrap_or(chosen.cache_hits as f64 / m.requests.max(1) as f64)
        .clamp(0.0, 1.0);
    let e2e_s = m.e2e_ms.mean / 1e3;
    let tokens = m.tokens.mean;
    let miss = 1.0 - hit_ratio;
    let per_answer = [
        (
            "Lambda duration",
            e2e_s * prices.memory_mb / 1024.0 * prices.lambda_gb_s,
        ),
        ("Lambda requests", prices.lambda_per_million / 1e6),
        ("API Gateway requests", prices.api_per_million / 1e6),
        (
            "DynamoDB cache reads",
            LOOKUP_READ_UNITS * prices.dynamodb_read_per_million / 1e6,
        ),
        (
            "DynamoDB cache writes (misses)",
            miss * WRITES_PER_ENTRY
                * prices.cache_entry_kb.ceil().max(1.0)
                * prices.dynamodb_write_per_million
                / 1e6,
        ),
        (
            "GPU (misses)",
            miss * tokens / prices.gpu_tokens_per_s * prices.gpu_per_hour / 3600.0,
        ),
    ];
    let lines: Vec<Line> = per_answer
        .into_iter()
        .map(|(item, dollars)| Line {
            item,
            per_1000: dollars * 1000.0,
        })
        .collect();
    Ok(Estimate {
        level: chosen.label.clone(),
        e2e_s,
        tokens,
        hit_ratio,
        total_per_1000: lines.iter().map(|l| l.per_1000).sum(),
        lines,
    })
}

/// The estimate as a Markdown page (what `sluice bench cost` writes into `docs/`).
pub fn markdown(report: &Report, estimate: &Estimate, prices: &Prices) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Cost per 1,000 answers\n");
    let _ = writeln!(
        out,
        "Written by `sluice bench cost` from the benchmark of {} (started {}), level **{}**: \
         mean end-to-end {:.2} s, {:.0} tokens per answer, cache hit ratio {:.0} %.\n",
        report.target,
        report.started_at,
        estimate.level,
        estimate.e2e_s,
        estimate.tokens,
        estimate.hit_ratio * 100.0
    );
    let _ = writeln!(out, "| item | $ per 1,000 answers |\n|---|---:|");
    for l in &estimate.lines {
        let _ = writeln!(out, "| {} | {:.4} |", l.item, l.per_1000);
    }
    let _ = writeln!(out, "| **total** | **{:.4}** |\n", estimate.total_per_1000);
    let _ = writeln!(out, "Inputs (unit prices are inputs, not measurements):\n");
    let _ = writeln!(
        out,
        "| input | value |\n|---|---:|\n| Lambda $/GB-s | {} |\n| Lambda $/million requests | {} |\n| function memory MB | {} |\n| API Gateway $/million requests | {} |\n| DynamoDB $/million RRU | {} |\n| DynamoDB $/million WRU | {} |\n| cache entry KB | {} |\n| GPU $/hour | {} |\n| GPU tokens/s (assumed aggregate decode throughput) | {} |",
        prices.lambda_gb_s,
        prices.lambda_per_million,
        prices.memory_mb,
        prices.api_per_million,
        prices.dynamodb_read_per_million,
        prices.dynamodb_write_per_million,
        prices.cache_entry_kb,
        prices.gpu_per_hour,
        prices.gpu_tokens_per_s,
    );
    let _ = writeln!(
        out,
        "\nModel: Lambda bills a streaming function for the whole stream (duration = the measured \
         end-to-end time); every answer reads the cache ({LOOKUP_READ_UNITS} RRU when nothing \
         matches); a miss writes the entry to the table and its 10 band indexes \
         ({WRITES_PER_ENTRY} × ceil(KB) WRU) and costs GPU time for its tokens. Not included: \
         data transfer, NAT/VPC endpoints, CloudWatch, the vector store."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Level, Load, Sample};
    use crate::report::{LevelReport, measures, stages};

    fn report(e2e_ms: f64, tokens: u64, hits: usize) -> Report {
        let samples: Vec<Sample> = (0..4)
            .map(|i| Sample {
                ok: true,
                ttft_ms: Some(10.0),
                e2e_ms,
                tokens,
                cache: Some(if i < hits { "hit" } else { "miss" }.into()),
                ..Sample::default()
            })
            .collect();
        let level = Level {
            load: Load::Concurrent(4),
            samples,
            duration: std::time::Duration::from_secs(1),
        };
        Report {
            target: "t".into(),
            started_at: "now".into(),
            slo_ttft_ms: 100.0,
            warmup_s: 0.0,
            levels: vec![LevelReport {
                load: level.load,
                label: level.load.label(),
                sluice: measures(&level, 100.0),
                stages: stages(&level),
                cache_hits: hits,
                degraded: 0,
                direct: None,
                added_ttft_ms: None,
                server_rss_mb: None,
                server_peak_rss_mb: None,
                server_open_fds: None,
                samples: level.samples,
            }],
        }
    }

    fn prices() -> Prices {
        Prices {
            lambda_gb_s: 0.00001,
            lambda_per_million: 0.2,
            memory_mb: 2048.0,
            api_per_million: 0.0,
            dynamodb_read_per_million: 0.25,
            dynamodb_write_per_million: 1.0,
            cache_entry_kb: 2.5,
            cache_hit_ratio: None,
            gpu_per_hour: 3.6,
            gpu_tokens_per_s: 1000.0,
        }
    }

    #[test]
    fn each_line_follows_its_unit_price() {
        let e = estimate(&report(2000.0, 100, 0), None, &prices()).expect("estimate");
        let line = |name: &str| e.lines.iter().find(|l| l.item == name).map(|l| l.per_1000);
        // 2 s × 2 GB × $0.00001 × 1000 answers.
        assert!((line("Lambda duration").unwrap() - 0.04).abs() < 1e-9);
        // 100 tokens / 1000 tok/s × $3.6/h ÷ 3600 × 1000.
        assert!((line("GPU (misses)").unwrap() - 0.1).abs() < 1e-9);
        // 11 writes × 3 WRU × $1/M × 1000.
        assert!((line("DynamoDB cache writes (misses)").unwrap() - 0.033).abs() < 1e-9);
        let sum: f64 = e.lines.iter().map(|l| l.per_1000).sum();
        assert!((e.total_per_1000 - sum).abs() < 1e-12);
    }

    #[test]
    fn cache_hits_cost_no_gpu_or_writes() {
        let half = estimate(&report(2000.0, 100, 2), None, &prices()).expect("estimate");
        assert_eq!(half.hit_ratio, 0.5);
        let gpu = half
            .lines
            .iter()
            .find(|l| l.item == "GPU (misses)")
            .unwrap();
        assert!((gpu.per_1000 - 0.05).abs() < 1e-9);
        let bad = estimate(&report(2000.0, 100, 0), Some("poisson 3/s"), &prices());
        assert!(bad.is_err());
    }
}
