//! `sluice doctor`: which parts are ready, and what to do about the rest — of the environment
//! `sluice serve` would start with here (`sluice_app::doctor`), or with `--url` of a running
//! server (its `/readyz`: model, store, LLM). It creates nothing and asks no server it was
//! not pointed at.

use anyhow::{Result, bail};

fn report(ok: bool, what: &str, detail: &str) -> bool {
    println!("{} {what}: {detail}", if ok { "✓" } else { "✗" });
    ok
}

/// Prints one line per part; fails when a part the server needs is missing.
pub async fn run(settings: &sluice_app::Settings, url: Option<&str>) -> Result<()> {
    match url {
        Some(url) => server(url).await,
        None => environment(settings).await,
    }
}

/// The parts `sluice serve` would use, as this environment configures them.
async fn environment(settings: &sluice_app::Settings) -> Result<()> {
    println!(
        "Checking what `sluice serve` would start with here (its SLUICE_* settings); \
         `sluice doctor --url URL` checks a running server instead.\n"
    );
    println!("configuration: {settings:?}\n");
    let mut ok = true;
    for check in sluice_app::doctor::checks(settings).await {
        ok &= report(check.ok, &check.part, &check.detail);
    }
    if !ok {
        bail!("some parts are missing (see ✗ above)");
    }
    Ok(())
}

/// A running server's own view of its parts: `GET /readyz`.
async fn server(url: &str) -> Result<()> {
    println!("Checking the server at {url} (its /readyz: model, store, LLM).\n");
    let (status, body) = match sluice_client::Client::new(url)?.ready().await {
        Ok(answer) => answer,
        Err(e) => {
            report(false, "server", &format!("nothing answers at {url} ({e})"));
            bail!("no server at {url} — start one with `sluice serve`, or check --url");
        }
    };
    let Some(body) = body else {
        report(
            false,
            "server",
            &format!("{url}/readyz answered {status} without JSON"),
        );
        bail!("{url} is not a Sluice server (no /readyz report)");
    };
    let mut ok = report(
        (200..300).contains(&status),
        "server",
        &format!("{url} answers ({status})"),
    );
    for check in sluice_app::doctor::readiness(&body) {
        ok &= report(check.ok, &check.part, &check.detail);
    }
    if !ok {
        bail!("the server at {url} is not ready (see ✗ above)");
    }
    Ok(())
}
