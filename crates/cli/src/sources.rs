//! `sluice sources …`: a tenant's sources on a running server.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};
use sluice_client::Client;
use sluice_contract::escape;

#[derive(Subcommand)]
pub enum SourcesCommand {
    /// Add or replace a source: a website (--site, a start page or a sitemap: repeatable) or
    /// an S3 prefix (--s3 s3://bucket/prefix); or the whole source as JSON (--file).
    Put {
        name: String,
        #[arg(long, conflicts_with_all = ["site", "s3", "every"])]
        file: Option<PathBuf>,
        #[arg(long)]
        site: Vec<String>,
        #[arg(long, conflicts_with = "site")]
        s3: Option<String>,
        /// Sync every N minutes (without it: only when asked).
        #[arg(long, value_name = "MINUTES")]
        every: Option<u32>,
    },
    /// The tenant's sources: what each reads, its schedule, its last sync.
    List,
    /// Sync a source now: each page or object as it goes, then the report.
    Sync { name: String },
    /// The reports of a source's last syncs (JSON).
    Syncs { name: String },
    /// Cancel a source's sync that is going.
    Cancel { name: String },
    /// Delete a source and the documents synced from it (--keep-documents: they stay).
    Delete {
        name: String,
        #[arg(long)]
        keep_documents: bool,
    },
}

/// `sluice sources …` against the server `client` talks to.
pub async fn command(client: &Client, command: SourcesCommand) -> Result<()> {
    let path = |name: &str| format!("/v1/sources/{}", escape(name));
    let answer = match command {
        SourcesCommand::Put {
            name,
            file: Some(file),
            ..
        } => client.put(&path(&name), &crate::read_json(&file)?).await?,
        SourcesCommand::Put {
            name,
            site,
            s3,
            every,
            ..
        } => {
            let source = sluice_client::source_from(&site, s3.as_deref(), every);
            client
                .put(&path(&name), &source.map_err(anyhow::Error::msg)?)
                .await?
        }
        SourcesCommand::List => {
            let listed = client.get("/v1/sources").await?;
            for shown in listed["sources"].as_array().into_iter().flatten() {
                println!("{}", sluice_client::source_line(shown));
            }
            return Ok(());
        }
        SourcesCommand::Sync { name } => {
            let item = |event: &str, data: &Value| {
                (event == "item").then(|| eprintln!("{}", sluice_client::sync_item_line(data)));
            };
            let report = client.sync_source(&name, &mut |e, d| item(e, d)).await?;
            sluice_client::sync_report_lines(&report)
                .iter()
                .for_each(|l| println!("{l}"));
            return Ok(());
        }
        SourcesCommand::Syncs { name } => client.get(&format!("{}/syncs", path(&name))).await?,
        SourcesCommand::Cancel { name } => {
            client
                .post(&format!("{}/sync/cancel", path(&name)), &json!({}))
                .await?
        }
        SourcesCommand::Delete {
            name,
            keep_documents,
        } => {
            let query = ["", "?keep_documents=true"][usize::from(keep_documents)];
            client
                .delete(&format!("{}{query}", path(&name)), None)
                .await?
        }
    };
    println!("{answer:#}");
    Ok(())
}
