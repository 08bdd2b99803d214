//! `sluice`: serve the pipeline locally and talk to it. Arguments and dispatch only: each
//! command's work is in the crate it names (`sluice --help` lists them; the docs tests read
//! that list, so it is not repeated here).

mod bench;
mod client;
mod doctor;
mod eval;
mod keys;
mod serve;
mod settings;
mod sources;

use std::path::PathBuf;

use anyhow::{Context, Result};
use bench::{BenchCommand, FixtureCommand};
use clap::{Parser, Subcommand};
use client::DocumentsCommand;
use eval::EvalCommand;
use keys::KeysCommand;
use settings::SettingsCommand;
use sluice_component::cli::ComponentCommand;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Streaming RAG answers over your own documents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (configuration from SLUICE_* variables; see docs/configuration.md).
    Serve,
    /// Ingest files or folders (.txt, .md, .html, .pdf, .docx, .json, .jsonl) through a
    /// running server.
    Ingest {
        /// Files or folders (searched recursively).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Who may see them: principals, comma-separated (group:hr,user:alice; '' for no end user)
        #[arg(long)]
        access: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Ask a question and stream the answer.
    Ask {
        #[command(flatten)]
        question: Question,
        /// Neither read nor write the answer cache.
        #[arg(long)]
        no_cache: bool,
    },
    /// Show the sources a question would be answered from, without the answer (no LLM).
    Search {
        #[command(flatten)]
        question: Question,
        /// Print the server's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// List, read or delete a tenant's documents on a running server.
    Documents {
        #[command(subcommand)]
        command: DocumentsCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Show the tenant's usage per day (answers, tokens, component fuel, documents) from a
    /// running server.
    Usage {
        #[command(flatten)]
        days: client::UsageDays,
        #[command(flatten)]
        target: Target,
    },
    /// Read or change the tenant's own settings and prompt on a running server.
    Settings {
        #[command(subcommand)]
        command: SettingsCommand,
        #[command(flatten)]
        target: Target,
    },
    /// A tenant's sources on a running server — a website or an S3 prefix kept in step with
    /// its documents — and their syncs.
    Sources {
        #[command(subcommand)]
        command: sources::SourcesCommand,
        #[command(flatten)]
        target: Target,
    },
    /// The tenant's ratings of its answers on a running server.
    Feedback {
        #[command(subcommand)]
        command: eval::FeedbackCommand,
        #[command(flatten)]
        target: Target,
    },
    /// What the tenant's corpus does not answer, from a running server.
    Insights {
        #[command(subcommand)]
        command: eval::InsightsCommand,
        #[command(flatten)]
        target: Target,
    },
    /// Check the model, the data folder, the LLM and the server.
    Doctor {
        /// Check the server running at this URL (its /readyz) instead of this environment
        /// (only when given here: SLUICE_URL is not read).
        #[arg(long)]
        url: Option<String>,
    },
    /// Manage a remote vector store.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Manage the answer cache.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Manage API keys (auth).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Manage the embedding model.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Load-test a running server, or price a benchmark's answers.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Evaluate retrieval quality on a labelled dataset, or a tenant's own sets on a server.
    Eval {
        #[command(subcommand)]
        command: EvalCommand,
    },
    /// A tenant's component: build, test and measure it locally; upload it, read its log
    /// and replay its failures against a server.
    Component {
        #[command(subcommand)]
        command: ComponentCommand,
    },
    /// Benchmark fixtures.
    Fixture {
        #[command(subcommand)]
        command: FixtureCommand,
    },
}

/// A question and how its sources are found (`ask`, `search`).
#[derive(clap::Args)]
struct Question {
    /// The question.
    query: String,
    /// Number of sources.
    #[arg(short, long)]
    k: Option<usize>,
    /// Retrieval deadline for this request, in milliseconds.
    #[arg(long)]
    deadline_ms: Option<u64>,
    /// Only sources whose document metadata passes this filter: a JSON object, as the API's
    /// `filter` (e.g. '{"year": {"$gte": 2025}}').
    #[arg(long, value_name = "JSON")]
    filter: Option<String>,
    /// What the tenant's rerank component is told about the caller: a JSON object of
    /// strings, as the API's `rerank_context` (e.g. '{"plan": "premium"}').
    #[arg(long, value_name = "JSON")]
    rerank_context: Option<String>,
    #[command(flatten)]
    target: Target,
}

impl Question {
    /// The question, its request options, and the server to ask.
    fn asked(self, no_cache: bool) -> Result<(String, sluice_client::AnswerOptions, Target)> {
        let (filter, context) = (self.filter.as_deref(), self.rerank_context.as_deref());
        let options =
            sluice_client::AnswerOptions::from_flags(self.k, self.deadline_ms, filter, context)
                .map_err(anyhow::Error::msg)?;
        let options = sluice_client::AnswerOptions {
            no_cache,
            ..options
        };
        Ok((self.query, options, self.target))
    }
}

/// The server a client command talks to, and as which tenant.
#[derive(clap::Args)]
struct Target {
    /// Tenant (with auth off; with a key, the key's) [default: SLUICE_DEFAULT_TENANT]
    #[arg(long, global = true)]
    tenant: Option<String>,
    /// Server base URL [default: http://$SLUICE_ADDR]
    #[arg(long, env = "SLUICE_URL", global = true)]
    url: Option<String>,
    /// Act for the end user of this token (a JWT from the tenant's identity provider)
    #[arg(long, env = "SLUICE_USER_TOKEN", global = true, hide_env_values = true)]
    user_token: Option<String>,
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Write model.nnef.tar beside model.onnx: the graph after tract's analysis and
    /// decluttering, which loads in about two thirds of the time (the same vectors). Run it
    /// wherever the model is installed; the Lambda model layer is built with it.
    Prepare {
        /// Model folder [default: SLUICE_MODEL_DIR]
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Create what SLUICE_STORE needs (idempotent): for qdrant, the collection
    /// SLUICE_QDRANT_COLLECTION (dense cosine + BM25 sparse with IDF, payload indexes) and its
    /// corpus-version collection; for pinecone, the serverless indexes SLUICE_PINECONE_INDEX
    /// (dense, cosine) and <index>-bm25 (sparse), waiting until ready and printing their hosts.
    CreateCollection,
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Create the DynamoDB table SLUICE_CACHE_TABLE with its indexes and TTL (idempotent;
    /// AWS_REGION, credentials and AWS_ENDPOINT_URL_DYNAMODB from the environment).
    CreateTable,
    /// Forget the cached answers of a tenant on a running server (DELETE /v1/cache).
    Clear {
        #[command(flatten)]
        target: Target,
    },
}

/// Runs the command; an error is printed as its message and the causes under it on one line
/// (`error: …: …`) and exits 1 — never a backtrace, whatever `RUST_BACKTRACE` says: what a
/// user gets wrong needs the message and the fix, not the stack.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let json = match std::env::var("SLUICE_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => false,
        Ok("json") => true,
        Ok(other) => anyhow::bail!("SLUICE_LOG_FORMAT is {other:?}; it must be text or json"),
    };
    sluice_app::logs(sluice_app::Logs::Terminal { json });
    let cli = Cli::parse();
    let settings = sluice_app::Settings::from_env()?;
    let server = |target: Target| {
        let client = sluice_client::Client::new(&server_url(&settings.wire, target.url))?;
        let client = client.for_tenant(target.tenant.as_deref());
        Ok::<_, anyhow::Error>(client.for_user(target.user_token.as_deref()))
    };
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.command {
        Command::Serve => runtime.block_on(serve::run(settings)),
        Command::Ingest {
            paths,
            access,
            target,
        } => {
            let client = server(target)?;
            runtime.block_on(client::ingest(
                &client,
                &paths,
                access.as_deref(),
                &settings.convert,
            ))
        }
        Command::Ask { question, no_cache } => {
            let (query, options, target) = question.asked(no_cache)?;
            runtime.block_on(client::ask(&server(target)?, &query, &options))
        }
        Command::Search { question, json } => {
            let (query, options, target) = question.asked(false)?;
            runtime.block_on(client::search(&server(target)?, &query, &options, json))
        }
        Command::Documents { command, target } => {
            runtime.block_on(client::documents(&server(target)?, command))
        }
        Command::Usage { days, target } => runtime.block_on(client::usage(&server(target)?, days)),
        Command::Settings { command, target } => {
            runtime.block_on(settings::command(&server(target)?, command))
        }
        Command::Sources { command, target } => {
            runtime.block_on(sources::command(&server(target)?, command))
        }
        Command::Feedback { command, target } => {
            runtime.block_on(eval::feedback(&server(target)?, command))
        }
        Command::Insights { command, target } => {
            runtime.block_on(eval::insights(&server(target)?, command))
        }
        Command::Doctor { url } => runtime.block_on(doctor::run(&settings, url.as_deref())),
        Command::Store {
            command: StoreCommand::CreateCollection,
        } => runtime.block_on(async {
            for line in sluice_retrieve::create(&settings.store, sluice_embed::DIM).await? {
                println!("{line}");
            }
            Ok(())
        }),
        Command::Cache {
            command: CacheCommand::CreateTable,
        } => {
            let (table, created) =
                runtime.block_on(sluice_app::create_cache_table(&settings.aws))?;
            let created = if created { "created" } else { "already exists" };
            println!("table {table} {created}");
            Ok(())
        }
        Command::Keys { command } => runtime.block_on(keys::command(&settings, command)),
        Command::Eval {
            command: EvalCommand::Sets { command, target },
        } => runtime.block_on(eval::sets(&server(target)?, command)),
        Command::Eval {
            command: EvalCommand::Run { run, target },
        } => runtime.block_on(eval::run_set(&server(target)?, run)),
        Command::Eval { command } => runtime.block_on(eval::command(&settings, command)),
        Command::Component { command } => {
            Ok(runtime.block_on(sluice_component::cli::command(&settings, command))?)
        }
        Command::Model {
            command: ModelCommand::Prepare { dir },
        } => {
            let dir = dir.unwrap_or_else(|| settings.embed.model_dir.clone());
            let path = sluice_embed::prepare(&dir)?;
            println!("wrote {}", path.display());
            Ok(())
        }
        Command::Fixture { command } => runtime.block_on(bench::fixture(command)),
        Command::Bench { command } => runtime.block_on(bench::command(&settings.wire, command)),
        Command::Cache {
            command: CacheCommand::Clear { mut target },
        } => {
            let tenant = (target.tenant.take())
                .unwrap_or_else(|| settings.wire.auth.default_tenant.to_string());
            target.tenant = Some(tenant.clone());
            runtime.block_on(client::clear_cache(&server(target)?, &tenant))
        }
    }
}

/// A JSON document from `file` (`-`: standard input).
fn read_json(file: &std::path::Path) -> Result<serde_json::Value> {
    let text = match file.as_os_str() == "-" {
        true => std::io::read_to_string(std::io::stdin()).context("reading standard input")?,
        false => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        }
    };
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))
}

/// The server a client command talks to: `--url`, else `http://$SLUICE_ADDR`.
fn server_url(config: &sluice_http::WireConfig, url: Option<String>) -> String {
    url.unwrap_or_else(|| format!("http://{}", config.server.addr))
}
