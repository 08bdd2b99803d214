//! Configuration from `SLUICE_*` environment variables, validated once at start-up.
//!
//! The engine's sections; the wire (`sluice-http`) and each adapter read their own
//! (`sluice-llm`, `sluice-retrieve`, `sluice-rerank`, …), and `sluice-app` composes them into
//! one `Settings`. Every variable has a
//! default; docs/configuration.md lists them all (a test holds it to the code).

use sluice_contract::grounding::GroundingMode;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use sluice_contract::fusion::{FusionConfig, InvalidFusion};
use sluice_contract::settings::{self, ConfigError, millis, one_of, parse, ranged};
use sluice_contract::stages::MAX_K;
use sluice_contract::tenant::Tenant;

mod cache;

use cache::cache_section;
pub use cache::{CacheBackend, CacheConfig};

/// Everything Sluice reads from its environment, in one section per owner: each adapter is
/// given its own section, and `sluice-app` picks the backends from them.
#[derive(Debug, Clone)]
pub struct Config {
    /// `SLUICE_HOME`: downloads, models and tools (default `~/.cache/sluice`).
    pub home: PathBuf,
    /// `SLUICE_DATA_DIR`: the Qdrant Edge shard and the local component folder.
    pub data_dir: PathBuf,
    /// How an answer is made (the pipeline's).
    pub answer: AnswerConfig,
    /// How documents are chunked, and how many one request may bring.
    pub ingest: IngestConfig,
    /// The answer cache.
    pub cache: CacheConfig,
    /// Where usage is counted, and tenants' token budgets.
    pub usage: UsageConfig,
}

/// Where usage is counted ([`crate::usage`]), and tenants' monthly token budgets.
#[derive(Debug, Clone)]
pub struct UsageConfig {
    /// `SLUICE_USAGE`: where the counters are kept.
    pub backend: UsageBackend,
    /// The file of [`UsageBackend::File`]: `SLUICE_DATA_DIR/usage.json`.
    pub file: PathBuf,
    /// `SLUICE_TENANT_TOKEN_BUDGETS`: monthly token budgets, `acme=5000000,globex=100000`.
    pub tenant_budgets: HashMap<Tenant, u64>,
    /// `SLUICE_USAGE_REFRESH_MS`: how old a tenant's month of usage, as a process last read
    /// it for budgets, may get before it is read again.
    pub refresh: Duration,
}

/// Where usage is counted (`SLUICE_USAGE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageBackend {
    /// Not counted; no budgets are enforced and `GET /v1/usage` is 404.
    Off,
    /// A JSON file in the data folder (the local default).
    File,
    /// A DynamoDB table, added to by every process (`SLUICE_USAGE_TABLE`).
    Dynamodb,
}

/// How the pipeline makes an answer.
#[derive(Debug, Clone)]
pub struct AnswerConfig {
    /// `SLUICE_TOP_K`: sources per answer when the request does not say.
    pub top_k: usize,
    /// `SLUICE_RETRIEVAL_DEADLINE_MS`: everything before the LLM; past it, answer without
    /// context.
    pub retrieval_deadline: Duration,
    /// `SLUICE_MAX_TOKENS`: cap on generated tokens per answer.
    pub max_tokens: u32,
    /// `SLUICE_LLM_CONTEXT_TOKENS`: the model's context window; the prompt budget derives
    /// from it.
    pub context_tokens: usize,
    /// `SLUICE_CACHE_BUDGET_MS`: how long past the embedding the scope reads the cache needs
    /// (corpus version, active component) are waited for — the cache's own lookup budget.
    pub scope_budget: Duration,
    /// `SLUICE_FUSION` and `SLUICE_FUSION_TENANTS`: how each tenant's hybrid search fuses
    /// its dense and BM25 rankings.
    pub fusion: FusionConfig,
    /// `SLUICE_GROUNDING`: the grounding check of a tenant that sets none (`off`, `annotate`
    /// or `strict`; default `annotate`).
    pub grounding: GroundingMode,
    /// `SLUICE_EXTRACT`: `meta.extract` for a tenant and a request that do not say (default
    /// true).
    pub extract: bool,
}

/// How documents become chunks.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// `SLUICE_CHUNK_TOKENS`: target chunk size in model tokens.
    pub chunk_tokens: usize,
    /// `SLUICE_CHUNK_OVERLAP_TOKENS`: tokens repeated from the end of one chunk at the start
    /// of the next.
    pub chunk_overlap_tokens: usize,
    /// `SLUICE_MAX_DOCUMENTS`: documents per ingest request.
    pub max_documents: usize,
    /// `SLUICE_MAX_CHUNKS`: chunks one ingest request may produce.
    pub max_chunks: usize,
    /// `SLUICE_INGEST_TIMEOUT_MS`: how long one request's chunking and embedding may take;
    /// past it the request is refused and nothing is stored (default 100 s, inside the
    /// Lambda functions' time limits).
    pub timeout: Duration,
    /// `SLUICE_CONTEXT_HEADER`: give retrieval each chunk with its document's title and
    /// section path before it (the embedding and BM25 read both; the prompt quotes the text).
    pub context_header: bool,
    /// `SLUICE_PACK_SECTIONS`: let whole sections that fit share a chunk (each under its
    /// heading line; the chunk cites the path they share) instead of one path per chunk. On
    /// by default: better recall where sections are short, no worse where they are long
    /// (docs/ingestion.md says what was measured).
    pub pack_sections: bool,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let home = settings::home(&get);
        let data_dir = get("SLUICE_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "sluice-data".into());
        let cache_budget = millis(&get, "SLUICE_CACHE_BUDGET_MS", 50, 1)?;
        Ok(Config {
            cache: cache_section(&get, cache_budget, &settings::model_dir(&get))?,
            answer: AnswerConfig {
                top_k: ranged(&get, "SLUICE_TOP_K", 5, 1, MAX_K)?,
                retrieval_deadline: millis(&get, "SLUICE_RETRIEVAL_DEADLINE_MS", 200, 0)?,
                max_tokens: ranged(&get, "SLUICE_MAX_TOKENS", 256, 1, 32768)? as u32,
                context_tokens: ranged(&get, "SLUICE_LLM_CONTEXT_TOKENS", 8192, 512, 1 << 20)?,
                scope_budget: cache_budget,
                fusion: fusion_section(&get)?,
                grounding: parse(
                    &get,
                    "SLUICE_GROUNDING",
                    "annotate",
                    "off, annotate or strict",
                )?,
                extract: parse(&get, "SLUICE_EXTRACT", "true", "true or false")?,
            },
            ingest: ingest_section(&get)?,
            usage: usage_section(&get, &data_dir)?,
            home,
            data_dir,
        })
    }
}

fn fusion_section(get: &impl Fn(&str) -> Option<String>) -> Result<FusionConfig, ConfigError> {
    let default = get("SLUICE_FUSION").unwrap_or_else(|| "rrf".into());
    let tenants = get("SLUICE_FUSION_TENANTS").unwrap_or_default();
    Ok(FusionConfig {
        default: default.parse().map_err(|e: InvalidFusion| ConfigError {
            name: "SLUICE_FUSION",
            value: default.clone(),
            expected: e.to_string(),
        })?,
        tenants: FusionConfig::parse_tenants(&tenants).map_err(|e| ConfigError {
            name: "SLUICE_FUSION_TENANTS",
            value: tenants.clone(),
            expected: format!("comma-separated tenant=fusion pairs, such as acme=convex:dense=0.7,globex=rrf:k=20 — {e}"),
        })?,
    })
}

fn ingest_section(get: &impl Fn(&str) -> Option<String>) -> Result<IngestConfig, ConfigError> {
    let ingest = IngestConfig {
        chunk_tokens: ranged(get, "SLUICE_CHUNK_TOKENS", 256, 16, 512)?,
        chunk_overlap_tokens: ranged(get, "SLUICE_CHUNK_OVERLAP_TOKENS", 32, 0, 256)?,
        max_documents: ranged(get, "SLUICE_MAX_DOCUMENTS", 1000, 1, 1_000_000)?,
        max_chunks: ranged(get, "SLUICE_MAX_CHUNKS", 20_000, 1, 10_000_000)?,
        timeout: millis(get, "SLUICE_INGEST_TIMEOUT_MS", 100_000, 100)?,
        context_header: parse(get, "SLUICE_CONTEXT_HEADER", "true", "true or false")?,
        pack_sections: parse(get, "SLUICE_PACK_SECTIONS", "true", "true or false")?,
    };
    if ingest.chunk_overlap_tokens >= ingest.chunk_tokens / 2 {
        return Err(ConfigError {
            name: "SLUICE_CHUNK_OVERLAP_TOKENS",
            value: ingest.chunk_overlap_tokens.to_string(),
            expected: format!(
                "less than half of SLUICE_CHUNK_TOKENS ({})",
                ingest.chunk_tokens
            ),
        });
    }
    Ok(ingest)
}

/// `tenant=value` pairs separated by commas (`what` names the value, `example` shows a
/// setting), each value read by `parse` (which says what is wrong with one).
fn tenant_values<T>(
    name: &'static str,
    value: &str,
    what: &str,
    example: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<HashMap<Tenant, T>, ConfigError> {
    let mut map = HashMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = |expected: &str| ConfigError {
            name,
            value: value.to_string(),
            expected: format!(
                "{expected} (comma-separated tenant={what} pairs, such as {example})"
            ),
        };
        let (tenant, v) = pair
            .split_once('=')
            .ok_or_else(|| bad(&format!("{pair:?} has no '='")))?;
        let tenant = Tenant::new(tenant.trim()).map_err(|e| bad(&e.to_string()))?;
        let v = parse(v.trim()).map_err(|e| bad(&format!("{tenant}'s {what} {e}")))?;
        map.insert(tenant, v);
    }
    Ok(map)
}

fn usage_section(
    get: &impl Fn(&str) -> Option<String>,
    data_dir: &std::path::Path,
) -> Result<UsageConfig, ConfigError> {
    const BUDGETS: &str = "SLUICE_TENANT_TOKEN_BUDGETS";
    Ok(UsageConfig {
        backend: one_of(
            get,
            "SLUICE_USAGE",
            &[
                ("file", UsageBackend::File),
                ("dynamodb", UsageBackend::Dynamodb),
                ("off", UsageBackend::Off),
            ],
        )?,
        file: data_dir.join("usage.json"),
        tenant_budgets: tenant_values(
            BUDGETS,
            get(BUDGETS).as_deref().unwrap_or(""),
            "budget",
            "acme=5000000,globex=100000",
            |v| match v.parse::<u64>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err("is not a whole number of tokens from 1".to_string()),
            },
        )?,
        refresh: millis(get, "SLUICE_USAGE_REFRESH_MS", 10_000, 0)?,
    })
}

#[cfg(test)]
mod tests;
