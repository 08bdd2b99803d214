//! The loop against a server: upload, activate, list and delete versions, read a version's
//! log (`logs`, `--follow`), and run a version's stored failing calls on a local build
//! (`replay`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice_client::Client;
use sluice_contract::components::{CallInput, ComponentCall, ComponentVersion};
use sluice_contract::stages::{DocumentInfo, Embedder, Hit, RerankContext, RerankInput};

use crate::test::{Local, label};
use crate::{LoopError, Result, pipeline, report};

/// A server's refusal or a broken connection, as the loop's error.
pub(crate) fn server(e: sluice_client::ClientError) -> LoopError {
    LoopError::Pipeline(e.to_string())
}

/// Unix milliseconds as RFC 3339 in UTC, to the millisecond.
pub(crate) fn at(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    (time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok())
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// A version as one line: its digest, label, upload time, what it cost, how often it failed.
pub(crate) fn version_line(v: &ComponentVersion) -> String {
    let mut line = format!("{}{}", v.version, if v.active { "  (active)" } else { "" });
    if let Some(label) = &v.label {
        line += &format!("  {label:?}");
    }
    if let Some(ms) = v.uploaded_ms {
        line += &format!("  uploaded {}", at(ms));
    }
    line += &format!("  {} bytes", v.size);
    if let Some(c) = v.cost {
        line += &format!(
            "  {} calls, fuel p50 {} p99 {}, p99 {} µs",
            c.calls, c.fuel_p50, c.fuel_p99, c.wall_us_p99
        );
    }
    if let Some(last) = v.failures.first() {
        line += &format!(
            "\n    {} recent failures; last {}: {}",
            v.failures.len(),
            at(last.at_ms),
            last.failure
        );
    }
    line
}

/// The tenant's versions of `kind` components on the server (`GET /v1/components/{kind}`).
pub(crate) async fn versions(client: &Client, kind: &str) -> Result<Vec<ComponentVersion>> {
    let path = format!("/v1/components/{kind}");
    let mut listed = (client.get(&path).await).map_err(server)?;
    serde_json::from_value(listed["versions"].take())
        .map_err(|e| LoopError::Pipeline(e.to_string()))
}

/// Uploads `file` (as `label`), and activates it when `activate` says: the version, and
/// what the tenant's quality gate said of it (when it has one and the version was activated).
pub async fn upload(
    client: &Client,
    kind: &str,
    file: &Path,
    label: Option<&str>,
    activate: bool,
) -> Result<(ComponentVersion, Option<serde_json::Value>)> {
    let bytes =
        std::fs::read(file).map_err(LoopError::io(format!("reading {}", file.display())))?;
    let version = (client.upload_component(kind, bytes, label).await).map_err(server)?;
    if !activate {
        return Ok((version, None));
    }
    (client
        .activate_component(kind, &version.version, None)
        .await)
        .map_err(server)
}

/// A version as activated: its line, and the quality gate's comparison under it.
pub fn activated_lines(version: &ComponentVersion, quality: Option<&serde_json::Value>) -> String {
    let gate = quality.map(sluice_client::gate_lines).unwrap_or_default();
    std::iter::once(version_line(version))
        .chain(gate)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A call of a version's log as lines: when, the request, what it logged, how it failed.
fn call_lines(call: &ComponentCall) -> Vec<String> {
    let request = (call.request_id.as_deref()).map_or(String::new(), |r| format!("  request {r}"));
    let mut lines = vec![format!("{}{request}", at(call.at_ms))];
    for line in &call.lines {
        let level = format!("{:?}", line.level).to_lowercase();
        lines.push(format!("  {level:<5} {}", line.message));
    }
    if let Some(failure) = &call.failure {
        lines.push(format!("  FAILED {failure}"));
    }
    lines
}

/// Writes the version's log, oldest first; with `follow`, then every new call as it comes
/// (the server is asked again every `every`) until the process is stopped.
pub async fn logs(
    client: &Client,
    kind: &str,
    version: &str,
    follow: Option<Duration>,
    out: &mut dyn Write,
) -> Result<()> {
    let mut last: Option<(u64, Option<String>)> = None;
    loop {
        let calls = (client.component_logs(kind, version).await).map_err(server)?;
        // Newest first from the server; written oldest first, past what was written already.
        let new = calls.iter().rev().filter(|c| {
            (last.as_ref()).is_none_or(|(at, id)| (c.at_ms, &c.request_id) > (*at, id))
        });
        for call in new {
            for line in call_lines(call) {
                writeln!(out, "{line}").map_err(report)?;
            }
        }
        out.flush().map_err(report)?;
        if let Some(newest) = calls.first() {
            last = Some((newest.at_ms, newest.request_id.clone()));
        }
        let Some(every) = follow else {
            return Ok(());
        };
        tokio::time::sleep(every).await;
    }
}

/// The candidates a kept input holds, as the pipeline gives them to a component.
fn hits(input: &CallInput) -> Vec<Hit> {
    (input.candidates.iter())
        .map(|c| Hit {
            document: DocumentInfo {
                id: c.id.clone(),
                title: c.title.clone(),
                source: String::new(),
                metadata: c.metadata.clone(),
                origin: None,
                format: None,
                digest: None,
            },
            chunk: c.chunk,
            text: c.text.clone(),
            tokens: 0,
            vector: Vec::new(),
            score: c.score,
            place: Default::default(),
        })
        .collect()
}

/// Runs the stored failing calls of `version` (those the server kept with their input; a key
/// bound to a filter is given none) on the component in `file`, under the configured limits:
/// what failed there, and what happens here. Fails when a call still fails here.
pub async fn replay(
    settings: &sluice_app::Settings,
    client: &Client,
    version: &str,
    file: &Path,
    out: &mut dyn Write,
) -> Result<()> {
    let calls = (client.component_logs("rerank", version).await).map_err(server)?;
    let failed: Vec<&ComponentCall> = calls.iter().filter(|c| c.input.is_some()).collect();
    if failed.is_empty() {
        writeln!(
            out,
            "version {version} has no stored failing call to replay"
        )
        .map_err(report)?;
        return Ok(());
    }
    let bytes =
        std::fs::read(file).map_err(LoopError::io(format!("reading {}", file.display())))?;
    let embedder: Arc<dyn Embedder> =
        Arc::new(sluice_app::model(&settings.embed).map_err(pipeline)?);
    let local = Local::start(settings, &embedder, &bytes, file).await?;
    let mut still = 0;
    for call in failed.iter().rev() {
        let Some(input) = &call.input else { continue };
        for line in call_lines(call)
            .into_iter()
            .filter(|l| !l.starts_with("  "))
        {
            writeln!(out, "\n{line}").map_err(report)?;
        }
        let context: Vec<String> = (input.context.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(out, "  query {:?} [{}]", input.query, context.join(", ")).map_err(report)?;
        if let Some(failure) = &call.failure {
            writeln!(out, "  there: FAILED {failure}").map_err(report)?;
        }
        let context = serde_json::to_value(&input.context)
            .ok()
            .and_then(|c| RerankContext::parse(&c).ok())
            .unwrap_or_default();
        let (hits, query) = (hits(input), input.query.clone());
        let active = Arc::clone(&local.active);
        let (call, hits) = tokio::task::spawn_blocking(move || {
            let call = active.rerank(&RerankInput {
                query: &query,
                query_vector: &[],
                hits: &hits,
                context: &context,
                request_id: "",
            });
            (call, hits)
        })
        .await
        .map_err(pipeline)?;
        match call.order {
            Ok(order) => {
                let order: Vec<String> = (order.iter()).map(|&(i, _)| label(&hits[i])).collect();
                writeln!(out, "  here:  ok: {}", order.join(", ")).map_err(report)?;
            }
            Err(failure) => {
                still += 1;
                writeln!(out, "  here:  FAILED {failure}").map_err(report)?;
            }
        }
        if input.cut {
            writeln!(out, "  (the stored texts were cut to fit the log)").map_err(report)?;
        }
    }
    match still {
        0 => Ok(()),
        n => Err(LoopError::Failed(format!(
            "{n} of {} replayed calls still fail",
            failed.len()
        ))),
    }
}
