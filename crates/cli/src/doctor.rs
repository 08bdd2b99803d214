//! `sluice doctor`: which parts are ready, and what to do about the rest — of the environment
//! `sluice serve` would start with here (`sluice_app::doctor`), or with `--url` of a running
//! server (its `/readyz`: model, store, LLM). It creates nothing and asks no server it was
//! not pointed at.

use anyhow::{Result, anyhow, ensure};
use sluice_app::doctor::Check;

/// Prints one plain line per part; fails when a part is not ready.
pub async fn run(settings: &sluice_app::Settings, url: Option<&str>) -> Result<()> {
    let checks = match url {
        None => {
            println!(
                "What `sluice serve` would start with here, from its SLUICE_* variables \
                 (`sluice doctor --url URL` checks a running server instead):"
            );
            sluice_app::doctor::checks(settings).await
        }
        Some(url) => server(url).await?,
    };
    for c in &checks {
        println!("{} {}: {}", if c.ok { "✓" } else { "✗" }, c.part, c.detail);
    }
    ensure!(
        checks.iter().all(|c| c.ok),
        "some parts are not ready (✗ above)"
    );
    Ok(())
}

/// A running server's own view of its parts: `GET /readyz`.
async fn server(url: &str) -> Result<Vec<Check>> {
    ensure!(
        !url.trim().is_empty(),
        "--url needs a server's address, such as http://127.0.0.1:8080"
    );
    println!("The server at {url} (its /readyz: model, store, LLM):");
    let (status, body) = (sluice_client::Client::new(url)?.ready().await).map_err(|e| {
        println!("✗ server: nothing answers at {url}");
        anyhow!("{e} — start one with `sluice serve`, or check --url")
    })?;
    let body = body.ok_or_else(|| {
        anyhow!("{url}/readyz answered {status} without JSON: not a Sluice server")
    })?;
    let ok = (200..300).contains(&status);
    let answers = Check {
        ok,
        part: "server".into(),
        detail: format!("{url} answers ({status})"),
    };
    Ok(std::iter::once(answers)
        .chain(sluice_app::doctor::readiness(&body))
        .collect())
}
