//! `dev`: the loop on every save — build, test (when questions are given), upload and
//! activate on a server — until the process is stopped.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use sluice_client::Client;
use sluice_contract::Tenant;

use crate::{LoopError, Result, report};

/// How often the crate's files are looked at.
const POLL: Duration = Duration::from_millis(500);

/// The questions a round runs before it uploads: the file, the corpus, the tenant.
pub type Checks<'a> = (&'a Path, Option<&'a Path>, &'a Tenant);
/// Where a round uploads: the server, the component kind, and how many `dev` versions it
/// keeps there.
pub type Target<'a> = (&'a Client, &'a str, usize);

/// The label of the versions `dev` uploads.
const DEV: &str = "dev";

/// The newest modification time under the crate's `src/` and of its `Cargo.toml`, with the
/// number of files (a deleted file changes it too).
fn stamp(dir: &Path) -> (Option<SystemTime>, usize) {
    let mut newest = None;
    let mut files = 0;
    let mut pending = vec![dir.join("src"), dir.join("Cargo.toml")];
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let entries = std::fs::read_dir(&path).into_iter().flatten().flatten();
            pending.extend(entries.map(|e| e.path()));
            continue;
        }
        files += 1;
        newest = newest.max(meta.modified().ok());
    }
    (newest, files)
}

/// Builds the crate in `dir`, runs `checks`, and uploads and activates the component on the
/// server of `client` (labelled `dev`), again on every change of its sources, writing what
/// each round did to `out`; a round that fails says why and the loop waits for the next
/// change.
pub async fn dev(
    settings: &sluice_app::Settings,
    dir: &Path,
    target: Target<'_>,
    checks: Option<Checks<'_>>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut seen = None;
    loop {
        let now = stamp(dir);
        if seen.as_ref() != Some(&now) {
            seen = Some(now);
            if let Err(e) = round(settings, dir, target, checks, out).await {
                writeln!(out, "not uploaded: {e}").map_err(report)?;
            }
            writeln!(out, "watching {} for changes (Ctrl-C ends)", dir.display())
                .map_err(report)?;
            out.flush().map_err(report)?;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One round: build, check, upload, activate.
async fn round(
    settings: &sluice_app::Settings,
    dir: &Path,
    (client, kind, keep): Target<'_>,
    checks: Option<Checks<'_>>,
    out: &mut dyn Write,
) -> Result<()> {
    let wasm = crate::build(dir)?;
    writeln!(out, "built {}", wasm.display()).map_err(report)?;
    if let Some((queries, corpus, tenant)) = checks {
        crate::test(settings, &wasm, queries, corpus, tenant, None, out).await?;
    }
    let kind = crate::cli::kind_of_file(&wasm, kind);
    let (version, quality) = crate::upload(client, kind, &wasm, Some(DEV), true)
        .await
        .map_err(|e| LoopError::Pipeline(format!("uploading to the server: {e}")))?;
    let activated = crate::remote::activated_lines(&version, quality.as_ref());
    writeln!(out, "activated {activated}").map_err(report)?;
    let pruned = prune(client, kind, keep).await?;
    if pruned > 0 {
        let kept = format!("the last {keep} are kept; `--keep N` for more");
        writeln!(out, "deleted {pruned} older dev version(s) ({kept})").map_err(report)?;
    }
    Ok(())
}

/// Deletes the tenant's `dev` versions past the newest `keep` (never the active one): the
/// number deleted.
async fn prune(client: &Client, kind: &str, keep: usize) -> Result<usize> {
    let versions = crate::remote::versions(client, kind).await?;
    let mut dev: Vec<_> = (versions.iter())
        .filter(|v| v.label.as_deref() == Some(DEV))
        .collect();
    dev.sort_by_key(|v| std::cmp::Reverse(v.uploaded_ms.unwrap_or(0)));
    let mut deleted = 0;
    for old in dev.iter().skip(keep).filter(|v| !v.active) {
        let gone = client
            .delete(&format!("/v1/components/{kind}/{}", old.version), None)
            .await;
        gone.map_err(crate::remote::server)?;
        deleted += 1;
    }
    Ok(deleted)
}
