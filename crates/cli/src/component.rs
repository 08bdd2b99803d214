//! `sluice component`: a tenant's local loop for a rerank component — start a crate from the
//! SDK (`new`, in a workspace of its own anywhere: the SDK and the WIT come from this binary),
//! build it into a component (`build`), run it on questions over a corpus without a server
//! (`test`), and measure what it costs (`bench`). `test` runs the component as the answer path does (the registry, the
//! same limits, the same candidates with their metadata); `bench` runs it in the sandbox
//! alone, on synthetic candidates.

use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use sluice_contract::Tenant;
use sluice_contract::{
    stages::CallCosts, stages::Components, stages::Embedder, stages::Hit, stages::RerankContext,
    stages::RerankInput, stages::Reranker, stages::Search, stages::Store,
};
use sluice_core::Ingest;
use sluice_rerank::measure::{measure, sample_candidates};
use sluice_rerank::{Call, Candidate, Sandbox, UploadHost};

/// The crate `sluice component new` writes (`components/template`, built and tested with the
/// other components): a 0.2 component that keeps the fused order, with the places to put a
/// tenant's rules marked; its name is the template's.
const TEMPLATE_LIB: &str = include_str!("../../../components/template/src/lib.rs");
const TEMPLATE_MANIFEST: &str = include_str!("../../../components/template/Cargo.toml");
/// What the template is called in its files.
const TEMPLATE_NAME: &str = "template";

/// The SDK and the world `sluice component new` writes into a workspace of its own: the ones
/// this binary was built with, so a component built from them fits the host that runs it.
const SDK_LIB: &str = include_str!("../../../components/sdk/src/lib.rs");
const SDK_MANIFEST: &str = include_str!("../../../components/sdk/Cargo.toml");
const WORLD: &str = include_str!("../../../wit/rerank-0.2/rerank.wit");
/// The components workspace's manifest: where the SDK's `wit-bindgen` is pinned.
const COMPONENTS_MANIFEST: &str = include_str!("../../../components/Cargo.toml");

/// A workspace of one component: the crate, the SDK under `vendor/` (which reads the WIT at
/// `../../wit/rerank-0.2`, as in Sluice's own tree) and the release profile components need
/// (`NAME` and `VERSION` filled in).
const STANDALONE_MANIFEST: &str = include_str!("../../../components/template/standalone.toml");

/// `sluice component new NAME`: a component crate — in `dir` when that is a components
/// workspace (Sluice's own `components/`), else a workspace of its own at `dir/NAME` (default
/// `dir`: `components/` when it is one, else the current folder).
pub fn new(name: &str, dir: Option<&Path>) -> Result<PathBuf> {
    let valid = name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name != "sdk";
    ensure!(
        valid,
        "{name:?} is not a crate name for a component: lowercase ASCII letters, digits and -, \
         starting with a letter, at most 40 characters (and not `sdk`)"
    );
    let is_workspace = |dir: &Path| {
        std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|m| m.contains("[workspace]") && m.contains("sluice-rerank-sdk"))
    };
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None if is_workspace(Path::new("components")) => PathBuf::from("components"),
        None => PathBuf::from("."),
    };
    let root = dir.join(name);
    ensure!(!root.exists(), "{} already exists", root.display());
    let write = |path: &Path, text: &str| -> Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(
        &root.join("src/lib.rs"),
        &TEMPLATE_LIB.replacen(TEMPLATE_NAME, name, 1),
    )?;
    if is_workspace(&dir) {
        write(
            &root.join("Cargo.toml"),
            &TEMPLATE_MANIFEST.replacen(
                &format!("name = \"{TEMPLATE_NAME}\""),
                &format!("name = \"{name}\""),
                1,
            ),
        )?;
        return Ok(root);
    }
    let version = env!("CARGO_PKG_VERSION");
    let manifest = STANDALONE_MANIFEST
        .replace("NAME", name)
        .replace("VERSION", version);
    write(&root.join("Cargo.toml"), &manifest)?;
    write(&root.join("vendor/sluice-rerank-sdk/src/lib.rs"), SDK_LIB)?;
    write(
        &root.join("vendor/sluice-rerank-sdk/Cargo.toml"),
        &standalone_sdk_manifest(version)?,
    )?;
    write(&root.join("wit/rerank-0.2/rerank.wit"), WORLD)?;
    write(&root.join(".gitignore"), "/target\n")?;
    Ok(root)
}

/// The SDK's manifest outside Sluice's workspace: its own version (Sluice's) and the
/// `wit-bindgen` pin of the components workspace, written out.
fn standalone_sdk_manifest(version: &str) -> Result<String> {
    let bindgen = (COMPONENTS_MANIFEST.lines())
        .find(|l| l.starts_with("wit-bindgen = "))
        .context("the components workspace pins no wit-bindgen")?;
    let mut out = String::new();
    for line in SDK_MANIFEST.lines() {
        let line = match line {
            "version.workspace = true" => format!("version = \"{version}\""),
            "edition.workspace = true" => "edition = \"2024\"".into(),
            "license.workspace = true" => "license = \"Apache-2.0\"".into(),
            "publish.workspace = true" => "publish = false".into(),
            "wit-bindgen.workspace = true" => bindgen.to_string(),
            other => other.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    ensure!(
        !out.contains(".workspace = true"),
        "the SDK's manifest has a workspace key this writer does not know:\n{SDK_MANIFEST}"
    );
    Ok(out)
}

/// How this machine builds for `wasm32-unknown-unknown`.
enum Toolchain {
    /// A toolchain whose sysroot has the target's standard library (rustup's
    /// `rustup target add wasm32-unknown-unknown`).
    Installed,
    /// Debian's `rustc-web` with the standard library's sources (`rust-web-src`) and LLVM's
    /// linker (`lld-22`): the standard library is built with the component.
    DebianSources,
}

fn toolchain() -> Result<Toolchain> {
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if sysroot.is_some_and(|s| s.join("lib/rustlib/wasm32-unknown-unknown/lib").is_dir()) {
        return Ok(Toolchain::Installed);
    }
    if Path::new("/usr/bin/rustc").is_file()
        && Path::new("/usr/lib/rustlib/src/rust").is_dir()
        && Path::new("/usr/bin/wasm-ld-22").is_file()
    {
        return Ok(Toolchain::DebianSources);
    }
    bail!(
        "no Rust toolchain here builds for wasm32-unknown-unknown. With rustup: \
         `rustup target add wasm32-unknown-unknown`; on Debian or Ubuntu: \
         `apt-get install rustc-web cargo-web rust-web-src lld-22`"
    )
}

/// `sluice component build [DIR]`: the component crate in `dir` built for
/// `wasm32-unknown-unknown` (release) and made a component in-process; returns the path of the
/// `.component.wasm`, written beside the build's output (`<target dir>/NAME.component.wasm`).
pub fn build(dir: &Path) -> Result<PathBuf> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| {
        format!(
            "{} is not a component crate (no Cargo.toml); start one with `sluice component new NAME`",
            dir.display()
        )
    })?;
    let name = (text.lines())
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').to_string())
        })
        .with_context(|| format!("{} has no [package] name", manifest.display()))?;
    let toolchain = toolchain()?;
    let cargo = |args: &[&str]| {
        let mut command = match toolchain {
            Toolchain::Installed => std::process::Command::new("cargo"),
            Toolchain::DebianSources => {
                let mut c = std::process::Command::new("/usr/bin/cargo");
                // RUSTC_BOOTSTRAP lets the stable toolchain build the standard library
                // (-Zbuild-std); Debian ships no rust-lld, hence the linker.
                c.env("RUSTC", "/usr/bin/rustc")
                    .env("RUSTC_BOOTSTRAP", "1")
                    .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", "wasm-ld-22");
                c
            }
        };
        // A wrapper of the host toolchain (clippy's, sccache) must not wrap this one.
        command
            .env_remove("RUSTC_WRAPPER")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .arg(args[0])
            .arg("--manifest-path")
            .arg(&manifest)
            .args(&args[1..]);
        command
    };
    let metadata = cargo(&["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("running cargo")?;
    ensure!(
        metadata.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: Value = serde_json::from_slice(&metadata.stdout)?;
    let target = PathBuf::from(
        metadata["target_directory"]
            .as_str()
            .context("cargo metadata names no target directory")?,
    );
    let mut args = vec![
        "build",
        "--release",
        "--target",
        "wasm32-unknown-unknown",
        "-p",
        &name,
    ];
    if let Toolchain::DebianSources = toolchain {
        args.push("-Zbuild-std=std,panic_abort");
    }
    let status = cargo(&args).status().context("running cargo build")?;
    ensure!(
        status.success(),
        "cargo build failed (its errors are above)"
    );
    let core_path = target
        .join("wasm32-unknown-unknown/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    let core = std::fs::read(&core_path)
        .with_context(|| format!("reading the built module {}", core_path.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&core)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| anyhow::anyhow!("making {} a component: {e:#}", core_path.display()))?;
    let out = target.join(format!("{name}.component.wasm"));
    std::fs::write(&out, component).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

/// One question of `--queries`: a line of text, or a JSON object
/// `{"query", "rerank_context"?, "k"?}`.
#[derive(Debug, Clone)]
pub struct Question {
    pub query: String,
    pub context: RerankContext,
    pub k: Option<usize>,
}

/// The questions of a file: one per line (blank lines and `#` comments skipped).
pub fn questions(path: &Path) -> Result<Vec<Question>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        if !line.starts_with('{') {
            out.push(Question {
                query: line.to_string(),
                context: RerankContext::default(),
                k: None,
            });
            continue;
        }
        let v: Value = serde_json::from_str(line).with_context(at)?;
        let query = v["query"]
            .as_str()
            .filter(|q| !q.trim().is_empty())
            .with_context(|| format!("{}: no \"query\"", at()))?;
        let context = match v.get("rerank_context") {
            None => RerankContext::default(),
            Some(c) => RerankContext::parse(c)
                .map_err(|e| anyhow::anyhow!("{}: \"rerank_context\": {e}", at()))?,
        };
        let k = match v.get("k") {
            None => None,
            Some(k) => Some(
                k.as_u64()
                    .filter(|k| (1..=sluice_contract::stages::MAX_K as u64).contains(k))
                    .with_context(|| {
                        format!(
                            "{}: \"k\" must be 1 to {}",
                            at(),
                            sluice_contract::stages::MAX_K
                        )
                    })? as usize,
            ),
        };
        out.push(Question {
            query: query.to_string(),
            context,
            k,
        });
    }
    ensure!(!out.is_empty(), "{}: no questions", path.display());
    Ok(out)
}

/// `sluice component test`: what happened to one question.
struct Outcome {
    fused: Vec<String>,
    reranked: Result<Vec<String>, String>,
    dropped: Vec<String>,
    fuel: u64,
    wall: Duration,
}

fn label(hit: &Hit) -> String {
    format!("{}#{}", hit.document.id, hit.chunk)
}

/// Each question's query vector and candidates, retrieved as the answer path retrieves them
/// (the tenant's fusion, `k` candidates): from `corpus` ingested into a scratch store, or from
/// the configured store (what `sluice serve` has ingested).
async fn retrieve(
    settings: &sluice_app::Settings,
    questions: &[Question],
    corpus: Option<&Path>,
    tenant: &Tenant,
    embedder: &Arc<dyn Embedder>,
) -> Result<Vec<(Vec<f32>, Vec<Hit>)>> {
    let config = &settings.config;
    let embedder = Arc::clone(embedder);
    let scratch = tempfile::tempdir()?;
    let store: Arc<dyn Store> = match corpus {
        Some(dir) => {
            let (documents, _) =
                crate::client::read_documents(&[dir.to_path_buf()], &settings.convert, &|_| {})?;
            let store: Arc<dyn Store> = Arc::new(sluice_retrieve::EdgeStore::open(
                &scratch.path().join("store"),
                sluice_embed::DIM,
            )?);
            let mut ingest_config = config.ingest.clone();
            ingest_config.max_documents = ingest_config.max_documents.max(documents.len());
            let ingest = Ingest::new(ingest_config, Arc::clone(&embedder), Arc::clone(&store));
            let report = ingest.ingest(tenant, documents).await?;
            eprintln!(
                "corpus: {} documents, {} chunks from {}",
                report.documents,
                report.chunks,
                dir.display()
            );
            store
        }
        None => {
            let store = sluice_app::store(&settings.store)
                .context("opening the configured store (the local corpus); stop `sluice serve` or pass --corpus")?;
            let chunks = store.count(tenant).await?;
            ensure!(
                chunks > 0,
                "tenant {tenant} has no documents in the configured store; ingest some or pass --corpus DIR"
            );
            eprintln!("corpus: tenant {tenant}'s {chunks} chunks in the configured store");
            store
        }
    };

    let fusion = config.answer.fusion.for_tenant(tenant);
    let mut retrieved = Vec::with_capacity(questions.len());
    for q in questions {
        let vector = embedder
            .embed(&[q.query.as_str()])?
            .pop()
            .context("no query vector")?;
        let k = q.k.unwrap_or(config.answer.top_k);
        let search = Search::new(&q.query, &vector, k).fusion(fusion);
        let hits = store.search(tenant, &search).await?;
        retrieved.push((vector, hits));
    }
    Ok(retrieved)
}

/// `sluice component test FILE --queries FILE [--corpus DIR]`: every question retrieved as
/// the answer path retrieves it (the tenant's fusion, `k` candidates), then reranked by the
/// component under the configured limits. Prints the two orders side by side, what was
/// dropped, and the cost per call; fails when any call failed.
pub async fn test(
    settings: &sluice_app::Settings,
    file: &Path,
    queries: &Path,
    corpus: Option<&Path>,
    tenant: &Tenant,
) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let questions = questions(queries)?;
    let embedder: Arc<dyn Embedder> = Arc::new(sluice_app::model(&settings.embed)?);
    let retrieved = retrieve(settings, &questions, corpus, tenant, &embedder).await?;

    // The component as the answer path runs it: uploaded to a registry (validated, compiled,
    // smoke-run under the limits), then called with the same candidates and context.
    let world = sandbox(settings)?
        .compile(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: refused at upload: {e}", file.display()))?
        .world();
    let scratch = tempfile::tempdir()?;
    let disk = sluice_rerank::Disk::open(&scratch.path().join("components"))?;
    let registry = sluice_app::registry(&settings.rerank, Arc::clone(&embedder), Arc::new(disk))?;
    let version = registry
        .upload(tenant, &bytes, &sluice_contract::cancel::Cancel::new())
        .map_err(|e| anyhow::anyhow!("{}: refused at upload: {e}", file.display()))?;
    registry.activate(tenant, &version.version)?;
    let by = tokio::time::Instant::now() + Duration::from_secs(60);
    let active = registry
        .active(tenant, by)
        .await
        .map_err(anyhow::Error::msg)?
        .context("the registry does not run the component just activated")?;
    eprintln!(
        "component: {} ({} bytes, {}), limits: fuel {}, deadline {:?}, memory {} MiB",
        file.display(),
        bytes.len(),
        world,
        settings.rerank.fuel,
        settings.rerank.deadline,
        settings.rerank.memory_mb
    );

    let mut outcomes = Vec::with_capacity(questions.len());
    for (q, (vector, hits)) in questions.iter().zip(retrieved) {
        let active = Arc::clone(&active);
        let (query, context, candidates) = (q.query.clone(), q.context.clone(), hits.clone());
        let call = tokio::task::spawn_blocking(move || {
            active.rerank(&RerankInput {
                query: &query,
                query_vector: &vector,
                hits: &candidates,
                context: &context,
            })
        })
        .await?;
        let kept: Option<Vec<usize>> =
            (call.order.as_ref().ok()).map(|order| order.iter().map(|&(i, _)| i).collect());
        let dropped = match kept {
            Some(order) => (0..hits.len())
                .filter(|i| !order.contains(i))
                .map(|i| label(&hits[i]))
                .collect(),
            None => Vec::new(),
        };
        // Each list with its own scores: the fused one's, and the component's.
        let scored = |label: String, score: f32| format!("{label} {score:.3}");
        outcomes.push(Outcome {
            fused: (hits.iter()).map(|h| scored(label(h), h.score)).collect(),
            reranked: (call.order)
                .map(|order| {
                    (order.iter())
                        .map(|&(i, score)| scored(label(&hits[i]), score))
                        .collect()
                })
                .map_err(|failure| failure.to_string()),
            dropped,
            fuel: call.fuel,
            wall: call.wall,
        });
    }

    let mut failed = 0;
    for (q, o) in questions.iter().zip(&outcomes) {
        let context: Vec<String> = q.context.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "\n{}{}",
            q.query,
            if context.is_empty() {
                String::new()
            } else {
                format!("  [{}]", context.join(", "))
            }
        );
        match &o.reranked {
            Ok(order) => {
                let width = o.fused.iter().map(String::len).max().unwrap_or(5).max(5);
                println!(
                    "  {:>3}  {:<width$}  component (its score)",
                    "#", "fused (score)"
                );
                for i in 0..o.fused.len() {
                    println!(
                        "  {:>3}  {:<width$}  {}",
                        i + 1,
                        o.fused[i],
                        order.get(i).map_or("", String::as_str)
                    );
                }
                if !o.dropped.is_empty() {
                    println!("  dropped: {}", o.dropped.join(", "));
                }
            }
            Err(e) => {
                failed += 1;
                println!("  FAILED (the answer keeps the fused order, rerank_failed): {e}");
            }
        }
        println!("  fuel {}, {:.0} µs", o.fuel, o.wall.as_secs_f64() * 1e6);
    }
    let costs = CallCosts::of(outcomes.iter().map(|o| (o.fuel, o.wall.as_micros() as u64)))
        .context("no calls")?;
    println!(
        "\n{} calls, {failed} failed; fuel p50 {} p99 {}; time p50 {} µs p99 {} µs",
        costs.calls, costs.fuel_p50, costs.fuel_p99, costs.wall_us_p50, costs.wall_us_p99
    );
    if failed > 0 {
        bail!("{failed} of {} calls failed", outcomes.len());
    }
    Ok(())
}

/// A sandbox under the configured limits whose host runs no model (made-up embeddings, as
/// at upload; words counted as tokens).
fn sandbox(settings: &sluice_app::Settings) -> Result<Sandbox> {
    let host = UploadHost(Box::new(|text: &str| text.split_whitespace().count()));
    Sandbox::new(sluice_rerank::limits(&settings.rerank), Arc::new(host))
        .map_err(|e| anyhow::anyhow!("starting the sandbox: {e:#}"))
}

/// The synthetic set `sluice component bench` runs on without `--queries`, as its output and
/// the docs describe it.
pub const SYNTHETIC: &str = "query \"what is the card limit\"; candidates doc-0, doc-1, … \
(title \"Document i\", a 144-word text about card limits and international transfers, fused \
score 1/(60+i), chunk i mod 7) with metadata audience = [\"enterprise\"] for every 4th, else \
[\"free\", \"pro\", \"enterprise\"]; draft = true for every 9th; topic = \"cards\"; \
updated_at one day older each from 2025-03-01; year 2025, 2024, 2023 in turn";

/// `sluice component bench FILE`: the component's instantiate and call cost under the
/// configured limits (embeddings made up, as at upload: no model runs) — on the synthetic
/// set ([`SYNTHETIC`]) at 10, 50 and 200 candidates, or on the tenant's own questions and
/// their candidates (`queries`, from `corpus` or the configured store), each with its
/// context; `context` replaces every call's.
pub async fn bench(
    settings: &sluice_app::Settings,
    file: &Path,
    runs: usize,
    context: Option<&str>,
    data: Option<(&Path, Option<&Path>, &Tenant)>,
) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let context = match context {
        Some(text) => {
            let value: Value = serde_json::from_str(text).context(
                "--context is not JSON; write an object, such as '{\"plan\": \"premium\"}'",
            )?;
            Some(RerankContext::parse(&value).map_err(|e| anyhow::anyhow!("--context: {e}"))?)
        }
        None => None,
    };
    let sandbox = sandbox(settings)?;
    let prepared = sandbox
        .compile(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: refused at upload: {e}", file.display()))?;
    println!(
        "{} ({} bytes, {}): {runs} calls each, fresh store and instance per call",
        file.display(),
        bytes.len(),
        prepared.world()
    );
    // (what, query, context, candidates) per row.
    let mut rows: Vec<(String, String, RerankContext, Vec<Candidate>)> = Vec::new();
    match data {
        None => {
            let context = context.unwrap_or_else(|| {
                let pro = serde_json::json!({"plan": "pro"});
                RerankContext::parse(&pro).unwrap_or_default()
            });
            println!("synthetic set: {SYNTHETIC}; context {}", show(&context));
            for n in [0, 10, 50, 200] {
                let what = match n {
                    0 => "instantiate + empty call".to_string(),
                    n => format!("{n} candidates"),
                };
                let query = "what is the card limit".to_string();
                rows.push((what, query, context.clone(), sample_candidates(n)));
            }
        }
        Some((queries, corpus, tenant)) => {
            let questions = questions(queries)?;
            let embedder: Arc<dyn Embedder> = Arc::new(sluice_app::model(&settings.embed)?);
            let retrieved = retrieve(settings, &questions, corpus, tenant, &embedder).await?;
            let max = settings.rerank.max_text_bytes;
            for (i, (q, (_, hits))) in questions.iter().zip(retrieved).enumerate() {
                let context = context.clone().unwrap_or_else(|| q.context.clone());
                println!(
                    "q{}: {} — {} candidates, context {}",
                    i + 1,
                    q.query,
                    hits.len(),
                    show(&context)
                );
                let what = format!("q{} ({} candidates)", i + 1, hits.len());
                rows.push((
                    what,
                    q.query.clone(),
                    context,
                    sluice_rerank::candidates(&hits, max),
                ));
            }
        }
    }
    let mut failed = false;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (what, query, context, candidates) in &rows {
        let entries = sluice_rerank::context_entries(context);
        let call = Call {
            query,
            context: &entries,
            candidates,
        };
        let m = measure(&sandbox, &prepared, &call, runs);
        println!(
            "  {what:<26} p50 {:>8.1} µs  p99 {:>8.1} µs  fuel p50 {:>10} p99 {:>10}{}",
            us(m.wall.0),
            us(m.wall.1),
            m.fuel.0,
            m.fuel.1,
            m.failure
                .as_ref()
                .map_or(String::new(), |e| format!("  FAILED: {e}"))
        );
        failed |= m.failure.is_some();
    }
    ensure!(!failed, "the component failed under the limits");
    Ok(())
}

/// A context as `key=value, …` (`none` when empty).
fn show(context: &RerankContext) -> String {
    let pairs: Vec<String> = context.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if pairs.is_empty() {
        "none".into()
    } else {
        pairs.join(", ")
    }
}

#[derive(Subcommand)]
pub enum ComponentCommand {
    /// Create a component crate from the SDK (0.2 world): a workspace of its own at DIR/NAME,
    /// with the SDK and the WIT this binary carries (in Sluice's `components/` workspace, a
    /// crate of it).
    New {
        /// Crate name: lowercase letters, digits and -.
        name: String,
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

/// `--tenant`, else `SLUICE_DEFAULT_TENANT`.
fn tenant_or_default(settings: &sluice_app::Settings, tenant: Option<&str>) -> Result<Tenant> {
    Ok(match tenant {
        Some(t) => Tenant::new(t)?,
        None => settings.config.auth.default_tenant.clone(),
    })
}

/// `sluice component …`.
pub async fn command(settings: &sluice_app::Settings, command: ComponentCommand) -> Result<()> {
    match command {
        ComponentCommand::New { name, dir } => {
            let root = new(&name, dir.as_deref())?;
            println!("created {}", root.display());
            println!("build it:  sluice component build {}", root.display());
            println!(
                "try it:    sluice component test <the .component.wasm it prints> --queries FILE --corpus DIR"
            );
            Ok(())
        }
        ComponentCommand::Build { dir } => {
            println!("{}", build(&dir)?.display());
            Ok(())
        }
        ComponentCommand::Test {
            file,
            queries,
            corpus,
            tenant,
        } => {
            let tenant = tenant_or_default(settings, tenant.as_deref())?;
            test(settings, &file, &queries, corpus.as_deref(), &tenant).await
        }
        ComponentCommand::Bench {
            file,
            runs,
            context,
            queries,
            corpus,
            tenant,
        } => {
            let tenant = tenant_or_default(settings, tenant.as_deref())?;
            let data = queries.as_deref().map(|q| (q, corpus.as_deref(), &tenant));
            bench(settings, &file, runs, context.as_deref(), data).await
        }
    }
}
