//! Configuration from `SLUICE_*` environment variables, validated once at start-up.
//!
//! The engine's and the wire's sections; each adapter reads its own (`sluice-llm`, `sluice-retrieve`,
//! `sluice-rerank`), and `sluice-app` composes them into one `Settings`. Every variable has a
//! default; docs/configuration.md lists them all (a test holds it to the code).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fusion::{FusionConfig, InvalidFusion};
use crate::tenant::{TENANT_RULE, Tenant};
pub use sluice_contract::settings::ConfigError;
use sluice_contract::settings::{millis, one_of, parse, ranged};

/// Everything Sluice reads from its environment, in one section per owner: each adapter is
/// given its own section, and `sluice-app` picks the backends from them.
#[derive(Debug, Clone)]
pub struct Config {
    /// `SLUICE_HOME`: downloads, models and tools (default `~/.cache/sluice`).
    pub home: PathBuf,
    /// `SLUICE_DATA_DIR`: the Qdrant Edge shard and the local component folder.
    pub data_dir: PathBuf,
    /// `SLUICE_MODEL_DIR`: `model.onnx`, `word_embeddings.f32` and `tokenizer.json` of the
    /// embedding model (and `model.nnef.tar` where it was prepared).
    pub model_dir: PathBuf,
    /// `SLUICE_EMBED_WINDOWS`: most windows of the model's 256 tokens a long text (a long
    /// question) is read in; 1 reads only the first, as truncation does.
    pub embed_windows: usize,
    /// `SLUICE_EMBED_THREADS`: threads a batch of texts (an ingest's chunks) is embedded on;
    /// a query is always one text on one thread. Default: the cores this process may use.
    pub embed_threads: usize,
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
    /// Where tenants' components are kept.
    pub components: ComponentsConfig,
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
    /// `SLUICE_USAGE_TABLE`: the DynamoDB table of [`UsageBackend::Dynamodb`].
    pub table: String,
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
    /// Caps and the time budget of converting one file (PDF, HTML, Word), read by their
    /// owner ([`sluice_convert::ConvertLimits`]).
    pub convert: sluice_convert::ConvertLimits,
}

/// The answer cache: where, and its rules.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// `SLUICE_CACHE`: where answers are cached.
    pub backend: CacheBackend,
    /// `SLUICE_CACHE_TABLE`: the DynamoDB table.
    pub table: String,
    /// `SLUICE_CACHE_CREATE_TABLE`: create the table at start when it is missing.
    pub create_table: bool,
    /// `SLUICE_CACHE_TENANT_ROLE_ARN`: a role assumed per tenant (session tag `sluice-tenant`)
    /// for the cache's item calls, whose policy confines them to the tenant's keys.
    pub tenant_role_arn: Option<String>,
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

/// Where tenants' rerank components are kept.
#[derive(Debug, Clone)]
pub struct ComponentsConfig {
    /// `SLUICE_COMPONENT_BUCKET`: keep them in this S3 bucket (and their pointers in
    /// `table`) instead of `SLUICE_DATA_DIR/components`.
    pub bucket: Option<String>,
    /// `SLUICE_COMPONENT_TABLE`: the DynamoDB table of component pointers.
    pub table: String,
    /// `SLUICE_COMPONENT_REPLICAS`: in a deployment over several regions, every region's
    /// component bucket (`region=bucket`, comma-separated; `bucket`'s own entry is
    /// skipped). Each upload and its
    /// artefact are written to all of them before the version is recorded, so a version
    /// the (global) table names has its bytes in every region. Empty: one region.
    pub replicas: Vec<(String, String)>,
}

/// Who may call: API keys, and the tenant of a request while auth is off.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `SLUICE_DEFAULT_TENANT`: the tenant of requests without `x-sluice-tenant` while auth
    /// is off.
    pub default_tenant: Tenant,
    /// `SLUICE_API_KEYS_FILE`: the key file of `sluice serve` (auth on when set).
    pub api_keys_file: Option<PathBuf>,
    /// `SLUICE_API_KEYS_TABLE`: the DynamoDB table of keys on Lambda (auth on when set).
    pub api_keys_table: Option<String>,
}

pub use sluice_contract::stages::MAX_K;
/// Longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 4096;
/// Longest conversation a chat request may send besides its question: the bytes of its
/// earlier turns and system messages together. Four times what fits the largest usual window
/// (32k tokens of English); what does not fit the model's window is left out, oldest turns
/// first (`history_truncated`), but every byte sent is tokenised, so this bounds that work.
pub const MAX_CONVERSATION_BYTES: usize = 512 << 10;
/// Most messages one chat request may send.
pub const MAX_MESSAGES: usize = 512;

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let home = get("SLUICE_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(get("HOME").unwrap_or_else(|| ".".into())).join(".cache/sluice")
        });
        let data_dir = get("SLUICE_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "sluice-data".into());
        let cache_budget = millis(&get, "SLUICE_CACHE_BUDGET_MS", 50, 1)?;
        let model_dir = get("SLUICE_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("models/all-MiniLM-L6-v2"));
        Ok(Config {
            cache: cache_section(&get, cache_budget, &model_dir)?,
            model_dir,
            embed_windows: ranged(&get, "SLUICE_EMBED_WINDOWS", 4, 1, 16)?,
            embed_threads: ranged(&get, "SLUICE_EMBED_THREADS", cores(), 1, 256)?,
            server: server_section(&get)?,
            limits: limits_section(&get)?,
            answer: AnswerConfig {
                top_k: ranged(&get, "SLUICE_TOP_K", 5, 1, MAX_K)?,
                retrieval_deadline: millis(&get, "SLUICE_RETRIEVAL_DEADLINE_MS", 200, 0)?,
                max_tokens: ranged(&get, "SLUICE_MAX_TOKENS", 256, 1, 32768)? as u32,
                context_tokens: ranged(&get, "SLUICE_LLM_CONTEXT_TOKENS", 8192, 512, 1 << 20)?,
                scope_budget: cache_budget,
                fusion: fusion_section(&get)?,
            },
            ingest: ingest_section(&get)?,
            components: components_section(&get)?,
            auth: auth_section(&get)?,
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
        convert: sluice_convert::ConvertLimits::from_lookup(get)?,
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

fn cache_section(
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
        table: get("SLUICE_CACHE_TABLE").unwrap_or_else(|| "sluice-cache".into()),
        create_table: parse(get, "SLUICE_CACHE_CREATE_TABLE", "false", "true or false")?,
        tenant_role_arn: match get("SLUICE_CACHE_TENANT_ROLE_ARN") {
            Some(arn) if !is_role_arn(&arn) => {
                return Err(ConfigError {
                    name: "SLUICE_CACHE_TENANT_ROLE_ARN",
                    value: arn,
                    expected: "an IAM role ARN (arn:aws:iam::<account>:role/<name>)".into(),
                });
            }
            arn => arn,
        },
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

fn auth_section(get: &impl Fn(&str) -> Option<String>) -> Result<AuthConfig, ConfigError> {
    let default_tenant = get("SLUICE_DEFAULT_TENANT").unwrap_or_else(|| "default".into());
    let auth = AuthConfig {
        default_tenant: Tenant::new(&default_tenant).map_err(|_| ConfigError {
            name: "SLUICE_DEFAULT_TENANT",
            value: default_tenant.clone(),
            expected: TENANT_RULE.into(),
        })?,
        api_keys_file: get("SLUICE_API_KEYS_FILE").map(PathBuf::from),
        api_keys_table: get("SLUICE_API_KEYS_TABLE"),
    };
    if auth.api_keys_file.is_some() && auth.api_keys_table.is_some() {
        return Err(ConfigError {
            name: "SLUICE_API_KEYS_TABLE",
            value: auth.api_keys_table.unwrap_or_default(),
            expected: "unset while SLUICE_API_KEYS_FILE is set (keys come from one place)".into(),
        });
    }
    Ok(auth)
}

/// A cosine threshold: from 0.8 (looser answers paraphrases that are not) to 1.0.
fn threshold(name: &'static str, value: &str) -> Result<f32, ConfigError> {
    match value.trim().parse::<f32>() {
        Ok(t) if (0.8..=1.0).contains(&t) => Ok(t),
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
        table: get("SLUICE_USAGE_TABLE").unwrap_or_else(|| "sluice-usage".into()),
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

/// `arn:<partition>:iam::<12 digits>:role/<path and name>`.
fn is_role_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    matches!(parts.as_slice(), ["arn", partition, "iam", "", account, resource]
        if partition.starts_with("aws")
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && resource.strip_prefix("role/").is_some_and(|n| !n.is_empty()))
}

/// S3's bucket naming rules, as far as a typo would break them.
/// `SLUICE_COMPONENT_BUCKET`, `SLUICE_COMPONENT_TABLE`, `SLUICE_COMPONENT_REPLICAS`.
fn components_section(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<ComponentsConfig, ConfigError> {
    let bucket = match get("SLUICE_COMPONENT_BUCKET") {
        Some(b) if !valid_bucket(&b) => {
            return Err(ConfigError {
                name: "SLUICE_COMPONENT_BUCKET",
                value: b,
                expected: "an S3 bucket name (3-63 characters of a-z, 0-9, '.' or '-')".into(),
            });
        }
        b => b,
    };
    let mut replicas = Vec::new();
    if let Some(list) = get("SLUICE_COMPONENT_REPLICAS").filter(|l| !l.trim().is_empty()) {
        let bad = |expected: &str| ConfigError {
            name: "SLUICE_COMPONENT_REPLICAS",
            value: list.clone(),
            expected: expected.into(),
        };
        if bucket.is_none() {
            return Err(bad(
                "nothing unless SLUICE_COMPONENT_BUCKET is set (the replicas \
                 copy that bucket)",
            ));
        }
        for entry in list.split(',').map(str::trim) {
            let (region, name) = entry.split_once('=').unwrap_or(("", entry));
            let region_ok = !region.is_empty()
                && region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !region_ok || !valid_bucket(name) {
                return Err(bad(&format!(
                    "region=bucket pairs, comma-separated (e.g. eu-west-1=my-components-eu); \
                     {entry:?} is not one"
                )));
            }
            if replicas.iter().any(|(r, _): &(String, String)| r == region) {
                return Err(bad(&format!("each region once; {region} is there twice")));
            }
            replicas.push((region.to_string(), name.to_string()));
        }
    }
    Ok(ComponentsConfig {
        bucket,
        table: get("SLUICE_COMPONENT_TABLE").unwrap_or_else(|| "sluice-components".into()),
        replicas,
    })
}

fn valid_bucket(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
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

/// The cores this process may use (its CPU affinity, cgroup quota included), at most 256.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(256))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_lookup(sluice_contract::settings::pairs(vars))
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = with(&[("HOME", "/home/u")]).unwrap();
        assert_eq!(c.server.addr.to_string(), "127.0.0.1:8080");
        assert_eq!(c.home, PathBuf::from("/home/u/.cache/sluice"));
        assert_eq!(
            c.model_dir,
            PathBuf::from("/home/u/.cache/sluice/models/all-MiniLM-L6-v2")
        );
        assert_eq!(c.answer.retrieval_deadline, Duration::from_millis(200));
        assert_eq!(c.answer.top_k, 5);
    }

    #[test]
    fn values_are_read() {
        let c = with(&[
            ("SLUICE_RETRIEVAL_DEADLINE_MS", "0"),
            ("SLUICE_TOP_K", "12"),
        ])
        .unwrap();
        assert_eq!(c.answer.retrieval_deadline, Duration::ZERO);
        assert_eq!(c.answer.top_k, 12);
    }

    #[test]
    fn bad_values_name_the_variable_and_the_expectation() {
        let e = with(&[("SLUICE_TOP_K", "0")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_TOP_K");
        assert!(e.to_string().contains("from 1 to 50"), "{e}");
        let e = with(&[("SLUICE_ADDR", "localhost")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_ADDR");
        let e = with(&[("SLUICE_RETRIEVAL_DEADLINE_MS", "soon")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_RETRIEVAL_DEADLINE_MS");
        let e = with(&[
            ("SLUICE_CHUNK_TOKENS", "64"),
            ("SLUICE_CHUNK_OVERLAP_TOKENS", "40"),
        ])
        .unwrap_err();
        assert_eq!(e.name, "SLUICE_CHUNK_OVERLAP_TOKENS");
        let e = with(&[("SLUICE_CONTEXT_HEADER", "on")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_CONTEXT_HEADER");
        assert!(
            !with(&[("SLUICE_CONTEXT_HEADER", "false")])
                .unwrap()
                .ingest
                .context_header
        );
        let e = with(&[("SLUICE_PACK_SECTIONS", "1")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_PACK_SECTIONS");
        let e = with(&[("SLUICE_CONVERT_THREADS", "0")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_CONVERT_THREADS");
        let e = with(&[("SLUICE_DEFAULT_TENANT", "a b")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_DEFAULT_TENANT");
    }

    #[test]
    fn auth_and_limits_have_defaults_and_are_checked() {
        let c = with(&[]).unwrap();
        assert_eq!(
            (
                c.auth.api_keys_file.as_ref(),
                c.auth.api_keys_table.as_ref()
            ),
            (None, None)
        );
        assert_eq!(
            (
                c.limits.tenant_rate,
                c.limits.tenant_burst,
                c.limits.tenant_max_streams
            ),
            (50.0, 100, 64)
        );
        assert_eq!(
            (c.ingest.max_documents, c.ingest.max_chunks),
            (1000, 20_000)
        );
        let c = with(&[
            ("SLUICE_API_KEYS_FILE", "/etc/sluice/keys.json"),
            ("SLUICE_TENANT_RATE", "0.5"),
        ])
        .unwrap();
        assert_eq!(
            c.auth.api_keys_file,
            Some(PathBuf::from("/etc/sluice/keys.json"))
        );
        assert_eq!(c.limits.tenant_rate, 0.5);
        let e = with(&[
            ("SLUICE_API_KEYS_FILE", "k.json"),
            ("SLUICE_API_KEYS_TABLE", "keys"),
        ])
        .unwrap_err();
        assert_eq!(e.name, "SLUICE_API_KEYS_TABLE");
        for (name, value) in [
            ("SLUICE_TENANT_RATE", "-1"),
            ("SLUICE_TENANT_RATE", "lots"),
            ("SLUICE_TENANT_BURST", "0"),
            ("SLUICE_MAX_DOCUMENTS", "0"),
            ("SLUICE_MAX_CHUNKS", "x"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(e.name, name, "{name}={value}: {e}");
        }
    }

    #[test]
    fn the_local_server_guards_have_safe_defaults_and_are_checked() {
        let c = with(&[]).unwrap();
        assert_eq!(c.server.allowed_hosts, None);
        assert!(!c.server.allow_unauthenticated);
        assert_eq!(c.server.sse_keepalive, Duration::from_secs(5));
        let c = with(&[
            ("SLUICE_ALLOWED_HOSTS", " Sluice.Internal ,10.0.0.5,[::1]"),
            ("SLUICE_ALLOW_UNAUTHENTICATED", "true"),
            ("SLUICE_SSE_KEEPALIVE_MS", "0"),
        ])
        .unwrap();
        assert_eq!(
            c.server.allowed_hosts,
            Some(vec![
                "sluice.internal".into(),
                "10.0.0.5".into(),
                "[::1]".into()
            ])
        );
        assert!(c.server.allow_unauthenticated);
        assert_eq!(c.server.sse_keepalive, Duration::ZERO);
        assert_eq!(
            with(&[("SLUICE_ALLOWED_HOSTS", "*")])
                .unwrap()
                .server
                .allowed_hosts,
            Some(vec!["*".into()])
        );
        for (name, value) in [
            ("SLUICE_ALLOWED_HOSTS", "localhost:8080"),
            ("SLUICE_ALLOWED_HOSTS", "*,localhost"),
            ("SLUICE_ALLOWED_HOSTS", "http://x"),
            ("SLUICE_ALLOWED_HOSTS", ","),
            ("SLUICE_ALLOW_UNAUTHENTICATED", "yes"),
            ("SLUICE_SSE_KEEPALIVE_MS", "-1"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(e.name, name, "{name}={value}: {e}");
        }
    }

    #[test]
    fn usage_is_counted_in_a_file_by_default_and_budgets_are_checked() {
        let c = with(&[("SLUICE_DATA_DIR", "/srv/sluice")]).unwrap();
        assert_eq!(c.usage.backend, UsageBackend::File);
        assert_eq!(c.usage.file, PathBuf::from("/srv/sluice/usage.json"));
        assert_eq!(c.usage.table, "sluice-usage");
        assert!(c.usage.tenant_budgets.is_empty());
        assert_eq!(c.usage.refresh, Duration::from_secs(10));
        let c = with(&[
            ("SLUICE_USAGE", "dynamodb"),
            ("SLUICE_TENANT_TOKEN_BUDGETS", " acme=5000000, globex=1 "),
        ])
        .unwrap();
        assert_eq!(c.usage.backend, UsageBackend::Dynamodb);
        assert_eq!(
            c.usage.tenant_budgets[&Tenant::new("acme").unwrap()],
            5_000_000
        );
        assert_eq!(c.usage.tenant_budgets.len(), 2);
        for (name, value, says) in [
            ("SLUICE_USAGE", "redis", "file, dynamodb or off"),
            ("SLUICE_TENANT_TOKEN_BUDGETS", "acme=0", "acme's budget"),
            ("SLUICE_TENANT_TOKEN_BUDGETS", "acme=lots", "whole number"),
            ("SLUICE_TENANT_TOKEN_BUDGETS", "acme", "has no '='"),
            ("SLUICE_USAGE_REFRESH_MS", "-5", "whole number"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(e.name, name, "{name}={value}: {e}");
            assert!(e.to_string().contains(says), "{name}={value}: {e}");
        }
    }

    #[test]
    fn component_storage_is_local_unless_a_bucket_is_named() {
        let c = with(&[]).unwrap();
        assert_eq!(c.components.bucket, None);
        let c = with(&[("SLUICE_COMPONENT_BUCKET", "acme-components.v2")]).unwrap();
        assert_eq!(c.components.bucket.as_deref(), Some("acme-components.v2"));
        assert_eq!(c.components.table, "sluice-components");
        assert!(c.components.replicas.is_empty());
        let c = with(&[
            ("SLUICE_COMPONENT_BUCKET", "acme-components"),
            (
                "SLUICE_COMPONENT_REPLICAS",
                "eu-west-1=acme-components-eu, ap-southeast-2=acme-components-ap",
            ),
        ])
        .unwrap();
        assert_eq!(
            c.components.replicas,
            vec![
                ("eu-west-1".to_string(), "acme-components-eu".to_string()),
                (
                    "ap-southeast-2".to_string(),
                    "acme-components-ap".to_string()
                )
            ]
        );
        for bad in [
            "acme-components-eu",
            "eu-west-1=",
            "EU=acme-components-eu",
            "eu-west-1=Bad_Bucket",
            "eu-west-1=a-bucket,eu-west-1=b-bucket",
        ] {
            let e = with(&[
                ("SLUICE_COMPONENT_BUCKET", "acme-components"),
                ("SLUICE_COMPONENT_REPLICAS", bad),
            ])
            .unwrap_err();
            assert_eq!(e.name, "SLUICE_COMPONENT_REPLICAS", "{bad}");
        }
        // Replicas of no bucket.
        let e = with(&[("SLUICE_COMPONENT_REPLICAS", "eu-west-1=acme-components-eu")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_COMPONENT_REPLICAS");
        for bad in ["Acme", "s3://acme", "ab", "-acme"] {
            let e = with(&[("SLUICE_COMPONENT_BUCKET", bad)]).unwrap_err();
            assert_eq!(e.name, "SLUICE_COMPONENT_BUCKET", "{bad}");
        }
    }

    #[test]
    fn the_tenant_role_must_be_a_role_arn() {
        assert_eq!(with(&[]).unwrap().cache.tenant_role_arn, None);
        let arn = "arn:aws:iam::123456789012:role/sluice/cache-tenant";
        let c = with(&[("SLUICE_CACHE_TENANT_ROLE_ARN", arn)]).unwrap();
        assert_eq!(c.cache.tenant_role_arn.as_deref(), Some(arn));
        for bad in [
            "cache-tenant",
            "arn:aws:iam::123456789012:user/bob",
            "arn:aws:iam::1234:role/x",
            "arn:aws:iam::123456789012:role/",
        ] {
            let e = with(&[("SLUICE_CACHE_TENANT_ROLE_ARN", bad)]).unwrap_err();
            assert_eq!(e.name, "SLUICE_CACHE_TENANT_ROLE_ARN", "{bad}");
        }
    }

    #[test]
    fn cache_settings_are_validated() {
        let c = with(&[]).unwrap();
        assert_eq!(c.cache.backend, CacheBackend::Memory);
        assert_eq!(c.cache.threshold, 0.9);
        assert_eq!(c.cache.ttl, Duration::from_secs(86_400));
        // The guard's lexicon sits beside the model unless named, or is off.
        let c = with(&[("SLUICE_MODEL_DIR", "/opt/model")]).unwrap();
        assert_eq!(
            c.cache.lexicon.as_deref(),
            Some(Path::new("/opt/model/lexicon.txt"))
        );
        let c = with(&[("SLUICE_CACHE_LEXICON", "/x/words.txt")]).unwrap();
        assert_eq!(c.cache.lexicon.as_deref(), Some(Path::new("/x/words.txt")));
        assert_eq!(
            with(&[("SLUICE_CACHE_LEXICON", "none")])
                .unwrap()
                .cache
                .lexicon,
            None
        );
        // Learning thresholds: off by default, rates per tenant, a bound.
        assert!(c.cache.explore.is_empty() && c.cache.error_bound == 0.01);
        let c = with(&[
            ("SLUICE_CACHE_EXPLORE", "acme=0.05"),
            ("SLUICE_CACHE_ERROR_BOUND", "0.02"),
        ])
        .unwrap();
        assert_eq!(c.cache.explore.get("acme"), Some(&0.05));
        assert_eq!(c.cache.error_bound, 0.02);
        for (name, bad) in [
            ("SLUICE_CACHE_EXPLORE", "acme=0"),
            ("SLUICE_CACHE_EXPLORE", "acme=1.5"),
            ("SLUICE_CACHE_EXPLORE", "acme"),
            ("SLUICE_CACHE_ERROR_BOUND", "0"),
            ("SLUICE_CACHE_ERROR_BOUND", "one percent"),
        ] {
            assert_eq!(with(&[(name, bad)]).unwrap_err().name, name, "{bad}");
        }
        let c = with(&[
            ("SLUICE_CACHE", "dynamodb"),
            ("SLUICE_CACHE_TENANT_THRESHOLDS", " acme=0.97, globex=0.9 "),
            ("SLUICE_CACHE_CREATE_TABLE", "true"),
        ])
        .unwrap();
        assert_eq!(c.cache.backend, CacheBackend::Dynamodb);
        assert!(c.cache.create_table);
        assert_eq!(c.cache.tenant_thresholds.get("acme"), Some(&0.97));
        assert_eq!(c.cache.tenant_thresholds.get("globex"), Some(&0.9));
        for (name, value) in [
            ("SLUICE_CACHE", "redis"),
            ("SLUICE_CACHE_THRESHOLD", "0.5"),
            ("SLUICE_CACHE_THRESHOLD", "high"),
            ("SLUICE_CACHE_TENANT_THRESHOLDS", "acme"),
            ("SLUICE_CACHE_TENANT_THRESHOLDS", "acme=1.5"),
            ("SLUICE_CACHE_TENANT_THRESHOLDS", "a b=0.9"),
            ("SLUICE_CACHE_CREATE_TABLE", "yes please"),
            ("SLUICE_CACHE_BUDGET_MS", "0"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(e.name, name, "{name}={value}: {e}");
        }
    }

    #[test]
    fn fusion_settings_are_read_per_tenant_and_validated() {
        use crate::fusion::Fusion;
        let c = with(&[]).unwrap();
        assert_eq!(c.answer.fusion.default, Fusion::default());
        assert!(c.answer.fusion.tenants.is_empty());
        let c = with(&[
            ("SLUICE_FUSION", "rrf:k=20:bm25=0.5"),
            ("SLUICE_FUSION_TENANTS", "acme=convex:dense=0.8"),
        ])
        .unwrap();
        let t = |n: &str| Tenant::new(n).unwrap();
        let rrf = Fusion::Rrf {
            k: 20,
            dense: 1.0,
            bm25: 0.5,
        };
        assert_eq!(c.answer.fusion.for_tenant(&t("globex")), rrf);
        assert_eq!(
            c.answer.fusion.for_tenant(&t("acme")),
            Fusion::Convex { dense: 0.8 }
        );
        for (name, value, says) in [
            ("SLUICE_FUSION", "dbsf", "unknown method"),
            ("SLUICE_FUSION", "rrf:k=0", "k=0"),
            ("SLUICE_FUSION_TENANTS", "acme", "tenant=fusion"),
            ("SLUICE_FUSION_TENANTS", "acme=convex:dense=2", "dense=2"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(e.name, name, "{name}={value}: {e}");
            assert!(e.to_string().contains(says), "{name}={value}: {e}");
        }
    }
}
