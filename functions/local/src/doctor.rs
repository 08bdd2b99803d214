//! `sluice doctor`: which parts are ready, and what to do about the rest.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use sluice_core::config::CacheBackend;
use sluice_core::stages::{Embedder, Llm};
use sluice_llm::OpenAiClient;

fn report(ok: bool, what: &str, detail: &str) -> bool {
    println!("{} {what}: {detail}", if ok { "✓" } else { "✗" });
    ok
}

/// Prints one line per part; fails when a part the server needs is missing.
pub async fn run(settings: &sluice_app::Settings, url: &str) -> Result<()> {
    println!("configuration: {settings:?}\n");
    let config = &settings.config;
    let mut ok = true;

    let started = Instant::now();
    let loaded =
        sluice_app::model(config).and_then(|m| Ok(m.embed(&["doctor"]).map(|v| (m, v))?));
    ok &= match loaded {
        Ok((m, v)) => report(
            true,
            "embedding model",
            &format!(
                "{} in {} ({}-d, loaded and ran in {} ms)",
                m.model_id(),
                config.model_dir.display(),
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
    let data_ok = std::fs::create_dir_all(data).is_ok() && tempfile_in(data);
    ok &= report(
        data_ok,
        "data folder",
        &if data_ok {
            format!(
                "{} is writable{}",
                data.display(),
                if data.join("shard").is_dir() {
                    " and holds a store"
                } else {
                    " (empty: ingest something)"
                }
            )
        } else {
            format!("{} cannot be written — set SLUICE_DATA_DIR", data.display())
        },
    );

    let llm = OpenAiClient::from_config(&settings.llm)?;
    ok &= match llm.ready().await {
        Ok(()) => report(
            true,
            "LLM",
            &format!(
                "{} answers (model {})",
                settings.llm.urls.join(", "),
                settings.llm.model
            ),
        ),
        Err(e) => report(
            false,
            "LLM",
            &format!("{e} — start one with `make llm` or set SLUICE_LLM_URL"),
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
            let checked = match sluice_cache::DynamoCache::connect(
                &config.cache.table,
                config.cache.tenant_role_arn.as_deref(),
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

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()?;
    match client.get(format!("{url}/readyz")).send().await {
        Ok(r) => {
            let ready = r.status().is_success();
            let body = r.text().await.unwrap_or_default();
            report(ready, "server", &format!("{url} /readyz → {body}"));
        }
        Err(_) => {
            report(
                false,
                "server",
                &format!(
                    "nothing answers at {url} — start it with `sluice serve` (not needed for this check to pass)"
                ),
            );
        }
    }
    if !ok {
        bail!("some parts are missing (see ✗ above)");
    }
    Ok(())
}

fn tempfile_in(dir: &std::path::Path) -> bool {
    let probe = dir.join(".sluice-doctor-probe");
    let ok = std::fs::write(&probe, b"ok").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}
