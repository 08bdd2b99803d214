//! `sluice component`: the arguments of a tenant's loop for a rerank or prompt component, and
//! what each runs — locally (`new`, `build`, `test`, `bench`) or against a server (`upload`,
//! `activate`, `versions`, `delete`, `logs`, `replay`, and `dev`, the loop on every save).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::{Kind, LoopError, Result};

/// The server a command talks to, as which tenant, and which kind of component.
#[derive(clap::Args)]
pub struct Server {
    /// Server base URL [default: http://$SLUICE_ADDR]
    #[arg(long, env = "SLUICE_URL")]
    url: Option<String>,
    /// Tenant (with auth off; with a key, the key's) [default: the server's]
    #[arg(long)]
    tenant: Option<String>,
    /// A prompt-assembly component (`/v1/components/prompt`), not a rerank one (an upload
    /// reads its kind from the component itself).
    #[arg(long)]
    prompt: bool,
}

impl Server {
    /// The component route's kind.
    fn kind(&self) -> &'static str {
        match self.prompt {
            true => "prompt",
            false => "rerank",
        }
    }
}

/// The route for the component in `file`: the kind it exports ([`sluice_rerank::kind_of`]),
/// else what `--prompt` says.
pub(crate) fn kind_of_file<'a>(file: &Path, flagged: &'a str) -> &'a str {
    (std::fs::read(file).ok())
        .and_then(|bytes| sluice_rerank::kind_of(&bytes))
        .unwrap_or(flagged)
}

#[derive(Subcommand)]
pub enum ComponentCommand {
    /// Create a component crate from the SDK: a workspace of its own at DIR/NAME, with the SDK
    /// and the WIT this binary carries (in Sluice's `components/` workspace, a crate of it).
    New {
        /// Crate name: lowercase letters, digits and -.
        name: String,
        /// `rerank` (the sluice:rerank@0.2.0 world) or `prompt` (sluice:prompt@0.1.0).
        #[arg(long, default_value = "rerank")]
        kind: Kind,
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
        /// Compare the orders with this file (written when it does not exist): a changed
        /// order fails the run; delete the file to accept the new orders.
        #[arg(long)]
        snapshot: Option<PathBuf>,
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
    /// On every save of the crate: build it, run the questions (with --queries), then upload
    /// it (labelled `dev`) and activate it on a server, keeping the last few `dev` versions; a
    /// failed step says why and waits for the next save. Runs until stopped.
    Dev {
        /// The crate's folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Questions to test each build on before it is uploaded (as `test` reads them).
        #[arg(long)]
        queries: Option<PathBuf>,
        /// With --queries: ingest this folder into a scratch store (default: the configured
        /// store).
        #[arg(long, requires = "queries")]
        corpus: Option<PathBuf>,
        /// How many `dev` versions to keep on the server: the newest; older ones that are not
        /// active are deleted after each upload.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
        keep: u16,
        #[command(flatten)]
        server: Server,
    },
    /// Upload a `.component.wasm` to a server (`--activate`: and make it the tenant's active
    /// one); prints the version.
    Upload {
        /// The `.component.wasm`.
        file: PathBuf,
        /// A name for the version, shown in `versions`.
        #[arg(long)]
        label: Option<String>,
        /// Activate it too.
        #[arg(long)]
        activate: bool,
        #[command(flatten)]
        server: Server,
    },
    /// Make a version the tenant's active one (an older one: a rollback).
    Activate {
        /// The version: its digest, a unique prefix of it (4 or more hex digits), or a label (the
        /// latest upload that carries it).
        version: String,
        /// Where the server cannot run the tenant's quality gate (AWS's registry function): the
        /// id of a run of the gate's set that tried this version (`sluice eval run` with it as
        /// candidate, on the answer function).
        #[arg(long)]
        gate_run: Option<String>,
        #[command(flatten)]
        server: Server,
    },
    /// Stop running the tenant's component: the built-in order (or prompt) serves again; its
    /// versions are kept.
    Deactivate {
        #[command(flatten)]
        server: Server,
    },
    /// The tenant's versions: label, upload time, calls, cost and recent failures.
    Versions {
        #[command(flatten)]
        server: Server,
    },
    /// Delete a version that is not active (its bytes, artefact and log).
    Delete {
        /// The version: its digest, a unique prefix of it (4 or more hex digits), or a label (the
        /// latest upload that carries it).
        version: String,
        #[command(flatten)]
        server: Server,
    },
    /// A version's log on the server: its last calls that logged a line or failed, oldest
    /// first, with their request ids (`--follow`: then new ones as they come).
    Logs {
        /// The version: its digest, a unique prefix of it (4 or more hex digits), or a label (the
        /// latest upload that carries it).
        version: String,
        /// Keep asking the server (every second) and write new calls as they come.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        server: Server,
    },
    /// Run a version's stored failing calls (their query, context and candidates, as the
    /// server kept them) on a local build: what failed there and what happens here. Exits
    /// non-zero while a call still fails.
    Replay {
        /// The version whose failures are replayed: its digest, a unique prefix of it, or a
        /// label.
        version: String,
        /// The local `.component.wasm` to run them on.
        file: PathBuf,
        #[command(flatten)]
        server: Server,
    },
}

/// `sluice component …`.
pub async fn command(settings: &sluice_app::Settings, command: ComponentCommand) -> Result<()> {
    let client = |server: Server| {
        let url = (server.url).unwrap_or_else(|| format!("http://{}", settings.wire.server.addr));
        let client = sluice_client::Client::new(&url).map_err(crate::remote::server)?;
        Ok::<_, LoopError>(client.for_tenant(server.tenant.as_deref()))
    };
    // The tenant whose documents a local run searches: the one named, else the default.
    let tenant_or_default = |tenant: Option<&str>| {
        (settings.wire.auth.tenant_or_default(tenant))
            .map_err(|e| LoopError::Invalid(e.to_string()))
    };
    match command {
        ComponentCommand::New { name, kind, dir } => {
            let root = crate::new(&name, kind, dir.as_deref())?;
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
            println!("{}", crate::build(&dir)?.display());
            Ok(())
        }
        ComponentCommand::Test {
            file,
            queries,
            corpus,
            tenant,
            snapshot,
        } => {
            let tenant = tenant_or_default(tenant.as_deref())?;
            let mut out = std::io::stdout();
            let (corpus, snapshot) = (corpus.as_deref(), snapshot.as_deref());
            crate::test(
                settings, &file, &queries, corpus, &tenant, snapshot, &mut out,
            )
            .await?;
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
            let tenant = tenant_or_default(tenant.as_deref())?;
            let data = queries.as_deref().map(|q| (q, corpus.as_deref(), &tenant));
            let mut out = std::io::stdout();
            let context = context.as_deref();
            crate::bench(settings, &file, runs, context, data, &mut out).await?;
            Ok(())
        }
        ComponentCommand::Dev {
            dir,
            queries,
            corpus,
            keep,
            server,
        } => {
            let tenant = tenant_or_default(server.tenant.as_deref())?;
            let checks = queries.as_deref().map(|q| (q, corpus.as_deref(), &tenant));
            let kind = server.kind();
            let client = client(server)?;
            let mut out = std::io::stdout();
            let keep = usize::from(keep);
            crate::dev(settings, &dir, (&client, kind, keep), checks, &mut out).await
        }
        ComponentCommand::Upload {
            file,
            label,
            activate,
            server,
        } => {
            let kind = kind_of_file(&file, server.kind());
            let client = client(server)?;
            let (version, quality) =
                crate::remote::upload(&client, kind, &file, label.as_deref(), activate).await?;
            println!(
                "{}",
                crate::remote::activated_lines(&version, quality.as_ref())
            );
            Ok(())
        }
        ComponentCommand::Activate {
            version,
            gate_run,
            server,
        } => {
            let kind = server.kind();
            let client = client(server)?;
            let activated = client.activate_component(kind, &version, gate_run.as_deref());
            let (version, quality) = activated.await.map_err(crate::remote::server)?;
            println!(
                "{}",
                crate::remote::activated_lines(&version, quality.as_ref())
            );
            Ok(())
        }
        ComponentCommand::Deactivate { server } => {
            let path = format!("/v1/components/{}", server.kind());
            (client(server)?.delete(&path, None).await).map_err(crate::remote::server)?;
            println!("deactivated: the built-in order serves");
            Ok(())
        }
        ComponentCommand::Versions { server } => {
            let kind = server.kind();
            let versions = crate::remote::versions(&client(server)?, kind).await?;
            for v in &versions {
                println!("{}", crate::remote::version_line(v));
            }
            if versions.is_empty() {
                println!("no versions: the built-in order serves");
            }
            Ok(())
        }
        ComponentCommand::Delete { version, server } => {
            let path = format!("/v1/components/{}/{version}", server.kind());
            let deleted = client(server)?.delete(&path, None).await;
            let deleted = deleted.map_err(crate::remote::server)?;
            println!(
                "deleted {}",
                deleted["deleted"].as_str().unwrap_or(&version)
            );
            Ok(())
        }
        ComponentCommand::Logs {
            version,
            follow,
            server,
        } => {
            let kind = server.kind();
            let every = follow.then_some(std::time::Duration::from_secs(1));
            let mut out = std::io::stdout();
            crate::remote::logs(&client(server)?, kind, &version, every, &mut out).await
        }
        ComponentCommand::Replay {
            version,
            file,
            server,
        } => {
            let mut out = std::io::stdout();
            let client = client(server)?;
            crate::remote::replay(settings, &client, &version, &file, &mut out).await
        }
    }
}
