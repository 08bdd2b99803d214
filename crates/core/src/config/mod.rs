//! Configuration from `SLUICE_*` environment variables, validated once at start-up.
//!
//! The engine's and the wire's sections; each adapter reads its own (`sluice-llm`, `sluice-retrieve`,
//! `sluice-rerank`), and `sluice-app` composes them into one `Settings`. Every variable has a
//! default; docs/configuration.md lists them all (a test holds it to the code).

use sluice_contract::grounding::GroundingMode;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_contract::fusion::{FusionConfig, InvalidFusion};
use sluice_contract::net::IpRange;
use sluice_contract::settings::{self, ConfigError, millis, one_of, parse, ranged};
use sluice_contract::stages::MAX_K;
use sluice_contract::tenant::{InvalidTenant, TENANT_RULE, Tenant};

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
    /// `sluice serve`'s listener and the streams' keep-alive.
    pub server: ServerConfig,
    /// Request sizes and per-tenant rates (the wire's).
    pub limits: RequestLimits,
    /// How an answer is made (the pipeline's).
    pub answer: AnswerConfig,
    /// How documents are chunked, and how many one request may bring.
    pub ingest: IngestConfig,
    /// The answer cache.
    pub cache: CacheConfig,
    /// API keys and the tenant of unauthenticated requests.
    pub auth: AuthConfig,
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

/// `sluice serve`'s listener, and what every entry point's streams do.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `SLUICE_ADDR`: where `sluice serve` listens.
    pub addr: SocketAddr,
    /// `SLUICE_DRAIN_TIMEOUT_MS`: after SIGTERM, how long `sluice serve` lets open streams
    /// finish before ending them with a retryable error.
    pub drain_timeout: Duration,
    /// `SLUICE_ALLOWED_HOSTS`: the `Host` names `sluice serve` answers to (`*`: any); `None`
    /// for the default, the loopback names and the address it listens on.
    pub allowed_hosts: Option<Vec<String>>,
    /// `SLUICE_ALLOW_UNAUTHENTICATED`: let `sluice serve` listen beyond loopback with auth off.
    pub allow_unauthenticated: bool,
    /// `SLUICE_SSE_KEEPALIVE_MS`: after this long without an event, a stream sends an SSE
    /// comment line, so that proxies with idle timeouts keep it open (0: never).
    pub sse_keepalive: Duration,
}

/// What one request may bring, and how fast each tenant may send them.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// `SLUICE_MAX_BODY_BYTES`: request body cap for `/v1/answer` (413 above).
    pub max_body_bytes: usize,
    /// `SLUICE_MAX_INGEST_BYTES`: request body cap for `/v1/documents` (413 above).
    pub max_ingest_bytes: usize,
    /// `SLUICE_TENANT_RATE`: requests per second per tenant (0 = no limit).
    pub tenant_rate: f64,
    /// `SLUICE_TENANT_BURST`: requests a tenant may make at once above its rate.
    pub tenant_burst: u32,
    /// `SLUICE_TENANT_MAX_STREAMS`: answers one tenant may have streaming at once (0 = no limit).
    pub tenant_max_streams: usize,
    /// `SLUICE_HEADER_READ_TIMEOUT_MS`: how long `sluice serve` waits for a request's head
    /// (its line and headers) before it closes the connection.
    pub header_timeout: Duration,
    /// `SLUICE_BODY_READ_TIMEOUT_MS`: how long a request's body may take to arrive, whole
    /// (408 `body_timeout` past it).
    pub body_timeout: Duration,
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

/// Who may call: API keys, and the tenant of a request while auth is off.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `SLUICE_DEFAULT_TENANT`: the tenant of requests without `x-sluice-tenant` while auth
    /// is off.
    pub default_tenant: Tenant,
    /// `SLUICE_API_KEYS_FILE`: the key file of `sluice serve` (auth on when set).
    pub api_keys_file: Option<PathBuf>,
    /// `SLUICE_SETTINGS_FILE`: where `sluice serve` keeps each tenant's settings (default
    /// `settings.json` in `SLUICE_DATA_DIR`).
    pub settings_file: PathBuf,
    /// `SLUICE_SETTINGS_FRESH_MS`: how long a process uses a tenant's settings before reading
    /// them again: a change is in force everywhere within it.
    pub settings_fresh: Duration,
    /// `SLUICE_FETCH_ALLOW`: address ranges (CIDR, comma-separated; default none) that URLs
    /// tenants give (`jwks_url`) may reach although they are not public — loopback, private,
    /// link-local. For tests and identity providers inside the operator's own network.
    pub fetch_allow: Vec<IpRange>,
}

impl AuthConfig {
    /// The tenant a command names (`--tenant`), else `SLUICE_DEFAULT_TENANT`.
    pub fn tenant_or_default(&self, named: Option<&str>) -> Result<Tenant, InvalidTenant> {
        named.map_or_else(|| Ok(self.default_tenant.clone()), Tenant::new)
    }
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
            server: server_section(&get)?,
            limits: limits_section(&get)?,
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
            auth: auth_section(&get, &data_dir)?,
            usage: usage_section(&get, &data_dir)?,
            home,
            data_dir,
        })
    }
}

fn server_section(get: &impl Fn(&str) -> Option<String>) -> Result<ServerConfig, ConfigError> {
    Ok(ServerConfig {
        addr: parse(
            get,
            "SLUICE_ADDR",
            "127.0.0.1:8080",
            "a socket address such as 127.0.0.1:8080",
        )?,
        drain_timeout: millis(get, "SLUICE_DRAIN_TIMEOUT_MS", 25_000, 0)?,
        allowed_hosts: match get("SLUICE_ALLOWED_HOSTS") {
            None => None,
            Some(list) => Some(host_names(&list)?),
        },
        allow_unauthenticated: parse(
            get,
            "SLUICE_ALLOW_UNAUTHENTICATED",
            "false",
            "true or false",
        )?,
        sse_keepalive: millis(get, "SLUICE_SSE_KEEPALIVE_MS", 5000, 0)?,
    })
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

fn limits_section(get: &impl Fn(&str) -> Option<String>) -> Result<RequestLimits, ConfigError> {
    const RATE: &str = "requests per second, from 0 (no limit) to 100000";
    let tenant_rate: f64 = parse(get, "SLUICE_TENANT_RATE", "50", RATE)?;
    if !(0.0..=100_000.0).contains(&tenant_rate) {
        return Err(ConfigError {
            name: "SLUICE_TENANT_RATE",
            value: tenant_rate.to_string(),
            expected: RATE.into(),
        });
    }
    Ok(RequestLimits {
        max_body_bytes: ranged(get, "SLUICE_MAX_BODY_BYTES", 1 << 20, 1024, 1 << 30)?,
        max_ingest_bytes: ranged(get, "SLUICE_MAX_INGEST_BYTES", 16 << 20, 1024, 1 << 30)?,
        tenant_rate,
        tenant_burst: ranged(get, "SLUICE_TENANT_BURST", 100, 1, 1_000_000)? as u32,
        tenant_max_streams: ranged(get, "SLUICE_TENANT_MAX_STREAMS", 64, 0, 1_000_000)?,
        header_timeout: millis(get, "SLUICE_HEADER_READ_TIMEOUT_MS", 10_000, 100)?,
        body_timeout: millis(get, "SLUICE_BODY_READ_TIMEOUT_MS", 30_000, 100)?,
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

fn auth_section(
    get: &impl Fn(&str) -> Option<String>,
    data_dir: &Path,
) -> Result<AuthConfig, ConfigError> {
    let default_tenant = get("SLUICE_DEFAULT_TENANT").unwrap_or_else(|| "default".into());
    Ok(AuthConfig {
        default_tenant: Tenant::new(&default_tenant).map_err(|_| ConfigError {
            name: "SLUICE_DEFAULT_TENANT",
            value: default_tenant.clone(),
            expected: TENANT_RULE.into(),
        })?,
        api_keys_file: get("SLUICE_API_KEYS_FILE").map(PathBuf::from),
        settings_file: (get("SLUICE_SETTINGS_FILE").map(PathBuf::from))
            .unwrap_or_else(|| data_dir.join("settings.json")),
        settings_fresh: millis(get, "SLUICE_SETTINGS_FRESH_MS", 5_000, 0)?,
        fetch_allow: (IpRange::list(&get("SLUICE_FETCH_ALLOW").unwrap_or_default())).map_err(
            |why| ConfigError {
                name: "SLUICE_FETCH_ALLOW",
                value: get("SLUICE_FETCH_ALLOW").unwrap_or_default(),
                expected: format!("addresses or CIDR ranges, comma-separated ({why})"),
            },
        )?,
    })
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

/// `SLUICE_ALLOWED_HOSTS`: comma-separated host names or addresses (no port; IPv6 in
/// brackets), or `*` alone; lower-cased.
fn host_names(value: &str) -> Result<Vec<String>, ConfigError> {
    let names: Vec<String> = value
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    let valid = |h: &String| {
        h == "*"
            || h.strip_prefix('[')
                .and_then(|v6| v6.strip_suffix(']'))
                .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
            || (h.len() <= 253
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
    };
    if names.is_empty()
        || !names.iter().all(valid)
        || (names.len() > 1 && names.iter().any(|h| h == "*"))
    {
        return Err(ConfigError {
            name: "SLUICE_ALLOWED_HOSTS",
            value: value.to_string(),
            expected: "comma-separated host names or addresses without a port (IPv6 in brackets), such as localhost,sluice.internal,10.0.0.5; or * alone for any".into(),
        });
    }
    Ok(names)
}

#[cfg(test)]
mod tests;
