//! Load testing Sluice:
//!
//! - [`synthetic`]: an OpenAI-compatible upstream that streams at a fixed token rate — a
//!   benchmark fixture, so that a load test measures Sluice and not a model;
//! - [`load`]: the load generator (synchronous, concurrent, constant and Poisson rates) and
//!   its client-side measurements;
//! - [`report`]: statistics and the JSON, CSV and HTML reports;
//! - [`cost`]: dollars per 1,000 answers from a report and unit prices.
//!
//! [`run`] ties them together as `sluice bench run` does.
#![warn(missing_docs)]

pub mod cost;
pub mod load;
pub mod report;
pub mod synthetic;

use std::path::PathBuf;
use std::time::Duration;

use load::{Load, Target, Work};
use report::{LevelReport, Report};

/// What can stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad settings, or something to set up failed.
    #[error("{0}")]
    Setup(String),
    /// A report or price file could not be read or written.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// A whole run: the levels to measure against one server.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sluice's base URL.
    pub url: String,
    /// Tenant header, when set.
    pub tenant: Option<String>,
    /// Sources per answer, when set.
    pub k: Option<usize>,
    /// Let requests use the answer cache.
    pub use_cache: bool,
    /// The levels, in order.
    pub loads: Vec<Load>,
    /// Recorded requests per level.
    pub requests: usize,
    /// Unrecorded sending before each level.
    pub warmup: Duration,
    /// Questions, sent round-robin.
    pub queries: Vec<String>,
    /// TTFT SLO for goodput, ms.
    pub slo_ttft_ms: f64,
    /// Comparison mode: the LLM's base URL (`…/v1`) and model name (asked of its `/models`
    /// when unset).
    pub compare_llm: Option<(String, Option<String>)>,
    /// Seed of the Poisson arrivals.
    pub seed: u64,
}

/// `sluice bench run`'s arguments: what [`Plan`] is made of, as flags.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Server base URL [default: http://$SLUICE_ADDR]
    #[arg(long, env = "SLUICE_URL")]
    pub url: Option<String>,
    /// How requests are sent.
    #[arg(long, value_enum, default_value = "concurrent")]
    load: load::LoadKind,
    /// Comma-separated levels: concurrencies, or rates per second.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    levels: Vec<f64>,
    /// Recorded requests per level.
    #[arg(long, default_value_t = 100)]
    requests: usize,
    /// Seconds of unrecorded sending before each level (streams start spread over it).
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    /// Questions, one per line [default: questions about the sample documents].
    #[arg(long)]
    queries: Option<std::path::PathBuf>,
    /// Tenant (x-sluice-tenant).
    #[arg(long)]
    tenant: Option<String>,
    /// Sources per answer.
    #[arg(short, long)]
    k: Option<usize>,
    /// Let requests read and write the answer cache (by default they bypass it).
    #[arg(long)]
    use_cache: bool,
    /// TTFT objective for goodput, in milliseconds.
    #[arg(long, default_value_t = 500.0)]
    slo_ttft_ms: f64,
    /// Also send each level's assembled prompts straight to this OpenAI-compatible API
    /// (…/v1) at the same load, to measure the TTFT Sluice adds.
    #[arg(long)]
    compare_llm: Option<String>,
    /// Model name for --compare-llm [default: the first its /models lists].
    #[arg(long)]
    llm_model: Option<String>,
    /// Seed of the Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder for the report files.
    #[arg(long, default_value = "bench-report")]
    pub out: std::path::PathBuf,
}

impl RunArgs {
    /// The plan these flags describe, against `url` (the server's, the flag's or the
    /// default); the error names the flag at fault.
    pub fn plan(self, url: String) -> Result<Plan, BenchError> {
        let loads = self.load.loads(&self.levels)?;
        let queries = load::queries(self.queries.as_deref())?;
        if !(self.warmup_s >= 0.0 && self.warmup_s.is_finite()) {
            return Err(BenchError::Setup(
                "--warmup-s must be zero or more seconds".into(),
            ));
        }
        Ok(Plan {
            url,
            tenant: self.tenant,
            k: self.k,
            use_cache: self.use_cache,
            loads,
            requests: self.requests,
            warmup: Duration::from_secs_f64(self.warmup_s),
            queries,
            slo_ttft_ms: self.slo_ttft_ms,
            compare_llm: self.compare_llm.map(|u| (u, self.llm_model)),
            seed: self.seed,
        })
    }
}

/// Runs every level of `plan`, calling `progress` with each finished one.
pub async fn run(
    plan: &Plan,
    mut progress: impl FnMut(&LevelReport),
) -> Result<Report, BenchError> {
    if plan.queries.is_empty() {
        return Err(BenchError::Setup("no queries to send".into()));
    }
    let started_at = now_rfc3339();
    let compare = match &plan.compare_llm {
        None => None,
        Some((url, Some(model))) => Some((url.trim_end_matches('/').to_string(), model.clone())),
        Some((url, None)) => {
            let url = url.trim_end_matches('/').to_string();
            let model = first_model(&url).await?;
            Some((url, model))
        }
    };
    let sluice = Target::Sluice {
        url: plan.url.trim_end_matches('/').to_string(),
        tenant: plan.tenant.clone(),
        k: plan.k,
        use_cache: plan.use_cache,
        include_prompt: compare.is_some(),
    };
    let work: Vec<Work> = plan.queries.iter().cloned().map(Work::Query).collect();
    let client = load::client()?;
    let mut levels = Vec::new();
    for (i, load) in plan.loads.iter().enumerate() {
        let seed = plan.seed.wrapping_add(i as u64);
        let level = load::run_level(
            &client,
            &sluice,
            *load,
            &work,
            plan.requests,
            plan.warmup,
            seed,
        )
        .await?;
        let (rss, peak, fds) = server_process(&client, &plan.url).await;
        let sluice_measures = report::measures(&level, plan.slo_ttft_ms);
        let (direct, added) = match &compare {
            None => (None, None),
            Some((url, model)) => {
                let prompts: Vec<Work> = level
                    .samples
                    .iter()
                    .filter_map(|s| s.prompt.clone().map(Work::Prompt))
                    .collect();
                if prompts.is_empty() {
                    return Err(BenchError::Setup(
                        "no answer carried its prompt (meta.prompt): is the server a Sluice with include_prompt?".into(),
                    ));
                }
                let target = Target::Llm {
                    url: url.clone(),
                    model: model.clone(),
                };
                let direct = load::run_level(
                    &client,
                    &target,
                    *load,
                    &prompts,
                    plan.requests,
                    plan.warmup,
                    seed,
                )
                .await?;
                let direct = report::measures(&direct, plan.slo_ttft_ms);
                let added = report::added(&sluice_measures, &direct);
                (Some(direct), Some(added))
            }
        };
        let level_report = LevelReport {
            load: *load,
            label: load.label(),
            stages: report::stages(&level),
            cache_hits: level
                .samples
                .iter()
                .filter(|s| s.cache.as_deref() == Some("hit"))
                .count(),
            degraded: level.samples.iter().filter(|s| s.degraded).count(),
            sluice: sluice_measures,
            direct,
            added_ttft_ms: added,
            server_rss_mb: rss,
            server_peak_rss_mb: peak,
            server_open_fds: fds,
            samples: level.samples,
        };
        progress(&level_report);
        levels.push(level_report);
    }
    let target = match &compare {
        Some((url, model)) => format!("{} (compared with {model} at {url})", plan.url),
        None => plan.url.clone(),
    };
    Ok(Report {
        target,
        started_at,
        slo_ttft_ms: plan.slo_ttft_ms,
        warmup_s: plan.warmup.as_secs_f64(),
        levels,
    })
}

/// The first model an OpenAI-compatible server lists.
async fn first_model(url: &str) -> Result<String, BenchError> {
    let fail = |e: String| BenchError::Setup(format!("asking {url}/models for the model: {e}"));
    let body: serde_json::Value = reqwest::Client::new()
        .get(format!("{url}/models"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| fail(e.to_string()))?
        .json()
        .await
        .map_err(|e| fail(e.to_string()))?;
    body["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| fail("no model listed; pass --llm-model".into()))
}

/// The server's resident and peak resident memory in MB and its open file descriptors, from
/// its `/metrics`, if it has one.
async fn server_process(
    client: &reqwest::Client,
    url: &str,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let text = match client
        .get(format!("{}/metrics", url.trim_end_matches('/')))
        .timeout(Duration::from_secs(3))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => r.text().await.unwrap_or_default(),
        _ => return (None, None, None),
    };
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let mb = |b: f64| b / (1024.0 * 1024.0);
    (
        gauge("sluice_process_resident_memory_bytes").map(mb),
        gauge("sluice_process_peak_resident_memory_bytes").map(mb),
        gauge("sluice_process_open_fds"),
    )
}

/// Now as RFC 3339 in UTC.
fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc().replace_nanosecond(0);
    now.ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
