//! `sluice bench run` and `sluice bench cost`: argument checks and output; the work is in
//! `sluice-bench`.

use clap::Subcommand;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// Runs the plan, printing a line per level, then writes the reports.
async fn run(plan: &sluice_bench::Plan, out: &Path) -> Result<()> {
    eprintln!(
        "benchmarking {} : {} level(s), {} recorded requests each after {:.1} s of warm-up",
        plan.url,
        plan.loads.len(),
        plan.requests,
        plan.warmup.as_secs_f64()
    );
    let report = sluice_bench::run(plan, |level| eprintln!("{}", level.summary())).await?;
    for path in sluice_bench::report::write(&report, out)? {
        println!("wrote {}", path.display());
    }
    Ok(())
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
        load: sluice_bench::load::LoadKind,
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
    /// Serve a synthetic OpenAI-compatible chat upstream — a benchmark fixture, not a model —
    /// at a fixed rate: numbered placeholder tokens whatever the prompt, so that a load test
    /// measures Sluice and not an LLM, or (`--answers sources`) the sources' sentence nearest
    /// the question, cited, to try Sluice without a model. Point SLUICE_LLM_URL at it.
    Llm {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8090")]
        addr: std::net::SocketAddr,
        #[command(flatten)]
        settings: sluice_bench::synthetic::Settings,
    },
}

/// `sluice bench …`.
pub async fn command(wire: &sluice_http::WireConfig, command: BenchCommand) -> Result<()> {
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
            let loads = load.loads(&levels)?;
            let queries = sluice_bench::load::queries(file.as_deref())?;
            if !(warmup_s >= 0.0 && warmup_s.is_finite()) {
                bail!("--warmup-s must be zero or more seconds");
            }
            let plan = sluice_bench::Plan {
                url: crate::server_url(wire, url),
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
        } => {
            let estimate = sluice_bench::cost::price(&report, level.as_deref(), &prices, &out)?;
            println!(
                "{}: ${:.4} per 1,000 answers on classic Lambda, ${:.4} on managed instances \
                 ({} instances); wrote {}",
                estimate.level,
                estimate.total_per_1000,
                estimate.managed_total_per_1000,
                estimate.fleet.instances,
                out.display()
            );
            Ok(())
        }
    }
}

/// `sluice fixture llm`: the synthetic upstream, until the process is stopped.
pub async fn fixture(command: FixtureCommand) -> Result<()> {
    let FixtureCommand::Llm { addr, settings } = command;
    Ok(sluice_bench::synthetic::run(addr, settings).await?)
}
