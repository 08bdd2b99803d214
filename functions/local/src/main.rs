//! `sluice`: run the Sluice pipeline locally and talk to it.
//!
//! - `sluice serve`: the HTTP routes of the Lambda functions, on `SLUICE_ADDR`.
//! - `sluice ingest PATH…`: send .txt/.md/.json/.jsonl files to a running server.
//! - `sluice ask "question"`: stream an answer to the terminal, then the stage timings.
//! - `sluice documents list|get|delete`: a tenant's documents on a running server.
//! - `sluice usage`: a tenant's usage per day (and per key) on a running server.
//! - `sluice doctor`: say which parts are ready and what is missing.
//! - `sluice cache create-table`: create the DynamoDB cache table (`SLUICE_CACHE_TABLE`).
//! - `sluice store create-collection`: create the Qdrant collection or the Pinecone indexes
//!   (`SLUICE_STORE=qdrant|pinecone`).
//! - `sluice keys create`: a new API key for a tenant (its digest into `SLUICE_API_KEYS_FILE`,
//!   or the DynamoDB table `SLUICE_API_KEYS_TABLE`); the key is printed once.
//! - `sluice model prepare`: store the embedding model's graph in the form that loads fastest.
//! - `sluice bench run`: load-test a running server → report.json, report.csv, report.html.
//! - `sluice bench cost`: a report and unit prices → $ per 1,000 answers (docs/cost.md).
//! - `sluice eval retrieval`: recall, nDCG and MRR of dense, BM25, hybrid under each fusion
//!   and hybrid + rerank on held-out questions (τ²-bench's banking_knowledge by default).
//! - `sluice eval tune`: a tenant's best fusion on labelled questions, as a
//!   `SLUICE_FUSION_TENANTS` line.
//! - `sluice fixture llm`: a synthetic OpenAI-compatible upstream for load tests (not a model).

mod bench;
mod client;
mod component;
#[cfg(test)]
mod docs;
mod doctor;
mod eval;
mod keys;
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
    /// Serve the HTTP API (configuration from SLUICE_* variables; see docs/configuration.md).
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
    /// List, read or delete a tenant's documents on a running server.
    Documents {
        #[command(subcommand)]
        command: DocumentsCommand,
        /// Tenant (with auth off; with a key, the key's) [default: SLUICE_DEFAULT_TENANT]
        #[arg(long, global = true)]
        tenant: Option<String>,
        /// Server base URL [default: http://$SLUICE_ADDR]
        #[arg(long, env = "SLUICE_URL", global = true)]
        url: Option<String>,
    },
    /// Show the tenant's usage per day (answers, tokens, component fuel, documents) from a
    /// running server.
    Usage {
        /// First day, YYYY-MM-DD (UTC) [default: the first of this month]
        #[arg(long)]
        from: Option<String>,
        /// Last day, YYYY-MM-DD (UTC) [default: today]
        #[arg(long)]
        to: Option<String>,
        /// Also per API key (needs the usage:keys permission).
        #[arg(long)]
        keys: bool,
        /// Print the server's JSON.
        #[arg(long)]
        json: bool,
        /// Tenant (with auth off; with a key, the key's) [default: SLUICE_DEFAULT_TENANT]
        #[arg(long)]
        tenant: Option<String>,
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
    /// Evaluate retrieval quality on a labelled dataset.
    Eval {
        #[command(subcommand)]
        command: EvalCommand,
    },
    /// Build, test and measure a tenant rerank component locally.
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

#[derive(Subcommand)]
enum ComponentCommand {
    /// Create a component crate from the SDK (0.2 world) in the components workspace; build
    /// it with `scripts/build-components.sh DIR/NAME`.
    New {
        /// Crate name: lowercase letters, digits and -.
        name: String,
        /// The components workspace.
        #[arg(long, default_value = "components")]
        dir: PathBuf,
    },
    /// Run a component on questions over a corpus, without a server: the fused order and the
    /// component's side by side, what it dropped, fuel and time per call. Exits non-zero when
    /// a call fails or exceeds a limit.
    Test {
        /// The `.component.wasm`.
        file: PathBuf,
        /// Questions: one per line, or JSON Lines `{"query", "rerank_context"?, "k"?}`.
        #[arg(long)]
        queries: PathBuf,
        /// Ingest this folder into a scratch store (default: the configured store, i.e. what
        /// `sluice serve` has ingested; stop the server first for the local one).
        #[arg(long)]
        corpus: Option<PathBuf>,
        /// Tenant whose documents are searched (default: SLUICE_DEFAULT_TENANT).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Measure a component's instantiate and call cost on 10, 50 and 200 candidates with
    /// metadata, under the configured limits.
    Bench {
        /// The `.component.wasm`.
        file: PathBuf,
        /// Calls per size.
        #[arg(long, default_value_t = 1000)]
        runs: usize,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LoadKind {
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
enum BenchCommand {
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
enum EvalCommand {
    /// Recall@5/10/20 (recall@10 with a bootstrap 95 % interval), nDCG@10 and MRR of dense,
    /// BM25, hybrid under plain RRF, the tuned weighted RRF and convex fusions, and hybrid +
    /// each rerank component, on the held-out half of the questions (default: τ²-bench
    /// banking_knowledge, 698 documents, 97 tasks; `scripts/setup.sh eval` unpacks them from
    /// the PyPI package inspect-evals). Writes report.json and report.md to --out and prints
    /// the table.
    Retrieval {
        #[command(flatten)]
        data: EvalData,
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
        data: EvalData,
        /// The tenant whose setting is written [default: SLUICE_DEFAULT_TENANT].
        #[arg(long)]
        tenant: Option<String>,
        /// Where the reports and fusion.env go.
        #[arg(long, default_value = "eval-tune")]
        out: PathBuf,
    },
}

/// The dataset and the split of an evaluation.
#[derive(clap::Args)]
struct EvalData {
    /// Folder with documents.json and tasks.json (τ²-bench) or questions.jsonl (one
    /// {"question", "relevant": [document ids]} a line) [default: $SLUICE_HOME/eval/tau2-banking]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Evaluate only the first N questions.
    #[arg(long)]
    limit: Option<usize>,
    /// Ingest only N documents: those the evaluated questions require, then others in file
    /// order (a smaller haystack for a quick run; random recall is reported for it).
    #[arg(long)]
    documents: Option<usize>,
    /// Seed of the tuning/held-out split and of the bootstrap.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What tuning maximises on the tuning half (ties: nDCG@10).
    #[arg(long, value_enum, default_value = "recall@10")]
    metric: eval::Metric,
}

impl EvalData {
    fn options(&self, components: &[String]) -> eval::Options {
        eval::Options {
            limit: self.limit,
            documents: self.documents,
            seed: self.seed,
            metric: self.metric,
            // `--components ''` tries none.
            components: components
                .iter()
                .filter(|c| !c.is_empty())
                .cloned()
                .collect(),
        }
    }
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Make a key for a tenant and print it (once: only its SHA-256 is stored, in
    /// SLUICE_API_KEYS_FILE, or in the DynamoDB table SLUICE_API_KEYS_TABLE). `sluice serve`
    /// reads the file at start: restart it to use the new key.
    Create {
        /// The tenant the key acts for.
        #[arg(long)]
        tenant: String,
        /// What the key may do, comma-separated: answer, documents, documents:delete,
        /// components, cache, usage, usage:keys (every key's usage), prompt (see the
        /// assembled prompt) [default: all but prompt and usage:keys; with --filter: answer]
        #[arg(long, value_delimiter = ',')]
        permissions: Option<Vec<String>>,
        /// A label for people (never used for access).
        #[arg(long)]
        name: Option<String>,
        /// A metadata filter (JSON, the language of answers' `filter`) the key is bound to:
        /// ANDed with every request's own, so the key only ever sees documents that pass it,
        /// e.g. '{"groups": {"$in": ["finance"]}}'.
        #[arg(long)]
        filter: Option<String>,
        /// Tokens (prompt + completion) the key may spend per calendar month (UTC); past them
        /// its answers are refused with 429 budget_exceeded.
        #[arg(long)]
        token_budget: Option<u64>,
        /// With --filter: let the bound key hold permissions that act on the whole tenant
        /// beyond its filter (components: the rerank component that orders every key's
        /// answers; usage:keys: every key's usage). Refused without this flag.
        #[arg(long, requires = "filter")]
        tenant_wide: bool,
    },
    /// Create the DynamoDB table SLUICE_API_KEYS_TABLE (the SAM template makes it in a deployment).
    CreateTable,
}

#[derive(Subcommand)]
enum DocumentsCommand {
    /// Every document (id, chunks, when ingested, title), all pages.
    List {
        /// Only documents whose metadata passes this filter (JSON, as in /v1/answer).
        #[arg(long)]
        filter: Option<String>,
        /// The documents as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One document, as JSON.
    Get {
        /// The document's id.
        id: String,
    },
    /// Delete one document, those matching --filter, or --all (with --yes).
    Delete {
        /// The document's id.
        #[arg(conflicts_with_all = ["filter", "all"], required_unless_present_any = ["filter", "all"])]
        id: Option<String>,
        /// Every document whose metadata passes this filter (JSON).
        #[arg(long, conflicts_with = "all", requires = "yes")]
        filter: Option<String>,
        /// Every document of the tenant.
        #[arg(long, requires = "yes")]
        all: bool,
        /// Confirm a deletion by --filter or --all.
        #[arg(long)]
        yes: bool,
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
    // Qdrant Edge logs start-up notices meant for its own developers at warn level.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,qdrant_edge=error".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match std::env::var("SLUICE_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => logs.init(),
        // One JSON object per line; an answer's lines carry its span (request id, tenant,
        // trace id).
        Ok("json") => logs
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        Ok(other) => anyhow::bail!("SLUICE_LOG_FORMAT is {other:?}; it must be text or json"),
    }
    let cli = Cli::parse();
    let settings = sluice_app::Settings::from_env()?;
    let config = &settings.config;
    let url = |u: Option<String>| u.unwrap_or_else(|| format!("http://{}", config.server.addr));
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.command {
        Command::Serve => runtime.block_on(serve::run(settings)),
        Command::Ingest { paths, url: u } => runtime.block_on(client::ingest(&url(u), &paths)),
        Command::Ask {
            query,
            k,
            deadline_ms,
            no_cache,
            url: u,
        } => runtime.block_on(client::ask(&url(u), &query, k, deadline_ms, no_cache)),
        Command::Documents {
            command,
            tenant,
            url: u,
        } => {
            let (url, tenant) = (url(u), tenant.as_deref());
            runtime.block_on(async {
                match command {
                    DocumentsCommand::List { filter, json } => {
                        client::list_documents(&url, tenant, filter.as_deref(), json).await
                    }
                    DocumentsCommand::Get { id } => client::get_document(&url, tenant, &id).await,
                    DocumentsCommand::Delete {
                        id, filter, all, ..
                    } => {
                        let what = match (&id, &filter) {
                            (Some(id), _) => client::Deletion::Id(id),
                            (None, Some(f)) => client::Deletion::Filter(f),
                            (None, None) if all => client::Deletion::All,
                            (None, None) => anyhow::bail!("name a document, --filter or --all"),
                        };
                        client::delete_documents(&url, tenant, what).await
                    }
                }
            })
        }
        Command::Usage {
            from,
            to,
            keys,
            json,
            tenant,
            url: u,
        } => runtime.block_on(client::usage(
            &url(u),
            tenant.as_deref(),
            from.as_deref(),
            to.as_deref(),
            keys,
            json,
        )),
        Command::Doctor { url: u } => runtime.block_on(doctor::run(&settings, &url(u))),
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
        } => runtime.block_on(async {
            let table = sluice_cache::DynamoCache::connect(&config.cache).await?;
            let created = table.create_table().await?;
            println!(
                "table {} {}",
                table.table(),
                if created { "created" } else { "already exists" }
            );
            Ok(())
        }),
        Command::Keys {
            command:
                KeysCommand::Create {
                    tenant,
                    permissions,
                    name,
                    filter,
                    token_budget,
                    tenant_wide,
                },
        } => runtime.block_on(keys::create(
            config,
            tenant,
            permissions.as_deref(),
            name,
            filter.as_deref(),
            token_budget,
            tenant_wide,
        )),
        Command::Keys {
            command: KeysCommand::CreateTable,
        } => runtime.block_on(keys::create_table(config)),
        Command::Eval { command } => {
            let (data, components, out) = match &command {
                EvalCommand::Retrieval {
                    data,
                    components,
                    out,
                } => (data, components.clone(), out),
                EvalCommand::Tune { data, out, .. } => (data, Vec::new(), out),
            };
            let tenant = match &command {
                EvalCommand::Tune { tenant, .. } => Some(match tenant {
                    Some(t) => sluice_core::Tenant::new(t)?,
                    None => config.auth.default_tenant.clone(),
                }),
                EvalCommand::Retrieval { .. } => None,
            };
            let folder = (data.data.clone()).unwrap_or_else(|| eval::default_data(config));
            let report = runtime.block_on(eval::run(
                &settings,
                &folder,
                &data.options(&components),
                |line| eprintln!("{line}"),
            ))?;
            std::fs::create_dir_all(out)?;
            let table = eval::table(&report);
            std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
            std::fs::write(out.join("report.md"), &table)?;
            println!("{table}");
            eprintln!("wrote {}/report.json and report.md", out.display());
            if let Some(tenant) = tenant {
                let fusion: sluice_core::fusion::Fusion =
                    report.tuned.fusion.parse().map_err(anyhow::Error::msg)?;
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
            }
            Ok(())
        }
        Command::Component { command } => match command {
            ComponentCommand::New { name, dir } => {
                let root = component::new(&name, &dir)?;
                println!("created {}", root.display());
                println!("build it:  scripts/build-components.sh {}", root.display());
                println!(
                    "try it:    sluice component test ~/.cache/sluice/components/{name}.component.wasm --queries FILE --corpus DIR"
                );
                Ok(())
            }
            ComponentCommand::Test {
                file,
                queries,
                corpus,
                tenant,
            } => {
                let tenant = match tenant.as_deref() {
                    Some(t) => sluice_core::Tenant::new(t)?,
                    None => config.auth.default_tenant.clone(),
                };
                runtime.block_on(component::test(
                    &settings,
                    &file,
                    &queries,
                    corpus.as_deref(),
                    &tenant,
                ))
            }
            ComponentCommand::Bench { file, runs } => component::bench(&settings, &file, runs),
        },
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
        Command::Bench {
            command:
                BenchCommand::Run {
                    url: u,
                    load,
                    levels,
                    requests,
                    warmup_s,
                    queries,
                    tenant,
                    k,
                    use_cache,
                    slo_ttft_ms,
                    compare_llm,
                    llm_model,
                    seed,
                    out,
                },
        } => {
            let loads = bench::loads(load, &levels)?;
            let queries = bench::queries(queries.as_deref())?;
            if !(warmup_s >= 0.0 && warmup_s.is_finite()) {
                anyhow::bail!("--warmup-s must be zero or more seconds");
            }
            let plan = sluice_bench::Plan {
                url: url(u),
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
            runtime.block_on(bench::run(&plan, &out))
        }
        Command::Bench {
            command:
                BenchCommand::Cost {
                    report,
                    level,
                    prices,
                    out,
                },
        } => bench::cost(&report, level.as_deref(), &prices, &out),
        Command::Cache {
            command: CacheCommand::Clear { tenant, url: u },
        } => {
            let tenant = tenant.unwrap_or_else(|| config.auth.default_tenant.to_string());
            runtime.block_on(client::clear_cache(&url(u), &tenant))
        }
    }
}
