//! What every entry point serves — `sluice serve` and the Lambda functions — wired once from
//! the configuration: the one place where backends are chosen (the store, the cache, the
//! component storage, the key store) and where each process builds only the parts its
//! [`Role`] needs (the embedding model, the vector store, the LLM pool, the rerank sandbox,
//! the answer cache). Everything heavy happens here, at start (on Lambda: in the init phase,
//! not on the first request).
#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub use parts::{Parts, Role};
use sluice_aws::settings::DynamoSettings;
use sluice_aws::{AwsConfig, ComponentsConfig};
use sluice_cache_dynamodb::DynamoCache;
use sluice_contract::auth::{KeyRecord, KeyStore};
use sluice_contract::cache::CacheStore;
use sluice_contract::settings::ConfigError;
use sluice_contract::tenant_settings::SettingsStore;
use sluice_contract::usage::UsageStore;
use sluice_contract::{
    components::ComponentError, components::ComponentStorage, stages::Embedder, stages::Llm,
    stages::Store,
};
use sluice_contract::{error::CacheError, error::EmbedError, error::LlmError, error::StoreError};
use sluice_core::Config;
use sluice_core::language::lexicon::{LexiconError, SharedLexicon};
use sluice_core::{cache::CacheSettings, cache::SemanticCache};
use sluice_core::{config::CacheBackend, config::CacheConfig, config::UsageBackend};
use sluice_embed::{EmbedConfig, MiniLm, Tokens};
use sluice_http::{AuthConfig, Server, WireConfig};
use sluice_local::{FileKeys, FileSettings, LocalUsage, MemoryCache};

pub mod doctor;
mod parts;
use sluice_llm::{LlmConfig, OpenAiClient};
use sluice_rerank::{Disk, HostServices, ModelHost, Registry, RerankConfig, UploadHost};
use sluice_retrieve::StoreConfig;
use tracing::{info, warn};

/// A part of the pipeline that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The embedding model did not load.
    #[error("loading the embedding model: {0}")]
    Model(#[from] EmbedError),
    /// The vector store did not open.
    #[error("opening the vector store: {0}")]
    Store(#[from] StoreError),
    /// The LLM client could not be built.
    #[error("building the LLM client: {0}")]
    Llm(#[from] LlmError),
    /// The rerank sandbox or the component storage failed.
    #[error("rerank components: {0:?}")]
    Components(ComponentError),
    /// The answer cache could not be set up.
    #[error("setting up the answer cache: {0}")]
    Cache(#[from] CacheError),
    /// The cache guard's lexicon could not be read.
    #[error("setting up the answer cache: {0}")]
    Lexicon(#[from] LexiconError),
    /// The usage file could not be read.
    #[error("{0}")]
    Usage(#[from] sluice_contract::usage::UsageError),
    /// The API keys could not be read.
    #[error("{0}")]
    Auth(#[from] sluice_contract::auth::AuthError),
    /// The configuration is invalid.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// An AWS client or call needed at start failed (secrets, component storage).
    #[error("{0}")]
    Aws(#[from] sluice_aws::AwsError),
    /// The blocking task that loads the model died.
    #[error("start-up task failed: {0}")]
    Task(String),
    /// A key was made, but no place to keep keys is configured.
    #[error(
        "set SLUICE_API_KEYS_FILE (sluice serve) or SLUICE_API_KEYS_TABLE (Lambda) to say where \
         keys live"
    )]
    NoKeyStore,
}

/// Everything a process reads from its environment, one section per owner: the engine's
/// (`sluice-core`'s [`Config`]), the wire's (`sluice-http`'s [`WireConfig`]), and each
/// adapter's own, which that adapter reads and checks.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The engine's: the answer, ingest, cache and usage sections.
    pub config: Config,
    /// The wire's (`sluice-http`): the listener, request limits, keys and tenants' settings.
    pub wire: WireConfig,
    /// The LLM client's (`sluice-llm`).
    pub llm: LlmConfig,
    /// The vector store's (`sluice-retrieve`).
    pub store: StoreConfig,
    /// The rerank sandbox's (`sluice-rerank`).
    pub rerank: RerankConfig,
    /// The embedding model's (`sluice-embed`).
    pub embed: EmbedConfig,
    /// The deployment's AWS names (`sluice-aws`).
    pub aws: AwsConfig,
    /// File conversion's caps (`sluice-convert`), in the processes that read files (the
    /// `files` feature: `sluice`, the ingest function).
    #[cfg(feature = "files")]
    pub convert: sluice_convert::ConvertLimits,
}

impl Settings {
    /// Reads every section through `lookup` (the environment, or a map in tests); a blank
    /// value counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let config = Config::from_lookup(get)?;
        Ok(Settings {
            wire: WireConfig::from_lookup(&get, &config.data_dir)?,
            llm: LlmConfig::from_lookup(&get)?,
            store: StoreConfig::from_lookup(&get, &config.data_dir)?,
            rerank: RerankConfig::from_lookup(&get)?,
            embed: EmbedConfig::from_lookup(&get)?,
            aws: AwsConfig::from_lookup(&get)?,
            #[cfg(feature = "files")]
            convert: sluice_convert::ConvertLimits::from_lookup(&get)?,
            config,
        })
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }
}

/// The settings from the environment, where `SLUICE_SECRETS_ARN` (when set) names a Secrets
/// Manager secret whose `SLUICE_*` values take the place of environment variables.
pub async fn settings() -> Result<Settings, AppError> {
    let secret = match std::env::var("SLUICE_SECRETS_ARN") {
        Ok(arn) if !arn.trim().is_empty() => {
            let settings = sluice_aws::secrets::settings(arn.trim()).await?;
            info!(
                settings = settings.len(),
                "settings read from Secrets Manager"
            );
            settings
        }
        _ => HashMap::new(),
    };
    Ok(Settings::from_lookup(|name| {
        secret
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    })?)
}

/// Builds what `role` needs as `settings` describe: the one place where backends are chosen.
/// The model load — most of a cold start — begins first, on the blocking pool, and the rest
/// is set up beside it: the store, the cache (which may call DynamoDB, `SLUICE_CACHE=dynamodb`),
/// the component storage (S3 clients with `SLUICE_COMPONENT_BUCKET`) and the keys; then the
/// LLM pool and the rerank sandbox. `model`, when given, is used instead of loading one
/// (tests share one).
pub async fn parts(
    settings: Settings,
    role: Role,
    model: Option<Arc<dyn Embedder>>,
) -> Result<Parts, AppError> {
    let Settings {
        config,
        wire,
        llm,
        store,
        rerank,
        embed,
        aws,
        #[cfg(feature = "files")]
        convert,
    } = settings;
    let joined = |e: tokio::task::JoinError| AppError::Task(e.to_string());
    let uses_model = role.answers() || role.documents();
    let loading = match (uses_model, &model) {
        (true, None) => Some(load_model(&embed)),
        _ => None,
    };
    let store = uses_model.then(|| tokio::task::spawn_blocking(move || self::store(&store)));
    let lexicon = match role.answers() {
        true => lexicon(&config.cache)?,
        false => SharedLexicon::default(),
    };
    let cache = match role.answers() {
        true => {
            let cache = cache(&config.cache, &aws, sluice_embed::DIM, &lexicon).await?;
            match &cache {
                Some(c) => info!(backend = c.backend(), "answer cache ready"),
                None => info!("answer cache off"),
            }
            cache
        }
        false => None,
    };
    let storage = match role.answers() || role.components() {
        true => Some(component_storage(&config, &aws.components).await?),
        false => None,
    };
    let keys = keys(&wire.auth, &aws).await?;
    // Tenants' settings, where answers, documents or components are served (the documents
    // routes check end users by the tenant's identity; an activation reads the tenant's
    // quality gate): the DynamoDB table on Lambda (`SLUICE_SETTINGS_TABLE`), else `sluice
    // serve`'s file; a function without the table keeps none, and every tenant answers with the
    // deployment's defaults there.
    let settings: Option<Arc<dyn SettingsStore>> = match (&aws.settings_table, role) {
        (_, role) if !role.answers() && !role.documents() && !role.components() => None,
        (Some(table), _) => Some(Arc::new(DynamoSettings::connect(table).await?)),
        (None, Role::All) => Some(Arc::new(FileSettings::new(&wire.auth.settings_file))),
        (None, _) => None,
    };
    // Evaluation sets, runs, ratings and gaps, where answers are served (and where components
    // are activated, which reads a gate's run); sources and their syncs' reports, where
    // documents are written: the DynamoDB table on Lambda (`SLUICE_RECORDS_TABLE`), else
    // `sluice serve`'s files; a function without the table keeps none.
    let records: Option<Arc<dyn sluice_contract::evals::Records>> = match (&aws.records_table, role)
    {
        (_, role) if !role.answers() && !role.components() && !role.documents() => None,
        (Some(table), _) => Some(Arc::new(
            sluice_aws::records::DynamoRecords::connect(table).await?,
        )),
        (None, Role::All) => Some(Arc::new(sluice_local::FileRecords::new(
            &wire.auth.records_dir,
        ))),
        (None, _) => None,
    };
    let usage = match role.answers() || role.documents() {
        true => usage_store(&config, &aws).await?,
        false => None,
    };
    let llm: Option<Arc<dyn Llm>> = match role.answers() {
        true => Some(Arc::new(OpenAiClient::from_config(&llm)?)),
        false => None,
    };
    let store = match store {
        Some(store) => Some(store.await.map_err(joined)??),
        None => None,
    };
    let embedder = match loading {
        Some(loading) => Some(loading.await.map_err(joined)??),
        None => model.filter(|_| uses_model),
    };
    // The file parsers, where the role ingests: only a process built with the `files` feature
    // (`sluice`, the ingest function) links them.
    #[cfg(feature = "files")]
    let converter = (role.documents()).then(|| {
        Arc::new(sluice_convert::Files(convert)) as Arc<dyn sluice_contract::document::Converter>
    });
    #[cfg(not(feature = "files"))]
    let converter = None;
    // The buckets of tenants' S3 sources, where documents are written and an AWS region is
    // set (a local `sluice serve` without one syncs websites only).
    let objects: Option<Arc<dyn sluice_contract::sources::Objects>> = match role.documents() {
        true => match sluice_aws::documents::Documents::connect().await {
            Ok(documents) => Some(Arc::new(documents)),
            Err(sluice_aws::AwsError::NoRegion(_)) => None,
            Err(e) => return Err(e.into()),
        },
        false => None,
    };
    // The sync queue (read by the ingest function on AWS); none: the schedule runs the syncs,
    // and a sync reads what it lists itself.
    let batches: Option<Arc<dyn sluice_contract::sources::Batches>> =
        match (&aws.sync_queue_url, role.documents()) {
            (Some(url), true) => Some(Arc::new(sluice_aws::queue::SyncQueue::connect(url).await?)),
            _ => None,
        };
    let mut parts = Parts {
        role,
        embedder,
        store,
        llm,
        cache,
        lexicon,
        reranker: None,
        components: None,
        keys,
        usage,
        records,
        secrets: settings
            .is_some()
            .then(|| Arc::new(sluice_aws::secrets::Reader::default()) as _),
        settings,
        config,
        wire,
        converter,
        objects,
        batches,
        replica_id: Some(replica_id()),
    };
    if let Some(storage) = storage {
        add_registry(&mut parts, &rerank, &embed, &aws, storage)?;
    }
    Ok(parts)
}

/// This process as answers name it (`done.replica_id`): the host's name (on Lambda, the
/// execution environment's) and the process id.
fn replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "local".into());
    format!("{host}-{}", std::process::id())
}

/// Adds the rerank registry over `storage`: with the model lent to components where answers
/// are served, else (the registry function) with the tokenizer alone.
fn add_registry(
    parts: &mut Parts,
    rerank: &RerankConfig,
    embed: &EmbedConfig,
    aws: &AwsConfig,
    storage: Arc<dyn ComponentStorage>,
) -> Result<(), AppError> {
    let host: Arc<dyn HostServices> = match &parts.embedder {
        Some(embedder) => Arc::new(ModelHost(Arc::clone(embedder))),
        None => {
            if aws.components.bucket.is_none() {
                // The components would stay in this process's own folder (a function's
                // /tmp), which no other function sees: almost certainly a mistake.
                warn!(
                    "SLUICE_COMPONENT_BUCKET is not set: components are kept in SLUICE_DATA_DIR, \
                         which the answer function cannot read"
                );
            }
            let started = Instant::now();
            let tokens = Tokens::load(&embed.model_dir)?;
            info!(
                ms = started.elapsed().as_millis() as u64,
                "tokenizer loaded (no model: uploads are smoke-run with made-up vectors)"
            );
            Arc::new(UploadHost(Box::new(move |text: &str| tokens.count(text))))
        }
    };
    let registry =
        Arc::new(Registry::from_config(rerank, host, storage).map_err(AppError::Components)?);
    if parts.role.answers() {
        parts.reranker = Some(registry.clone());
    }
    if parts.role.components() {
        parts.components = Some(registry);
    }
    Ok(())
}

/// Builds what `role` serves as `settings` describe, and the wire around it.
pub async fn server(settings: Settings, role: Role) -> Result<Server, AppError> {
    Ok(parts(settings, role, None).await?.into_server())
}

/// The embedding model as the configuration sets it up (its folder, windows per text,
/// threads): what every process and tool that embeds loads.
pub fn model(config: &EmbedConfig) -> Result<MiniLm, AppError> {
    let started = Instant::now();
    let model = MiniLm::load(&config.model_dir)?
        .with_max_windows(config.windows)
        .with_threads(config.threads);
    info!(model = %model.source().display(), ms = started.elapsed().as_millis() as u64, "embedding model loaded");
    Ok(model)
}

/// Starts loading the embedding model on the blocking pool.
fn load_model(
    config: &EmbedConfig,
) -> tokio::task::JoinHandle<Result<Arc<dyn Embedder>, AppError>> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || Ok(Arc::new(model(&config)?) as Arc<dyn Embedder>))
}

/// The configured vector store, opened (blocking: Qdrant Edge loads its shard); a store over
/// the network comes behind its circuit breaker.
pub fn store(store: &StoreConfig) -> Result<Arc<dyn Store>, AppError> {
    let opened = sluice_retrieve::open(store, sluice_embed::DIM)?;
    info!(store = ?store.backend, "vector store open");
    Ok(opened)
}

/// A rerank registry over `storage` whose components may call `model` (the answer path's
/// `embed` and `count-tokens`), under the configured limits.
pub fn registry(
    rerank: &RerankConfig,
    model: Arc<dyn Embedder>,
    storage: Arc<dyn ComponentStorage>,
) -> Result<Registry, AppError> {
    Registry::from_config(rerank, Arc::new(ModelHost(model)), storage).map_err(AppError::Components)
}

/// WordNet for the cache's guard and the grounding check (`SLUICE_CACHE_LEXICON`): checked
/// now, so that a missing table stops the start, and read in the background.
pub fn lexicon(config: &CacheConfig) -> Result<SharedLexicon, AppError> {
    let Some(path) = &config.lexicon else {
        return Ok(SharedLexicon::default());
    };
    std::fs::metadata(path).map_err(|source| LexiconError::Read {
        path: path.display().to_string(),
        source,
    })?;
    Ok(SharedLexicon::read_in_background(path.clone()))
}

/// The answer cache `config` asks for (`SLUICE_CACHE`), for query vectors of `dim`
/// components, its guard reading `lexicon`; `None` when it is off. For DynamoDB the client is built and the table checked
/// (and created, with `SLUICE_CACHE_CREATE_TABLE=true`) here, once per process.
pub async fn cache(
    config: &CacheConfig,
    aws: &AwsConfig,
    dim: usize,
    lexicon: &SharedLexicon,
) -> Result<Option<Arc<SemanticCache>>, AppError> {
    let store: Arc<dyn CacheStore> = match config.backend {
        CacheBackend::Off => return Ok(None),
        CacheBackend::Memory => Arc::new(MemoryCache::new(config.max_entries)),
        CacheBackend::Dynamodb => {
            let table =
                DynamoCache::connect(&aws.cache_table, aws.cache_tenant_role_arn.as_deref())
                    .await?;
            table.prepare(aws.cache_create_table).await?;
            Arc::new(table)
        }
    };
    let settings = CacheSettings::from_config(config);
    let cache = SemanticCache::new(store, settings, dim).with_lexicon(lexicon.clone());
    Ok(Some(Arc::new(cache)))
}

/// Where tenants' components are kept: S3 and DynamoDB with `SLUICE_COMPONENT_BUCKET`, else
/// `SLUICE_DATA_DIR/components`.
async fn component_storage(
    config: &Config,
    components: &ComponentsConfig,
) -> Result<Arc<dyn ComponentStorage>, AppError> {
    Ok(match &components.bucket {
        Some(bucket) => {
            let s3 = sluice_aws::components::S3Components::connect(bucket, &components.table)
                .await?
                .with_replicas(&components.replicas)
                .await?;
            info!(
                bucket = %bucket,
                table = %s3.table(),
                replicas = components.replicas.len(),
                "components in S3 and DynamoDB"
            );
            Arc::new(s3)
        }
        None => {
            Arc::new(Disk::open(&config.data_dir.join("components")).map_err(AppError::Components)?)
        }
    })
}

/// Where usage is counted (`SLUICE_USAGE`): a DynamoDB table, the data folder's file, or
/// nowhere.
pub async fn usage_store(
    config: &Config,
    aws: &AwsConfig,
) -> Result<Option<Arc<dyn UsageStore>>, AppError> {
    let usage = &config.usage;
    Ok(match usage.backend {
        UsageBackend::Off => {
            info!("usage not counted (SLUICE_USAGE=off)");
            None
        }
        UsageBackend::File => {
            let store = LocalUsage::open(&usage.file)?;
            info!(file = %usage.file.display(), "usage counted in a file");
            Some(Arc::new(store))
        }
        UsageBackend::Dynamodb => {
            let store = sluice_aws::usage::DynamoUsage::connect(&aws.usage_table).await?;
            info!(table = %store.table(), "usage counted in DynamoDB");
            Some(Arc::new(store))
        }
    })
}

/// The API keys: a DynamoDB table, a key file, or none (auth off).
async fn keys(config: &AuthConfig, aws: &AwsConfig) -> Result<Option<Arc<dyn KeyStore>>, AppError> {
    if let Some(table) = &aws.api_keys_table {
        info!(%table, "auth on: API keys in DynamoDB");
        return Ok(Some(Arc::new(
            sluice_aws::keys::DynamoKeys::connect(table).await?,
        )));
    }
    let file = (config.api_keys_file.as_deref()).map(FileKeys::load);
    Ok(match file.transpose()? {
        Some(keys) => {
            info!(keys = keys.len(), file = ?config.api_keys_file, "auth on: API keys from the key file");
            Some(Arc::new(keys))
        }
        None => {
            warn!(
                "auth is off (no SLUICE_API_KEYS_FILE or SLUICE_API_KEYS_TABLE): the x-sluice-tenant header is trusted"
            );
            None
        }
    })
}

/// Creates the DynamoDB answer-cache table `SLUICE_CACHE_TABLE` names (idempotent): its name,
/// and whether it was made now.
pub async fn create_cache_table(aws: &AwsConfig) -> Result<(String, bool), AppError> {
    let role = aws.cache_tenant_role_arn.as_deref();
    let table = DynamoCache::connect(&aws.cache_table, role).await?;
    let created = table.create_table().await?;
    Ok((table.table().to_string(), created))
}

/// Keeps a new key's `record` where this process's settings keep keys (the keys file of
/// `sluice serve`, else the DynamoDB table of the Lambda functions); says where, for people.
pub async fn store_key(settings: &Settings, record: KeyRecord) -> Result<String, AppError> {
    match (
        &settings.wire.auth.api_keys_file,
        &settings.aws.api_keys_table,
    ) {
        (Some(file), _) => {
            sluice_local::append_to_file(file, record)?;
            Ok(format!(
                "{} (restart sluice serve to use it)",
                file.display()
            ))
        }
        (None, Some(table)) => {
            let keys = sluice_aws::keys::DynamoKeys::connect(table).await?;
            keys.put(&record).await?;
            Ok(format!("DynamoDB table {table}"))
        }
        (None, None) => Err(AppError::NoKeyStore),
    }
}

/// Where a process logs, and how.
#[derive(Debug, Clone, Copy)]
pub enum Logs {
    /// A command in a terminal: standard error, timestamped, text or (`json`) JSON lines.
    Terminal {
        /// One JSON object per line (`SLUICE_LOG_FORMAT=json`).
        json: bool,
    },
    /// A Lambda function: JSON lines on standard output, beside its EMF metric lines
    /// (CloudWatch keeps one event per line, queryable by field, and stamps each itself).
    Lambda,
}

/// The time a Lambda invocation has left, from the deadline its context states (Unix
/// milliseconds); `None` when it states none — a value a day or more in the past is an
/// emulator's timeout, not a deadline (cargo-lambda sends `600000`).
pub fn time_left(deadline_ms: u64) -> Option<std::time::Duration> {
    const NOT_A_DEADLINE_MS: u64 = 86_400_000;
    let now = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .map_or(0, |d| d.as_millis() as u64);
    (deadline_ms >= now.saturating_sub(NOT_A_DEADLINE_MS))
        .then(|| std::time::Duration::from_millis(deadline_ms.saturating_sub(now)))
}

/// Log lines at `RUST_LOG`'s levels (default `info`, Qdrant Edge's start-up notices for its
/// own developers kept out); JSON lines carry the answer's span (request id, tenant, trace id)
/// on each of its lines.
pub fn logs(to: Logs) {
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,qdrant_edge=error".into())
    };
    // Colours only for a person at a terminal: a log piped to a file or a collector keeps
    // no escape codes.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let terminal = (tracing_subscriber::fmt())
        .with_env_filter(filter())
        .with_ansi(colours)
        .with_writer(std::io::stderr);
    match to {
        Logs::Terminal { json: false } => terminal.init(),
        Logs::Terminal { json: true } => terminal
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        Logs::Lambda => (tracing_subscriber::fmt().json())
            .with_env_filter(filter())
            .with_current_span(true)
            .with_span_list(false)
            .without_time()
            .init(),
    }
}

/// What every Lambda function does in its init phase: JSON log lines ([`Logs::Lambda`]), the
/// configuration (with the secret's settings), and
/// the pipeline with CloudWatch EMF metrics; the time it took is logged as `init_ms`.
pub async fn function(name: &'static str, role: Role) -> Result<Arc<Server>, AppError> {
    logs(Logs::Lambda);
    let started = Instant::now();
    let mut server = server(settings().await?, role).await?;
    // Nothing scrapes a Lambda process: each answer's metrics go out as an EMF log line.
    let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| name.into());
    server.metrics = sluice_http::metrics::Metrics::with_emf(&function);
    info!(
        function = name,
        ?role,
        init_ms = started.elapsed().as_millis() as u64,
        "function ready"
    );
    Ok(Arc::new(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::from_lookup(sluice_contract::settings::pairs(vars))
    }

    #[test]
    fn every_section_is_read_and_checked_by_its_owner() {
        let s = with(&[
            ("SLUICE_TOP_K", "7"),
            ("SLUICE_LLM_URL", "http://10.0.0.5:8000/v1/"),
            ("SLUICE_STORE", "qdrant"),
            ("SLUICE_RERANK_FUEL", "123456"),
        ])
        .unwrap();
        assert_eq!(s.config.answer.top_k, 7);
        assert_eq!(s.llm.urls, ["http://10.0.0.5:8000/v1"]);
        assert!(sluice_retrieve::is_remote(&s.store));
        assert_eq!(s.rerank.fuel, 123_456);
        // A blank value is unset in every section, not only the engine's.
        let s = with(&[("SLUICE_LLM_URL", " "), ("SLUICE_STORE", "")]).unwrap();
        assert_eq!(s.llm.urls, ["http://127.0.0.1:8081/v1"]);
        assert!(!sluice_retrieve::is_remote(&s.store));
        // Each owner's check stops start-up with the variable's name.
        for (name, value) in [
            ("SLUICE_TOP_K", "0"),
            ("SLUICE_LLM_URL", "127.0.0.1:8081"),
            ("SLUICE_STORE", "redis"),
            ("SLUICE_RERANK_DEADLINE_MS", "0"),
        ] {
            assert_eq!(with(&[(name, value)]).unwrap_err().name, name);
        }
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let s = with(&[
            ("SLUICE_LLM_API_KEY", "sk-llm-secret"),
            ("SLUICE_STORE", "pinecone"),
            ("SLUICE_PINECONE_API_KEY", "pc-secret"),
        ])
        .unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains("sk-llm-secret"), "{shown}");
        assert!(!shown.contains("pc-secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
