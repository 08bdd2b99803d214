//! `sluice bench run` and `sluice bench cost`: argument checks and output; the work is in
//! `sluice-bench`.

use clap::Subcommand;
use std::path::{Path, PathBuf};

use anyhow::Result;

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
    Run(sluice_bench::RunArgs),
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
        BenchCommand::Run(mut args) => {
            let (url, out) = (args.url.take(), args.out.clone());
            let plan = args.plan(crate::server_url(wire, url))?;
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
