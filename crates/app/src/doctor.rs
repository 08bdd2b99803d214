//! What `sluice doctor` checks of this environment: the parts `sluice serve` would start with
//! here (the model folder, the data folder, the LLM and the cache its `SLUICE_*` variables
//! name). It creates nothing.

use std::time::Instant;

use sluice_contract::stages::{Embedder, Llm};
use sluice_core::config::CacheBackend;
use sluice_llm::OpenAiClient;

use crate::Settings;

/// One part's state.
#[derive(Debug, Clone)]
pub struct Check {
    /// Whether the part is ready (or will be made by `sluice serve`).
    pub ok: bool,
    /// The part.
    pub part: String,
    /// What was found, and what to do when it is not ready.
    pub detail: String,
}

fn check(ok: bool, part: &str, detail: String) -> Check {
    let part = part.to_string();
    Check { ok, part, detail }
}

/// The parts a running server's `/readyz` `report` names, each with its state.
pub fn readiness(report: &serde_json::Value) -> Vec<Check> {
    let parts = report["checks"].as_object().into_iter().flatten();
    (parts.map(|(part, state)| {
        let ok = state["ok"] == true;
        let detail = match (ok, state["id"].as_str(), state["error"].as_str()) {
            (true, Some(id), _) => format!("ready ({id})"),
            (true, None, _) => "ready".to_string(),
            (false, _, Some(error)) => error.to_string(),
            (false, _, None) => "not ready".to_string(),
        };
        check(ok, part, detail)
    }))
    .collect()
}

/// Each part `sluice serve` needs, in order: the embedding model (loaded and run), the data
/// folder, the LLM (its readiness), the answer cache.
pub async fn checks(settings: &Settings) -> Vec<Check> {
    let config = &settings.config;
    let started = Instant::now();
    let loaded =
        crate::model(&settings.embed).and_then(|m| Ok(m.embed(&["doctor"]).map(|v| (m, v))?));
    let model = match loaded {
        Ok((m, v)) => check(
            true,
            "embedding model",
            format!(
                "{} in {} ({}-d, loaded and ran in {} ms)",
                m.model_id(),
                settings.embed.model_dir.display(),
                v.first().map_or(0, Vec::len),
                started.elapsed().as_millis()
            ),
        ),
        Err(e) => check(
            false,
            "embedding model",
            // The loader's error says which file is missing and what to set.
            e.to_string(),
        ),
    };

    let data = &config.data_dir;
    let folder = if !data.exists() {
        // Not made here: `sluice serve` makes it.
        let detail = "does not exist yet; `sluice serve` creates it (SLUICE_DATA_DIR)";
        check(true, "data folder", format!("{} {detail}", data.display()))
    } else if data.is_dir() && writable(data) {
        let holds = match data.join("shard").is_dir() {
            true => " and holds a store",
            false => " (empty: ingest something)",
        };
        let detail = format!("{} is writable{holds}", data.display());
        check(true, "data folder", detail)
    } else {
        let detail = "is not a folder this user can write — set SLUICE_DATA_DIR";
        check(false, "data folder", format!("{} {detail}", data.display()))
    };

    let urls = settings.llm.urls.join(", ");
    let ready = match OpenAiClient::from_config(&settings.llm) {
        Ok(llm) => llm.ready().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let llm = match ready {
        Ok(()) => check(
            true,
            "LLM",
            format!(
                "{urls} answers (model {}; SLUICE_LLM_URL)",
                settings.llm.model
            ),
        ),
        Err(e) => check(
            false,
            "LLM",
            format!(
                "{urls} (SLUICE_LLM_URL): {e} — start an OpenAI-compatible server there \
                 (vLLM, llama-server), point SLUICE_LLM_URL at one, or run `sluice fixture llm \
                 --answers sources` for a stand-in that answers from the prompt's sources"
            ),
        ),
    };

    let cache = match config.cache.backend {
        CacheBackend::Off => check(true, "answer cache", "off (SLUICE_CACHE=off)".into()),
        CacheBackend::Memory => check(
            true,
            "answer cache",
            format!(
                "in memory, up to {} entries (SLUICE_CACHE=dynamodb to share it)",
                config.cache.max_entries
            ),
        ),
        CacheBackend::Dynamodb => {
            let aws = &settings.aws;
            let role = aws.cache_tenant_role_arn.as_deref();
            let checked =
                match sluice_cache_dynamodb::DynamoCache::connect(&aws.cache_table, role).await {
                    Ok(table) => table.check().await.map(|exists| (table, exists)),
                    Err(e) => Err(e),
                };
            match checked {
                Ok((table, true)) => {
                    let detail = format!("DynamoDB table {} is ready", table.table());
                    check(true, "answer cache", detail)
                }
                Ok((table, false)) => check(
                    false,
                    "answer cache",
                    format!(
                        "DynamoDB table {} does not exist — run `sluice cache create-table`",
                        table.table()
                    ),
                ),
                Err(e) => check(false, "answer cache", e.to_string()),
            }
        }
    };
    vec![model, folder, llm, cache]
}

/// Whether this user can write in `dir`: a probe file written and removed at once.
fn writable(dir: &std::path::Path) -> bool {
    let probe = dir.join(".sluice-doctor-probe");
    let ok = std::fs::write(&probe, b"ok").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}
