//! `sluice bench run` and `sluice bench cost`: argument checks and output; the work is in
//! `sluice-bench`.

use clap::Subcommand;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sluice_bench::load::Load;

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

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LoadKind {
    /// One request at a time.
    Synchronous,
    /// Each level is a number of requests in flight at all times.
    Concurrent,
    /// Each level is requests started per second, evenly spaced.
    Constant,
    /// Each level is a mean rate per second, with random (exponential) gaps.
    Poisson,
    /// Synchronous, then each level as a concurrency.
    Sweep,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Send load to a running server and write report.json, report.csv and report.html.
    Run {
        /// Server base URL [default: http://$SLUICE_ADDR]
        #[arg(long, env = "SLUICE_URL")]
        url: Option<String>,
        /// How requests are sent.
        #[arg(long, value_enum, default_value = "concurrent")]
        load: LoadKind,
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
        queries: Option<PathBuf>,
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
        out: PathBuf,
    },
    /// Turn a report.json and unit prices into $ per 1,000 answers (a Markdown page).
    Cost {
        /// The benchmark report.
        #[arg(long)]
        report: PathBuf,
        /// The level to price (its label, e.g. "concurrent 32") [default: the last].
        #[arg(long)]
        level: Option<String>,
        #[command(flatten)]
        prices: sluice_bench::cost::Prices,
        /// Where to write the page.
        #[arg(long, default_value = "docs/cost.md")]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum FixtureCommand {
    /// Serve a synthetic OpenAI-compatible chat upstream — a benchmark fixture, not a model:
    /// numbered placeholder tokens at a fixed rate, whatever the prompt, so that a load test
    /// measures Sluice and not an LLM. Point SLUICE_LLM_URL at it.
    Llm {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8090")]
        addr: std::net::SocketAddr,
        /// Tokens per second of each stream.
        #[arg(long, default_value_t = 50.0)]
        tokens_per_sec: f64,
        /// Tokens per answer (fewer when the request's max_tokens is lower).
        #[arg(long, default_value_t = 128)]
        tokens: u32,
    },
}

/// `sluice bench …`.
pub async fn command(config: &sluice_core::Config, command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Run {
            url,
            load,
            levels,
            requests,
            warmup_s,
            queries: file,
            tenant,
            k,
            use_cache,
            slo_ttft_ms,
            compare_llm,
            llm_model,
            seed,
            out,
        } => {
            let loads = loads(load, &levels)?;
            let queries = queries(file.as_deref())?;
            if !(warmup_s >= 0.0 && warmup_s.is_finite()) {
                bail!("--warmup-s must be zero or more seconds");
            }
            let plan = sluice_bench::Plan {
                url: crate::server_url(config, url),
                tenant,
                k,
                use_cache,
                loads,
                requests,
                warmup: std::time::Duration::from_secs_f64(warmup_s),
                queries,
                slo_ttft_ms,
                compare_llm: compare_llm.map(|u| (u, llm_model)),
                seed,
            };
            run(&plan, &out).await
        }
        BenchCommand::Cost {
            report,
            level,
            prices,
            out,
        } => cost(&report, level.as_deref(), &prices, &out),
    }
}

/// `sluice fixture llm`: the synthetic upstream, until the process is stopped.
pub async fn fixture(command: FixtureCommand) -> Result<()> {
    let FixtureCommand::Llm {
        addr,
        tokens_per_sec,
        tokens,
    } = command;
    if !(tokens_per_sec > 0.0 && tokens_per_sec.is_finite()) {
        bail!("--tokens-per-sec must be a positive number");
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!(
        "synthetic LLM fixture (a benchmark fixture, not a model) on http://{}/v1: \
         {tokens} tokens at {tokens_per_sec} tokens/s per stream",
        listener.local_addr()?
    );
    let settings = sluice_bench::synthetic::Settings {
        tokens_per_sec,
        tokens,
    };
    Ok(sluice_bench::synthetic::serve(listener, settings).await?)
}
