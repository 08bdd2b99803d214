//! `sluice doctor`: which parts are ready, and what to do about the rest — of the environment
//! `sluice serve` would start with here (the model folder, the data folder, the LLM and the
//! cache its `SLUICE_*` variables name), or with `--url` of a running server (its `/readyz`:
//! model, store, LLM). It creates nothing and asks no server it was not pointed at.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use sluice_contract::{stages::Embedder, stages::Llm};
use sluice_core::config::CacheBackend;
use sluice_llm::OpenAiClient;

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
    let config = &settings.config;
    let mut ok = true;

    let started = Instant::now();
    let loaded = sluice_app::model(&settings.embed)
        .and_then(|m| Ok(m.embed(&["doctor"]).map(|v| (m, v))?));
    ok &= match loaded {
        Ok((m, v)) => report(
            true,
            "embedding model",
            &format!(
                "{} in {} ({}-d, loaded and ran in {} ms)",
                m.model_id(),
                settings.embed.model_dir.display(),
                v[0].len(),
                started.elapsed().as_millis()
            ),
        ),
        Err(e) => report(
            false,
            "embedding model",
            &format!("{e} — run `scripts/setup.sh model`"),
        ),
    };

    let data = &config.data_dir;
    ok &= if !data.exists() {
        // Not made here: `sluice serve` makes it.
        report(
            true,
            "data folder",
            &format!(
                "{} does not exist yet; `sluice serve` creates it (SLUICE_DATA_DIR)",
                data.display()
            ),
        )
    } else if data.is_dir() && writable(data) {
        report(
            true,
            "data folder",
            &format!(
                "{} is writable{}",
                data.display(),
                if data.join("shard").is_dir() {
                    " and holds a store"
                } else {
                    " (empty: ingest something)"
                }
            ),
        )
    } else {
        report(
            false,
            "data folder",
            &format!(
                "{} is not a folder this user can write — set SLUICE_DATA_DIR",
                data.display()
            ),
        )
    };

    let llm = OpenAiClient::from_config(&settings.llm)?;
    ok &= match llm.ready().await {
        Ok(()) => report(
            true,
            "LLM",
            &format!(
                "{} answers (model {}; SLUICE_LLM_URL)",
                settings.llm.urls.join(", "),
                settings.llm.model
            ),
        ),
        Err(e) => report(
            false,
            "LLM",
            &format!(
                "{} (SLUICE_LLM_URL): {e} — start one with `make llm` or set SLUICE_LLM_URL",
                settings.llm.urls.join(", ")
            ),
        ),
    };

    ok &= match config.cache.backend {
        CacheBackend::Off => report(true, "answer cache", "off (SLUICE_CACHE=off)"),
        CacheBackend::Memory => report(
            true,
            "answer cache",
            &format!(
                "in memory, up to {} entries (SLUICE_CACHE=dynamodb to share it)",
                config.cache.max_entries
            ),
        ),
        CacheBackend::Dynamodb => {
            let checked = match sluice_cache_dynamodb::DynamoCache::connect(
                &settings.aws.cache_table,
                settings.aws.cache_tenant_role_arn.as_deref(),
            )
            .await
            {
                Ok(table) => table.check().await.map(|exists| (table, exists)),
                Err(e) => Err(e),
            };
            match checked {
                Ok((table, true)) => report(
                    true,
                    "answer cache",
                    &format!("DynamoDB table {} is ready", table.table()),
                ),
                Ok((table, false)) => report(
                    false,
                    "answer cache",
                    &format!(
                        "DynamoDB table {} does not exist — run `sluice cache create-table`",
                        table.table()
                    ),
                ),
                Err(e) => report(false, "answer cache", &e.to_string()),
            }
        }
    };

    if !ok {
        bail!("some parts are missing (see ✗ above)");
    }
    Ok(())
}

/// A running server's own view of its parts: `GET /readyz`.
async fn server(url: &str) -> Result<()> {
    println!("Checking the server at {url} (its /readyz: model, store, LLM).\n");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let response = match client.get(format!("{url}/readyz")).send().await {
        Ok(r) => r,
        Err(e) => {
            report(false, "server", &format!("nothing answers at {url} ({e})"));
            bail!("no server at {url} — start one with `sluice serve`, or check --url");
        }
    };
    let status = response.status();
    let body: serde_json::Value = match response.json().await {
        Ok(body) => body,
        Err(_) => {
            report(
                false,
                "server",
                &format!("{url}/readyz answered {status} without JSON"),
            );
            bail!("{url} is not a Sluice server (no /readyz report)");
        }
    };
    report(
        status.is_success(),
        "server",
        &format!("{url} answers ({status})"),
    );
    let mut ok = status.is_success();
    for (part, check) in body["checks"].as_object().into_iter().flatten() {
        let fine = check["ok"] == true;
        let detail = match (fine, check["id"].as_str(), check["error"].as_str()) {
            (true, Some(id), _) => format!("ready ({id})"),
            (true, None, _) => "ready".to_string(),
            (false, _, Some(error)) => error.to_string(),
            (false, _, None) => "not ready".to_string(),
        };
        ok &= report(fine, part, &detail);
    }
    if !ok {
        bail!("the server at {url} is not ready (see ✗ above)");
    }
    Ok(())
}

/// Whether this user can write in `dir`: a probe file written and removed at once.
fn writable(dir: &std::path::Path) -> bool {
    let probe = dir.join(".sluice-doctor-probe");
    let ok = std::fs::write(&probe, b"ok").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}
