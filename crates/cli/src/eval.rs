//! `sluice eval retrieval`, `tune`, `pages`, `grounding` and `cache`: the arguments, and
//! where the reports go (the evaluations themselves are `sluice-eval`).

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;
use serde::Serialize;
use sluice_contract::fusion::Fusion;
use sluice_core::Config;
use sluice_eval::{run, table};

/// The default dataset folder: `$SLUICE_HOME/eval/tau2-banking`.
pub fn default_data(config: &Config) -> PathBuf {
    config.home.join("eval/tau2-banking")
}

#[derive(Subcommand)]
pub enum EvalCommand {
    /// Recall@5/10/20 (recall@10 with a bootstrap 95 % interval), nDCG@10 and MRR of dense,
    /// BM25, hybrid under plain RRF, the tuned weighted RRF and convex fusions, and hybrid +
    /// each rerank component, on the held-out half of the questions (default: τ²-bench
    /// banking_knowledge, 698 documents, 97 tasks; `scripts/setup.sh eval` unpacks them from
    /// the PyPI package inspect-evals). Writes report.json and report.md to --out and prints
    /// the table.
    Retrieval {
        #[command(flatten)]
        data: sluice_eval::EvalData,
        /// Rerank components (built by scripts/build-components.sh) to try on top of hybrid.
        #[arg(long, value_delimiter = ',', default_value = "keyword-boost,mmr")]
        components: Vec<String>,
        /// Where the reports go.
        #[arg(long, default_value = "eval-report")]
        out: PathBuf,
    },
    /// Choose a tenant's fusion: score every setting (weighted RRF over k and weights, convex
    /// combinations) on a seeded half of the labelled questions, report the best on the other
    /// half, and write the tenant's setting as a SLUICE_FUSION_TENANTS line (the current
    /// value with this tenant's entry set) to --out/fusion.env.
    Tune {
        #[command(flatten)]
        data: sluice_eval::EvalData,
        /// The tenant whose setting is written [default: SLUICE_DEFAULT_TENANT].
        #[arg(long)]
        tenant: Option<String>,
        /// Also store the fusion in the tenant's settings on the server at this URL (`PUT
        /// /v1/settings`; a key with the settings permission in SLUICE_API_KEY).
        #[arg(long, value_name = "URL")]
        apply: Option<String>,
        /// Where the reports and fusion.env go.
        #[arg(long, default_value = "eval-tune")]
        out: PathBuf,
    },
    /// Whether retrieval over converted PDFs cites the page an answer is on: every PDF of
    /// --data ingested, each labelled question searched as a request would; hit@1 and hit@3
    /// (a chunk among the first 3 spanning a page that holds the answer's phrase in poppler's
    /// text, <file>.ref.txt). Writes report.json and report.md to --out.
    Pages {
        /// Folder of PDFs, each with poppler's text beside it as <file>.ref.txt
        /// [default: $SLUICE_HOME/docs-corpus/pdf, which `scripts/setup.sh docs` fills]
        #[arg(long)]
        data: Option<PathBuf>,
        /// One {"question", "answer"} a line, the answer a phrase the PDF prints [default: 24
        /// questions on Debian's documentation, built in]
        #[arg(long)]
        questions: Option<PathBuf>,
        /// Where the reports go.
        #[arg(long, default_value = "eval-pages")]
        out: PathBuf,
    },
    /// The grounding check on HaluEval QA and on answers made from the sample corpus and
    /// τ²-bench's documents (`scripts/setup.sh eval`): balanced accuracy, precision and recall
    /// of "unsupported", false alarms and time per verdict, on the half tuning never saw.
    /// Writes report.json and report.md to --out.
    Grounding {
        /// Check only the first N HaluEval items.
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, default_value = "eval-grounding")]
        out: PathBuf,
    },
    /// A tenant's evaluation sets on a running server: store one (a JSON file, or - for
    /// standard input), print one, list them, delete one.
    Sets {
        #[command(subcommand)]
        command: SetsCommand,
        #[command(flatten)]
        target: crate::Target,
    },
    /// Run one of the tenant's evaluation sets on a running server, through its own
    /// pipeline: each question as it is scored, then the figures with their 95 % intervals
    /// and the difference from the set's last finished run.
    Run {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        target: crate::Target,
    },
    /// Paraphrases the cache answers by retrieval agreement (tests/fixtures' labelled pairs,
    /// run from the repository, over τ²-bench's documents), measured on held-out halves.
    Cache {
        #[arg(long, default_value = "eval-cache")]
        out: PathBuf,
    },
}

/// `sluice eval run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The set.
    #[arg(long)]
    set: String,
    /// Answer each question whole (the LLM and the grounding verdict; tokens are counted as
    /// answers'), not only its retrieval.
    #[arg(long)]
    answers: bool,
    /// Sources per question [default: the tenant's k].
    #[arg(short, long)]
    k: Option<u32>,
    /// Compare with this run [default: the set's last finished run in the same mode].
    #[arg(long)]
    compare_to: Option<String>,
    /// Try a stored component version beside the live one: `rerank=VERSION` or
    /// `prompt=VERSION` (a hash, a unique prefix or a label).
    #[arg(long, value_parser = candidate)]
    candidate: Option<serde_json::Value>,
    /// Print the report's JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum SetsCommand {
    /// Store a set (replacing one of the same name): {"description"?, "questions": [{"question",
    /// "documents"?, "first"?, "facts"?, …}]}.
    Put { name: String, file: PathBuf },
    /// Print a set.
    Get { name: String },
    /// List the tenant's sets.
    List,
    /// Delete a set (its runs stay).
    Delete { name: String },
    /// Add to a set (made if missing) each down-vote that names the source its answer should
    /// have been built from, as a question expecting that source first.
    Add {
        name: String,
        #[arg(long, required = true)]
        from_feedback: bool,
    },
}

#[derive(Subcommand)]
pub enum FeedbackCommand {
    /// The tenant's ratings, newest first: when, the rating, the question, the source it should
    /// have come from, the comment.
    List {
        /// Only the down-votes.
        #[arg(long)]
        down: bool,
        /// The server's JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum InsightsCommand {
    /// The questions the corpus did not answer (no source, an unsupported answer, a
    /// down-vote), grouped by similar question, most asked first.
    Gaps {
        /// The server's JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `sluice insights gaps` against the server `client` talks to.
pub async fn insights(client: &sluice_client::Client, command: InsightsCommand) -> Result<()> {
    let InsightsCommand::Gaps { json } = command;
    show(
        client.get("/v1/insights/gaps").await?,
        json,
        sluice_client::gap_lines,
    )
}

/// `sluice feedback list` against the server `client` talks to.
pub async fn feedback(client: &sluice_client::Client, command: FeedbackCommand) -> Result<()> {
    let FeedbackCommand::List { down, json } = command;
    let path = ["/v1/feedback", "/v1/feedback?rating=down"][usize::from(down)];
    show(client.get(path).await?, json, sluice_client::feedback_lines)
}

/// What the server answered: its JSON, or `lines` of it for people.
fn show(
    answer: serde_json::Value,
    json: bool,
    lines: fn(&serde_json::Value) -> Vec<String>,
) -> Result<()> {
    match json {
        true => println!("{answer:#}"),
        false => lines(&answer).iter().for_each(|l| println!("{l}")),
    }
    Ok(())
}

/// `sluice eval sets …` against the server `client` talks to.
pub async fn sets(client: &sluice_client::Client, command: SetsCommand) -> Result<()> {
    let path = |name: &str| format!("/v1/evals/sets/{}", sluice_contract::escape(name));
    let answer = match command {
        SetsCommand::Put { name, file } => {
            client.put(&path(&name), &crate::read_json(&file)?).await?
        }
        SetsCommand::Get { name } => client.get(&path(&name)).await?,
        SetsCommand::List => client.get("/v1/evals/sets").await?,
        SetsCommand::Delete { name } => client.delete(&path(&name), None).await?,
        SetsCommand::Add { name, .. } => {
            let from = format!("{}/from-feedback", path(&name));
            client.post(&from, &serde_json::json!({})).await?
        }
    };
    println!("{answer:#}");
    Ok(())
}

/// `sluice eval run`: the run streamed, a line per question, then the figures.
/// `--candidate KIND=VERSION` as a run's `candidate`.
fn candidate(text: &str) -> Result<serde_json::Value, String> {
    match text.split_once('=') {
        Some((kind @ ("rerank" | "prompt"), version)) => Ok(serde_json::json!({ kind: version })),
        _ => Err(format!("{text:?}: write rerank=VERSION or prompt=VERSION")),
    }
}

pub async fn run_set(client: &sluice_client::Client, run: RunArgs) -> Result<()> {
    let mode = ["retrieval", "answer"][usize::from(run.answers)];
    let body = serde_json::json!({"set": run.set, "mode": mode, "k": run.k,
        "compare_to": run.compare_to, "candidate": run.candidate});
    let report = (client.run_eval(&body, &mut |name, data| match name {
        "run" => eprintln!("run {}: {} questions ({mode})", data["id"], data["total"]),
        _ => eprintln!("{}", sluice_client::eval_question_line(data)),
    }))
    .await?;
    show(report, run.json, sluice_client::eval_report_lines)
}

/// `sluice eval …`: runs the evaluation and writes its reports to `--out` (and, for `tune`,
/// the tenant's `fusion.env`).
pub async fn command(settings: &sluice_app::Settings, command: EvalCommand) -> Result<()> {
    let config = &settings.config;
    let (data, components, out, tenant) = match command {
        EvalCommand::Retrieval {
            data,
            components,
            out,
        } => (data, components, out, None),
        EvalCommand::Pages {
            data,
            questions,
            out,
        } => {
            let folder = data.unwrap_or_else(|| config.home.join("docs-corpus/pdf"));
            let questions = sluice_eval::pages::questions(questions.as_deref())?;
            let report =
                sluice_eval::pages::run(settings, &folder, &questions, |line| eprintln!("{line}"))
                    .await?;
            return write_reports(&out, &report, &sluice_eval::pages::table(&report));
        }
        EvalCommand::Sets { .. } | EvalCommand::Run { .. } => {
            unreachable!("a server's evaluations are dispatched by main")
        }
        EvalCommand::Cache { out } => {
            let report = sluice_eval::cache::run_installed(settings, &default_data(config)).await?;
            return write_reports(&out, &report, &sluice_eval::cache::table(&report));
        }
        EvalCommand::Grounding { limit, out } => {
            let report = sluice_eval::grounding::run_installed(config, limit)?;
            return write_reports(&out, &report, &sluice_eval::grounding::table(&report));
        }
        EvalCommand::Tune {
            data,
            out,
            tenant,
            apply,
        } => {
            let tenant = settings.wire.auth.tenant_or_default(tenant.as_deref())?;
            (data, Vec::new(), out, Some((tenant, apply)))
        }
    };
    let folder = (data.data.clone()).unwrap_or_else(|| default_data(config));
    let report = run(settings, &folder, &data.options(&components), |line| {
        eprintln!("{line}")
    })
    .await?;
    write_reports(&out, &report, &table(&report))?;
    let out = sluice_eval::write_set(&out, &report)?;
    eprintln!("wrote {0}/documents.json, {0}/set.json", out.display());
    if let Some((tenant, apply)) = tenant {
        let fusion: Fusion = report.tuned.fusion.parse().map_err(anyhow::Error::msg)?;
        let line = format!(
            "SLUICE_FUSION_TENANTS={}",
            config.answer.fusion.tenants_with(&tenant, fusion)
        );
        std::fs::write(out.join("fusion.env"), format!("{line}\n"))?;
        println!(
            "{tenant}'s fusion: {fusion} (tuned by {}); set\n{line}",
            report.tuned.metric
        );
        eprintln!("wrote {}/fusion.env", out.display());
        if let Some(url) = apply {
            let client = sluice_client::Client::new(&url)?.for_tenant(Some(tenant.as_str()));
            let stored =
                (client.update_settings(|s| s["fusion"] = fusion.to_string().into())).await?;
            let version = &stored["version"];
            println!("stored in {tenant}'s settings, version {version}");
        }
    }
    Ok(())
}

/// Writes an evaluation's reports to `out` and prints the table.
fn write_reports(out: &Path, report: &impl Serialize, table: &str) -> Result<()> {
    let [json, md] = sluice_eval::write_reports(out, report, table)?;
    println!("{table}");
    eprintln!("wrote {} and {}", json.display(), md.display());
    Ok(())
}
