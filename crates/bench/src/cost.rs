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
//! - **Each extra region** (`--regions N`, the template's HomeRegion/SecondRegion/ThirdRegion):
//!   an answer is served in one region, so the lines above do not change; what a region adds
//!   per answer is the usage table's replication — the answer's usage write (at most
//!   [`USAGE_WRITES_PER_ANSWER`]) replicated to each other region at the replicated write
//!   price. Its fixed monthly costs (a data key, alarms, a health check, VPC endpoints) are
//!   not per answer and not in the table.
//!
//! Beside it, the same answers on **Lambda Managed Instances** ([`Managed`]): no duration
//! charge; the account pays the capacity provider's EC2 instances plus Lambda's management fee
//! on their price, and the request charge. One execution environment serves many streams, so
//! the fleet the load needs is the level's concurrency over the streams per environment, the
//! environments packed onto instances by vCPU and memory, never fewer instances than the
//! provider keeps; its hourly price is shared by the answers the level completes per hour.
//! The other lines (API Gateway, DynamoDB, GPU) are the same in both modes.
//!
//! The GPU throughput is an input, not something the benchmark can measure with the
//! synthetic upstream; the written table says which numbers were assumed.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::load::Load;
use crate::report::Report;

/// Read units of one cache lookup that finds nothing: an eventually consistent `GetItem`
/// (0.5) and one `Query` per band (0.5 each, 10 bands).
pub const LOOKUP_READ_UNITS: f64 = 0.5 + 10.0 * 0.5;
/// Item writes per cached answer: the table and its 10 band indexes.
pub const WRITES_PER_ENTRY: f64 = 11.0;
/// Usage writes per answer, at the most: the meter adds each tenant's and key's counts with
/// one `UpdateItem` per flush, so answers of one key between two flushes share a write.
pub const USAGE_WRITES_PER_ANSWER: f64 = 1.0;

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
    /// Regions of the deployment (the template's HomeRegion, SecondRegion, ThirdRegion): every
    /// region but one adds a line, the usage writes replicated to it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3))]
    #[serde(default = "one_region")]
    pub regions: u32,
    /// DynamoDB global tables' $ per million replicated write request units (on demand).
    #[arg(long, default_value_t = 0.625)]
    #[serde(default = "replicated_write_price")]
    pub dynamodb_replicated_write_per_million: f64,
    /// The managed-instances deployment priced beside the classic one.
    #[command(flatten)]
    #[serde(flatten)]
    pub managed: Managed,
}

fn one_region() -> u32 {
    1
}

fn replicated_write_price() -> f64 {
    0.625
}

/// The answer function on Lambda Managed Instances (a capacity provider), also flags of
/// `sluice bench cost`. Defaults: m7g.xlarge on demand in us-east-1 (4 vCPU, 16 GiB), the 15 %
/// management fee, 64 streams per environment, 2 GiB per vCPU, three instances (one per
/// availability zone, as Lambda starts them).
#[derive(Debug, Clone, Serialize, Deserialize, clap::Args)]
pub struct Managed {
    /// $ per hour of one instance of the capacity provider.
    #[arg(long = "lmi-instance-per-hour", default_value_t = 0.1632)]
    pub instance_per_hour: f64,
    /// vCPUs of one instance.
    #[arg(long = "lmi-instance-vcpus", default_value_t = 4.0)]
    pub instance_vcpus: f64,
    /// Memory of one instance, GiB.
    #[arg(long = "lmi-instance-memory-gb", default_value_t = 16.0)]
    pub instance_memory_gb: f64,
    /// Lambda's management fee, as a share of the instances' price.
    #[arg(long = "lmi-fee", default_value_t = 0.15)]
    pub fee: f64,
    /// Streams one execution environment serves at once (the function's maximum concurrency
    /// per environment).
    #[arg(long = "lmi-env-concurrency", default_value_t = 64)]
    pub env_concurrency: u32,
    /// Memory per vCPU of an environment, GiB (2 to 8): with the function's memory, the
    /// vCPUs each environment takes.
    #[arg(long = "lmi-memory-per-vcpu-gb", default_value_t = 2.0)]
    pub memory_per_vcpu_gb: f64,
    /// Instances the capacity provider keeps at the least.
    #[arg(long = "lmi-min-instances", default_value_t = 3)]
    pub min_instances: u32,
}

/// The managed-instances fleet a level's load needs.
#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    /// Streams open at once: the level's concurrency (for an open-loop level, its rate × the
    /// mean end-to-end time).
    pub concurrency: f64,
    /// Execution environments: the concurrency over the streams per environment.
    pub environments: u64,
    /// vCPUs of one environment.
    pub environment_vcpus: f64,
    /// Environments one instance holds (by vCPU and by memory).
    pub per_instance: u64,
    /// Instances: enough for the environments, at least the provider's minimum.
    pub instances: u64,
    /// $ per hour of the instances with the management fee.
    pub dollars_per_hour: f64,
    /// Answers the level completes per hour at that concurrency.
    pub answers_per_hour: f64,
}

/// One line of the estimate.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// What it is.
    pub item: &'static str,
    /// $ per 1,000 answers on classic Lambda.
    pub per_1000: f64,
    /// $ per 1,000 answers on managed instances.
    pub managed_per_1000: f64,
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
    /// Sum of the lines, classic Lambda.
    pub total_per_1000: f64,
    /// Sum of the lines, managed instances.
    pub managed_total_per_1000: f64,
    /// The managed-instances fleet priced.
    pub fleet: Fleet,
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
    positive(&[
        ("memory", prices.memory_mb),
        ("GPU tokens per second", prices.gpu_tokens_per_s),
    ])?;
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
    let fleet = fleet(chosen.load, e2e_s, prices)?;
    let managed_per_answer = fleet.dollars_per_hour / fleet.answers_per_hour;
    // (item, classic $ per answer, managed $ per answer)
    let shared = |item, dollars| (item, dollars, dollars);
    let per_answer = [
        (
            "Lambda duration",
            e2e_s * prices.memory_mb / 1024.0 * prices.lambda_gb_s,
            0.0,
        ),
        (
            "Managed instances (EC2 + management fee)",
            0.0,
            managed_per_answer,
        ),
        shared("Lambda requests", prices.lambda_per_million / 1e6),
        shared("API Gateway requests", prices.api_per_million / 1e6),
        shared(
            "DynamoDB cache reads",
            LOOKUP_READ_UNITS * prices.dynamodb_read_per_million / 1e6,
        ),
        shared(
            "DynamoDB cache writes (misses)",
            miss * WRITES_PER_ENTRY
                * prices.cache_entry_kb.ceil().max(1.0)
                * prices.dynamodb_write_per_million
                / 1e6,
        ),
        shared(
            "GPU (misses)",
            miss * tokens / prices.gpu_tokens_per_s * prices.gpu_per_hour / 3600.0,
        ),
    ];
    let replicated = shared(
        "Global tables: usage writes replicated to the other regions",
        f64::from(prices.regions.saturating_sub(1))
            * USAGE_WRITES_PER_ANSWER
            * prices.dynamodb_replicated_write_per_million
            / 1e6,
    );
    let lines: Vec<Line> = per_answer
        .into_iter()
        .chain((prices.regions > 1).then_some(replicated))
        .map(|(item, classic, managed)| Line {
            item,
            per_1000: classic * 1000.0,
            managed_per_1000: managed * 1000.0,
        })
        .collect();
    Ok(Estimate {
        level: chosen.label.clone(),
        e2e_s,
        tokens,
        hit_ratio,
        total_per_1000: lines.iter().map(|l| l.per_1000).sum(),
        managed_total_per_1000: lines.iter().map(|l| l.managed_per_1000).sum(),
        lines,
        fleet,
    })
}

/// Each named value is positive and finite, or the first that is not is named.
fn positive(values: &[(&str, f64)]) -> Result<(), BenchError> {
    match values.iter().find(|(_, v)| !(*v > 0.0 && v.is_finite())) {
        Some((name, _)) => Err(BenchError::Setup(format!("{name} must be positive"))),
        None => Ok(()),
    }
}

/// The managed-instances fleet for `load` answered in `e2e_s` each.
fn fleet(load: Load, e2e_s: f64, prices: &Prices) -> Result<Fleet, BenchError> {
    let m = &prices.managed;
    positive(&[
        ("--lmi-instance-vcpus", m.instance_vcpus),
        ("--lmi-instance-memory-gb", m.instance_memory_gb),
        ("--lmi-env-concurrency", f64::from(m.env_concurrency)),
        ("the mean end-to-end time", e2e_s),
    ])?;
    if !(2.0..=8.0).contains(&m.memory_per_vcpu_gb) {
        return Err(BenchError::Setup(
            "--lmi-memory-per-vcpu-gb must be from 2 to 8 (what Lambda allows)".into(),
        ));
    }
    if !(m.instance_per_hour >= 0.0 && m.fee >= 0.0) {
        return Err(BenchError::Setup(
            "--lmi-instance-per-hour and --lmi-fee must not be negative".into(),
        ));
    }
    let concurrency = match load {
        Load::Synchronous => 1.0,
        Load::Concurrent(n) => n as f64,
        // Little's law: streams open at once = arrival rate × time in the system.
        Load::Constant(rate) | Load::Poisson(rate) => rate * e2e_s,
    };
    let memory_gb = prices.memory_mb / 1024.0;
    let environment_vcpus = memory_gb / m.memory_per_vcpu_gb;
    let per_instance = (m.instance_vcpus / environment_vcpus)
        .min(m.instance_memory_gb / memory_gb)
        .floor() as u64;
    if per_instance == 0 {
        return Err(BenchError::Setup(format!(
            "an environment of {} MB ({environment_vcpus} vCPUs at {} GiB per vCPU) does not fit an instance of {} vCPUs and {} GiB",
            prices.memory_mb, m.memory_per_vcpu_gb, m.instance_vcpus, m.instance_memory_gb
        )));
    }
    let environments = (concurrency / f64::from(m.env_concurrency)).ceil().max(1.0) as u64;
    let instances = environments
        .div_ceil(per_instance)
        .max(u64::from(m.min_instances));
    Ok(Fleet {
        concurrency,
        environments,
        environment_vcpus,
        per_instance,
        instances,
        dollars_per_hour: instances as f64 * m.instance_per_hour * (1.0 + m.fee),
        answers_per_hour: concurrency / e2e_s * 3600.0,
    })
}

/// The run in `report` (a `sluice bench run` report.json) priced at `level` (default: the
/// last), its Markdown page written to `out`.
pub fn price(
    report: &std::path::Path,
    level: Option<&str>,
    prices: &Prices,
    out: &std::path::Path,
) -> Result<Estimate, BenchError> {
    let text =
        std::fs::read_to_string(report).map_err(|e| BenchError::Io(report.to_path_buf(), e))?;
    let parsed: Report = serde_json::from_str(&text).map_err(|e| {
        let what = format!(
            "{} is not a `sluice bench run` report: {e}",
            report.display()
        );
        BenchError::Setup(what)
    })?;
    let estimate = estimate(&parsed, level, prices)?;
    let page = markdown(&parsed, &estimate, prices);
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::Io(dir.to_path_buf(), e))?;
    }
    std::fs::write(out, &page).map_err(|e| BenchError::Io(out.to_path_buf(), e))?;
    Ok(estimate)
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
    let _ = writeln!(
        out,
        "| item | classic Lambda, $ per 1,000 answers | Lambda Managed Instances, $ per 1,000 answers |\n|---|---:|---:|"
    );
    for l in &estimate.lines {
        let _ = writeln!(
            out,
            "| {} | {:.4} | {:.4} |",
            l.item, l.per_1000, l.managed_per_1000
        );
    }
    let _ = writeln!(
        out,
        "| **total** | **{:.4}** | **{:.4}** |\n",
        estimate.total_per_1000, estimate.managed_total_per_1000
    );
    let f = &estimate.fleet;
    let m = &prices.managed;
    let _ = writeln!(
        out,
        "Managed instances: {:.0} streams open at once need {} execution environments of {} MB \
         ({:.2} vCPU at {} GiB per vCPU, {} streams each), {} to an instance of {} vCPUs and {} GiB, \
         so **{} instances** (at least {}) at ${}/h plus the {:.0} % management fee: \
         ${:.4}/h for {:.0} answers an hour. Assumed: each environment streams its {} answers \
         as the emulated one does (`LAMBDA=N make load`, *Load testing* in docs/benchmarks.md), and the instances are \
         paid only for the hours they carry this load (idle hours, scaling and Savings Plans are \
         not modelled).\n",
        f.concurrency,
        f.environments,
        prices.memory_mb,
        f.environment_vcpus,
        m.memory_per_vcpu_gb,
        m.env_concurrency,
        f.per_instance,
        m.instance_vcpus,
        m.instance_memory_gb,
        f.instances,
        m.min_instances,
        m.instance_per_hour,
        m.fee * 100.0,
        f.dollars_per_hour,
        f.answers_per_hour,
        m.env_concurrency,
    );
    let _ = writeln!(out, "Inputs (unit prices are inputs, not measurements):\n");
    let _ = writeln!(
        out,
        "| input | value |\n|---|---:|\n| Lambda $/GB-s | {} |\n| Lambda $/million requests | {} |\n| function memory MB | {} |\n| API Gateway $/million requests | {} |\n| DynamoDB $/million RRU | {} |\n| DynamoDB $/million WRU | {} |\n| cache entry KB | {} |\n| GPU $/hour | {} |\n| GPU tokens/s (assumed aggregate decode throughput) | {} |\n| managed: instance $/hour | {} |\n| managed: instance vCPUs / GiB | {} / {} |\n| managed: management fee | {} |\n| managed: streams per environment | {} |\n| managed: GiB per vCPU | {} |\n| managed: least instances | {} |\n| regions | {} |\n| DynamoDB $/million replicated WRU | {} |",
        prices.lambda_gb_s,
        prices.lambda_per_million,
        prices.memory_mb,
        prices.api_per_million,
        prices.dynamodb_read_per_million,
        prices.dynamodb_write_per_million,
        prices.cache_entry_kb,
        prices.gpu_per_hour,
        prices.gpu_tokens_per_s,
        prices.managed.instance_per_hour,
        prices.managed.instance_vcpus,
        prices.managed.instance_memory_gb,
        prices.managed.fee,
        prices.managed.env_concurrency,
        prices.managed.memory_per_vcpu_gb,
        prices.managed.min_instances,
        prices.regions,
        prices.dynamodb_replicated_write_per_million,
    );
    let _ = writeln!(
        out,
        "\nModel: Lambda bills a streaming function for the whole stream (duration = the measured \
         end-to-end time); every answer reads the cache ({LOOKUP_READ_UNITS} RRU when nothing \
         matches); a miss writes the entry to the table and its 10 band indexes \
         ({WRITES_PER_ENTRY} × ceil(KB) WRU) and costs GPU time for its tokens. On managed \
         instances there is no duration charge: the instances and the fee, shared by the \
         answers of an hour, and the same request charge. Over several regions an answer is \
         served in one, so only the replication of its usage write (at most \
         {USAGE_WRITES_PER_ANSWER} per answer) to each other region is added. Not included: \
         each region's fixed monthly costs, Route 53 queries and health checks, data transfer, \
         NAT/VPC endpoints (a capacity provider runs in the account's VPC), CloudWatch, the \
         vector store."
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
            regions: 1,
            dynamodb_replicated_write_per_million: 0.5,
            managed: Managed {
                instance_per_hour: 0.2,
                instance_vcpus: 4.0,
                instance_memory_gb: 16.0,
                fee: 0.15,
                env_concurrency: 64,
                memory_per_vcpu_gb: 2.0,
                min_instances: 3,
            },
        }
    }

    #[test]
    fn managed_instances_price_the_fleet_the_concurrency_needs() {
        // 4 streams of 2 s: one environment, but the provider's three instances.
        let e = estimate(&report(2000.0, 100, 0), None, &prices()).expect("estimate");
        let f = &e.fleet;
        assert_eq!((f.concurrency, f.environments, f.instances), (4.0, 1, 3));
        // 2 GiB at 2 GiB per vCPU: 1 vCPU an environment, 4 to an instance.
        assert_eq!((f.environment_vcpus, f.per_instance), (1.0, 4));
        assert!((f.dollars_per_hour - 3.0 * 0.2 * 1.15).abs() < 1e-12);
        // 4 streams / 2 s = 7,200 answers an hour.
        assert!((f.answers_per_hour - 7200.0).abs() < 1e-9);
        let line = |name: &str| e.lines.iter().find(|l| l.item == name).unwrap().clone();
        let hardware = line("Managed instances (EC2 + management fee)");
        assert!((hardware.managed_per_1000 - 0.69 / 7.2).abs() < 1e-12);
        assert_eq!(hardware.per_1000, 0.0);
        assert_eq!(line("Lambda duration").managed_per_1000, 0.0);
        // The other lines are the same in both modes.
        let gpu = line("GPU (misses)");
        assert_eq!(gpu.per_1000, gpu.managed_per_1000);
        let sum: f64 = e.lines.iter().map(|l| l.managed_per_1000).sum();
        assert!((e.managed_total_per_1000 - sum).abs() < 1e-12);

        // One stream per environment: 4 environments, 4 to an instance; no minimum.
        let mut p = prices();
        p.managed.env_concurrency = 1;
        p.managed.min_instances = 1;
        let f = estimate(&report(2000.0, 100, 0), None, &p).unwrap().fleet;
        assert_eq!((f.environments, f.instances), (4, 1));
        // At 8 GiB per vCPU a 2 GiB environment takes a quarter vCPU: memory bounds it (8).
        p.managed.memory_per_vcpu_gb = 8.0;
        p.managed.env_concurrency = 1;
        let f = estimate(&report(2000.0, 100, 0), None, &p).unwrap().fleet;
        assert_eq!(f.per_instance, 8);
    }

    #[test]
    fn a_managed_setting_that_cannot_be_refuses_with_what_is_wrong() {
        let refused = |change: &dyn Fn(&mut Prices)| {
            let mut p = prices();
            change(&mut p);
            match estimate(&report(2000.0, 100, 0), None, &p) {
                Ok(_) => panic!("accepted"),
                Err(e) => e.to_string(),
            }
        };
        assert!(refused(&|p| p.managed.memory_per_vcpu_gb = 1.0).contains("2 to 8"));
        assert!(refused(&|p| p.managed.env_concurrency = 0).contains("--lmi-env-concurrency"));
        // A 32 GiB environment on a 16 GiB instance.
        let too_big = refused(&|p| p.memory_mb = 32768.0);
        assert!(too_big.contains("does not fit"), "{too_big}");
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
    fn each_extra_region_adds_its_replicated_usage_writes_and_nothing_else() {
        let one = estimate(&report(2000.0, 100, 0), None, &prices()).expect("estimate");
        let item = "Global tables: usage writes replicated to the other regions";
        assert!(
            one.lines.iter().all(|l| l.item != item),
            "no line for one region"
        );
        for regions in [2, 3] {
            let mut p = prices();
            p.regions = regions;
            let e = estimate(&report(2000.0, 100, 0), None, &p).expect("estimate");
            let line = e.lines.iter().find(|l| l.item == item).unwrap();
            // (regions - 1) × 1 write × $0.5/M × 1000 answers, in both modes.
            let expected = f64::from(regions - 1) * 0.5e-3;
            assert!(
                (line.per_1000 - expected).abs() < 1e-12,
                "{regions}: {line:?}"
            );
            assert_eq!(line.per_1000, line.managed_per_1000);
            // Every other line is the one-region estimate's.
            assert!((e.total_per_1000 - one.total_per_1000 - expected).abs() < 1e-12);
            let page = markdown(&report(2000.0, 100, 0), &e, &p);
            assert!(page.contains(&format!("| regions | {regions} |")), "{page}");
        }
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
