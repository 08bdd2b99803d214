//! The answer cache's section: where answers are cached and the rules of a hit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_contract::settings::{ConfigError, one_of, ranged};
use sluice_contract::tenant::Tenant;
use sluice_contract::tenant_settings::THRESHOLDS;

use super::tenant_values;

/// The answer cache: where, and its rules.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// `SLUICE_CACHE`: where answers are cached.
    pub backend: CacheBackend,
    /// `SLUICE_CACHE_TTL_SECS`: lifetime of a cached answer.
    pub ttl: Duration,
    /// `SLUICE_CACHE_THRESHOLD`: cosine a paraphrase needs to reach to be answered from cache.
    pub threshold: f32,
    /// `SLUICE_CACHE_TENANT_THRESHOLDS`: per-tenant thresholds, `acme=0.97,globex=0.9`.
    pub tenant_thresholds: HashMap<Tenant, f32>,
    /// `SLUICE_CACHE_BUDGET_MS`: budget of one cache lookup round; late is a miss.
    pub budget: Duration,
    /// `SLUICE_CACHE_MAX_ENTRIES`: size bound of the in-memory cache.
    pub max_entries: usize,
    /// `SLUICE_CACHE_EXPLORE`: tenants that learn their threshold, with the share of cache
    /// candidates they compare with the LLM's answer, `acme=0.05`.
    pub explore: HashMap<Tenant, f64>,
    /// `SLUICE_CACHE_ERROR_BOUND`: the false-hit rate a learned threshold keeps under.
    pub error_bound: f64,
    /// `SLUICE_CACHE_LEXICON`: the guard's WordNet table (default `lexicon.txt` in
    /// `SLUICE_MODEL_DIR`); `None` for `none`: any differing word is another question.
    pub lexicon: Option<PathBuf>,
}

/// Where answers are cached (`SLUICE_CACHE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheBackend {
    /// No cache: every request reports `cache: "bypass"`.
    Off,
    /// In the process (the local default).
    Memory,
    /// A DynamoDB table, shared by every process (`SLUICE_CACHE_TABLE`).
    Dynamodb,
}

pub(super) fn cache_section(
    get: &impl Fn(&str) -> Option<String>,
    budget: Duration,
    model_dir: &Path,
) -> Result<CacheConfig, ConfigError> {
    Ok(CacheConfig {
        backend: one_of(
            get,
            "SLUICE_CACHE",
            &[
                ("memory", CacheBackend::Memory),
                ("dynamodb", CacheBackend::Dynamodb),
                ("off", CacheBackend::Off),
            ],
        )?,
        ttl: Duration::from_secs(
            ranged(get, "SLUICE_CACHE_TTL_SECS", 86_400, 1, 365 * 86_400)? as u64,
        ),
        threshold: threshold(
            "SLUICE_CACHE_THRESHOLD",
            get("SLUICE_CACHE_THRESHOLD").as_deref().unwrap_or("0.9"),
        )?,
        tenant_thresholds: tenant_thresholds(
            get("SLUICE_CACHE_TENANT_THRESHOLDS")
                .as_deref()
                .unwrap_or(""),
        )?,
        budget,
        max_entries: ranged(get, "SLUICE_CACHE_MAX_ENTRIES", 10_000, 1, 10_000_000)?,
        explore: tenant_values(
            "SLUICE_CACHE_EXPLORE",
            get("SLUICE_CACHE_EXPLORE").as_deref().unwrap_or(""),
            "exploration rate",
            "acme=0.05,globex=0.1",
            |v| match v.parse::<f64>() {
                Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
                _ => Err("is not a number over 0 and at most 1".into()),
            },
        )?,
        error_bound: {
            let v = get("SLUICE_CACHE_ERROR_BOUND").unwrap_or_else(|| "0.01".into());
            match v.trim().parse::<f64>() {
                Ok(b) if b > 0.0 && b <= 0.5 => b,
                _ => {
                    return Err(ConfigError {
                        name: "SLUICE_CACHE_ERROR_BOUND",
                        value: v,
                        expected: "a false-hit rate over 0 and at most 0.5 (0.01 is 1 %)".into(),
                    });
                }
            }
        },
        lexicon: match get("SLUICE_CACHE_LEXICON") {
            Some(v) if v == "none" => None,
            Some(path) => Some(PathBuf::from(path)),
            None => Some(model_dir.join("lexicon.txt")),
        },
    })
}

/// A cosine threshold: from 0.8 (looser answers paraphrases that are not) to 1.0.
fn threshold(name: &'static str, value: &str) -> Result<f32, ConfigError> {
    match value.trim().parse::<f32>() {
        Ok(t) if THRESHOLDS.contains(&f64::from(t)) => Ok(t),
        _ => Err(ConfigError {
            name,
            value: value.to_string(),
            expected: "a number from 0.8 to 1.0".into(),
        }),
    }
}

/// `tenant=threshold` pairs separated by commas.
fn tenant_thresholds(value: &str) -> Result<HashMap<Tenant, f32>, ConfigError> {
    const NAME: &str = "SLUICE_CACHE_TENANT_THRESHOLDS";
    tenant_values(NAME, value, "threshold", "acme=0.97,globex=0.9", |t| {
        threshold(NAME, t).map_err(|_| "is not from 0.8 to 1.0".to_string())
    })
}
