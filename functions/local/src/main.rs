//! `sluice`: run the Sluice pipeline locally and talk to it.
//!
//! - `sluice serve`: the HTTP routes of the Lambda functions, on `SLUICE_ADDR`.
//! - `sluice ingest PATH…`: send .txt/.md/.json/.jsonl files to a running server.
//! - `sluice ask "question"`: stream an answer to the terminal, then the stage timings.
//! - `sluice doctor`: say which parts are ready and what is missing.
//! - `sluice cache create-table`: create the DynamoDB cache table (`SLUICE_CACHE_TABLE`).
//! - `sluice store create-collection`: create the Qdrant collection or the Pinecone indexes
//!   (`SLUICE_STORE=qdrant|pinecone`).
//! - `sluice model prepare`: store the embedding model's graph in the form that loads fastest.
//! - `sluice fixture llm`: a synthetic OpenAI-compatible upstream for load tests (not a model).

mod client;
mod doctor;
mod serve;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    /// Serve the HTTP API (configuration from SLUICE_* variables; see the README).
    Serve,
    /// Ingest files or folders (.txt, .md, .json, .jsonl) through a running server.
    Ingest {
        /// Files or folders (searched recursively).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Server base URL [default: http://$SLUICE_ADDR]
        #[arg(long, env = "SLUICE_URL")]
        url: Option<String>,
    },
    /// Ask a question and stream the answer.
    Ask {
        /// The question.
        query: String,
        /// Number of sources.
        #[arg(short, long)]
        k: Option<usize>,
        /// Retrieval deadline for this request, in milliseconds.
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// Neither read nor write the answer cache.
        #[arg(long)]
        no_cache: bool,
        /// Server base URL [default: http://$SLUICE_ADDR]
        #[arg(long, env = "SLUICE_URL")]
        url: Option<String>,
    },
    /// Check the model, the data folder, the LLM and the server.
    Doctor {
        /// Server base URL [default: http://$SLUICE_ADDR]
        #[arg(long, env = "SLUICE_URL")]
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
    /// Manage the embedding model.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Benchmark fixtures.
    Fixture {
        #[command(subcommand)]
        command: FixtureCommand,
    },
}

#[derive(Subcommand)]
enum FixtureCommand {
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
        /// Tenant [default: SLUICE_DEFAULT_TENANT]
        #[arg(long)]
        tenant: Option<String>,
        /// Server base URL [default: http://$SLUICE_ADDR]
        #[arg(long, env = "SLUICE_URL")]
        url: Option<String>,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // Qdrant Edge logs start-up notices meant for its own developers at warn level.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,qdrant_edge=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let config = sluice_core::Config::from_env()?;
    let url = |u: Option<String>| u.unwrap_or_else(|| format!("http://{}", config.addr));
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.command {
        Command::Serve => runtime.block_on(serve::run(config)),
        Command::Ingest { paths, url: u } => runtime.block_on(client::ingest(&url(u), &paths)),
        Command::Ask {
            query,
            k,
            deadline_ms,
            no_cache,
            url: u,
        } => runtime.block_on(client::ask(&url(u), &query, k, deadline_ms, no_cache)),
        Command::Doctor { url: u } => runtime.block_on(doctor::run(&config, &url(u))),
        Command::Store {
            command: StoreCommand::CreateCollection,
        } => runtime.block_on(async {
            for line in sluice_retrieve::create(&config, sluice_embed::DIM).await? {
                println!("{line}");
            }
            Ok(())
        }),
        Command::Cache {
            command: CacheCommand::CreateTable,
        } => runtime.block_on(async {
            let table = sluice_cache::DynamoCache::connect(&config).await?;
            let created = table.create_table().await?;
            println!(
                "table {} {}",
                table.table(),
                if created { "created" } else { "already exists" }
            );
            Ok(())
        }),
        Command::Model {
            command: ModelCommand::Prepare { dir },
        } => {
            let dir = dir.unwrap_or_else(|| config.model_dir.clone());
            let path = sluice_embed::prepare(&dir)?;
            println!("wrote {}", path.display());
            Ok(())
        }
        Command::Fixture {
            command:
                FixtureCommand::Llm {
                    addr,
                    tokens_per_sec,
                    tokens,
                },
        } => runtime.block_on(async {
            if !(tokens_per_sec > 0.0 && tokens_per_sec.is_finite()) {
                anyhow::bail!("--tokens-per-sec must be a positive number");
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
        }),
        Command::Cache {
            command: CacheCommand::Clear { tenant, url: u },
        } => {
            let tenant = tenant.unwrap_or_else(|| config.default_tenant.clone());
            runtime.block_on(client::clear_cache(&url(u), &tenant))
        }
    }
}
