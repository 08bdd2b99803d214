//! `sluice settings get|set|edit`: the tenant's own settings on a running server.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use sluice_client::Client;

#[derive(Subcommand)]
pub enum SettingsCommand {
    /// Print the tenant's settings, their version and when they were written.
    Get,
    /// Replace the tenant's settings with a JSON document (a file, or - for standard input).
    Set { file: PathBuf },
    /// Edit the tenant's settings in $EDITOR (default vi), then store them.
    Edit,
}

/// `sluice settings …` against the server `client` talks to.
pub async fn command(client: &Client, command: SettingsCommand) -> Result<()> {
    let settings = match command {
        SettingsCommand::Get => {
            println!("{:#}", client.get("/v1/settings").await?);
            return Ok(());
        }
        SettingsCommand::Set { file } => crate::read_json(&file)?,
        SettingsCommand::Edit => {
            let now = client.get("/v1/settings").await?;
            let draft = tempfile::Builder::new().suffix(".json").tempfile()?;
            std::fs::write(draft.path(), format!("{:#}\n", now["settings"]))?;
            let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".into());
            let status = std::process::Command::new(&editor)
                .arg(draft.path())
                .status();
            anyhow::ensure!(
                status?.success(),
                "{editor} did not exit cleanly; nothing stored"
            );
            crate::read_json(draft.path())?
        }
    };
    let stored = client.put_settings(&settings).await?;
    println!("{stored:#}");
    Ok(())
}
