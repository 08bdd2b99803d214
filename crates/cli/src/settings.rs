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
    /// Edit the tenant's settings in $EDITOR (default vi), then store them (a refused draft is
    /// reopened with the reason).
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
        SettingsCommand::Edit => return edit(client).await,
    };
    let stored = client.put_settings(&settings).await?;
    println!("{stored:#}");
    Ok(())
}

/// Lines of a draft that begin with this are notes to the editor's user, not settings.
const NOTE: &str = "//";

/// The settings in $EDITOR until the server stores them: a draft it refuses (or that is not
/// JSON) is opened again with why above it, as `git commit` and `kubectl edit` do; a draft
/// saved empty, or as it was reopened, gives up with nothing stored.
async fn edit(client: &Client) -> Result<()> {
    let mut text = format!("{:#}\n", client.get("/v1/settings").await?["settings"]);
    let draft = tempfile::Builder::new().suffix(".json").tempfile()?;
    let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".into());
    let mut refused: Option<String> = None;
    loop {
        let notes = (refused.as_deref()).map_or(String::new(), |why| {
            let give_up = "save it unchanged or empty to give up";
            format!("{NOTE} not stored: {why}\n{NOTE} fix it and save; {give_up}\n")
        });
        let shown = format!("{notes}{text}");
        std::fs::write(draft.path(), &shown)?;
        let status = std::process::Command::new(&editor)
            .arg(draft.path())
            .status()?;
        anyhow::ensure!(
            status.success(),
            "{editor} did not exit cleanly; nothing stored"
        );
        let saved = std::fs::read_to_string(draft.path())?;
        let body: Vec<&str> = (saved.lines())
            .filter(|l| !l.trim_start().starts_with(NOTE))
            .collect();
        text = body.join("\n") + "\n";
        let given_up = text.trim().is_empty() || (refused.is_some() && saved == shown);
        anyhow::ensure!(!given_up, "nothing stored");
        let stored = match serde_json::from_str(&text) {
            Ok(settings) => client
                .put_settings(&settings)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("not JSON: {e}")),
        };
        match stored {
            Ok(stored) => break println!("{stored:#}"),
            Err(why) => refused = Some(why.replace('\n', " ")),
        }
    }
    Ok(())
}
