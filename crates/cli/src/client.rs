//! The client side of `sluice ingest`, `sluice ask`, `sluice documents` and `sluice cache
//! clear`: plain HTTP to a running server.

use clap::Subcommand;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use sluice_client::{AnswerOptions, Client};
use sluice_contract::escape;
use sluice_contract::sse::Event;
use sluice_convert::ConvertLimits;

/// `sluice ingest`: convert and parse every file here (errors name the file), then send in
/// batches.
pub async fn ingest(
    client: &Client,
    paths: &[PathBuf],
    access: Option<&str>,
    limits: &ConvertLimits,
) -> Result<()> {
    let reading = ProgressBar::new_spinner();
    let (mut documents, files) = sluice_convert::read_files(paths, limits, &|f| {
        reading.set_message(format!("reading {}", f.display()));
        reading.tick();
    })?;
    (documents.iter_mut()).for_each(|d| access.into_iter().for_each(|a| d.set_access(a)));
    reading.finish_and_clear();

    let bar = ProgressBar::new(documents.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} documents, {msg} [{elapsed}]",
    )?);
    let started = Instant::now();
    let sent = |n: usize, so_far: &sluice_client::Ingested| {
        bar.inc(n as u64);
        bar.set_message(format!("{} chunks", so_far.chunks));
    };
    let total = (client.ingest_batched(documents, sent).await).inspect_err(|_| bar.abandon())?;
    bar.finish();
    println!(
        "ingested {} documents ({} unchanged) from {files} files as {} chunks in {:.1} s; corpus version {}",
        bar.length().unwrap_or(0),
        total.unchanged,
        total.chunks,
        started.elapsed().as_secs_f64(),
        total.corpus_version
    );
    Ok(())
}

/// `sluice ask`: the extract, the answer as it streams (again with its unsupported facts
/// marked, if it has any), the verdict, sources and timings (client-measured TTFT first).
pub async fn ask(client: &Client, query: &str, options: &AnswerOptions) -> Result<()> {
    let (body, sent) = (options.body(query), Instant::now());
    let mut events = client.answer(&body).await?;
    let (mut ttft, mut meta, mut text) = (None, None, String::new());
    let mut out = std::io::stdout();
    while let Some(event) = events.next().await {
        match event? {
            Event::Meta(m) => {
                if let Some(x) = &m.extract {
                    println!("extract [{}]: {}\n", x.source, x.text);
                }
                meta = Some(m);
            }
            Event::Token(token) => {
                ttft.get_or_insert_with(|| sent.elapsed());
                text.push_str(&token.text);
                write!(out, "{}", token.text)?;
                out.flush()?;
            }
            Event::Done(done) => {
                let ttft = ttft.unwrap_or_default();
                let lines = sluice_client::done_lines(&text, meta.as_deref(), &done, ttft);
                println!("\n\n{}", lines.join("\n"));
                return Ok(());
            }
            Event::Error(e) => {
                println!();
                bail!("{} ({})", e.message, e.code);
            }
        }
    }
    bail!("the stream ended without a done or error event")
}

/// `sluice search`: the sources, numbered as an answer would cite them (or the JSON).
pub async fn search(
    client: &Client,
    query: &str,
    options: &AnswerOptions,
    json: bool,
) -> Result<()> {
    let found = client.search(&options.body(query)).await?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&found)?),
        false => sluice_client::found_lines(&found)
            .iter()
            .for_each(|l| println!("{l}")),
    }
    Ok(())
}

/// `sluice cache clear`: `DELETE /v1/cache` for the client's tenant.
pub async fn clear_cache(client: &Client, tenant: &str) -> Result<()> {
    let report = client.delete("/v1/cache", None).await?;
    println!(
        "deleted {} cached answers of tenant {tenant}",
        report["deleted"].as_u64().unwrap_or(0)
    );
    Ok(())
}

/// `sluice documents list`: every page of the tenant's documents (under `filter`, a JSON
/// text), a line each (`--json`: the documents as JSON lines).
pub async fn list_documents(client: &Client, filter: Option<&str>, json_lines: bool) -> Result<()> {
    if let Some(f) = filter {
        serde_json::from_str::<Value>(f).context("--filter is not JSON")?;
    }
    if !json_lines {
        println!("id\tchunks\tingested_at\ttitle");
    }
    let count = (client.each_document(filter, &mut |d| match json_lines {
        true => println!("{d}"),
        false => println!("{}", sluice_client::document_line(d)),
    }))
    .await?;
    eprintln!("{count} documents");
    Ok(())
}

/// `sluice documents get ID`: the document as JSON.
pub async fn get_document(client: &Client, id: &str) -> Result<()> {
    let document = client.get(&format!("/v1/documents/{}", escape(id))).await?;
    println!("{document:#}");
    Ok(())
}

/// `sluice documents delete`: the document `id`, or those passing `filter` (JSON text), or
/// `all` (a thousand per call, called until none is left, with the count so far shown).
async fn delete_documents(client: &Client, id: Option<&str>, filter: Option<&str>) -> Result<()> {
    let selection = match (id, filter) {
        (Some(id), _) => {
            let report = client
                .delete(&format!("/v1/documents/{}", escape(id)), None)
                .await?;
            println!("deleted {id}; corpus version {}", report["corpus_version"]);
            return Ok(());
        }
        (None, Some(f)) => {
            json!({ "filter": serde_json::from_str::<Value>(f).context("--filter is not JSON")? })
        }
        (None, None) => json!({ "all": true }),
    };
    let progress = &mut |so_far| eprintln!("deleted {so_far} documents so far…");
    let report = client.delete_documents(&selection, progress).await?;
    let (total, version) = (&report["deleted"], &report["corpus_version"]);
    println!("deleted {total} documents; corpus version {version}");
    Ok(())
}

/// `sluice usage`: the tenant's usage per day from `from` to `to` (`YYYY-MM-DD`; the server's
/// default is this month so far), a line a day and a total (`--json`: the server's answer);
/// with `keys`, per API key as well.
/// Which days of usage `sluice usage` shows, and how.
#[derive(clap::Args)]
pub struct UsageDays {
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
}

pub async fn usage(client: &Client, days: UsageDays) -> Result<()> {
    let (from, to) = (days.from.as_deref(), days.to.as_deref());
    let usage = client.usage(from, to, days.keys).await?;
    if days.json {
        println!("{usage:#}");
        return Ok(());
    }
    println!("{}", sluice_client::usage_lines(&usage).join("\n"));
    let budgets = &usage["budgets"];
    for whose in ["tenant", "key"] {
        if let Some(budget) = budgets[whose].as_u64() {
            eprintln!(
                "{whose} budget: {budget} tokens a month (starts again on {})",
                budgets["resets_on"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(())
}

#[derive(Subcommand)]
pub enum DocumentsCommand {
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

/// `sluice documents …` against the server at `url`.
pub async fn documents(client: &Client, command: DocumentsCommand) -> Result<()> {
    match command {
        DocumentsCommand::List { filter, json } => {
            list_documents(client, filter.as_deref(), json).await
        }
        DocumentsCommand::Get { id } => get_document(client, &id).await,
        DocumentsCommand::Delete {
            id, filter, all, ..
        } => {
            if id.is_none() && filter.is_none() && !all {
                bail!("name a document, --filter or --all");
            }
            delete_documents(client, id.as_deref(), filter.as_deref()).await
        }
    }
}
