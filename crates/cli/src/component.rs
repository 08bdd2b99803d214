//! `sluice component`: the arguments of a tenant's local loop for a rerank or prompt
//! component; the work is in `sluice-component`.

use clap::Subcommand;
use std::path::PathBuf;

use anyhow::Result;

#[derive(Subcommand)]
pub enum ComponentCommand {
    /// Create a component crate from the SDK: a workspace of its own at DIR/NAME, with the SDK
    /// and the WIT this binary carries (in Sluice's `components/` workspace, a crate of it).
    New {
        /// Crate name: lowercase letters, digits and -.
        name: String,
        /// `rerank` (the sluice:rerank@0.2.0 world) or `prompt` (sluice:prompt@0.1.0).
        #[arg(long, default_value = "rerank")]
        kind: sluice_component::Kind,
        /// Where [default: `components/` when it is Sluice's components workspace, else the
        /// current folder].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a component crate into a `.component.wasm` (release, wasm32-unknown-unknown,
    /// made a component in-process); prints its path.
    Build {
        /// The crate's folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run a component on questions over a corpus, without a server: the fused order and the
    /// component's side by side, what it dropped (a prompt component: the messages it makes),
    /// fuel and time per call. Exits non-zero when a call fails or exceeds a limit.
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
    /// Measure a component's instantiate and call cost under the configured limits: on a
    /// synthetic set at 10, 50 and 200 candidates (what it holds is printed), or with
    /// --queries on the tenant's own questions and candidates.
    Bench {
        /// The `.component.wasm`.
        file: PathBuf,
        /// Calls per row.
        #[arg(long, default_value_t = 1000)]
        runs: usize,
        /// The rerank context of every call: a JSON object of strings (default: each
        /// question's own; `{"plan": "pro"}` on the synthetic set).
        #[arg(long, value_name = "JSON")]
        context: Option<String>,
        /// Questions (as `test` reads them): benchmark on their candidates instead.
        #[arg(long)]
        queries: Option<PathBuf>,
        /// With --queries: ingest this folder into a scratch store (default: the configured
        /// store).
        #[arg(long, requires = "queries")]
        corpus: Option<PathBuf>,
        /// With --queries: tenant whose documents are searched (default:
        /// SLUICE_DEFAULT_TENANT).
        #[arg(long, requires = "queries")]
        tenant: Option<String>,
    },
}

/// `sluice component …`.
pub async fn command(settings: &sluice_app::Settings, command: ComponentCommand) -> Result<()> {
    match command {
        ComponentCommand::New { name, kind, dir } => {
            let root = sluice_component::new(&name, kind, dir.as_deref())?;
            println!(
                "created {0}\nbuild it:  sluice component build {0}",
                root.display()
            );
            println!(
                "try it:    sluice component test <the .component.wasm it prints> --queries FILE --corpus DIR"
            );
            Ok(())
        }
        ComponentCommand::Build { dir } => {
            println!("{}", sluice_component::build(&dir)?.display());
            Ok(())
        }
        ComponentCommand::Test {
            file,
            queries,
            corpus,
            tenant,
        } => {
            let tenant = settings.config.auth.tenant_or_default(tenant.as_deref())?;
            let mut out = std::io::stdout();
            let corpus = corpus.as_deref();
            sluice_component::test(settings, &file, &queries, corpus, &tenant, &mut out).await?;
            Ok(())
        }
        ComponentCommand::Bench {
            file,
            runs,
            context,
            queries,
            corpus,
            tenant,
        } => {
            let tenant = settings.config.auth.tenant_or_default(tenant.as_deref())?;
            let data = queries.as_deref().map(|q| (q, corpus.as_deref(), &tenant));
            let mut out = std::io::stdout();
            let context = context.as_deref();
            sluice_component::bench(settings, &file, runs, context, data, &mut out).await?;
            Ok(())
        }
    }
}
